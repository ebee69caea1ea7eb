# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Slurm from Debian's packages (munge, slurmctld, slurmd 22.05) on the converged fleet's ``cri-bookworm``
(``_fleet_converged.py``: installed before ``site.yml`` with the admin's ``slurm.conf``, which includes the node lines
the slurm stage writes; ``slurm_constrain_devices: true``). After ``site.yml``: the node is in service with the GPUs
discovery found, and a job given one GPU sees that GPU alone (the stub NVML, as NVIDIA's, lists no GPU whose device
file the job's device cgroup keeps from it)."""

from __future__ import annotations

import re

import pytest

from tests.integration._fleet_converged import SLURM

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def node(converged_fleet):
    return converged_fleet.node(SLURM)


def _gpu_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if re.match(r"GPU \d+: ", line)]


def test_site_described_the_gpus_to_slurm(node):
    gres = node.run("cat /etc/slurm/gres.conf", check=True).stdout.splitlines()
    assert gres[1:] == [
        "AutoDetect=off",
        "Name=gpu Type=a100-sxm4-40gb File=/dev/nvidia0",
        "Name=gpu Type=a100-sxm4-40gb File=/dev/nvidia1",
    ]
    assert "ConstrainDevices=yes" in node.run("cat /etc/slurm/cgroup.conf", check=True).stdout
    show = node.run(f"scontrol show node {SLURM} --oneliner", check=True).stdout
    assert "Gres=gpu:a100-sxm4-40gb:2" in show, show
    sinfo = node.run("sinfo --noheader -N -o '%N %t'", check=True).stdout.split()
    assert sinfo == [SLURM, "idle"], sinfo


def test_srun_with_one_gpu_sees_one(node):
    one = node.run("timeout 60 srun --gres=gpu:1 nvidia-smi -L", check=True).stdout
    assert len(_gpu_lines(one)) == 1, one
    two = node.run("timeout 60 srun --gres=gpu:2 nvidia-smi -L", check=True).stdout
    assert len(_gpu_lines(two)) == 2, two
    assert _gpu_lines(one)[0] in _gpu_lines(two)
    none = node.run("timeout 60 srun nvidia-smi -L")
    assert _gpu_lines(none.stdout) == [], none.stdout
