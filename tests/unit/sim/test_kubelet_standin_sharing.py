# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""make k8s-live's sharing and MPS judgements without a node (tests/tools/kubelet_standin/live_sharing.py,
live_mps.py): MIG UUIDs named as the NVML stub names the instances of its mig-state (checked against the stub
itself), what a time-sliced and a MIG pod must see, and the MPS configuration read back from
NVIDIA's mps-control-daemon log."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.tools.kubelet_standin import live_mps, live_sharing  # noqa: E402

G0 = "GPU-1cdde31b-086b-5d09-9b6c-19ca6174c7e0"
G1 = "GPU-5e0ab9a0-1d53-5f25-a2ec-7cf2a7aa3d25"
GPUS = [{"uuid": G0, "index": 0, "minor": 0}, {"uuid": G1, "index": 1, "minor": 1}]
MINOR = {G0: 0, G1: 1}
# The stub's mig-state: "gpu <uuid> <mode>", "gi <uuid> <id> <profile index> <start> <has ci>".
STATE = f"gpu {G0} 1\ngi {G0} 7 0 4 1\ngi {G0} 8 0 5 1\ngpu {G1} 1\ngi {G1} 9 0 6 1\n"


def test_mig_parents_name_each_instance_of_the_state():
    parents = live_sharing.mig_parents(STATE + "junk line\n", GPUS)
    assert list(parents.values()) == [G0, G0, G1]
    assert [u.split("-")[2] for u in parents] == ["0007", "0008", "0009"]
    assert all(u.endswith(f"-{i:012x}") for u, i in zip(parents, (0, 0, 1)))


PROBE = """
import ctypes, json, sys
lib = ctypes.CDLL(sys.argv[1])
assert lib.nvmlInit_v2() == 0
out = []
for i in range(2):
    dev = ctypes.c_void_p()
    assert lib.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(dev)) == 0
    for k in range(7):
        mig = ctypes.c_void_p()
        if lib.nvmlDeviceGetMigDeviceHandleByIndex(dev, k, ctypes.byref(mig)) == 0:
            buf = ctypes.create_string_buffer(96)
            assert lib.nvmlDeviceGetUUID(mig, buf, 96) == 0
            out.append(buf.value.decode())
print(json.dumps(out))
"""


