# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The stage_stamp module's main(): no stamp, stamp, current, drift removes the stamp, check mode writes nothing."""

import json

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpufleet.nvidia.plugins.modules import stage_stamp

pytestmark = pytest.mark.controller


@pytest.fixture
def run(capsys, tmp_path):
    def _run(**args):
        with patch_module_args({"stage": "runtime", "dir": str(tmp_path / "stamps"), **args}), pytest.raises(
            SystemExit
        ):
            stage_stamp.main()
        return json.loads(capsys.readouterr().out)

    return _run


def test_stamp_then_current_then_drift(run, tmp_path):
    owned = tmp_path / "daemon.json"
    owned.write_text("{}")
    args = {"inputs": {"runtime_cdi": True}, "facts": {"driver": {}}, "paths": [str(owned)]}
    first = run(**args)
    assert not first["current"] and first["reason"] == "no stamp from an earlier run" and not first["changed"]
    stamped = run(state="present", **args, published={"gpufleet_runtime": {"a": 1}})
    assert not stamped["changed"] and (tmp_path / "stamps" / "runtime.json").is_file()
    again = run(**args)
    assert again["current"] and again["published"] == {"gpufleet_runtime": {"a": 1}}
    assert not run(**dict(args, inputs={"runtime_cdi": False}, _ansible_check_mode=True))["current"]
    assert (tmp_path / "stamps" / "runtime.json").is_file()  # check mode removes nothing
    owned.write_text('{"runtimes": {}}')
    drift = run(**args)
    assert not drift["current"] and drift["reason"] == f"{owned} changed since the stamped run"
    assert not (tmp_path / "stamps" / "runtime.json").exists()  # a stage that fails now leaves no stamp


def test_check_mode_stamps_nothing_and_bad_input_is_named(run, tmp_path):
    first = run()
    assert not first["current"]
    run(state="present", _ansible_check_mode=True)
    assert not (tmp_path / "stamps").exists()
    bad = run(paths=["etc/docker/daemon.json"])
    assert bad["failed"] and "etc/docker/daemon.json" in bad["msg"] and "absolute" in bad["msg"]
    assert run(stage="../x")["failed"]
