# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""remediate/: the gpu_reset module's work (refuses naming the holders, check mode, a failed reset), the
remediation_record module's (append, amend, check mode, a broken record kept) and dcgm_diag's (the JSON of dcgmi diag
-j as DCGM 3 and 4 print it, dcgmi absent, check mode)."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.base.runner import Failure
from ansible_collections.gpufleet.nvidia.plugins.module_utils.remediate import dcgm, record, reset

GPU = {"uuid": "GPU-4050a883-76e9-5f5a-bb11-6a5ebea6b95f", "minor": 0, "pci_bus_id": "0000:17:00.0"}


class FakeHost:
    def __init__(self, check=False, diff=False, answers=None, binaries=None):
        self.check_mode, self.diff = check, diff
        self.answers = list(answers or [])
        self.binaries = binaries or {}
        self.calls = []

    def run_command(self, argv):
        self.calls.append(argv)
        return self.answers.pop(0) if self.answers else (0, "", "")

    def get_bin_path(self, name):
        return self.binaries.get(name)

    def warn(self, text):
        raise AssertionError(text)


def _proc(root, pid, command, device):
    d = root / "proc" / str(pid)
    (d / "fd").mkdir(parents=True)
    (d / "stat").write_text(f"{pid} ({command}) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 100 0 0\n")
    (d / "cgroup").write_text("0::/\n")
    os.symlink(device, d / "fd" / "3")


def _reset_request(root, command=None, stop_clients=False):
    return reset.ResetRequest.from_params(
        {
            "gpus": [GPU],
            "command": command or list(reset.DEFAULT_COMMAND),
            "ignore": [],
            "root": str(root),
            "stop_clients": stop_clients,
        }
    )


def test_reset_runs_nvidia_smi_by_uuid(tmp_path):
    (tmp_path / "proc").mkdir()
    host = FakeHost(answers=[(0, "GPU 00000000:17:00.0 was successfully reset.\n", "")])
    result = reset.run_reset(_reset_request(tmp_path), host)
    assert host.calls == [["nvidia-smi", "-r", "-i", GPU["uuid"]]]
    assert result.changed and result.reset == [GPU["uuid"]]


def test_reset_refuses_naming_the_process_that_holds_the_gpu(tmp_path):
    _proc(tmp_path, 4242, "train.py", "/dev/nvidia0")
    _proc(tmp_path, 4243, "other.py", "/dev/nvidia1")  # another GPU blocks too (nvidia-smi(1))
    _proc(tmp_path, 4244, "nvidia-smi", "/dev/nvidiactl")  # the control device alone is no GPU
    host = FakeHost()
    with pytest.raises(Failure) as err:
        reset.run_reset(_reset_request(tmp_path), host)
    assert "pid 4242 (train.py) holding /dev/nvidia0" in err.value.msg and "pid 4243 (other.py)" in err.value.msg
    assert "4244" not in err.value.msg and host.calls == []
    ignoring = reset.ResetRequest.from_params(
        {
            "gpus": [GPU],
            "command": list(reset.DEFAULT_COMMAND),
            "ignore": ["train.py", "other.py"],
            "root": str(tmp_path),
            "stop_clients": False,
        }
    )
    assert reset.run_reset(ignoring, FakeHost()).reset == [GPU["uuid"]]


def test_reset_in_check_mode_resets_nothing_and_a_failed_reset_says_reboot(tmp_path):
    (tmp_path / "proc").mkdir()
    host = FakeHost(check=True)
    result = reset.run_reset(_reset_request(tmp_path), host)
    assert host.calls == [] and result.reset == [GPU["uuid"]] and result.changed
    host = FakeHost(answers=[(255, "", "GPU Reset couldn't run because GPU 00000000:17:00.0 is the primary GPU.")])
    with pytest.raises(Failure) as err:
        reset.run_reset(_reset_request(tmp_path), host)
    assert "primary GPU" in err.value.msg and "reboot the host" in err.value.msg


class SystemdHost(FakeHost):
    """``systemctl is-active`` true for the units in ``active``; ``systemctl stop``/``start`` logged, failing for the
    units in ``stuck``/``dead``; every other command (the reset) answers ``reset_rc``."""

    def __init__(self, active, *, stuck=(), dead=(), reset_rc=0, check=False, proc=None):
        super().__init__(check=check)
        self.active, self.stuck, self.dead, self.reset_rc, self.proc = set(active), stuck, dead, reset_rc, proc

    def run_command(self, argv):
        self.calls.append(argv)
        if argv[:2] == ["systemctl", "is-active"]:
            return (0 if argv[-1] in self.active else 3, "", "")
        if argv[:2] == ["systemctl", "stop"]:
            if argv[-1] in self.stuck:
                return (1, "", "timed out")
            self.active.discard(argv[-1])
            if self.proc and argv[-1] == "nvidia-persistenced.service":
                shutil.rmtree(self.proc)  # its process is gone
            return (0, "", "")
        if argv[:2] == ["systemctl", "start"]:
            return (1, "", "failed") if argv[-1] in self.dead else (0, "", "")
        return (self.reset_rc, "", "reset failed" if self.reset_rc else "")


