# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The simulated GPU node and fleet (tests/sim) do what other tests rely on."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.integration

GPU_NODES = ["gpu-bookworm", "gpu-trixie"]
ALL_NODES = [*GPU_NODES, "cpu-sid"]
ENGINE_VERSIONS = {  # node -> (docker major, containerd major.minor)
    "gpu-bookworm": ("20.10", "1.6"),
    "gpu-trixie": ("26.", "1.7"),
    "cpu-sid": ("28.", "2.1"),
}

# Run inside a node: what NVML (through ctypes, as gpu_facts does) says, as JSON.
NVML_PROBE = r"""
import ctypes, json, os
class Pci(ctypes.Structure):
    _fields_ = [("busIdLegacy", ctypes.c_char * 16), ("domain", ctypes.c_uint), ("bus", ctypes.c_uint),
                ("device", ctypes.c_uint), ("pciDeviceId", ctypes.c_uint), ("pciSubSystemId", ctypes.c_uint),
                ("busId", ctypes.c_char * 32)]
class Mem(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]
nvml = ctypes.CDLL(os.environ.get("NVML_LIB", "libnvidia-ml.so.1"))
nvml.nvmlErrorString.restype = ctypes.c_char_p
out = {"init": nvml.nvmlInit_v2()}
if out["init"] == 0:
    buf = ctypes.create_string_buffer(96)
    assert nvml.nvmlSystemGetDriverVersion(buf, 96) == 0; out["driver"] = buf.value.decode()
    cuda = ctypes.c_int(); assert nvml.nvmlSystemGetCudaDriverVersion_v2(ctypes.byref(cuda)) == 0
    out["cuda"] = cuda.value
    n = ctypes.c_uint(); assert nvml.nvmlDeviceGetCount_v2(ctypes.byref(n)) == 0
    out["gpus"] = []
    for i in range(n.value):
        h = ctypes.c_void_p(); assert nvml.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(h)) == 0
        g = {}
        assert nvml.nvmlDeviceGetName(h, buf, 96) == 0; g["name"] = buf.value.decode()
        assert nvml.nvmlDeviceGetUUID(h, buf, 96) == 0; g["uuid"] = buf.value.decode()
        pci = Pci(); assert nvml.nvmlDeviceGetPciInfo_v3(h, ctypes.byref(pci)) == 0
        g["bus_id"] = pci.busId.decode(); g["pci_device_id"] = pci.pciDeviceId
        mem = Mem(); assert nvml.nvmlDeviceGetMemoryInfo(h, ctypes.byref(mem)) == 0; g["memory"] = mem.total
        ma, mi = ctypes.c_int(), ctypes.c_int()
        assert nvml.nvmlDeviceGetCudaComputeCapability(h, ctypes.byref(ma), ctypes.byref(mi)) == 0
        g["cc"] = f"{ma.value}.{mi.value}"
        cur, pend = ctypes.c_uint(), ctypes.c_uint()
        rc = nvml.nvmlDeviceGetMigMode(h, ctypes.byref(cur), ctypes.byref(pend))
        g["mig"] = cur.value if rc == 0 else nvml.nvmlErrorString(rc).decode()
        minor = ctypes.c_uint(); assert nvml.nvmlDeviceGetMinorNumber(h, ctypes.byref(minor)) == 0
        g["minor"] = minor.value
        h2 = ctypes.c_void_p()
        assert nvml.nvmlDeviceGetHandleByUUID(g["uuid"].encode(), ctypes.byref(h2)) == 0 and h2.value == h.value
        assert nvml.nvmlDeviceGetHandleByPciBusId_v2(g["bus_id"].encode(), ctypes.byref(h2)) == 0
        assert h2.value == h.value
        out["gpus"].append(g)
    assert nvml.nvmlShutdown() == 0
else:
    out["error"] = nvml.nvmlErrorString(out["init"]).decode()
print(json.dumps(out))
"""


def nvml_probe(node, lib: str = "libnvidia-ml.so.1") -> dict:
    res = node.run(f"NVML_LIB={lib} python3 -", input=NVML_PROBE)
    assert res.rc == 0, f"{node.name}: NVML probe failed:\n{res.stdout}\n{res.stderr}"
    return json.loads(res.stdout.strip().splitlines()[-1])


def expected_gpus(node) -> list[dict]:
    return [
        {
            "name": g["name"],
            "uuid": g["uuid"],
            "bus_id": g["pci_bus_id"],
            "pci_device_id": (g["device_id"] << 16) | 0x10DE,
            "memory": g["memory_mib"] * 1024 * 1024,
            "cc": g["compute_capability"],
            "mig": {"disabled": 0, "enabled": 1, None: "Not Supported"}[g["mig_mode"]],
            "minor": g["minor"],
        }
        for g in node.gpus
    ]


