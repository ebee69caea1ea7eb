# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The NVML stub (tests/sim/nvml), compiled with the host's gcc and loaded with ctypes: no Docker.

Each probe runs in its own Python process: a library's soname is loaded once per process.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.sim.fleet import JSON_MARKER, build_stub  # noqa: E402
from tests.sim.model import node_config, validate_fleet  # noqa: E402

pytestmark = pytest.mark.skipif(not shutil.which("gcc"), reason="gcc is needed to build the NVML stub")

PROBE = r"""
import ctypes, json, sys
class Pci(ctypes.Structure):
    _fields_ = [("busIdLegacy", ctypes.c_char * 16), ("domain", ctypes.c_uint), ("bus", ctypes.c_uint),
                ("device", ctypes.c_uint), ("pciDeviceId", ctypes.c_uint), ("pciSubSystemId", ctypes.c_uint),
                ("busId", ctypes.c_char * 32)]
nvml = ctypes.CDLL(sys.argv[1])
nvml.nvmlErrorString.restype = ctypes.c_char_p
out = {"init": nvml.nvmlInitWithFlags(0), "gpus": []}
out["error"] = nvml.nvmlErrorString(out["init"]).decode()
n = ctypes.c_uint()
out["count_rc"] = nvml.nvmlDeviceGetCount_v2(ctypes.byref(n))
buf = ctypes.create_string_buffer(96)
out["small_buffer_rc"] = nvml.nvmlSystemGetDriverVersion(buf, 4)
if nvml.nvmlSystemGetNVMLVersion(buf, 96) == 0:
    out["nvml"] = buf.value.decode()
for i in range(n.value if out["count_rc"] == 0 else 0):
    h = ctypes.c_void_p(); nvml.nvmlDeviceGetHandleByIndex(i, ctypes.byref(h))
    pci = Pci(); nvml.nvmlDeviceGetPciInfo(h, ctypes.byref(pci))
    nvml.nvmlDeviceGetUUID(h, buf, 96)
    cur, pend, mx = ctypes.c_uint(), ctypes.c_uint(), ctypes.c_uint()
    arch, brand, idx = ctypes.c_uint(), ctypes.c_int(), ctypes.c_uint()
    nvml.nvmlDeviceGetArchitecture(h, ctypes.byref(arch)); nvml.nvmlDeviceGetBrand(h, ctypes.byref(brand))
    nvml.nvmlDeviceGetIndex(h, ctypes.byref(idx))
    mig = ctypes.c_void_p()
    out["gpus"].append({
        "uuid": buf.value.decode(), "bus_id": pci.busId.decode(), "legacy": pci.busIdLegacy.decode(),
        "pci_device_id": pci.pciDeviceId, "arch": arch.value, "brand": brand.value, "index": idx.value,
        "mig_rc": nvml.nvmlDeviceGetMigMode(h, ctypes.byref(cur), ctypes.byref(pend)), "mig": cur.value,
        "max_mig_rc": nvml.nvmlDeviceGetMaxMigDeviceCount(h, ctypes.byref(mx)), "max_mig": mx.value,
        "mig_handle_rc": nvml.nvmlDeviceGetMigDeviceHandleByIndex(h, 0, ctypes.byref(mig)),
    })
    h2 = ctypes.c_void_p()
    out["gpus"][-1]["by_sysfs_bus_id"] = nvml.nvmlDeviceGetHandleByPciBusId(b"0000:17:00.0", ctypes.byref(h2))
out["unknown_uuid_rc"] = nvml.nvmlDeviceGetHandleByUUID(b"GPU-nope", ctypes.byref(ctypes.c_void_p()))
out["has_unimplemented"] = hasattr(nvml, "nvmlDeviceSetPowerManagementLimit")
# What nvidia-smi needs: NVML's private export table (word 0: its size; every slot NOT_SUPPORTED), and
# state the simulation does not have answering NOT_SUPPORTED (nvidia-smi prints N/A).
table = ctypes.POINTER(ctypes.c_void_p)()
guid = ctypes.create_string_buffer(16)
out["export_rc"] = nvml.nvmlInternalGetExportTable(ctypes.byref(table), guid)
if out["export_rc"] == 0:
    slot = ctypes.CFUNCTYPE(ctypes.c_int)(table[81])
    out["export_size"], out["export_slot_rc"] = table[0], slot()
if out["count_rc"] == 0 and n.value:
    h = ctypes.c_void_p(); nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h))
    v = ctypes.c_uint(7)
    out["power_rc"] = nvml.nvmlDeviceGetPowerUsage(h, ctypes.byref(v))
    out["display_active"] = (nvml.nvmlDeviceGetDisplayActive(h, ctypes.byref(v)), v.value)
    ext = (ctypes.c_uint * 16)()
    ext[0] = 0x1000000 | 64  # nvmlPciInfoExt_v1: version and size
    out["pci_ext_rc"] = nvml.nvmlDeviceGetPciInfoExt(h, ext)
    out["pci_ext"] = [ext[0], ext[2], ext[4], bytes(ext)[32:48].split(b"\0")[0].decode()]
    es = ctypes.c_void_p()
    out["event_set_rc"] = nvml.nvmlEventSetCreate(ctypes.byref(es))
    types = ctypes.c_ulonglong(1)
    out["event_types"] = (nvml.nvmlDeviceGetSupportedEventTypes(h, ctypes.byref(types)), types.value)
    data = (ctypes.c_char * 64)()
    out["event_wait_rc"] = nvml.nvmlEventSetWait_v2(es, data, 0)
    out["event_free_rc"] = nvml.nvmlEventSetFree(es)
print(json.dumps(out))
"""

