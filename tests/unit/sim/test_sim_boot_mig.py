# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""tests/sim/node/gpufleet_sim_setup.py at a simulated boot: the stub NVML's ``mig-state`` loses every MIG instance, as
a reboot does, and the MIG mode of Hopper and later GPUs (architecture 9 and up), which does not persist there; an
Ampere GPU keeps its mode."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def setup_module_at(config: Path):
    spec = importlib.util.spec_from_file_location("gpufleet_sim_setup", ROOT / "tests/sim/node/gpufleet_sim_setup.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.CONFIG = str(config)
    return module


def test_a_boot_forgets_the_instances_and_the_hopper_mode(tmp_path):
    cfg = {"gpus": [{"uuid": "GPU-A100", "architecture": 7}, {"uuid": "GPU-H100", "architecture": 9}]}
    state = tmp_path / "mig-state"
    state.write_text("gpu GPU-A100 1\ngi GPU-A100 1 1 0 1\ngi GPU-A100 2 1 2 1\ngpu GPU-H100 1\ngi GPU-H100 1 4 0 1\n")
    setup_module_at(tmp_path / "gpus.json").forget_mig_instances(cfg)
    assert state.read_text() == "gpu GPU-A100 1\n"


def test_no_state_no_file(tmp_path):
    setup_module_at(tmp_path / "gpus.json").forget_mig_instances({"gpus": []})
    assert not (tmp_path / "mig-state").exists()