@pytest.mark.parametrize("name", ALL_NODES)
def test_node_boots_systemd(sim_node, name):
    node = sim_node(name)
    state = node.run("systemctl is-system-running").stdout.strip()
    failed = node.run("systemctl --failed --no-legend --plain").stdout
    assert state == "running", f"{name}: system is {state}; failed units:\n{failed}"
    assert node.run("systemctl is-active gpufleet-sim.service docker.service containerd.service").rc == 0


@pytest.mark.parametrize("name", GPU_NODES)
def test_nvml_stub_answers_for_configured_gpus(sim_node, name):
    node = sim_node(name)
    out = nvml_probe(node)
    assert out["init"] == 0, out
    assert out["driver"] == node.desc["driver_version"]
    assert out["cuda"] == node.config["cuda_version"]
    assert out["gpus"] == expected_gpus(node)


def test_cpu_node_has_no_nvml(sim_node):
    node = sim_node("cpu-sid")
    assert node.run("ls /dev/nvidia* 2>/dev/null").stdout == ""
    res = node.run("python3 -c 'import ctypes; ctypes.CDLL(\"libnvidia-ml.so.1\")'")
    assert res.rc != 0 and "libnvidia-ml.so.1" in res.stderr
    assert node.run("test -e /sys/module/nvidia").rc != 0


@pytest.mark.parametrize("name", GPU_NODES)
def test_device_nodes(sim_node, name):
    node = sim_node(name)
    res = node.run("stat -c '%n %F %t %T' /dev/nvidia*", check=True)
    got = {}
    for line in res.stdout.splitlines():
        path, *kind, major, minor = line.split()
        assert " ".join(kind) == "character special file", line
        got[path] = (int(major, 16), int(minor, 16))
    want = {f"/dev/nvidia{g['minor']}": (195, g["minor"]) for g in node.gpus}
    uvm = node.config["uvm_major"]
    want.update(
        {
            "/dev/nvidiactl": (195, 255),
            "/dev/nvidia-modeset": (195, 254),
            "/dev/nvidia-uvm": (uvm, 0),
            "/dev/nvidia-uvm-tools": (uvm, 1),
        }
    )
    assert got == want


@pytest.mark.parametrize("name", GPU_NODES)
def test_pci_tree_and_module(sim_node, name):
    node = sim_node(name)
    script = (
        "cd /sys/bus/pci/devices && for d in *; do "
        'echo "$d $(cat $d/vendor) $(cat $d/class) $(cat $d/device) $(basename "$(readlink $d/driver)")"; done'
    )
    rows = [line.split() for line in node.run(script, check=True).stdout.splitlines()]
    gpus = {r[0]: r for r in rows if r[1] == "0x10de" and r[2].startswith("0x0302")}
    want = {g["pci_bus_id"][4:].lower(): g for g in node.gpus}
    assert sorted(gpus) == sorted(want)
    for bdf, gpu in want.items():
        assert gpus[bdf][3] == f"0x{gpu['device_id']:04x}"
        assert gpus[bdf][4] == "nvidia"
    audio = [r for r in rows if r[1] == "0x10de" and r[2] == "0x040300"]
    assert len(audio) == 1
    assert any(r[1] != "0x10de" for r in rows), "the host's own PCI functions are missing"
    version = node.run("cat /sys/module/nvidia/version", check=True).stdout.strip()
    assert version == node.desc["driver_version"]
    assert node.run("lspci -n -d 10de:").stdout.count("10de:") == len(node.gpus) + 1


@pytest.mark.parametrize("name", ALL_NODES)
def test_engine_versions_and_nested_docker_run(sim_node, name):
    node = sim_node(name)
    docker_v, containerd_v = ENGINE_VERSIONS[name]
    assert node.run("docker version --format '{{.Server.Version}}'", check=True).stdout.startswith(docker_v)
    assert f" {containerd_v}." in node.run("containerd --version", check=True).stdout
    node.run("gpufleet-sim-mini-image gpufleet-sim/mini:latest", check=True)
    res = node.run("docker run --rm --network none gpufleet-sim/mini:latest echo hello-from-nested")
    assert res.rc == 0 and res.stdout.strip() == "hello-from-nested", res.stderr
    res = node.run("docker run --rm gpufleet-sim/mini:latest cat /etc/hostname")  # the default bridge
    assert res.rc == 0 and res.stdout.strip(), res.stderr


def test_podman_on_trixie(sim_node):
    node = sim_node("gpu-trixie")
    assert node.run("podman --version", check=True).stdout.split()[-1].startswith("5.4")


