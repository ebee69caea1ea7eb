# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""slurm/gres.py: gres.conf lines and slurm.conf's Gres= from discovery's GPU records (whole GPUs by device
file, MIG devices by MultipleFiles with their capability minors), and what it refuses."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi.devices import parse_mig_minors
from ansible_collections.gpufleet.nvidia.plugins.module_utils.slurm import gres

A100 = "NVIDIA A100-SXM4-40GB"
MINORS = parse_mig_minors(
    "config 1\nmonitor 2\ngpu1/gi1/access 21\ngpu1/gi1/ci0/access 22\ngpu1/gi2/access 30\ngpu1/gi2/ci0/access 31\n"
)


def test_whole_gpus_by_device_file_in_minor_order():
    gpus = [
        {"index": 1, "minor": 3, "name": "NVIDIA H100 80GB HBM3", "mig_mode": "disabled"},
        {"index": 0, "minor": 0, "name": A100},
    ]
    out = gres.render("gpu-a", gpus, {})
    assert out["gres_conf"].splitlines()[1:] == [
        "AutoDetect=off",
        "Name=gpu Type=a100-sxm4-40gb File=/dev/nvidia0",
        "Name=gpu Type=h100_80gb_hbm3 File=/dev/nvidia3",
    ]
    assert out["gres"] == "gpu:a100-sxm4-40gb:1,gpu:h100_80gb_hbm3:1"
    assert out["slurm_conf"].splitlines()[1] == "NodeName=gpu-a Gres=gpu:a100-sxm4-40gb:1,gpu:h100_80gb_hbm3:1"
    assert "cgroup_conf" not in out


def test_mig_gpu_offered_as_its_slices_with_gi_and_ci_capabilities():
    gpus = [
        {"minor": 0, "name": A100},
        {
            "minor": 1,
            "name": A100,
            "mig_mode": "enabled",
            "mig_devices": [
                {"index": 1, "gi_id": 2, "ci_id": 0, "memory_mib": 4864},
                {"index": 0, "gi_id": 1, "ci_id": 0, "memory_mib": 4864, "profile": "1g.5gb"},
            ],
        },
    ]
    lines = gres.gres_lines(gpus, MINORS)
    assert [line for _kind, line in lines] == [
        "Name=gpu Type=a100-sxm4-40gb File=/dev/nvidia0",
        "Name=gpu Type=a100-sxm4-40gb_1g.5gb MultipleFiles=/dev/nvidia1,/dev/nvidia-caps/nvidia-cap21,"
        "/dev/nvidia-caps/nvidia-cap22",
        "Name=gpu Type=a100-sxm4-40gb_5gb MultipleFiles=/dev/nvidia1,/dev/nvidia-caps/nvidia-cap30,"
        "/dev/nvidia-caps/nvidia-cap31",
    ]
    # No line names the MIG GPU's own device file alone: Slurm would hand out the whole GPU and its slices.
    assert not any(line.endswith("File=/dev/nvidia1") for _kind, line in lines)
    assert gres.gres_value(lines) == "gpu:a100-sxm4-40gb:1,gpu:a100-sxm4-40gb_1g.5gb:1,gpu:a100-sxm4-40gb_5gb:1"


def test_same_type_counted_together_and_cgroup_on_request():
    gpus = [{"minor": m, "name": A100} for m in (0, 1, 2)]
    out = gres.render("n1", gpus, {}, cgroup_constrain=True)
    assert out["gres"] == "gpu:a100-sxm4-40gb:3"
    assert out["cgroup_conf"].splitlines()[1] == "ConstrainDevices=yes"


def test_no_gpu_gives_no_gres():
    out = gres.render("n1", [], {})
    assert out["gres"] == ""
    assert out["gres_conf"].splitlines()[1:] == ["AutoDetect=off"]
    assert "Gres=" not in out["slurm_conf"]


@pytest.mark.parametrize(
    ("gpu", "message"),
    [
        ({"index": 4, "name": A100}, "GPU 4 has no minor number"),
        (
            {
                "minor": 1,
                "name": A100,
                "mig_mode": "enabled",
                "mig_devices": [{"gi_id": 9, "ci_id": 0, "memory_mib": 1}],
            },
            "gpu1/gi9/access, gpu1/gi9/ci0/access",
        ),
        (
            {"minor": 1, "name": A100, "mig_mode": "enabled", "mig_devices": [{"gi_id": 1, "ci_id": 0}]},
            "neither a profile name nor a memory size",
        ),
    ],
)
def test_refuses_what_slurm_could_not_be_told(gpu, message):
    with pytest.raises(gres.GresError, match=message):
        gres.gres_lines([gpu], MINORS)
