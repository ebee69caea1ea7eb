# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The drain around a driver upgrade, on the converged fleet's ``cri-bookworm`` (Slurm 22.05 from Debian, controller
and GPU node in one, ``_fleet_converged.py``; after ``test_stages_alone.py``, which wants the fleet as ``site.yml``
left it). A Slurm GPU job and a docker GPU container hold the GPUs; ``nvidia-smi`` (one of the driver's packages) is
removed, so ``driver_upgrade.yml`` has a package to change:

* check mode drains nothing and says what it would wait for;
* the upgrade drains Slurm (the job ends on its own first: the drain waits), stops the container with docker's own
  stop, installs, validates and returns the node to Slurm (a job runs again);
* with a validation that fails the node stays drained: ``sinfo -R`` gives the reason, no new job starts, and the
  fleet report says the host stays out of service and why."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.integration._fleet_converged import SLURM

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
UPGRADE = ROOT / "playbooks" / "driver_upgrade.yml"
DRAIN = ROOT / "tests" / "integration" / "playbooks" / "drain.yml"
JOB_SECONDS = 12
# The job holds every GPU device its cgroup lets it open (O_PATH: the simulated devices have no driver behind them),
# then leaves a mark when it ended by itself.
HOLDERS = rf"""
set -eu
docker rm -f gpuhold >/dev/null 2>&1 || true
docker run -d --name gpuhold --gpus all gpufleet-sim/mini:latest python3 -c "import os, signal, sys, time; \
signal.signal(signal.SIGTERM, lambda *a: sys.exit(0)); fd = os.open('/dev/nvidia0', os.O_PATH); time.sleep(900)"
rm -f /tmp/gpufleet-job.done
sbatch -o /dev/null --gres=gpu:1 --wrap "python3 -c \"import glob, os, time; \
fds = [os.open(d, os.O_PATH) for d in glob.glob('/dev/nvidia[0-9]')]; time.sleep({JOB_SECONDS})\"; \
touch /tmp/gpufleet-job.done"
for i in $(seq 50); do squeue -h -t RUNNING | grep -q . && break; sleep 0.2; done
squeue -h -t RUNNING | grep -q .
dpkg -r nvidia-smi >/dev/null
"""


@pytest.fixture(scope="module")
def node(converged_fleet):
    found = converged_fleet.node(SLURM)
    found.fleet = converged_fleet
    yield found
    found.run("scontrol update NodeName=cri-bookworm State=RESUME; docker rm -f gpuhold")
    found.run("command -v nvidia-smi || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nvidia-smi")
    # slurmd's cgroup v1 folders (slurm_<node>) are made in the host's hierarchy, which the node shares: the last
    # Slurm user of the fleet stops the daemons and removes what is empty (a folder another run uses stays).
    found.run(
        "systemctl stop slurmd slurmctld; for d in /sys/fs/cgroup/*/slurm_cri-bookworm; do "
        '[ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} + 2>/dev/null; done; true'
    )


def playbook(node, path: Path, *args: str) -> subprocess.CompletedProcess:
    fleet = node.fleet
    cmd = [str(ROOT / ".venv" / "bin" / "ansible-playbook"), "-i", str(fleet.inventory)]
    cmd += ["-i", str(fleet.converged["kube_inventory"]), "-e", "ansible_become=false", *args, str(path)]
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".cache" / "collections"), ANSIBLE_FORCE_COLOR="0")
    return subprocess.run(cmd, check=False, capture_output=True, text=True, cwd=ROOT, env=env)


