# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""takeover in-process: the specs cdi_spec moved aside come back (never over a spec that came back), the units get
their recorded state back through systemctl, check mode and diff change nothing."""

import json
import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.controller

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible.module_utils.testing import patch_module_args  # noqa: E402

from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery import takeover as takeover_record  # noqa: E402
from ansible_collections.gpufleet.nvidia.plugins.modules import cdi_spec, takeover  # noqa: E402
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.modules.test_cdi_spec import GPUS, NVIDIA_SPEC  # noqa: E402

RECORD = "/var/lib/gpufleet-nvidia/takeover.json"


def _run(module, args, capsys, check=False, diff=False):
    extra = {"_ansible_check_mode": check, "_ansible_diff": diff}
    with patch_module_args({**args, **extra}), pytest.raises(SystemExit):
        module.main()
    return json.loads(capsys.readouterr().out)


@pytest.fixture
def host(tmp_path, capsys, debian_driver_tree):
    root, _version = debian_driver_tree
    os.symlink(root, str(tmp_path / "drv"))
    for folder in ("etc/cdi", "var/run/cdi"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "nvidia.yaml").write_text(NVIDIA_SPEC)
    base = {"root": str(tmp_path)}

    def spec(**args):
        return _run(cdi_spec, {**base, "driver_root": "/drv", "dev_root": "/nonexistent", "gpus": GPUS, **args}, capsys)

    def give_back(check=False, diff=False):
        return _run(takeover, {**base, "state": "absent"}, capsys, check=check, diff=diff)

    return tmp_path, spec, give_back


def test_uninstall_moves_nvidias_specs_back_and_drops_the_record(host):
    tmp, spec, give_back = host
    assert len(spec()["disabled"]) == 2
    record = json.loads((tmp / RECORD[1:]).read_text())
    assert [s["path"] for s in record["specs"]] == ["/etc/cdi/nvidia.yaml", "/var/run/cdi/nvidia.yaml"]
    assert not spec()["changed"] and json.loads((tmp / RECORD[1:]).read_text()) == record  # recorded once

    os.unlink(str(tmp / "etc/cdi/nvidia.yaml"))  # runtime absent.yml: our spec goes first
    result = give_back(check=True, diff=True)
    assert result["changed"] and [r["path"] for r in result["restored"]] == [s["path"] for s in record["specs"]]
    assert result["diff"][0]["after_header"] == "/etc/cdi/nvidia.yaml"
    assert not (tmp / "var/run/cdi/nvidia.yaml").exists() and (tmp / RECORD[1:]).exists()  # check mode

    result = give_back()
    assert result["changed"] and result["kept"] == []
    for folder in ("etc/cdi", "var/run/cdi"):
        assert os.listdir(str(tmp / folder)) == ["nvidia.yaml"]
        assert (tmp / folder / "nvidia.yaml").read_text() == NVIDIA_SPEC
    assert not (tmp / "var/lib/gpufleet-nvidia").exists()  # the record and its folder
    assert not give_back()["changed"]


def test_a_spec_that_came_back_is_never_overwritten(host):
    tmp, spec, give_back = host
    spec()
    os.unlink(str(tmp / "etc/cdi/nvidia.yaml"))
    (tmp / "var/run/cdi/nvidia.yaml").write_text(NVIDIA_SPEC + "# refreshed\n")  # NVIDIA's refresh ran again
    result = give_back()
    assert [r["path"] for r in result["restored"]] == ["/etc/cdi/nvidia.yaml"]
    assert [k["path"] for k in result["kept"]] == ["/var/run/cdi/nvidia.yaml"]
    assert "not overwritten" in result["kept"][0]["why"]
    assert (tmp / "var/run/cdi/nvidia.yaml").read_text().endswith("# refreshed\n")
    assert (tmp / "var/run/cdi/nvidia.yaml.gpufleet-disabled").read_text() == NVIDIA_SPEC
    again = give_back()  # reported again, still nothing overwritten
    assert not again["changed"] and [k["path"] for k in again["kept"]] == ["/var/run/cdi/nvidia.yaml"]


def test_units_get_their_recorded_state_back(tmp_path, capsys, monkeypatch):
    """Recorded before the mask (enabled, not masked, the .path active); given back with unmask and start only."""
    units = tmp_path / "usr/lib/systemd/system"
    units.mkdir(parents=True)
    wants = tmp_path / "etc/systemd/system/multi-user.target.wants"
    wants.mkdir(parents=True)
    for unit in ("nvidia-cdi-refresh.service", "nvidia-cdi-refresh.path"):
        (units / unit).write_text("[Unit]\n")
        os.symlink(f"/usr/lib/systemd/system/{unit}", str(wants / unit))
    calls = []

    def fake_run(self, argv, **_kw):
        calls.append(argv)
        if argv[1] == "is-active":
            return (0, "active\n", "") if argv[2].endswith(".path") and not masked() else (3, "inactive\n", "")
        return 0, "", ""

    def masked():
        return (tmp_path / "etc/systemd/system/nvidia-cdi-refresh.path").is_symlink()

    monkeypatch.setattr(AnsibleModule, "run_command", fake_run)
    # root "/" is what runs systemctl; the unit files are read under the test's tree
    real_units = takeover_record.unit_states
    monkeypatch.setattr(takeover_record, "unit_states", lambda _root: real_units(str(tmp_path)))
    record = str(tmp_path / "record.json")
    result = _run(takeover, {"record_path": record}, capsys, diff=True)
    assert result["changed"] and result["recorded"] == {
        "nvidia-cdi-refresh.path": {"enabled": True, "masked": False, "active": True},
        "nvidia-cdi-refresh.service": {"enabled": True, "masked": False, "active": False},
    }
    for unit in ("nvidia-cdi-refresh.service", "nvidia-cdi-refresh.path"):  # the role masks them
        os.symlink("/dev/null", str(tmp_path / "etc/systemd/system" / unit))
    assert not _run(takeover, {"record_path": record}, capsys)["changed"]  # the masked state is not recorded

    calls.clear()
    result = _run(takeover, {"record_path": record, "state": "absent"}, capsys, check=True)
    assert result["units"] == [
        {"unit": "nvidia-cdi-refresh.path", "verbs": ["unmask", "start"]},
        {"unit": "nvidia-cdi-refresh.service", "verbs": ["unmask"]},
    ]
    assert [c for c in calls if c[1] != "is-active"] == [] and os.path.exists(record)  # check mode
    result = _run(takeover, {"record_path": record, "state": "absent"}, capsys)
    assert [c for c in calls if c[1] != "is-active"] == [
        ["systemctl", "unmask", "nvidia-cdi-refresh.path"],
        ["systemctl", "start", "nvidia-cdi-refresh.path"],
        ["systemctl", "unmask", "nvidia-cdi-refresh.service"],
    ]
    assert not os.path.exists(record)


def test_mask_records_then_stops_and_masks_in_one_call(tmp_path, capsys, monkeypatch):
    """mask=true: the units' state is recorded first, then the active one is stopped and each is masked; check mode
    runs nothing; a second call (masked, inactive) changes nothing; a failing mask fails naming the unit, the record
    written."""
    units = tmp_path / "usr/lib/systemd/system"
    units.mkdir(parents=True)
    (tmp_path / "etc/systemd/system").mkdir(parents=True)
    for unit in ("nvidia-cdi-refresh.service", "nvidia-cdi-refresh.path"):
        (units / unit).write_text("[Unit]\n")
    calls, fail = [], {}

    def fake_run(self, argv, **_kw):
        calls.append(argv)
        unit = argv[2]
        link = tmp_path / "etc/systemd/system" / unit
        if argv[1] == "is-active":
            active = unit.endswith(".path") and ["systemctl", "stop", unit] not in calls
            return (0, "active\n", "") if active else (3, "inactive\n", "")
        if fail.get(argv[1]) == unit:
            return 1, "", f"Failed to {argv[1]} unit {unit}"
        if argv[1] == "mask":
            os.symlink("/dev/null", str(link))
        return 0, "", ""

    monkeypatch.setattr(AnsibleModule, "run_command", fake_run)
    real_units = takeover_record.unit_states
    monkeypatch.setattr(takeover_record, "unit_states", lambda _root: real_units(str(tmp_path)))
    record = str(tmp_path / "record.json")
    verbs = [
        {"unit": "nvidia-cdi-refresh.path", "verbs": ["stop", "mask"]},
        {"unit": "nvidia-cdi-refresh.service", "verbs": ["mask"]},
    ]
    result = _run(takeover, {"record_path": record, "mask": True}, capsys, check=True, diff=True)
    assert result["changed"] and result["units"] == verbs and not os.path.exists(record)
    assert [c for c in calls if c[1] != "is-active"] == []
    assert result["diff"][1]["after"] == "systemctl stop mask nvidia-cdi-refresh.path\n"
    result = _run(takeover, {"record_path": record, "mask": True}, capsys)
    assert result["changed"] and result["units"] == verbs
    assert [c for c in calls if c[1] != "is-active"] == [
        ["systemctl", "stop", "nvidia-cdi-refresh.path"],
        ["systemctl", "mask", "nvidia-cdi-refresh.path"],
        ["systemctl", "mask", "nvidia-cdi-refresh.service"],
    ]
    assert json.loads(Path(record).read_text())["units"]["nvidia-cdi-refresh.path"] == {
        "enabled": False,
        "masked": False,
        "active": True,
    }
    result = _run(takeover, {"record_path": record, "mask": True}, capsys)
    assert not result["changed"] and result["units"] == []
    # a unit that cannot be masked: the failure names it and the record; the record of its state is written
    for unit in ("nvidia-cdi-refresh.service", "nvidia-cdi-refresh.path"):
        os.unlink(str(tmp_path / "etc/systemd/system" / unit))
    os.unlink(record)
    fail["mask"] = "nvidia-cdi-refresh.service"
    result = _run(takeover, {"record_path": record, "mask": True}, capsys)
    assert result["failed"] and result["msg"].startswith("systemctl mask nvidia-cdi-refresh.service failed (rc 1)")
    assert record in result["msg"] and os.path.exists(record)


def test_mask_is_refused_with_state_absent(tmp_path, capsys):
    result = _run(takeover, {"record_path": str(tmp_path / "r.json"), "state": "absent", "mask": True}, capsys)
    assert result["failed"] and result["msg"].startswith("mask: only with state=present")