NODE = validate_fleet(
    {"nodes": [{"name": "n", "gpus": [{"model": "A100-SXM4-40GB", "mig_mode": "enabled"}, {"model": "T4"}]}]}
)[0]


@pytest.fixture(scope="module")
def stub(tmp_path_factory):
    return build_stub(tmp_path_factory.mktemp("stub") / "libnvidia-ml.so.1")


def probe(lib: Path, env: dict | None = None) -> dict:
    res = subprocess.run(
        [sys.executable, "-c", PROBE, str(lib)], check=False, capture_output=True, text=True, env=env or {}
    )
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def write_config(path: Path, **changes) -> Path:
    cfg = {**node_config(NODE), "all_devices": 1, **changes}  # the host has no /dev/nvidia*
    path.write_text(json.dumps(cfg))
    return path


def test_stub_answers_from_json(stub, tmp_path):
    out = probe(stub, {"GPUFLEET_SIM_GPUS_JSON": str(write_config(tmp_path / "gpus.json"))})
    assert out["init"] == 0 and out["count_rc"] == 0
    assert out["small_buffer_rc"] == 7 and out["nvml"] == "12.535.261.03"
    a100, t4 = out["gpus"]
    assert a100["uuid"] == NODE["gpus"][0]["uuid"] and t4["index"] == 1
    assert a100["bus_id"] == "00000000:17:00.0" and a100["legacy"] == "0000:17:00.0"
    assert a100["pci_device_id"] == 0x20B010DE and a100["arch"] == 7 and a100["brand"] == 14
    assert (a100["mig_rc"], a100["mig"], a100["max_mig_rc"], a100["max_mig"]) == (0, 1, 0, 7)
    assert a100["mig_handle_rc"] == 6  # NOT_FOUND: no MIG instances in the simulation
    assert (t4["mig_rc"], t4["max_mig_rc"], t4["mig_handle_rc"]) == (3, 3, 3)  # NOT_SUPPORTED
    assert a100["by_sysfs_bus_id"] == 0
    assert out["unknown_uuid_rc"] == 6
    assert out["has_unimplemented"] is False
    assert (out["export_rc"], out["export_size"], out["export_slot_rc"]) == (0, 1024 * 8, 3)
    assert out["power_rc"] == 3 and out["display_active"] == [0, 0]
    assert out["pci_ext_rc"] == 0 and out["pci_ext"] == [0x1000000 | 64, 0x17, 0x20B010DE, "00000000:17:00.0"]
    assert out["event_set_rc"] == 0 and out["event_types"] == [0, 0]
    assert out["event_wait_rc"] == 10 and out["event_free_rc"] == 0  # TIMEOUT: nothing ever happens


def test_driver_not_loaded_and_missing_config(stub, tmp_path):
    out = probe(stub, {"GPUFLEET_SIM_GPUS_JSON": str(write_config(tmp_path / "g.json", driver_state="installed"))})
    assert (out["init"], out["error"], out["count_rc"]) == (9, "Driver Not Loaded", 1)
    out = probe(stub, {"GPUFLEET_SIM_GPUS_JSON": str(tmp_path / "absent.json")})
    assert out["init"] == 9  # no config at all (nor /etc/gpufleet-sim/gpus.json on this host)


