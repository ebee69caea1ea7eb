# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""slurm/drain.py, the slurm_drain module's work, against a stand-in of scontrol and squeue whose output is shaped
after Slurm 22.05's (the real ones run in tests/integration/test_slurm.py): drain and wait for the GPU jobs, the
timeout, check mode, resume only the collection's own drain."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.base.runner import Failure
from ansible_collections.gpufleet.nvidia.plugins.module_utils.slurm import drain

REASON = "gpufleet: driver upgrade"


class FakeSlurm:
    """scontrol show/update and squeue of one node; ``jobs`` is what squeue prints at each look, the last repeated."""

    def __init__(self, state="IDLE", reason="", jobs=None, check=False, scontrol="/usr/bin/scontrol"):
        self.state, self.reason, self.looks = state, reason, list(jobs or [""])
        self.check_mode, self.diff, self.scontrol = check, False, scontrol
        self.updates = []

    def get_bin_path(self, name):
        return {"scontrol": self.scontrol, "squeue": "/usr/bin/squeue", "slurmd": "/usr/sbin/slurmd"}.get(name)

    def run_command(self, argv):
        if argv[-1] == "-C":
            return 0, "NodeName=gpu-a CPUs=2 RealMemory=100\nUpTime=0\n", ""
        if argv[1] == "show":
            reason = f" Reason={self.reason} [root@2026-11-27T22:36:34]" if self.reason else ""
            return 0, f"NodeName=gpu-a Arch=x86_64 State={self.state} Partitions=gpu{reason}\n", ""
        if argv[1] == "update":
            self.updates.append(argv[2:])
            if argv[3] == "State=DRAIN":
                self.state = self.state.split("+")[0] + "+DRAIN"
                self.reason = argv[4].split("=", 1)[1]
            else:
                self.state, self.reason = self.state.split("+")[0], ""
            return 0, "", ""
        if argv[0].endswith("squeue"):
            assert argv[1:] == ["-h", "-w", "gpu-a", "-t", "RUNNING,COMPLETING", "-o", drain.SQUEUE_FORMAT]
            out = self.looks.pop(0) if len(self.looks) > 1 else self.looks[0]
            if not out:
                self.state = self.state.replace("MIXED", "IDLE")
            return 0, out, ""
        raise AssertionError(argv)


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def run(host, state="drained", reason=REASON, timeout=60, poll=5):
    clock = Clock()
    request = drain.DrainRequest("", state, reason, timeout, poll)
    return drain.slurm_drain(request, host, clock=clock, sleep=clock.sleep), clock


GPU_JOB = "17|alice|train|RUNNING|gres:gpu:1\n18|bob|cpu-only|RUNNING|N/A\n"


def test_drain_waits_for_the_gpu_jobs_only():
    host = FakeSlurm(state="MIXED", jobs=[GPU_JOB, GPU_JOB, "18|bob|cpu-only|RUNNING|N/A\n"])
    out, clock = run(host)
    assert host.updates == [["NodeName=gpu-a", "State=DRAIN", f"Reason={REASON}"]]
    assert out.changed and out.before == "in_service" and out.jobs == [] and clock.now == 10
    assert out.reason.startswith(REASON)


def test_timeout_fails_naming_the_jobs_and_stays_drained():
    host = FakeSlurm(state="MIXED", jobs=[GPU_JOB])
    with pytest.raises(Failure, match=r"GPU jobs still run after 12s: job 17 \(train, user alice, gres:gpu:1\)") as exc:
        run(host, timeout=12)
    assert exc.value.fields["after"] == "draining" and "DRAIN" in host.state
    assert exc.value.fields["jobs"] == [
        {"id": "17", "user": "alice", "name": "train", "state": "RUNNING", "gres": "gres:gpu:1"}
    ]


def test_check_mode_says_what_and_changes_nothing():
    host = FakeSlurm(state="MIXED", jobs=[GPU_JOB], check=True)
    out, _clock = run(host)
    assert out.changed and out.after == "draining" and [j["id"] for j in out.jobs] == ["17"]
    assert host.updates == [] and host.state == "MIXED"


def test_drained_with_the_same_reason_is_no_change_another_reason_is_replaced():
    host = FakeSlurm(state="IDLE+DRAIN", reason=REASON)
    out, _clock = run(host)
    assert not out.changed and host.updates == []
    out, _clock = run(host, reason="gpufleet: validation failed: nvidia-smi")
    assert out.changed and host.reason == "gpufleet: validation failed: nvidia-smi"


def test_resume_only_the_collections_drain():
    host = FakeSlurm(state="IDLE+DRAIN", reason="gpufleet: validation failed")
    out, _clock = run(host, state="resumed", reason="gpufleet:", timeout=0)
    assert out.changed and out.after == "in_service"
    assert host.updates == [["NodeName=gpu-a", "State=RESUME"]]
    admin = FakeSlurm(state="IDLE+DRAIN", reason="bad fan, ticket 4711")
    out, _clock = run(admin, state="resumed", reason="gpufleet:")
    assert not out.changed and admin.updates == [] and "bad fan" in out.msg
    out, _clock = run(FakeSlurm(), state="resumed", reason="gpufleet:")
    assert not out.changed and out.after == "in_service"


def test_an_admins_drain_keeps_its_reason_and_is_not_resumed():
    host = FakeSlurm(state="IDLE+DRAIN", reason="bad fan, ticket 4711")
    out, _clock = run(host)
    assert not out.changed and host.updates == [] and "bad fan" in out.msg and out.after == "drained"
    out, _clock = run(host, state="resumed", reason="gpufleet:")
    assert not out.changed and host.updates == [] and host.state == "IDLE+DRAIN"
    with pytest.raises(Failure, match="would resume any drain"):
        run(host, state="resumed", reason=" ")
    assert host.updates == []


def test_not_a_slurm_node_and_an_empty_reason():
    out, _clock = run(FakeSlurm(scontrol=None))
    assert out.slurm is False and not out.changed
    with pytest.raises(Failure, match="needs a reason"):
        run(FakeSlurm(), reason=" ")


def test_no_node_name_fails_before_any_scontrol_call():
    host = FakeSlurm()
    host.get_bin_path = lambda name: "/usr/bin/scontrol" if name == "scontrol" else None
    host.run_command = lambda argv: (1, "", "hostname: not found") if argv[0] == "hostname" else AssertionError(argv)
    with pytest.raises(Failure, match="set node"):
        run(host)


def test_gpu_jobs_parse():
    assert drain.gpu_jobs("1|u|n|RUNNING|gres:gpu:a100:2\n2|u|n|RUNNING|N/A\nbroken\n") == [
        {"id": "1", "user": "u", "name": "n", "state": "RUNNING", "gres": "gres:gpu:a100:2"}
    ]
