# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The driver role's task order where no simulated node can show it (a reboot): the initramfs handler that the
nouveau blacklist and the NVreg_* options notify runs before the reboot, not at the end of the play (issue 23,
item 10). Read from the task files as Ansible would run them."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.controller
TASKS = Path(__file__).resolve().parents[3] / "roles" / "driver" / "tasks"


def steps(name: str) -> list[str]:
    """Each task of a task file as 'include:<file>', 'meta:<action>' or its module name."""
    found = []
    for task in yaml.safe_load((TASKS / name).read_text()):
        if "ansible.builtin.include_tasks" in task:
            found.append(f"include:{task['ansible.builtin.include_tasks']}")
        elif "ansible.builtin.meta" in task:
            found.append(f"meta:{task['ansible.builtin.meta']}")
        else:
            found.append(next(k for k in task if k.startswith("ansible.") or k.startswith("gpufleet.")))
    return found


def test_initramfs_handlers_run_before_the_reboot():
    order = steps("driver.yml")
    modprobe, reboot = order.index("include:modprobe.yml"), order.index("include:reboot.yml")
    assert "meta:flush_handlers" in order[modprobe:reboot], order
    # and the handler it flushes is the one the modprobe files notify
    notified = {t.get("notify") for t in yaml.safe_load((TASKS / "modprobe.yml").read_text())} - {None}
    assert notified == {"Rebuild the initramfs"}
