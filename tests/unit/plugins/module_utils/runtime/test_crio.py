# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The CRI-O config editor (runtime/crio/edit.py): drop-in or main file, monitor settings.

Every case also checks that a second run changes nothing and, where present added everything it touched,
that ``absent`` gives back the input byte for byte.
"""

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.runtime.crio import edit as crio
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils.runtime.golden import SHIM
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils.runtime.golden import golden as _golden
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils.runtime.golden import read_fixture as _read


# ---- CRI-O -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("case", ["crun-monitor", "runc-default", "empty"])
def test_crio_drop_in(case):
    src = _read("crio", f"{case}.input.conf")
    edit = crio.present_drop_in(None, SHIM, set_as_default=True, configs=[("/etc/crio/crio.conf", src)])
    _golden(edit.text, "crio", f"{case}.dropin.expected.conf")
    again = crio.present_drop_in(edit.text, SHIM, set_as_default=True, configs=[("/etc/crio/crio.conf", src)])
    assert not again.changed
    assert crio.absent_drop_in(edit.text).text is None


@pytest.mark.parametrize("case", ["crun-monitor", "runc-default"])
def test_crio_main_file_roundtrip(case):
    src = _read("crio", f"{case}.input.conf")
    edit = crio.present_main(src, SHIM, set_as_default=True)
    _golden(edit.text, "crio", f"{case}.main.expected.conf")
    assert not crio.present_main(edit.text, SHIM, set_as_default=True).changed
    assert crio.absent_main(edit.text, SHIM).text == src


def test_crio_monitor_settings_follow_the_default_runtime_across_drop_ins():
    base = _read("crio", "crun-monitor.input.conf")
    later = '[crio.runtime]\ndefault_runtime = "runc"\n[crio.runtime.runtimes.runc]\nmonitor_cgroup = "pod"\n'
    monitor = dict(crio.monitor_settings([("/etc/crio/crio.conf", base), ("/etc/crio/crio.conf.d/10.conf", later)]))
    assert monitor == {"monitor_path": "/usr/libexec/crio/conmon", "monitor_cgroup": "pod"}


def test_crio_default_back_to_false():
    """true -> false: the drop-in loses default_runtime; in crio.conf our comment's value comes back."""
    src = _read("crio", "runc-default.input.conf")
    configs = [("/etc/crio/crio.conf", src)]
    on = crio.present_drop_in(None, SHIM, set_as_default=True, configs=configs).text
    off = crio.present_drop_in(on, SHIM, set_as_default=False, configs=configs)
    assert off.changed and "default_runtime" in on and "default_runtime" not in off.text
    main_on = crio.present_main(src, SHIM, set_as_default=True).text
    main_off = crio.present_main(main_on, SHIM, set_as_default=False)
    assert main_off.changed and main_off.text == crio.present_main(src, SHIM).text
    assert not crio.present_main(main_off.text, SHIM, set_as_default=False).changed
