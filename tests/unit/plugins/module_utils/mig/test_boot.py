# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""mig/boot.py (``gpufleet-mig-boot``) on a host tree whose NVML is the stub: the recorded layout applied
again with the GPU's clients stopped (last first) and started again (in order, without blocking while the system
boots), nothing done when the layout is in place, and a layout that fails half-way leaves MIG disabled, with
discovery's ``mig_boot_failed`` problem naming what happened."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery import mig_boot_check
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils.discovery.discovery_tree import (
    REPO,
    compile_nvml_stub,
    gpu_host,
    stub_config,
)

# One process per boot, as at boot: the stub NVML keeps the instances in mig-state beside its gpus.json.
BOOT = """
import json, sys
from ansible_collections.gpufleet.nvidia.plugins.module_utils.mig import boot as mig_boot
from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery import nvml
root, active = sys.argv[1], json.loads(sys.argv[2])
calls = []
def run(argv):
    calls.append(list(argv))
    if argv[:2] == ["systemctl", "is-active"]:
        return 0 if argv[-1] in active else 3
    return 0
status = mig_boot.reapply(root, run=run, is_booting=lambda run: True)
gpus = nvml.query(sys.argv[3:])["gpus"]
print(json.dumps({"status": status, "calls": calls, "gpus": gpus}))
"""
LAYOUT = [{"devices": [0], "mig-enabled": True, "mig-devices": {"1g.5gb": 2, "3g.20gb": 1}}]
ACTIVE = ["nvidia-persistenced.service", "nvidia-dcgm.service"]


@pytest.fixture(scope="module")
def stub(tmp_path_factory):
    path = compile_nvml_stub(str(tmp_path_factory.mktemp("nvml-stub")))
    if path is None:
        pytest.skip("no C compiler for the NVML stub")
    return path


def host(tmp_path, monkeypatch, stub, **a100):
    tree = gpu_host(tmp_path / "root", 2, stub)
    config = stub_config(count=2)
    config["gpus"][0].update(name="NVIDIA A100-SXM4-40GB", pci_device_id=0x20B010DE, memory_total=40960 * 1024**2,
                             cc_major=8, cc_minor=0, architecture=7, mig_mode=0, max_mig_devices=7, **a100)  # fmt: skip
    (tmp_path / "gpus.json").write_text(json.dumps(config))
    monkeypatch.setenv("GPUFLEET_SIM_GPUS_JSON", str(tmp_path / "gpus.json"))
    tree.write("/etc/gpufleet/mig-layout.json", json.dumps({"name": "mixed", "layout": LAYOUT}))
    return tree


def boot(tree, stub, active=()):
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, ".cache", "collections"))
    proc = subprocess.run(
        [sys.executable, "-c", BOOT, tree.root, json.dumps(list(active)), stub],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def profiles(gpu):
    return sorted(m["profile"] for m in gpu.get("mig_devices") or ())


def changes(calls):
    return [c for c in calls if c[:2] != ["systemctl", "is-active"]]


def test_the_layout_is_applied_again_between_stopping_and_starting_the_clients(tmp_path, monkeypatch, stub):
    tree = host(tmp_path, monkeypatch, stub)
    out = boot(tree, stub, ACTIVE)
    assert out["status"]["ok"] and out["status"]["changed"], out["status"]
    assert out["status"]["stopped"] == ["nvidia-dcgm.service", "nvidia-persistenced.service"]
    assert changes(out["calls"]) == [
        ["systemctl", "stop", "nvidia-dcgm.service"],
        ["systemctl", "stop", "nvidia-persistenced.service"],
        ["systemctl", "start", "--no-block", "nvidia-persistenced.service"],
        ["systemctl", "start", "--no-block", "nvidia-dcgm.service"],
    ]
    assert profiles(out["gpus"][0]) == ["1g.5gb", "1g.5gb", "3g.20gb"] and profiles(out["gpus"][1]) == []

    again = boot(tree, stub, ACTIVE)  # the layout in place: no client is touched
    assert again["status"] == dict(again["status"], ok=True, changed=False, message="the layout is in place")
    assert changes(again["calls"]) == []


def test_nvidia_drm_is_unloaded_around_the_change_and_loaded_again(tmp_path, monkeypatch, stub):
    tree = host(tmp_path, monkeypatch, stub)
    os.makedirs(tree.path("/sys/module/nvidia_drm"))
    out = boot(tree, stub)
    assert out["status"]["ok"] and out["status"]["drm_unloaded"], out["status"]
    assert changes(out["calls"]) == [["modprobe", "-r", "nvidia_drm"], ["modprobe", "nvidia_drm"]]


def test_a_layout_that_fails_half_way_leaves_mig_disabled_and_a_problem(tmp_path, monkeypatch, stub):
    tree = host(tmp_path, monkeypatch, stub, mig_gi_limit=1)  # the second GPU instance cannot be made
    out = boot(tree, stub, ACTIVE)
    status = out["status"]
    assert not status["ok"] and not status["applied"], status
    assert status["message"].startswith("the layout could not be applied, MIG left disabled on the GPUs it changes: ")
    assert "nvmlDeviceCreateGpuInstanceWithPlacement" in status["message"]
    assert out["gpus"][0]["mig_mode"] == "disabled" and profiles(out["gpus"][0]) == []
    # the clients are started again all the same
    assert changes(out["calls"])[-2:] == [
        ["systemctl", "start", "--no-block", "nvidia-persistenced.service"],
        ["systemctl", "start", "--no-block", "nvidia-dcgm.service"],
    ]
    tree.write(mig_boot_check.STATUS, json.dumps(status))
    (found,) = mig_boot_check.mig_boot_failed(type("Host", (), {"root": tree.root})())
    assert found["code"] == "mig_boot_failed" and "MIG left disabled" in found["message"]
    assert "journalctl -b -u gpufleet-mig-layout.service" in found["fix"]


def test_no_status_or_a_good_one_is_no_problem(tmp_path):
    class Host:
        root = str(tmp_path)

    assert mig_boot_check.mig_boot_failed(Host()) == []
    os.makedirs(tmp_path / "run" / "gpufleet")
    (tmp_path / "run" / "gpufleet" / "mig-boot.json").write_text(json.dumps({"ok": True, "message": "in place"}))
    assert mig_boot_check.mig_boot_failed(Host()) == []
    (tmp_path / "run" / "gpufleet" / "mig-boot.json").write_text("{not json")
    assert mig_boot_check.mig_boot_failed(Host()) == []
