# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""mig/nvml_mig.py through the stub NVML (tests/sim/nvml/nvml_stub.c), which keeps the instances it is asked to make
in ``mig-state`` beside its gpus.json: each step runs in its own process, as each module run does, and the next
process (and discovery) sees what the last one made."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.mig import nvml_mig
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils.discovery.discovery_tree import (
    REPO,
    compile_nvml_stub,
    dgx_stub_config,
    stub_config,
)
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils.mig import static_profiles as static

STEP = """
import json, sys
from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery import nvml
from ansible_collections.gpufleet.nvidia.plugins.module_utils.mig import apply, layout, nvml_mig
library, wanted = sys.argv[1], json.loads(sys.argv[2])
gpus = nvml.query([library])["gpus"]
try:
    steps = layout.plan(gpus, wanted, apply.read_tables([library], gpus))
except layout.LayoutError as exc:
    print(json.dumps({"error": str(exc)}))
    raise SystemExit(0)
with nvml_mig.Session([library]) as session:
    for step in steps:
        if step["changed"]:
            session.apply(step)
after = nvml.query([library])["gpus"]
print(json.dumps({"steps": steps, "after": after}))
"""


@pytest.fixture(scope="module")
def stub(tmp_path_factory):
    path = compile_nvml_stub(str(tmp_path_factory.mktemp("nvml-stub")))
    if path is None:
        pytest.skip("no C compiler for the NVML stub")
    return path


@pytest.fixture
def a100_host(tmp_path, monkeypatch):
    """One A100-SXM4-40GB (MIG off) and one H100 the layout leaves alone; the stub's state beside its config."""
    config = stub_config(count=2)
    a100 = config["gpus"][0]
    a100.update(name="NVIDIA A100-SXM4-40GB", pci_device_id=0x20B010DE, memory_total=40960 * 1024 * 1024,
                cc_major=8, cc_minor=0, architecture=7, mig_mode=0, max_mig_devices=7)  # fmt: skip
    path = tmp_path / "gpus.json"
    path.write_text(json.dumps(config))
    monkeypatch.setenv("GPUFLEET_SIM_GPUS_JSON", str(path))
    return tmp_path


