# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""gpufleet.nvidia.gpu_facts end to end: `ansible -m` against every node of the simulated fleet, the
facts compared with what each node was configured to have (its `gpufleet_sim` host vars); plus one
small fleet with Debian's real 535 packages (driver installed but not loaded, and loaded)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
UVM_MAJOR, CAPS_MAJOR = 235, 236  # tests/sim/model.py: the majors the sim gives uvm and nvidia-caps
ARCHITECTURES = {"ampere": "Ampere", "ada": "Ada Lovelace", "hopper": "Hopper", "turing": "Turing"}
ENGINE_VERSIONS = {  # the engines' major.minor per suite, from Debian's archive (tests/sim/README.md)
    "bookworm": {"docker": "20.10.", "containerd": "1.6."},
    "trixie": {"docker": "26.", "containerd": "1.7.", "podman": "5.4."},
    "sid": {"docker": "28.", "containerd": "2.1."},
}


def gpu_facts(inventory: Path, pattern: str = "all") -> dict[str, dict[str, Any]]:
    """Run the module through `ansible -m` (json callback): host -> its task result."""
    env = dict(
        os.environ,
        ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".cache" / "collections"),
        ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
        ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json",
    )
    res = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "ansible"), "-i", str(inventory), pattern, "-m", "gpufleet.nvidia.gpu_facts"],
        check=False, capture_output=True, text=True, env=env, cwd=ROOT, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return json.loads(res.stdout)["plays"][0]["tasks"][0]["hosts"]


def host_vars(inventory: Path) -> dict[str, dict[str, Any]]:
    data = yaml.safe_load(inventory.read_text())
    return {
        name: hv["gpufleet_sim"]
        for group in data["all"]["children"].values()
        for name, hv in (group.get("hosts") or {}).items()
    }


def bus_id(value: str) -> str:
    return ("0000:" + value.split(":", 1)[1]).lower() if value.count(":") == 2 else value.lower()


def check_gpus(name: str, facts: dict[str, Any], sim: dict[str, Any]) -> None:
    loaded = sim["driver_state"] == "loaded"
    want = sorted(sim["gpus"], key=lambda g: g["minor"]) if loaded else []
    assert facts["gpu_count"] == len(want), name
    # Each GPU is on the bus (with an NVIDIA HD-audio function beside the first): only GPUs count.
    assert facts["pci_gpu_count"] == len(sim["gpus"]), name
    if sim["gpus"]:
        classes = [d for d in facts["pci_devices"] if d["vendor_id"] == "0x10de" and not d["is_gpu"]]
        assert classes, f"{name}: the sim's NVIDIA audio function is missing from pci_devices"
    for gpu, cfg in zip(facts["gpus"], want):
        where = f"{name} GPU {cfg['minor']}"
        assert gpu["source"] == "nvml", where
        assert (gpu["uuid"], gpu["name"], gpu["minor"]) == (cfg["uuid"], cfg["name"], cfg["minor"]), where
        assert gpu["pci_bus_id"] == bus_id(cfg["pci_bus_id"]), where
        assert gpu["pci_device_id"] == "0x{}10de".format(cfg["device_id"][2:].lower()), where
        assert gpu["memory_mib"] == cfg["memory_mib"], where
        assert gpu["compute_capability"] == cfg["compute_capability"], where
        assert gpu["architecture"] == ARCHITECTURES[cfg["architecture"]], where
        assert gpu["mig_mode"] == cfg["mig_mode"], where
        assert gpu["lost"] is False, where


def check_device_nodes(name: str, facts: dict[str, Any], sim: dict[str, Any]) -> None:
    nodes = {n["path"]: (n["major"], n["minor"]) for n in facts["device_nodes"]}
    if sim["driver_state"] != "loaded":
        assert nodes == {}, name
        return
    want = {f"/dev/nvidia{g['minor']}": (195, g["minor"]) for g in sim["gpus"]}
    want.update({"/dev/nvidiactl": (195, 255), "/dev/nvidia-modeset": (195, 254)})
    want.update({"/dev/nvidia-uvm": (UVM_MAJOR, 0), "/dev/nvidia-uvm-tools": (UVM_MAJOR, 1)})
    if any(g["mig_mode"] == "enabled" for g in sim["gpus"]):
        want.update({"/dev/nvidia-caps/nvidia-cap1": (CAPS_MAJOR, 1), "/dev/nvidia-caps/nvidia-cap2": (CAPS_MAJOR, 2)})
    assert nodes == want, name


def check_engines(name: str, facts: dict[str, Any], sim: dict[str, Any]) -> None:
    engines = facts["engines"]
    for engine in ("docker", "containerd", "podman"):
        if engine in sim["engines"]:
            version = engines[engine]["version"] or ""
            assert engines[engine]["installed"] is True, f"{name}: {engine}"
            assert version.startswith(ENGINE_VERSIONS[sim["suite"]][engine]), f"{name}: {engine} {version}"
        else:
            assert engines[engine]["installed"] is False, f"{name}: {engine} {engines[engine]}"