def upgrade(node, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return playbook(
        node, UPGRADE, "-e", f"driver_upgrade_hosts={SLURM}", "-e", "driver_branch=535", "-e", "driver_drain_delay=2",
        "-e", f"report_dir={tmp_path}", *args,
    )  # fmt: skip


def slurm_state(node) -> tuple[str, str]:
    out = node.run(f"sinfo -h -n {SLURM} -o '%T|%E'", check=True).stdout.strip()
    state, _sep, reason = out.partition("|")
    return state, reason


def test_check_mode_drains_nothing_and_says_what_it_would(node):
    node.run(HOLDERS, check=True)
    res = playbook(node, DRAIN, "--check", "-e", "drain_reason=check")
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    assert "would be drained (gpufleet: check)" in res.stdout and "Slurm in_service -> draining" in res.stdout
    assert "containers to stop: docker " in res.stdout, res.stdout[-3000:]
    assert slurm_state(node)[0] in ("mixed", "allocated")
    assert node.run("docker inspect -f '{{.State.Running}}' gpuhold").stdout.strip() == "true"
    node.run("DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nvidia-smi >/dev/null", check=True)
    node.run(f"for i in $(seq {JOB_SECONDS * 10}); do test -e /tmp/gpufleet-job.done && break; sleep 0.2; done")


def test_a_gpu_job_past_the_timeout_fails_the_drain_naming_it(node):
    node.run("sbatch -o /dev/null -J long-gpu-job --gres=gpu:1 --wrap 'sleep 60'", check=True)
    try:
        # the job must run before the drain looks (a pending job is not on the node yet, and the drain rightly lets
        # it be: under CI's load the scheduler took longer than the playbook's start)
        running = node.run(
            "for i in $(seq 150); do squeue -h -n long-gpu-job -t R -o %i | grep -q . && exit 0; sleep 0.2; done;"
            " exit 1"
        )
        assert running.rc == 0, node.run("squeue -a").stdout
        res = playbook(node, DRAIN, "-e", "drain_reason=timeout", "-e", "drain_timeout=3")
        assert res.returncode != 0, res.stdout[-3000:]
        assert "GPU jobs still run after 3s: job " in res.stdout and "(long-gpu-job, user root" in res.stdout, (
            res.stdout[-3000:]
        )
        assert slurm_state(node) == ("draining", "gpufleet: timeout")
    finally:
        node.run("scancel -n long-gpu-job; scontrol update NodeName=cri-bookworm State=RESUME")


def test_upgrade_drains_slurm_and_docker_then_returns_the_node(node, tmp_path):
    node.run(HOLDERS, check=True)
    res = upgrade(node, tmp_path)
    assert res.returncode == 0, res.stdout[-6000:] + res.stderr[-2000:]
    # The Slurm job ended by itself before the package came back: the drain waited for it.
    done = node.run("stat -c %Y /tmp/gpufleet-job.done", check=True).stdout.strip()
    installed = node.run("stat -c %Y /var/lib/dpkg/info/nvidia-smi.list", check=True).stdout.strip()
    assert int(done) <= int(installed)
    assert node.run("docker inspect -f '{{.State.Running}} {{.State.ExitCode}}' gpuhold").stdout.split() == [
        "false",
        "0",
    ]  # docker stop's SIGTERM, which the holder answers by exiting 0
    assert slurm_state(node)[0] == "idle"
    again = node.run("timeout 60 srun --gres=gpu:1 nvidia-smi -L", check=True).stdout
    assert again.startswith("GPU 0: "), again
    assert "Drain the Slurm node (gpufleet: the driver change)" in res.stdout


def test_failed_validation_keeps_the_node_drained_with_the_reason(node, tmp_path):
    node.run(HOLDERS, check=True)
    res = upgrade(node, tmp_path, "-e", "validate_image=gpufleet-sim/absent:latest")
    assert res.returncode != 0
    state, reason = slurm_state(node)
    assert state == "drained", (state, reason)
    assert reason.startswith("gpufleet: validation failed after the driver upgrade ("), reason
    job = node.run("sbatch --parsable --gres=gpu:1 --wrap true", check=True).stdout.strip()
    pending = node.run(f"sleep 2; squeue -h -j {job} -o '%T'").stdout.strip()
    assert pending == "PENDING", pending
    node.run(f"scancel {job}")
    report = (tmp_path / "fleet-report.md").read_text()
    assert "the host stays out of service (gpufleet: validation failed after the driver upgrade" in report, report
    assert "Slurm node cri-bookworm" in report
