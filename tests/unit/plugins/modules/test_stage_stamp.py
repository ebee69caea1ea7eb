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
        args = {"stage": "runtime", "dir": str(tmp_path / "stamps"), **args}
        if args["stage"] is None:  # stage=None: no stage option at all (stages instead)
            del args["stage"]
        with patch_module_args(args), pytest.raises(SystemExit):
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


def test_several_stages_stamped_in_one_call_each_checked_alone(run, tmp_path):
    owned = tmp_path / "daemon.json"
    owned.write_text("{}")
    facts = {"driver": {}}
    stages = [
        {"stage": "toolkit", "inputs": {"toolkit_provider": "native"}, "published": {"gpufleet_toolkit": {"t": 1}}},
        {
            "stage": "runtime",
            "inputs": {"runtime_cdi": True},
            "paths": [str(owned)],
            "published": {"gpufleet_runtime": 2},
        },
    ]
    stamped = run(stage=None, state="present", facts=facts, stages=stages)
    assert not stamped["changed"] and stamped["stamps"] == {
        "toolkit": str(tmp_path / "stamps" / "toolkit.json"),
        "runtime": str(tmp_path / "stamps" / "runtime.json"),
    }
    toolkit = run(stage="toolkit", facts=facts, inputs={"toolkit_provider": "native"})
    assert toolkit["current"] and toolkit["published"] == {"gpufleet_toolkit": {"t": 1}}
    runtime = run(facts=facts, inputs={"runtime_cdi": True}, paths=[str(owned)])
    assert runtime["current"] and runtime["published"] == {"gpufleet_runtime": 2}
    # each stamp holds its own stage's inputs: the toolkit's are not the runtime's
    assert not run(facts=facts, inputs={"toolkit_provider": "native"}, paths=[str(owned)])["current"]


def test_several_stages_refusals(run, tmp_path):
    one = {"stage": "runtime"}
    assert "state=present only" in run(stage=None, stages=[one])["msg"]
    assert "runtime named more than once" in run(stage=None, state="present", stages=[one, one])["msg"]
    assert "'Bad' is not a stage name" in run(stage=None, state="present", stages=[{"stage": "Bad"}])["msg"]
    assert "mutually exclusive" in run(state="present", stages=[one])["msg"]
    run(stage=None, state="present", stages=[one], _ansible_check_mode=True)
    assert not (tmp_path / "stamps").exists()