def test_gpu_facts_on_every_node(sim_fleet: Any) -> None:
    results = gpu_facts(sim_fleet.inventory)
    sims = host_vars(sim_fleet.inventory)
    assert set(results) == set(sims) == {"gpu-bookworm", "gpu-trixie", "cpu-sid"}
    for name, sim in sims.items():
        result = results[name]
        assert not result.get("failed") and result["changed"] is False, f"{name}: {result.get('msg')}"
        facts = result["ansible_facts"]["nvidia"]
        check_gpus(name, facts, sim)
        check_device_nodes(name, facts, sim)
        check_engines(name, facts, sim)
        driver, labels = facts["driver"], facts["labels"]
        if sim["gpus"]:
            assert driver["loaded"] is True and driver["loaded_version"] == sim["driver_version"], name
            assert driver["cuda_version"] == sim["cuda_version"], name
            assert facts["sources"]["answered"][0] == "nvml" and facts["warnings"] == [], name
            first = min(sim["gpus"], key=lambda g: g["minor"])
            assert labels["nvidia.com/gpu.present"] == "true", name
            assert labels["nvidia.com/gpu.count"] == str(len(sim["gpus"])), name
            assert labels["nvidia.com/gpu.product"] == first["name"].replace(" ", "-"), name
            assert labels["nvidia.com/gpu.memory"] == str(first["memory_mib"]), name
            major, minor = first["compute_capability"].split(".")
            assert (labels["nvidia.com/gpu.compute.major"], labels["nvidia.com/gpu.compute.minor"]) == (major, minor)
            assert labels["nvidia.com/cuda.driver-version.full"] == sim["driver_version"], name
        else:  # the CPU node: no GPU, no driver, no failure
            assert (facts["gpu_count"], facts["pci_gpu_count"], facts["gpus"]) == (0, 0, []), name
            assert driver["loaded"] is False and driver["installed_version"] is None, name
            assert labels == {"nvidia.com/gpu.present": "false"}, name
            assert facts["problems"] == [] and facts["warnings"] == [], name


DEBIAN_FLEET = {
    "nodes": [
        {"name": "pkg-installed", "suite": "bookworm", "driver_state": "installed", "driver_packages": True,
         "engines": [], "gpus": [{"model": "T4"}]},
        {"name": "pkg-loaded", "suite": "bookworm", "driver_state": "loaded", "driver_packages": True,
         "engines": [], "gpus": [{"model": "A100-SXM4-40GB", "mig_mode": "enabled"}]},
    ]
}  # fmt: skip
FLAVOUR_DIR = "/usr/lib/x86_64-linux-gnu/nvidia/current"


def test_gpu_facts_with_debians_driver_packages(sim_fleet_factory: Any) -> None:
    fleet = sim_fleet_factory(DEBIAN_FLEET, name="debpkg")
    # What Debian's 535 packages really lay out (checked here, so a changed image shows up as such):
    # libnvidia-ml.so.1 in nvidia/current, and on the default library path as a slave link of the "nvidia"
    # alternative (nvidia-alternative's trigger; the simulation registers it once the stub exists, see
    # tests/sim/README.md), which is how nvidia-smi finds it on a GPU host.
    node = fleet.node("pkg-loaded")
    assert node.run(f"readlink /etc/alternatives/nvidia; readlink {FLAVOUR_DIR}/libnvidia-ml.so.1").stdout.split() == [
        "/usr/lib/nvidia/current", "libnvidia-ml.so.535.261.03",
    ]  # fmt: skip
    slave = node.run("readlink -f /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", check=True).stdout.strip()
    assert slave == FLAVOUR_DIR + "/libnvidia-ml.so.535.261.03"
    assert "libcuda.so.1 " in node.run("ldconfig -p", check=True).stdout

    results = gpu_facts(fleet.inventory)
    sims = host_vars(fleet.inventory)
    for name, sim in sims.items():
        facts = results[name]["ansible_facts"]["nvidia"]
        check_gpus(name, facts, sim)
        check_device_nodes(name, facts, sim)
        driver = facts["driver"]
        assert driver["installed_version"] == "535.261.03", name  # the Debian package's version
        assert driver["sources"]["installed_version"] == "ld.so.cache", name
        assert driver["reboot_required"] is False, name
        utility = {f["name"]: f for f in facts["libraries"]["utility"]}
        compute = {f["name"]: f for f in facts["libraries"]["compute"]}
        # found through ld.so.cache, at the alternative's public name (ldconfig lists the usrmerge /lib one first)
        assert utility["libnvidia-ml.so.1"]["path"] == "/lib/x86_64-linux-gnu/libnvidia-ml.so.1", name
        assert utility["libnvidia-ml.so.1"]["resolved"] == FLAVOUR_DIR + "/libnvidia-ml.so.535.261.03", name
        assert compute["libcuda.so.1"]["resolved"] == FLAVOUR_DIR + "/libcuda.so.535.261.03", name
        assert utility["nvidia-smi"]["resolved"] == "/usr/lib/nvidia/current/nvidia-smi", name
        libs = [f for cap in ("utility", "compute") for f in facts["libraries"][cap] if f["kind"] == "library"]
        assert all(f["resolved"].endswith(".so.535.261.03") for f in libs), name
        codes = [p["code"] for p in facts["problems"]]
        if sim["driver_state"] == "installed":
            assert driver["loaded"] is False and driver["loaded_version"] is None, name
            assert codes == ["driver_not_loaded"], name
            # NVML was found (in nvidia/current) and answered as real NVML does without a kernel module.
            assert facts["warnings"] == ["nvml: nvmlInit: Driver Not Loaded"], name
        else:
            assert driver["loaded"] is True and driver["loaded_version"] == "535.261.03", name
            assert driver["cuda_version"] == "12.2", name
            assert "driver_not_loaded" not in codes, name
            assert facts["sources"]["answered"][0] == "nvml" and facts["warnings"] == [], name
            assert facts["labels"]["nvidia.com/mig.capable"] == "true", name