def test_only_gpus_with_device_nodes_are_seen(stub, tmp_path):
    cfg = write_config(tmp_path / "g.json", all_devices=0)
    out = probe(stub, {"GPUFLEET_SIM_GPUS_JSON": str(cfg)})
    assert out["init"] == 0 and out["gpus"] == []  # this host has no /dev/nvidia0 or /dev/nvidia1


def test_json_appended_to_the_library_is_read(stub, tmp_path):
    lib = tmp_path / "libnvidia-ml.so.535.261.03"
    lib.write_bytes(stub.read_bytes() + JSON_MARKER + write_config(tmp_path / "g.json").read_bytes())
    out = probe(lib)
    assert out["init"] == 0 and [g["uuid"] for g in out["gpus"]] == [g["uuid"] for g in NODE["gpus"]]


def test_malformed_json_is_an_error_not_a_crash(stub, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"driver_state": "loaded", "gpus": [ {"uuid": "GPU-1", ')
    out = probe(stub, {"GPUFLEET_SIM_GPUS_JSON": str(bad)})
    assert out["init"] == 999


MIG_PROBE = r"""
import ctypes, json, sys
nvml = ctypes.CDLL(sys.argv[1])
out = {"init": nvml.nvmlInit_v2(), "handles": [], "migs": []}
for i in range(2):
    h = ctypes.c_void_p()
    out["handles"].append(nvml.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(h)))
    if out["handles"][-1]:
        continue
    for slot in range(3):
        m, buf, gi, ci = ctypes.c_void_p(), ctypes.create_string_buffer(96), ctypes.c_uint(), ctypes.c_uint()
        rc = nvml.nvmlDeviceGetMigDeviceHandleByIndex(h, slot, ctypes.byref(m))
        if rc == 0:
            nvml.nvmlDeviceGetName(m, buf, 96)
            nvml.nvmlDeviceGetGpuInstanceId(m, ctypes.byref(gi))
            nvml.nvmlDeviceGetComputeInstanceId(m, ctypes.byref(ci))
        out["migs"].append([i, slot, rc, buf.value.decode(), gi.value, ci.value])
    out["gpu_gi_rc"] = nvml.nvmlDeviceGetGpuInstanceId(h, ctypes.byref(ctypes.c_uint()))
print(json.dumps(out))
"""


def test_lost_gpu_mig_devices_and_forced_init_error(stub, tmp_path):
    """What gpu_facts' unit tests need: a lost GPU, MIG instances, an nvmlInit failure of choice."""
    config = node_config(NODE)
    config["all_devices"] = 1
    config["gpus"][0]["mig_devices"] = [{"slot": 1, "name": "A100 MIG 1g.5gb", "gi_id": 7, "ci_id": 0}]
    config["gpus"][1]["lost"] = True
    (tmp_path / "g.json").write_text(json.dumps(config))
    env = {"GPUFLEET_SIM_GPUS_JSON": str(tmp_path / "g.json")}
    res = subprocess.run(
        [sys.executable, "-c", MIG_PROBE, str(stub)], check=True, capture_output=True, text=True, env=env
    )
    out = json.loads(res.stdout)
    assert out["init"] == 0 and out["handles"] == [0, 15]  # NVML_ERROR_GPU_IS_LOST
    assert out["migs"] == [[0, 0, 6, "", 0, 0], [0, 1, 0, "A100 MIG 1g.5gb", 7, 0], [0, 2, 6, "", 0, 0]]
    assert out["gpu_gi_rc"] == 2  # a GPU handle is no MIG device
    config["init_error"] = 18
    (tmp_path / "g.json").write_text(json.dumps(config))
    res = subprocess.run(
        [sys.executable, "-c", MIG_PROBE, str(stub)], check=True, capture_output=True, text=True, env=env
    )
    assert json.loads(res.stdout)["init"] == 18


TOPOLOGY_PROBE = r"""
import ctypes, json, sys
class Pci(ctypes.Structure):
    _fields_ = [("busIdLegacy", ctypes.c_char * 16), ("domain", ctypes.c_uint), ("bus", ctypes.c_uint),
                ("device", ctypes.c_uint), ("pciDeviceId", ctypes.c_uint), ("pciSubSystemId", ctypes.c_uint),
                ("busId", ctypes.c_char * 32)]
nvml = ctypes.CDLL(sys.argv[1])
out = {"init": nvml.nvmlInit_v2()}
h = [ctypes.c_void_p(), ctypes.c_void_p()]
for i in range(2):
    nvml.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(h[i]))
def level(a, b):
    v = ctypes.c_int(-1)
    return [nvml.nvmlDeviceGetTopologyCommonAncestor(a, b, ctypes.byref(v)), v.value]
out["same"], out["pair"], out["pair_back"] = level(h[0], h[0]), level(h[0], h[1]), level(h[1], h[0])
mig = ctypes.c_void_p()
out["mig_rc"] = nvml.nvmlDeviceGetMigDeviceHandleByIndex(h[0], 0, ctypes.byref(mig))
if out["mig_rc"] == 0:
    out["mig_to_own_gpu"] = level(mig, h[0])
numa = ctypes.c_uint(99)
out["numa"] = [[nvml.nvmlDeviceGetNumaNodeId(x, ctypes.byref(numa)), numa.value] for x in h]
state, pci, cap = ctypes.c_int(-1), Pci(), ctypes.c_uint(9)
out["links"] = []
for x in h:
    row = []
    for link in range(3):
        rc = nvml.nvmlDeviceGetNvLinkState(x, link, ctypes.byref(state))
        prc = nvml.nvmlDeviceGetNvLinkRemotePciInfo_v2(x, link, ctypes.byref(pci))
        crc = nvml.nvmlDeviceGetNvLinkCapability(x, link, 0, ctypes.byref(cap))
        row.append([rc, state.value if rc == 0 else None, prc, pci.busId.decode() if prc == 0 else None, crc])
    out["links"].append(row)
print(json.dumps(out))
"""


def topology(stub, tmp_path, **gpu_changes):
    config = node_config(NODE)
    config["all_devices"] = 1
    for index, changes in gpu_changes.items():
        config["gpus"][int(index[1:])].update(changes)
    (tmp_path / "t.json").write_text(json.dumps(config))
    env = {"GPUFLEET_SIM_GPUS_JSON": str(tmp_path / "t.json")}
    res = subprocess.run(
        [sys.executable, "-c", TOPOLOGY_PROBE, str(stub)], check=True, capture_output=True, text=True, env=env
    )
    return json.loads(res.stdout)


def test_topology_numa_and_nvlink_answer_what_nvidias_allocator_asks(stub, tmp_path):
    """k8s-device-plugin v0.20.0's GetPreferredAllocation (go-gpuallocator internal/links/device.go) asks every pair's
    common ancestor and every GPU's NVLinks 0..17; a missing symbol killed the plugin (exit 127)."""
    # NODE's A100 and T4 on NUMA nodes 0 and 1 (two sockets); a PCIe board has no NVLink.
    out = topology(stub, tmp_path, g0={"numa_node": 0}, g1={"numa_node": 1})
    assert out["init"] == 0
    assert out["same"] == [0, 0]  # NVML_TOPOLOGY_INTERNAL
    assert out["pair"] == [0, 50] and out["pair_back"] == [0, 50]  # NVML_TOPOLOGY_SYSTEM: across the sockets
    assert out["numa"] == [[0, 0], [0, 1]]
    assert all(link[0] == 3 and link[2] == 3 and link[4] == 3 for row in out["links"] for link in row)  # NOT_SUPPORTED
    # One socket: NODE; one PCIe switch: SINGLE; NUMA unknown: NOT_SUPPORTED for the id.
    out = topology(stub, tmp_path, g0={"numa_node": 0}, g1={"numa_node": 0})
    assert out["pair"] == [0, 40]
    out = topology(stub, tmp_path, g0={"pcie_switch": 2, "numa_node": -1}, g1={"pcie_switch": 2, "numa_node": -1})
    assert out["pair"] == [0, 10] and out["numa"] == [[3, 99], [3, 99]]


def test_nvlinks_name_their_peer_and_links_past_the_last_are_invalid(stub, tmp_path):
    a100, t4 = (g["pci_bus_id"] for g in NODE["gpus"])
    out = topology(stub, tmp_path, g0={"nvlinks": [t4, "0000:c1:00.0"]}, g1={"nvlinks": [a100]})
    a100_links, t4_links = out["links"]
    assert a100_links[0] == [0, 1, 0, "00000000:37:00.0", 0]  # enabled, the T4 at the other end
    assert a100_links[1] == [0, 1, 0, "00000000:C1:00.0", 0]  # a peer that is no GPU (an NVSwitch)
    assert a100_links[2][0] == 2 and a100_links[2][2] == 2  # INVALID_ARGUMENT: the allocator skips it
    assert t4_links[0][3] == "00000000:17:00.0" and t4_links[1][0] == 2


def test_a_mig_device_has_its_gpus_topology(stub, tmp_path):
    out = topology(stub, tmp_path, g0={"mig_devices": [{"slot": 0, "name": "A100 MIG 1g.5gb", "gi_id": 7, "ci_id": 0}]})
    assert out["mig_rc"] == 0 and out["mig_to_own_gpu"] == [0, 0]


THREADS_PROBE = r"""
import ctypes, json, sys, threading
nvml = ctypes.CDLL(sys.argv[1])
bad = []
def worker():
    n, h = ctypes.c_uint(), ctypes.c_void_p()
    for _ in range(300):
        rc = nvml.nvmlInit_v2()
        if rc:
            bad.append(("init", rc)); continue
        if nvml.nvmlDeviceGetCount_v2(ctypes.byref(n)) or n.value != 2:
            bad.append(("count", n.value))
        if nvml.nvmlDeviceGetHandleByIndex_v2(1, ctypes.byref(h)):
            bad.append(("handle",))
        rc = nvml.nvmlShutdown()
        if rc:
            bad.append(("shutdown", rc))
threads = [threading.Thread(target=worker) for _ in range(8)]
[t.start() for t in threads]; [t.join() for t in threads]
print(json.dumps({"bad": bad[:5], "bad_count": len(bad), "after": nvml.nvmlShutdown()}))
"""


def test_init_and_shutdown_from_many_threads_at_once(stub, tmp_path):
    """NVIDIA's plugin calls nvmlInit from its health check and its allocator at the same time: each call succeeds,
    each Shutdown balances one Init, and a device seen between them is whole (8 threads x 300 rounds)."""
    env = {"GPUFLEET_SIM_GPUS_JSON": str(write_config(tmp_path / "g.json"))}
    res = subprocess.run(
        [sys.executable, "-c", THREADS_PROBE, str(stub)], check=True, capture_output=True, text=True, env=env
    )
    out = json.loads(res.stdout)
    assert out["bad_count"] == 0, out["bad"]
    assert out["after"] == 1  # NVML_ERROR_UNINITIALIZED: every Init was shut down


COMPUTE_MODE = """
import ctypes, json, sys
nvml = ctypes.CDLL(sys.argv[1])
assert nvml.nvmlInit_v2() == 0
h = [ctypes.c_void_p(), ctypes.c_void_p()]
for i in (0, 1):
    assert nvml.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(h[i])) == 0
mode = ctypes.c_int()
out = {"set": [nvml.nvmlDeviceSetComputeMode(h[0], m) for m in json.loads(sys.argv[2])]}
out["modes"] = [[nvml.nvmlDeviceGetComputeMode(d, ctypes.byref(mode)), mode.value][1] for d in h]
print(json.dumps(out))
"""


def set_compute_modes(stub: Path, config: Path, modes: list[int]) -> dict:
    res = subprocess.run(
        [sys.executable, "-c", COMPUTE_MODE, str(stub), json.dumps(modes)],
        check=False, capture_output=True, text=True, env={"GPUFLEET_SIM_GPUS_JSON": str(config)},
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_a_compute_mode_set_is_kept_for_the_next_process_until_set_back(stub, tmp_path):
    """NVIDIA's MPS control daemon runs nvidia-smi -c EXCLUSIVE_PROCESS on each GPU it shares, and DEFAULT when it
    stops; the mode outlives the process, as the driver keeps it."""
    config = write_config(tmp_path / "gpus.json")
    out = set_compute_modes(stub, config, [3])  # EXCLUSIVE_PROCESS
    assert out == {"set": [0], "modes": [3, 0]}
    assert (tmp_path / "compute-mode").read_text() == f"{NODE['gpus'][0]['uuid']} 3\n"
    assert set_compute_modes(stub, config, [])["modes"] == [3, 0]  # another process sees it
    # EXCLUSIVE_THREAD (1) was removed from NVML; 7 is no mode; both leave the mode as it was.
    assert set_compute_modes(stub, config, [1, 7]) == {"set": [3, 2], "modes": [3, 0]}
    assert set_compute_modes(stub, config, [2, 0]) == {"set": [0, 0], "modes": [0, 0]}  # PROHIBITED, then DEFAULT
    assert (tmp_path / "compute-mode").read_text() == ""