def test_mig_parents_are_the_uuids_the_nvml_stub_reports(tmp_path):
    from tests.sim.fleet import build_stub

    try:
        library = build_stub(tmp_path / "libnvidia-ml.so.1")
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"no NVML stub: {exc}")
    gpu = {"name": "NVIDIA A100-SXM4-40GB", "pci_device_id": 0x20B010DE, "memory_total": 40960 << 20,
           "max_mig_devices": 7, "mig_mode": 0, "cc_major": 8, "cc_minor": 0}  # fmt: skip
    config = {
        "driver_state": "loaded",
        "all_devices": 1,
        "driver_version": "550.163.01",
        "gpus": [
            {**gpu, "index": i, "uuid": u, "minor": i, "pci_bus_id": f"00000000:0{i + 1}:00.0"}
            for i, u in enumerate((G0, G1))
        ],
    }
    (tmp_path / "gpus.json").write_text(json.dumps(config))
    (tmp_path / "mig-state").write_text(STATE)
    res = subprocess.run(
        [sys.executable, "-c", PROBE, str(library)],
        env={"GPUFLEET_SIM_GPUS_JSON": str(tmp_path / "gpus.json"), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert sorted(json.loads(res.stdout)) == sorted(live_sharing.mig_parents(STATE, GPUS))


def seen(allocated, uuids, dev, caps=None):
    return {"allocated": [allocated], "uuids": uuids, "dev": dev, "caps": caps}


def test_time_slicing_needs_four_replicas_of_one_gpu_each_seeing_only_it():
    good = [seen(f"{G0}::{n}", [G0], ["nvidia0"]) for n in range(4)]
    assert live_sharing.time_slicing_ok(good, MINOR)
    assert not live_sharing.time_slicing_ok(good[:3], MINOR)
    spread = [*good[:3], seen(f"{G1}::0", [G1], ["nvidia1"])]
    assert not live_sharing.time_slicing_ok(spread, MINOR)  # distributed, not packed
    same = [seen(f"{G0}::0", [G0], ["nvidia0"])] * 4
    assert not live_sharing.time_slicing_ok(same, MINOR)  # one replica given four times
    both = [*good[:3], seen(f"{G0}::3", [G0, G1], ["nvidia0", "nvidia1"])]
    assert not live_sharing.time_slicing_ok(both, MINOR)  # a container seeing more than its GPU


def test_a_mig_pod_sees_its_parent_and_exactly_the_capability_nodes_its_cdi_device_names():
    parents = live_sharing.mig_parents(STATE, GPUS)
    m0, m1, m2 = parents
    cdi = {
        m0: ["/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap21", "/dev/nvidia-caps/nvidia-cap22"],
        m1: ["/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap30", "/dev/nvidia-caps/nvidia-cap31"],
        m2: ["/dev/nvidia1", "/dev/nvidia-caps/nvidia-cap156", "/dev/nvidia-caps/nvidia-cap157"],
    }
    a = seen(m0, [G0], ["nvidia0"], ["nvidia-cap21", "nvidia-cap22"])
    b = seen(m2, [G1], ["nvidia1"], ["nvidia-cap156", "nvidia-cap157"])
    assert live_sharing.mig_ok([a, b], parents, MINOR, cdi)
    assert not live_sharing.mig_ok([a, a], parents, MINOR, cdi)  # the same MIG device twice
    assert not live_sharing.mig_ok([a, {**b, "dev": ["nvidia0", "nvidia1"]}], parents, MINOR, cdi)
    assert not live_sharing.mig_ok([a, {**b, "caps": ["nvidia-cap156"]}], parents, MINOR, cdi)
    assert not live_sharing.mig_ok([a, {**b, "caps": [*b["caps"], "nvidia-cap21"]}], parents, MINOR, cdi)
    assert not live_sharing.mig_ok([a, seen("MIG-unknown", [], ["nvidia1"], [])], parents, MINOR, cdi)
    # A node without /proc/driver/nvidia-caps/mig-minors (the simulated ones): the spec names the parent only.
    bare = {m: nodes[:1] for m, nodes in cdi.items()}
    assert live_sharing.mig_ok([{**a, "caps": []}, {**b, "caps": []}], parents, MINOR, bare)
    assert not live_sharing.mig_ok([a, {**b, "caps": []}], parents, MINOR, bare)


# NVIDIA mps-control-daemon v0.20.0's log with the role's MPS config (make k8s-live records it), shortened.
DAEMON_LOG = """I1128 02:07:04.1 1 main.go:192]
Running with config:
{
  "version": "v1",
  "flags": {"migStrategy": "none"},
  "sharing": {"mps": {"renameByDefault": false, "resources": [{"name": "nvidia.com/gpu", "devices": "all",
    "replicas": 2}]}}
}
E1128 02:07:04.2 1 main.go:212] Failed to start MPS daemon: error setting compute mode EXCLUSIVE_PROCESS: error \
running nvidia-smi: exec: "nvidia-smi": executable file not found in $PATH
"""


def test_the_mps_configuration_and_error_are_read_from_the_daemons_log():
    assert live_mps.mps_replicas(live_mps._config_run(DAEMON_LOG)) == {"nvidia.com/gpu": 2}
    assert live_mps._config_run("no configuration logged") is None
    assert live_mps.mps_replicas(None) == {}
    assert live_mps._errors(DAEMON_LOG)[0].startswith("Failed to start MPS daemon: error setting compute mode")


def test_compute_modes_read_the_stubs_file(tmp_path):
    assert live_mps.compute_modes(tmp_path / "compute-mode") == {}  # never set: every GPU in Default
    (tmp_path / "compute-mode").write_text(f"{G0} 3\n{G1} 3\n\n")
    assert live_mps.compute_modes(tmp_path / "compute-mode") == {G0: 3, G1: 3}