def _actions(calls):
    return [c for c in calls if c[:2] != ["systemctl", "is-active"]]


def test_reset_stops_the_gpu_services_and_starts_them_again(tmp_path):
    (tmp_path / "proc").mkdir()
    _proc(tmp_path, 812, "nvidia-persistenced", "/dev/nvidia0")  # the daemon holds every GPU while it runs
    active = ["nvidia-persistenced.service", "nvidia-dcgm.service"]
    host = SystemdHost(active, proc=tmp_path / "proc" / "812")
    result = reset.run_reset(_reset_request(tmp_path, stop_clients=True), host)
    assert _actions(host.calls) == [
        ["systemctl", "stop", "nvidia-dcgm.service"],
        ["systemctl", "stop", "nvidia-persistenced.service"],
        ["nvidia-smi", "-r", "-i", GPU["uuid"]],
        ["systemctl", "start", "nvidia-persistenced.service"],
        ["systemctl", "start", "nvidia-dcgm.service"],
    ]
    assert result.reset == [GPU["uuid"]] and result.clients_stopped == [
        "nvidia-dcgm.service",
        "nvidia-persistenced.service",
    ]


def test_reset_starts_the_services_again_when_it_fails_or_refuses(tmp_path):
    (tmp_path / "proc").mkdir()
    host = SystemdHost(["nvidia-persistenced.service"], reset_rc=255)
    with pytest.raises(Failure, match="reboot the host"):
        reset.run_reset(_reset_request(tmp_path, stop_clients=True), host)
    assert _actions(host.calls)[-1] == ["systemctl", "start", "nvidia-persistenced.service"]
    _proc(tmp_path, 4242, "train.py", "/dev/nvidia0")
    host = SystemdHost(["nvidia-persistenced.service"])
    with pytest.raises(Failure, match="pid 4242"):
        reset.run_reset(_reset_request(tmp_path, stop_clients=True), host)
    assert _actions(host.calls) == [
        ["systemctl", "stop", "nvidia-persistenced.service"],
        ["systemctl", "start", "nvidia-persistenced.service"],
    ]


def test_reset_refuses_when_a_service_will_not_stop_and_says_when_one_did_not_start(tmp_path):
    (tmp_path / "proc").mkdir()
    host = SystemdHost(
        ["nvidia-persistenced.service", "nvidia-fabricmanager.service"], stuck=["nvidia-persistenced.service"]
    )
    with pytest.raises(Failure, match=r"nvidia-persistenced\.service would not stop") as err:
        reset.run_reset(_reset_request(tmp_path, stop_clients=True), host)
    assert err.value.fields["reset"] == [] and ["nvidia-smi", "-r", "-i", GPU["uuid"]] not in host.calls
    assert _actions(host.calls)[-1] == ["systemctl", "start", "nvidia-fabricmanager.service"]
    host = SystemdHost(["nvidia-persistenced.service"], dead=["nvidia-persistenced.service"])
    with pytest.raises(Failure, match="did not start again") as err:
        reset.run_reset(_reset_request(tmp_path, stop_clients=True), host)
    assert err.value.fields["reset"] == [GPU["uuid"]]


def test_reset_check_mode_names_the_services_it_would_stop_and_stops_nothing(tmp_path):
    (tmp_path / "proc").mkdir()
    _proc(tmp_path, 812, "nvidia-persistenced", "/dev/nvidia0")
    host = SystemdHost(["nvidia-persistenced.service"], check=True)
    result = reset.run_reset(_reset_request(tmp_path, stop_clients=True), host)
    assert _actions(host.calls) == [] and result.clients_stopped == ["nvidia-persistenced.service"]
    assert result.reset == [GPU["uuid"]]


def test_reset_request_needs_uuid_minor_and_a_uuid_placeholder(tmp_path):
    with pytest.raises(Failure, match="needs uuid and minor"):
        reset.ResetRequest.from_params(
            {"gpus": [{"uuid": "GPU-1"}], "command": ["x", "{uuid}"], "ignore": [], "root": "/"}
        )
    with pytest.raises(Failure, match=r"\{uuid\}"):
        _reset_request(tmp_path, ["nvidia-smi", "-r"])