def run(stub, layout):
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, ".cache", "collections"))
    proc = subprocess.run(
        [sys.executable, "-c", STEP, stub, json.dumps(layout)], capture_output=True, text=True, env=env, timeout=60,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def profiles(gpu):
    return [m["profile"] for m in gpu.get("mig_devices") or ()]


def test_apply_then_nothing_to_do_then_a_changed_layout_then_off(stub, a100_host):
    first = run(stub, [{"devices": [0], "mig-enabled": True, "mig-devices": {"1g.5gb": 2, "3g.20gb": 1}}])
    (step,) = first["steps"]
    assert step["changed"] and step["set_mig_mode"] is True
    a100, h100 = first["after"]
    assert a100["mig_mode"] == "enabled" and sorted(profiles(a100)) == ["1g.5gb", "1g.5gb", "3g.20gb"]
    assert [m["memory_mib"] for m in a100["mig_devices"]] == [19968, 4864, 4864]  # 3g.20gb first: largest placed first
    assert len({m["uuid"] for m in a100["mig_devices"]}) == 3 and all(
        m["uuid"].startswith("MIG-") for m in a100["mig_devices"]
    )
    assert "mig_devices" not in h100
    assert (a100_host / "mig-state").is_file()

    again = run(stub, [{"devices": [0], "mig-enabled": True, "mig-devices": {"3g.20gb": 1, "1g.5gb": 2}}])
    assert [s["changed"] for s in again["steps"]] == [False]  # a second run changes nothing
    assert again["after"][0]["mig_devices"] == first["after"][0]["mig_devices"]

    changed = run(stub, [{"devices": [0], "mig-enabled": True, "mig-devices": {"7g.40gb": 1}}])
    assert changed["steps"][0]["destroy"] and profiles(changed["after"][0]) == ["7g.40gb"]

    off = run(stub, [{"devices": [0], "mig-enabled": False}])
    assert off["after"][0]["mig_mode"] == "disabled" and profiles(off["after"][0]) == []


def test_a_profile_the_a100_does_not_offer_is_refused_before_any_call(stub, a100_host):
    out = run(stub, [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.6gb": 4}, "device-filter": "A100"}])
    offered = "it offers 1g.5gb, 1g.5gb+me, 1g.10gb, 2g.10gb, 3g.20gb, 4g.20gb, 7g.40gb"
    assert f"does not offer MIG profile(s) 1g.6gb; {offered}" in out["error"]
    assert not (a100_host / "mig-state").exists()


def test_ctypes_structures_have_nvml_h_sizes():
    # nvml.h (go-nvml gen/nvml/nvml.h at 2f9e261f): 10 uints + an unsigned long long; 2 uints; 8 + 4 + 4 + 8; 9 uints.
    assert ctypes.sizeof(nvml_mig.GpuInstanceProfileInfo) == 48
    assert ctypes.sizeof(nvml_mig.GpuInstancePlacement) == 8
    assert ctypes.sizeof(nvml_mig.GpuInstanceInfo) == 24
    assert nvml_mig.GpuInstanceInfo.placement.offset == 16
    assert ctypes.sizeof(nvml_mig.ComputeInstanceProfileInfo) == 36


PROFILES = """
import json, sys
from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery import nvml
from ansible_collections.gpufleet.nvidia.plugins.module_utils.mig import apply
gpus = nvml.query([sys.argv[1]])["gpus"]
print(json.dumps({str(k): v for k, v in apply.read_tables([sys.argv[1]], gpus).items()}))
"""


def read_tables(stub):
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, ".cache", "collections"))
    proc = subprocess.run(
        [sys.executable, "-c", PROFILES, stub], capture_output=True, text=True, env=env, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    tables = json.loads(proc.stdout).items()
    return {int(k): {p: (r[0], r[1], r[2], tuple(r[3]), r[4]) for p, r in t.items()} for k, t in tables}


def test_the_a100_profiles_nvml_lists_are_the_user_guides(stub, a100_host):
    """The profiles read from NVML (the stub answers as an A100-SXM4-40GB does) equal the hand-written table of the
    MIG user guide, row for row and in its order; the second GPU, whose stub answers no profiles, lists none."""
    tables = read_tables(stub)
    assert tables[1] == {}
    assert tables[0] == static.PROFILES_BY_MODEL["A100-SXM4-40GB"]
    assert list(tables[0]) == list(static.PROFILES_BY_MODEL["A100-SXM4-40GB"])


# A GPU no table has: 4 compute and 4 memory slices of 96 GiB, with graphics and media-engine variants (made up for
# the test; the enums are nvml.h's 1_SLICE 0, 2_SLICE 1, 4_SLICE 3, 1_SLICE_GFX 10, 1_SLICE_NO_ME 13).
NEW_GPU_PROFILES = [
    {"enum": 0, "id": 14, "name": "1g.24gb", "slices": 1, "memory_slices": 1, "instances": 4, "memory_mib": 24064,
     "placements": [0, 1, 2, 3]},
    {"enum": 1, "id": 5, "name": "2g.48gb", "slices": 2, "memory_slices": 2, "instances": 2, "memory_mib": 48384,
     "placements": [0, 2]},
    {"enum": 3, "id": 0, "name": "4g.96gb", "slices": 4, "memory_slices": 4, "instances": 1, "memory_mib": 97024,
     "placements": [0]},
    {"enum": 10, "id": 47, "name": "1g.24gb+gfx", "slices": 1, "memory_slices": 1, "instances": 4,
     "memory_mib": 24064, "placements": [0, 1, 2, 3]},
    {"enum": 13, "id": 48, "name": "1g.24gb-me", "slices": 1, "memory_slices": 1, "instances": 4,
     "memory_mib": 24064, "placements": [0, 1, 2, 3]},
]  # fmt: skip


@pytest.fixture
def new_gpu_host(tmp_path, monkeypatch):
    config = stub_config(count=1)
    config["gpus"][0].update(name="NVIDIA Simulated MIG GPU 96GB", pci_device_id=0xFFF010DE,
                             memory_total=98304 * 1024 * 1024, mig_mode=0, max_mig_devices=4,
                             mig_profiles=NEW_GPU_PROFILES)  # fmt: skip
    path = tmp_path / "gpus.json"
    path.write_text(json.dumps(config))
    monkeypatch.setenv("GPUFLEET_SIM_GPUS_JSON", str(path))
    return tmp_path


def test_a_model_no_table_has_gets_its_layouts_from_nvml(stub, new_gpu_host):
    assert static.profiles_for("NVIDIA Simulated MIG GPU 96GB", "0xfff010de") is None
    (table,) = read_tables(stub).values()
    # names as nvidia-smi and go-nvlib give them, from slices, memory and the enum's suffix
    assert list(table) == ["1g.24gb", "1g.24gb+gfx", "1g.24gb-me", "2g.48gb", "4g.96gb"]
    assert table["2g.48gb"] == (1, 2, 2, (0, 2), 2)
    out = run(stub, [{"devices": [0], "mig-enabled": True, "mig-devices": {"2g.48gb": 1, "1g.24gb-me": 2}}])
    (step,) = out["steps"]
    created = [tuple(c) for c in step["create"]]
    assert step["changed"] and created == [("2g.48gb", 0), ("1g.24gb-me", 2), ("1g.24gb-me", 3)]
    assert sorted(profiles(out["after"][0])) == ["1g.24gb-me", "1g.24gb-me", "2g.48gb"]
    again = run(stub, [{"devices": [0], "mig-enabled": True, "mig-devices": {"2g.48gb": 1, "1g.24gb-me": 2}}])
    assert [s["changed"] for s in again["steps"]] == [False]
    too_many = run(stub, [{"devices": [0], "mig-enabled": True, "mig-devices": {"2g.48gb": 3}}])
    assert "does not fit on one GPU" in too_many["error"] and "2g.48gb x2" in too_many["error"]


@pytest.mark.parametrize(
    ("slices", "mib", "device_mib", "enum", "name"),
    [
        (1, 4864, 40960, 0, "1g.5gb"),
        (1, 9856, 40960, 9, "1g.10gb"),
        (7, 40192, 40960, 4, "7g.40gb"),
        (1, 4864, 40960, 7, "1g.5gb+me"),
        (2, 48384, 98304, 1, "2g.48gb"),
        (1, 24064, 98304, 15, "1g.24gb+me.all"),
    ],
)
def test_profile_names_from_nvmls_numbers(slices, mib, device_mib, enum, name):
    assert nvml_mig.profile_name(slices, mib, device_mib * 1024 * 1024, enum) == name


# What NVIDIA's go-nvlib asks of a MIG device made before boot (nvidia-ctk cdi generate, the device plugin): its
# parent, its GPU and compute instance by id, their profiles, its attributes, and its handle by UUID.
WALK = """
import ctypes, json, sys
from ansible_collections.gpufleet.nvidia.plugins.module_utils.mig import nvml_mig
nv = ctypes.CDLL(sys.argv[1])
assert nv.nvmlInit_v2() == 0
gpu, mig, parent, gi, ci = (ctypes.c_void_p() for _ in range(5))
out = {}
assert nv.nvmlDeviceGetHandleByIndex_v2(3, ctypes.byref(gpu)) == 0
assert nv.nvmlDeviceGetMigDeviceHandleByIndex(gpu, 2, ctypes.byref(mig)) == 0
assert nv.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig, ctypes.byref(parent)) == 0
out["parent_is_gpu"] = parent.value == gpu.value
gi_id, ci_id = ctypes.c_uint(), ctypes.c_uint()
nv.nvmlDeviceGetGpuInstanceId(mig, ctypes.byref(gi_id)); nv.nvmlDeviceGetComputeInstanceId(mig, ctypes.byref(ci_id))
out["ids"] = [gi_id.value, ci_id.value]
assert nv.nvmlDeviceGetGpuInstanceById(parent, gi_id, ctypes.byref(gi)) == 0
info = nvml_mig.GpuInstanceInfo()
nv.nvmlGpuInstanceGetInfo(gi, ctypes.byref(info))
out["gi"] = [info.id, info.profileId]
out["missing_gi"] = nv.nvmlDeviceGetGpuInstanceById(parent, 1, ctypes.byref(ctypes.c_void_p()))
assert nv.nvmlGpuInstanceGetComputeInstanceById(gi, ci_id, ctypes.byref(ci)) == 0
ci_info = (ctypes.c_uint * 16)()
nv.nvmlComputeInstanceGetInfo_v2(ci, ci_info)
profile = nvml_mig.ComputeInstanceProfileInfo()
ci_profile_id = ci_info[5]  # nvmlComputeInstanceInfo_t: two pointers, id, profileId, placement
out["ci_profile_matches"] = [
    e for e in range(7)
    if nv.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, e, 0, ctypes.byref(profile)) == 0
    and profile.id == ci_profile_id
]
attrs = (ctypes.c_uint * 10)()
assert nv.nvmlDeviceGetAttributes_v2(mig, attrs) == 0
out["attrs"] = [attrs[0], attrs[6], attrs[7], attrs[8]]
uuid = ctypes.create_string_buffer(96)
nv.nvmlDeviceGetUUID(mig, uuid, 96)
again = ctypes.c_void_p()
out["by_uuid"] = nv.nvmlDeviceGetHandleByUUID(uuid.value, ctypes.byref(again)) == 0 and again.value == mig.value
print(json.dumps(out))
"""


def test_mig_devices_made_before_boot_answer_as_nvidias_tools_ask(stub, tmp_path, monkeypatch):
    path = tmp_path / "gpus.json"
    path.write_text(json.dumps(dgx_stub_config(gpus=8, migs=7)))
    monkeypatch.setenv("GPUFLEET_SIM_GPUS_JSON", str(path))
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, ".cache", "collections"))
    proc = subprocess.run(
        [sys.executable, "-c", WALK, stub], capture_output=True, text=True, env=env, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["parent_is_gpu"] and out["by_uuid"]
    assert out["ids"] == [9, 0] and out["gi"] == [9, 19]  # slot 2: gi 9 of profile 1g.5gb (id 19)
    assert out["missing_gi"] == 6  # NVML_ERROR_NOT_FOUND
    assert out["ci_profile_matches"] == [0]  # the compute instance is of the 1-slice profile the GI offers
    assert out["attrs"] == [14, 1, 1, 4864]  # SMs, GI and CI slices, memory (MiB)


THREADS = """
import ctypes, sys, threading
nv = ctypes.CDLL(sys.argv[1])
failures = []
def work():
    for _ in range(300):
        if nv.nvmlInit_v2() != 0:
            failures.append("init")
        count = ctypes.c_uint()
        if nv.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0 or count.value != 8:
            failures.append("count")
        if nv.nvmlShutdown() != 0:
            failures.append("shutdown")
threads = [threading.Thread(target=work) for _ in range(8)]
[t.start() for t in threads]
[t.join() for t in threads]
print(len(failures), nv.nvmlShutdown())
"""


def test_nvml_init_from_threads_at_once(stub, tmp_path, monkeypatch):
    """NVIDIA's device plugin calls nvmlInit from several goroutines: every init, query and shutdown succeeds, and
    the count ends at zero (one shutdown more is refused)."""
    path = tmp_path / "gpus.json"
    path.write_text(json.dumps(dgx_stub_config(gpus=8, migs=7)))
    monkeypatch.setenv("GPUFLEET_SIM_GPUS_JSON", str(path))
    proc = subprocess.run(
        [sys.executable, "-c", THREADS, stub], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["0", "1"]  # no failure; NVML_ERROR_UNINITIALIZED