def test_stub_in_a_nested_container_sees_only_given_gpus(sim_node):
    """A container given one GPU's device node (and the stub) sees that GPU only, as index 0."""
    node = sim_node("gpu-bookworm")
    node.run("gpufleet-sim-mini-image gpufleet-sim/mini-py:latest --python", check=True)
    gpu = node.gpus[1]
    lib = node.run("readlink -f /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", check=True).stdout.strip()
    res = node.run(
        [
            "docker",
            "run",
            "--rm",
            "-i",
            "--network",
            "none",
            "--device",
            f"/dev/nvidia{gpu['minor']}",
            "--device",
            "/dev/nvidiactl",
            "-v",
            f"{lib}:/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1:ro",
            "gpufleet-sim/mini-py:latest",
            "python3",
            "-",
        ],
        input=NVML_PROBE,
    )
    assert res.rc == 0, res.stderr
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert [g["uuid"] for g in out["gpus"]] == [gpu["uuid"]]


DRIVER_FLEET = {
    "nodes": [
        {"name": "drv", "suite": "bookworm", "driver_packages": True, "gpus": [{"model": "H100-PCIE"}]},
        {"name": "inst", "suite": "bookworm", "driver_state": "installed", "gpus": 1},
    ]
}


@pytest.fixture(scope="module")
def driver_fleet(sim_fleet_factory):
    return sim_fleet_factory(DRIVER_FLEET, name="drv")


def test_stub_wins_over_debian_packages(driver_fleet):
    node = driver_fleet.node("drv")
    version = node.desc["driver_version"]
    real = f"/usr/lib/x86_64-linux-gnu/nvidia/current/libnvidia-ml.so.{version}"
    assert node.run("dpkg-query -W -f '${Version}' libnvidia-ml1", check=True).stdout.startswith(version)
    diversions = node.run("dpkg-divert --list", check=True).stdout
    assert f"{real} to {real}.real" in diversions
    assert node.run(f"test -s {real}.real && test $(stat -c %s {real}.real) -gt 1000000").rc == 0
    # Debian's layout: libnvidia-ml.so.1 in nvidia/current, on the default library path through the "nvidia"
    # alternative (registered once the stub exists); both reach the stub
    packaged = "/usr/lib/x86_64-linux-gnu/nvidia/current/libnvidia-ml.so.1"
    assert node.run(f"readlink -f {packaged}", check=True).stdout.strip() == real
    assert node.run("readlink -f /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", check=True).stdout.strip() == real
    out = nvml_probe(node, packaged)
    assert out["init"] == 0 and out["driver"] == version
    assert out["gpus"] == expected_gpus(node)
    # dpkg unpacking the package again (a reinstall, as the driver role may do) keeps the stub in place
    node.run("apt-get update -qq && apt-get install -y -qq --reinstall libnvidia-ml1", check=True, timeout=300)
    assert node.run(f"test $(stat -c %s {real}) -lt 1000000").rc == 0
    assert nvml_probe(node, packaged)["gpus"] == expected_gpus(node)


def test_installed_state_is_not_loaded(driver_fleet):
    node = driver_fleet.node("inst")
    out = nvml_probe(node)
    assert out["init"] == 9 and out["error"] == "Driver Not Loaded"
    assert node.run("ls /dev/nvidia* 2>/dev/null").stdout == ""
    assert node.run("test -e /sys/module/nvidia").rc != 0
    pci = node.run("grep -l 0x10de /sys/bus/pci/devices/*/vendor", check=True).stdout.split()
    assert len(pci) == 2  # the GPU and its audio function, no driver bound
    assert node.run("test -e /sys/bus/pci/devices/0000:17:00.0/driver").rc != 0


def test_inventory_reaches_every_node(ansible_playbook, sim_fleet, tmp_path):
    """The written inventory works as is: groups, docker connection, host vars that describe the GPUs."""
    playbook = tmp_path / "probe.yml"
    playbook.write_text(
        """\
- name: Probe the simulated fleet
  hosts: all
  gather_facts: false
  tasks:
    - name: Read the node's simulated GPU description
      ansible.builtin.slurp:
        src: /etc/gpufleet-sim/gpus.json
      register: sim_json
    - name: The node's JSON and its inventory host vars agree
      ansible.builtin.assert:
        that:
          - (sim_json.content | b64decode | from_json).gpus | map(attribute='uuid') | list
            == gpufleet_sim.gpus | map(attribute='uuid') | list
          - (inventory_hostname in groups['gpu_nodes']) == (gpufleet_sim.gpus | length > 0)
"""
    )
    res = ansible_playbook(playbook)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "failed=0" in res.stdout and res.stdout.count("ok=2") == len(sim_fleet.nodes)