def _record_params(root, **kw):
    params = {
        "state": "present",
        "action": "reset",
        "gpus": ["0000:17:00.0"],
        "problems": ["gpu_xid_48"],
        "result": "started",
        "dry_run": False,
        "reason": "alert",
        "handled": [],
        "amend": False,
        "path": "/var/lib/gpufleet/remediation.json",
        "root": str(root),
    }
    params.update(kw)
    return record.RecordRequest.from_params(params)


def test_record_appends_then_amends_and_check_mode_writes_nothing(tmp_path):
    (tmp_path / "proc/sys/kernel/random").mkdir(parents=True)
    (tmp_path / "proc/sys/kernel/random/boot_id").write_text("boot-a\n")
    (tmp_path / "proc/uptime").write_text("120.5 1.0\n")
    path = tmp_path / "var/lib/gpufleet/remediation.json"
    res = record.run_record(_record_params(tmp_path), FakeHost(check=True, diff=True))
    assert res.changed and not path.exists() and '"action": "reset"' in res.diff["after"]
    record.run_record(_record_params(tmp_path), FakeHost())
    res = record.run_record(
        _record_params(tmp_path, action="", result="returned", amend=True, handled=["0000:17:00.0"]), FakeHost()
    )
    data = json.loads(path.read_text())
    assert [(h["action"], h["result"]) for h in data["history"]] == [("reset", "returned")]
    assert data["handled_xids"] == {"0000:17:00.0": {"boot_id": "boot-a", "uptime_s": 120.5}}
    assert res.record["today"] == 1
    read = record.run_record(_record_params(tmp_path, state="read"), FakeHost())
    assert not read.changed and read.record["today"] == 1 and read.entry is None


def test_record_keeps_a_file_it_cannot_read(tmp_path):
    path = tmp_path / "var/lib/gpufleet/remediation.json"
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    with pytest.raises(Failure, match="not replacing it"):
        record.run_record(_record_params(tmp_path), FakeHost())
    assert path.read_text() == "{not json"


DCGM4_PASS = {
    "DCGM Diagnostic": {
        "test_categories": [
            {"category": "Deployment", "tests": [{"name": "software", "results": [{"status": "Pass"}]}]},
            {"category": "Hardware", "tests": [{"name": "memory", "results": [{"entity_id": 0, "status": "Pass"}]}]},
        ]
    }
}
DCGM3_FAIL = {
    "DCGM GPU Diagnostic": {
        "test_categories": [
            {
                "category": "Hardware",
                "tests": [
                    {
                        "name": "GPU Memory",
                        "results": [
                            {
                                "gpu_id": "1",
                                "status": "Fail",
                                "warnings": [{"warning": "Pending page retirements found", "error_id": 26}],
                            },
                            {"gpu_id": "0", "status": "Pass"},
                        ],
                    }
                ],
            },
            {"category": "Integration", "tests": [{"name": "PCIe", "results": [{"status": "Skip"}]}]},
        ]
    }
}


def test_dcgm_parse_both_versions():
    passed = dcgm.parse(json.dumps(DCGM4_PASS))
    assert passed["passed"] and [t["name"] for t in passed["tests"]] == ["software", "memory"]
    failed = dcgm.parse("Successfully ran diagnostic\n" + json.dumps(DCGM3_FAIL))
    assert not failed["passed"] and failed["failed"] == ["GPU Memory (GPU 1): Pending page retirements found"]
    with pytest.raises(ValueError):
        dcgm.parse('{"other": {}}')


def test_dcgm_run_absent_check_mode_and_failure():
    req = dcgm.DiagRequest.from_params({"level": 2, "command": "dcgmi"})
    absent = dcgm.run_diag(req, FakeHost())
    assert not absent.available and absent.passed is None and "not installed" in absent.summary
    host = FakeHost(check=True, binaries={"dcgmi": "/usr/bin/dcgmi"})
    check = dcgm.run_diag(req, host)
    assert check.available and not check.ran and host.calls == []
    host = FakeHost(answers=[(226, json.dumps(DCGM3_FAIL), "")], binaries={"dcgmi": "/usr/bin/dcgmi"})
    ran = dcgm.run_diag(req, host)
    assert host.calls == [["/usr/bin/dcgmi", "diag", "-r", "2", "-j"]]
    assert ran.passed is False and "Pending page retirements found" in ran.summary
    with pytest.raises(Failure, match="no dcgmi diag level"):
        dcgm.DiagRequest.from_params({"level": 5, "command": "dcgmi"})
    host = FakeHost(answers=[(1, "Error: unable to connect to host engine", "")], binaries={"dcgmi": "/usr/bin/dcgmi"})
    with pytest.raises(Failure, match="nv-hostengine"):
        dcgm.run_diag(req, host)
