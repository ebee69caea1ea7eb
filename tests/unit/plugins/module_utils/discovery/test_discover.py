# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""discover() end to end on fixture host trees: every source, their merge, and every problem."""

import ctypes
import os
import shutil
import subprocess

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery import nvml as _nvml
from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery.discover import discover, parse_sources
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils.discovery.discovery_tree import (
    HostTree,
    compile_nvml_stub,
    fixture_text,
    gpu_host,
    write_stub_config,
)


@pytest.fixture(scope="session")
def nvml_stub(tmp_path_factory):
    path = compile_nvml_stub(str(tmp_path_factory.mktemp("nvml-stub")))
    if path is None:
        pytest.skip("no C compiler for the NVML stub")
    return path


@pytest.fixture
def stub_gpus(tmp_path_factory, monkeypatch):
    """stub_gpus(**stub_config options): what the NVML stub answers (default: 2 H100s, driver loaded)."""
    path = str(tmp_path_factory.mktemp("stub-config") / "gpus.json")
    monkeypatch.setenv("GPUFLEET_SIM_GPUS_JSON", path)

    def configure(**kwargs):
        return write_stub_config(path, **kwargs)

    configure()
    return configure


class Commands:
    """A run_command fake that answers by program name and records every call."""

    def __init__(self, answers=None):
        self.answers = answers or {}
        self.calls = []

    def __call__(self, argv):
        self.calls.append(argv)
        name = argv[0].rsplit("/", 1)[-1]
        return self.answers.get(name, (127, "", f"{name}: not found"))


def codes(facts):
    return [p["code"] for p in facts["problems"]]


def test_parse_sources():
    assert parse_sources(["auto"]) == ("nvml", "nvidia-smi", "procfs", "sysfs")
    assert parse_sources(["sysfs", "nvml"]) == ("nvml", "sysfs")
    assert parse_sources("procfs,sysfs") == ("procfs", "sysfs")
    with pytest.raises(ValueError, match="'gpu'"):
        parse_sources(["gpu"])


def test_host_without_gpus(tmp_path):
    commands = Commands()
    facts = discover(str(tmp_path), run_command=commands)
    assert (facts["gpus"], facts["gpu_count"], facts["pci_gpu_count"], facts["device_nodes"]) == ([], 0, 0, [])
    assert (facts["gpu_node"], facts["container"]) == (False, None)
    assert facts["driver"] == {
        "installed_version": None,
        "loaded_version": None,
        "loaded": False,
        "kernel_module_flavor": None,
        "uvm_loaded": False,
        "cuda_version": None,
        "reboot_required": False,
        "device_files": {"uid": 0, "gid": 0, "mode": "0666", "source": "default", "additional_gids": []},
        "sources": {},
    }
    assert facts["problems"] == [] and facts["warnings"] == []
    assert facts["labels"] == {"nvidia.com/gpu.present": "false"}
    assert facts["sources"]["answered"] == ["sysfs"]
    assert commands.calls == []
    assert set(facts) == {
        "gpus", "gpu_count", "pci_gpu_count", "gpu_node", "pci_devices", "driver", "device_nodes", "libraries",
        "engines", "container", "toolkit", "cdi_spec", "nvidia_toolkit", "gpu_users", "labels", "problems", "sources",
        "warnings", "xid_events", "xid_source", "fabric_manager", "next_boot",
        "mig_boot", "gpu_watch", "imex", "dra",
    }  # fmt: skip
    assert facts["dra"] is None  # no NVIDIA GPU: no DRA verdict
    assert facts["mig_boot"] == {"layout": None, "status": None}
    assert facts["gpu_watch"]["installed"] is False  # no watch state under the root
    assert (facts["next_boot"]["kernel"], facts["next_boot"]["state"]) == (None, "unknown")  # no /boot in the tree
    assert (facts["toolkit"], facts["cdi_spec"]) == (None, None)
    assert facts["gpu_users"] == {"processes": [], "scanned": 0, "unreadable": 0, "truncated": False}


def test_gpus_on_the_bus_and_no_driver(tmp_path):
    tree = HostTree(tmp_path)
    tree.pci("0000:07:00.0", driver=None).pci("0000:07:00.1", pci_class="0x040300", driver=None)
    tree.module("nouveau", version=None, taint=None)
    facts = discover(tree.root, run_command=Commands())
    assert (facts["gpu_count"], facts["pci_gpu_count"], len(facts["pci_devices"])) == (0, 1, 2)
    assert facts["gpu_node"] is True  # a GPU on the bus makes a GPU node, driver or not
    assert codes(facts) == ["nouveau_loaded", "driver_not_installed"]
    assert facts["labels"]["nvidia.com/gpu.present"] == "true"


def test_driver_installed_not_loaded(tmp_path, debian_driver_tree):
    driver_root, version = debian_driver_tree
    tree = HostTree(tmp_path).pci("0000:07:00.0", driver=None)
    facts = discover(tree.root, driver_root=driver_root, run_command=Commands())
    assert facts["driver"]["installed_version"] == version
    assert facts["driver"]["loaded"] is False
    assert codes(facts) == ["driver_not_loaded"]
    # Not ready for DRA: no driver loaded, no CDI spec, no containerd; each failing check with its fix.
    dra = facts["dra"]
    assert dra["ready"] is False and dra["release"] == "v0.4.1"
    assert [(c["name"], c["ok"], bool(c["fix"])) for c in dra["checks"]] == [
        ("driver", False, True),
        ("cdi_spec", False, True),
        ("runtime_cdi", False, True),
    ]
    compute = {f["name"] for f in facts["libraries"]["compute"]}
    assert {"libcuda.so.1", "libnvidia-ptxjitcompiler.so.1"} <= compute
    assert all(f["resolved"].endswith(version) for f in facts["libraries"]["utility"] if f["kind"] == "library")
    # Secure Boot on: the likely reason is an unsigned module.
    tree.secure_boot(True)
    facts = discover(tree.root, driver_root=driver_root, run_command=Commands())
    assert codes(facts) == ["secure_boot_module_not_loaded"]


def test_procfs_and_sysfs_only(tmp_path):
    tree = gpu_host(tmp_path, 2)
    tree.proc_version(open_module=True)
    tree.machine("ProLiant XL675d Gen10 Plus")
    facts = discover(tree.root, sources=["procfs", "sysfs"], run_command=Commands())
    assert facts["sources"] == {"requested": ["procfs", "sysfs"], "answered": ["procfs", "sysfs"]}
    assert facts["gpu_count"] == facts["pci_gpu_count"] == 2
    gpu = facts["gpus"][1]
    assert gpu["minor"] == 1 and gpu["index"] == 1
    assert gpu["uuid"] == "GPU-00000000-0000-0000-0000-000000000001"
    assert (gpu["pci_bus_id"], gpu["pci_device_id"], gpu["numa_node"]) == ("0000:06:00.0", "0x233010de", 0)
    assert (gpu["compute_capability"], gpu["architecture"]) == ("9.0", "Hopper")
    assert gpu["source"] == "procfs"
    assert gpu["field_sources"] == {
        "pci_bus_id": "procfs",
        "name": "procfs",
        "uuid": "procfs",
        "minor": "procfs",
        "pci_device_id": "sysfs",
        "numa_node": "sysfs",
        "compute_capability": "table",
        "architecture": "table",
        "index": "pci-order",
    }
    assert facts["driver"]["kernel_module_flavor"] == "open"
    assert facts["driver"]["loaded_version"] == "535.261.03" and facts["driver"]["sources"]["loaded_version"] == "sysfs"
    assert [n["path"] for n in facts["device_nodes"]] == [
        "/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidiactl",
    ]  # fmt: skip
    assert all(n["char_link_present"] for n in facts["device_nodes"])
    assert facts["labels"]["nvidia.com/gpu.machine"] == "ProLiant-XL675d-Gen10-Plus"
    assert facts["problems"] == []


def test_nvml_through_the_stub_with_mig(tmp_path, nvml_stub, stub_gpus):
    stub_gpus(mig=True)
    tree = gpu_host(tmp_path, 2, stub=nvml_stub)
    commands = Commands()
    facts = discover(tree.root, run_command=commands)
    assert facts["sources"]["answered"] == ["nvml", "procfs", "sysfs"]
    assert commands.calls == []  # NVML answered: no nvidia-smi process
    a100, h100 = facts["gpus"]
    assert (a100["name"], a100["mig_mode"], a100["memory_mib"], a100["compute_capability"]) == (
        "NVIDIA A100-SXM4-40GB",
        "enabled",
        40960,
        "8.0",
    )
    assert a100["mig_devices"] == [
        {"index": 0, "uuid": "MIG-00000000-0000-0000-0000-000000000000", "name": "NVIDIA A100-SXM4-40GB MIG 1g.5gb",
         "profile": "1g.5gb", "gi_id": 7, "ci_id": 0, "memory_mib": 4864},
        {"index": 1, "uuid": "MIG-00000000-0000-0000-0000-000000000001", "name": "NVIDIA A100-SXM4-40GB MIG 3g.20gb",
         "profile": "3g.20gb", "gi_id": 2, "ci_id": 0, "memory_mib": 19968},
    ]  # fmt: skip
    assert (h100["architecture"], h100["mig_mode"], h100["pci_bus_id"], h100["source"]) == (
        "Hopper",
        "disabled",
        "0000:06:00.0",
        "nvml",
    )
    # NVML lacks nvmlDeviceGetNumaNodeId in the stub: sysfs fills it in.
    assert h100["field_sources"]["numa_node"] == "sysfs" and h100["field_sources"]["uuid"] == "nvml"
    assert facts["driver"]["cuda_version"] == "12.2" and facts["driver"]["installed_version"] == "535.261.03"
    assert facts["labels"]["nvidia.com/mig.capable"] == "true"
    assert facts["labels"]["nvidia.com/cuda.runtime-version.full"] == "12.2"
    assert facts["problems"] == [] and facts["warnings"] == []


def test_nvml_lost_gpu(tmp_path, nvml_stub, stub_gpus):
    stub_gpus(count=3, lost=1)
    tree = gpu_host(tmp_path, 3, stub=nvml_stub)
    facts = discover(tree.root, run_command=Commands())
    assert [g["lost"] for g in facts["gpus"]] == [False, True, False]
    assert facts["gpus"][1]["source"] == "procfs"
    assert codes(facts) == ["gpu_lost"]
    assert "GPU 1: no handle: GPU is lost" in facts["warnings"][0]


def test_nvml_init_failure_is_a_warning(tmp_path, nvml_stub, stub_gpus):
    stub_gpus(count=1, init_error=18)
    tree = gpu_host(tmp_path, 1, stub=nvml_stub)
    commands = Commands({"nvidia-smi": (9, "", "Failed to initialize NVML: Driver/library version mismatch")})
    tree.nvidia_smi()
    facts = discover(tree.root, run_command=commands)
    assert facts["gpu_count"] == 1 and facts["gpus"][0]["source"] == "procfs"
    assert [c[1:] for c in commands.calls] == [["-q", "-x"]]  # NVML failed, module loaded: nvidia-smi tried
    assert facts["warnings"][0].startswith("nvml: nvmlInit:")
    assert "version mismatch" in facts["warnings"][1]


def test_version_mismatch_needs_a_reboot(tmp_path, nvml_stub):
    tree = HostTree(tmp_path).module(version="535.216.01").nvml_stub(nvml_stub)
    facts = discover(tree.root, sources=["procfs", "sysfs"], run_command=Commands())
    assert facts["driver"]["reboot_required"] is True
    assert codes(facts) == ["driver_version_mismatch"]


def test_nvidia_smi_without_libcuda_reports_an_unknown_cuda_version(tmp_path):
    """``<cuda_version>Not Found</cuda_version>``: discovery reports no CUDA version, no source for it and no
    CUDA runtime labels (not the string, not a version 0)."""
    tree = HostTree(tmp_path).module().nvidia_smi()
    tree.pci("0000:01:00.0")
    commands = Commands({"nvidia-smi": (0, fixture_text("nvidia-smi-rtx4090-550-no-libcuda.xml"), "")})
    facts = discover(tree.root, sources=["nvidia-smi"], run_command=commands)
    assert facts["sources"]["answered"] == ["nvidia-smi"]
    assert facts["driver"]["cuda_version"] is None
    assert "cuda_version" not in facts["driver"]["sources"]
    assert not [k for k in facts["labels"] if "cuda.runtime" in k]
    assert "Not Found" not in repr(facts)


def test_nvidia_smi_source_with_a_lost_gpu(tmp_path):
    tree = HostTree(tmp_path).module().nvidia_smi()
    tree.pci("0000:07:00.0").pci("0000:3b:00.0")
    xml = fixture_text("nvidia-smi-a100-mig-535.xml")
    commands = Commands({"nvidia-smi": (15, xml, fixture_text("nvidia-smi-lost-unknown.txt"))})
    facts = discover(tree.root, sources=["nvidia-smi"], run_command=commands)
    assert facts["sources"]["answered"] == ["nvidia-smi"]
    assert [(g["pci_bus_id"], g["lost"]) for g in facts["gpus"]] == [("0000:07:00.0", False), ("0000:3b:00.0", True)]
    assert facts["gpus"][0]["mig_devices"][1]["gi_id"] == 7
    assert facts["driver"]["cuda_version"] == "12.2" and facts["driver"]["sources"]["cuda_version"] == "nvidia-smi"
    assert codes(facts) == ["gpu_lost"]
    assert facts["warnings"] and facts["warnings"][0].startswith("nvidia-smi: rc=15")


def test_explicit_source_that_is_missing_warns(tmp_path):
    facts = discover(str(tmp_path), sources=["nvml", "nvidia-smi"], run_command=Commands())
    assert facts["gpu_count"] == 0
    assert [w.split(":")[0] for w in facts["warnings"]] == ["nvml", "nvidia-smi"]


def test_char_links_missing_and_gpus_not_visible(tmp_path):
    tree = HostTree(tmp_path).module().proc_version()
    tree.gpu_nodes(1, char_links=False)
    tree.pci("0000:07:00.0").pci("0000:08:00.0")
    tree.proc_gpu("0000:07:00.0", "NVIDIA A100-SXM4-40GB", "GPU-1", 0)
    facts = discover(tree.root, run_command=Commands({"nvidia-smi": (0, "", "")}))
    assert codes(facts) == ["device_char_links_missing", "gpus_not_visible"]
    assert "/dev/nvidia0 (/dev/char/195:0)" in facts["problems"][0]["message"]


def test_loaded_driver_that_sees_no_gpu_and_an_unsigned_module(tmp_path):
    tree = HostTree(tmp_path).module(taint="OE").proc_version().secure_boot(True).pci("0000:07:00.0")
    os.makedirs(tree.path("/proc/driver/nvidia/gpus"))
    facts = discover(tree.root, run_command=Commands())
    assert codes(facts) == ["unsigned_module_loaded", "no_gpu_visible"]


def test_stale_cdi_spec(tmp_path, nvml_stub):
    tree = HostTree(tmp_path).nvml_stub(nvml_stub)
    tree.write("/etc/cdi/nvidia.yaml", "annotations:\n  gpufleet.nvidia/driver-version: 535.216.01\n")
    facts = discover(tree.root, sources=["sysfs"], run_command=Commands())
    assert codes(facts) == ["driver_not_loaded", "cdi_spec_stale"]
    assert "535.216.01" in facts["problems"][1]["message"]
    tree.write("/etc/cdi/nvidia.yaml", "annotations:\n  gpufleet.nvidia/driver-version: 535.261.03\n")
    assert codes(discover(tree.root, sources=["sysfs"], run_command=Commands())) == ["driver_not_loaded"]


class _FakeFunc:
    def __init__(self, impl):
        self.impl, self.restype = impl, None

    def __call__(self, *args):
        return self.impl(*args)


class _FakeNvml:
    """A CDLL-like object with only init, count and handles: every other symbol is missing."""

    def __init__(self):
        self.nvmlInit_v2 = _FakeFunc(lambda: 0)
        self.nvmlShutdown = _FakeFunc(lambda: 0)
        self.nvmlDeviceGetCount_v2 = _FakeFunc(self._count)
        self.nvmlDeviceGetHandleByIndex_v2 = _FakeFunc(lambda index, handle: 0)

    @staticmethod
    def _count(ref):
        ctypes.cast(ref, ctypes.POINTER(ctypes.c_uint))[0] = 2
        return 0


def test_nvml_tolerates_missing_symbols():
    result = _nvml.query("fake", cdll=_FakeNvml())
    assert result["gpus"] == [{"index": 0}, {"index": 1}]
    assert result["driver_version"] is None and result["cuda_version"] is None


def test_nvml_unavailable():
    with pytest.raises(_nvml.NvmlUnavailable):
        _nvml.query("/nonexistent/libnvidia-ml.so.1")


@pytest.mark.parametrize("count", [8, 16])
def test_scan_many_gpus(tmp_path, nvml_stub, stub_gpus, count):
    """Every GPU of a big host, through NVML and without it. Its timing (the target: < 50 ms for 16 GPUs)
    is measured by ``make bench`` (bench/bench.py), never asserted here."""
    stub_gpus(count=count)
    tree = gpu_host(tmp_path, count, stub=nvml_stub)
    for sources in (["auto"], ["procfs", "sysfs"]):
        facts = discover(tree.root, sources=sources, run_command=Commands())
        assert facts["gpu_count"] == count
        assert sorted(g["minor"] for g in facts["gpus"]) == list(range(count))


def debian_layout(tree, stub, version="535.261.03", flavour="current"):
    """Debian's packaging as installed on a node: the libraries in nvidia/<flavour>, the alternative's
    slave links for some sonames (libcuda.so.1) and none for libnvidia-ml.so.1 (not in ld.so.cache)."""
    libdir = "/usr/lib/x86_64-linux-gnu"
    flavour_dir = f"{libdir}/nvidia/{flavour}"
    os.makedirs(tree.path(flavour_dir))
    shutil.copy(stub, tree.path(f"{flavour_dir}/libnvidia-ml.so.{version}"))
    tree.link(flavour_dir + "/libnvidia-ml.so.1", "libnvidia-ml.so." + version)
    libcuda = tree.path(f"{flavour_dir}/libcuda.so.{version}")  # a real ELF with libcuda's soname
    empty = tree.write("/tmp/empty.c", "int cuda_stand_in;\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", libcuda, empty], check=True)
    tree.link(flavour_dir + "/libcuda.so.1", "libcuda.so." + version)
    tree.link("/etc/alternatives/nvidia", "/usr/lib/nvidia/" + flavour)
    tree.link("/etc/alternatives/nvidia--libcuda.so.1-x86_64-linux-gnu", flavour_dir + "/libcuda.so.1")
    tree.link(libdir + "/libcuda.so.1", "/etc/alternatives/nvidia--libcuda.so.1-x86_64-linux-gnu")
    os.makedirs(tree.path("/usr/lib/nvidia/" + flavour), exist_ok=True)
    tree.write("/etc/ld.so.conf", libdir + "\n")
    subprocess.run(["ldconfig", "-r", tree.root], check=True)
    return tree


def test_nvml_in_debians_flavour_directory(tmp_path, nvml_stub, stub_gpus):
    """Debian 535: libnvidia-ml.so.1 only in nvidia/current (found through /etc/alternatives/nvidia)."""
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi.ldcache import read_ld_so_cache

    tree = debian_layout(gpu_host(tmp_path, 2), nvml_stub)
    cached = {e.soname for e in read_ld_so_cache(tree.path("/etc/ld.so.cache"))}
    assert "libcuda.so.1" in cached and "libnvidia-ml.so.1" not in cached
    facts = discover(tree.root, run_command=Commands())
    assert facts["warnings"] == []
    assert facts["sources"]["answered"] == ["nvml", "procfs", "sysfs"]
    assert [g["source"] for g in facts["gpus"]] == ["nvml", "nvml"]
    utility = {f["name"]: f for f in facts["libraries"]["utility"]}
    assert utility["libnvidia-ml.so.1"]["path"] == "/usr/lib/x86_64-linux-gnu/nvidia/current/libnvidia-ml.so.1"
    assert utility["libnvidia-ml.so.1"]["resolved"].endswith("/nvidia/current/libnvidia-ml.so.535.261.03")
    # Without the soname link in the private folder there is nothing to load: NVML is not found
    # (and says so); the alternative's link is not needed to look there.
    os.unlink(tree.path("/etc/alternatives/nvidia"))
    os.unlink(tree.path("/usr/lib/x86_64-linux-gnu/nvidia/current/libnvidia-ml.so.1"))
    facts = discover(tree.root, sources=["nvml"], run_command=Commands())
    assert facts["gpu_count"] == 0 and facts["warnings"] == [
        f"nvml: libnvidia-ml.so.1 is not in {tree.root}'s ld.so.cache"
    ]


def test_nvml_candidates_on_slash_try_the_loader_first():
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi.ldcache import LdCacheEntry
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery.discover import nvml_candidates

    entry = LdCacheEntry(
        "libnvidia-ml.so.1", "/usr/lib/x86_64-linux-gnu/nvidia/current/libnvidia-ml.so.1", 0x303, "x86_64", None
    )
    assert nvml_candidates("/", [entry])[0] == "libnvidia-ml.so.1"
    assert len(nvml_candidates("/", [entry])) == 2
    assert nvml_candidates("/", []) == ["libnvidia-ml.so.1"]


def test_nvml_load_falls_back_to_the_next_candidate(nvml_stub):
    lib = _nvml.load(["libnvidia-ml-does-not-exist.so.1", nvml_stub])
    assert lib._name == nvml_stub
    with pytest.raises(_nvml.NvmlUnavailable, match=r"libnvidia-ml-does-not-exist\.so\.1.*nope\.so\.1"):
        _nvml.load(["libnvidia-ml-does-not-exist.so.1", "/nonexistent/nope.so.1"])


def test_docker_unit_flag_that_daemon_json_would_conflict_with(tmp_path):
    """dockerd --add-runtime nvidia=... in a drop-in: reported with its file and fix before the runtime role writes
    daemon.json (and, when daemon.json already sets runtimes, as the reason dockerd does not start now)."""
    tree = HostTree(tmp_path).module().proc_version()
    tree.write("/usr/sbin/dockerd", "#!/bin/sh\n", mode=0o755)
    tree.write("/lib/systemd/system/docker.service", "[Service]\nExecStart=/usr/sbin/dockerd -H fd://\n")
    drop_in = "/etc/systemd/system/docker.service.d/nvidia.conf"
    tree.write(
        drop_in,
        "[Service]\nExecStart=\n"
        "ExecStart=/usr/sbin/dockerd -H fd:// --add-runtime nvidia=/usr/bin/nvidia-container-runtime\n",
    )
    facts = discover(tree.root, sources=["sysfs"], run_command=Commands())
    assert facts["engines"]["docker"]["unit_flags"] == [
        {"flag": "--add-runtime nvidia=/usr/bin/nvidia-container-runtime", "option": "runtimes", "file": drop_in}
    ]
    (problem,) = [p for p in facts["problems"] if p["code"] == "docker_unit_runtime_flag"]
    assert drop_in in problem["message"] and "dockerd then refuses to start" in problem["message"]
    assert problem["fix"].startswith(f"remove --add-runtime from {drop_in}") and "daemon-reload" in problem["fix"]
    tree.write("/etc/docker/daemon.json", '{"runtimes": {"nvidia": {"path": "/x"}}}')
    facts = discover(tree.root, sources=["sysfs"], run_command=Commands())
    (problem,) = [p for p in facts["problems"] if p["code"] == "docker_unit_runtime_flag"]
    assert "refuses to start now" in problem["message"]
    assert "unit_flags" not in facts["engines"]["containerd"]


# The uvm part of a CDI spec as cdi_spec (YAML) and nvidia-ctk write it.
SPEC_WITH_UVM = 'containerEdits:\n  deviceNodes:\n    - path: "/dev/nvidiactl"\n    - path: "/dev/nvidia-uvm"\n'
SPEC_WITHOUT_UVM = SPEC_WITH_UVM.replace('"/dev/nvidia-uvm"', '"/dev/nvidia-uvm-tools"')


def test_uvm_loaded_without_its_node_or_out_of_the_spec(tmp_path):
    """The uvm module is loaded (its major in /proc/devices, or /sys/module/nvidia_uvm): a missing /dev/nvidia-uvm
    is a problem with its fix, and so is a CDI spec that does not list it."""
    tree = HostTree(tmp_path).module().proc_version().gpu_nodes(1).pci("0000:07:00.0")
    tree.proc_gpu("0000:07:00.0", "NVIDIA A100-SXM4-40GB", "GPU-1", 0)
    facts = discover(tree.root, run_command=Commands({"nvidia-smi": (0, "", "")}))
    assert facts["driver"]["uvm_loaded"] is False and codes(facts) == []  # nothing says uvm is loaded

    tree.write("/proc/devices", "Character devices:\n195 nvidia\n508 nvidia-uvm\n\nBlock devices:\n  8 sd\n")
    tree.write("/etc/cdi/nvidia.yaml", SPEC_WITH_UVM)
    facts = discover(tree.root, run_command=Commands({"nvidia-smi": (0, "", "")}))
    assert facts["driver"]["uvm_loaded"] is True and codes(facts) == []

    os.unlink(tree.path("/dev/nvidia-uvm"))
    tree.write("/etc/cdi/nvidia.yaml", SPEC_WITHOUT_UVM)
    facts = discover(tree.root, run_command=Commands({"nvidia-smi": (0, "", "")}))
    assert codes(facts) == ["uvm_device_missing", "cdi_spec_uvm_missing"]
    missing, spec = facts["problems"]
    assert "/dev/nvidia-uvm does not exist" in missing["message"] and "gpufleet-nvidia-devices" in missing["fix"]
    assert "/etc/cdi/nvidia.yaml" in spec["message"] and "gpufleet-cdi-refresh" in spec["fix"]

    # the module seen through sysfs only, as in the simulated nodes
    os.unlink(tree.path("/proc/devices"))
    tree.module("nvidia_uvm", version=None, taint=None)
    assert codes(discover(tree.root, run_command=Commands({"nvidia-smi": (0, "", "")})))[0] == "uvm_device_missing"
    # with no driver loaded, uvm is not asked for
    shutil.rmtree(tree.path("/sys/module/nvidia"))
    shutil.rmtree(tree.path("/proc/driver"))
    facts = discover(tree.root, run_command=Commands())
    assert facts["driver"]["loaded"] is False and facts["driver"]["uvm_loaded"] is False
    assert "uvm_device_missing" not in codes(facts) and "cdi_spec_uvm_missing" not in codes(facts)


def test_gpu_health_from_nvml_and_the_kernel_log(tmp_path, nvml_stub, stub_gpus):
    # GPU 0: a pending row remap, 2 uncorrected ECC errors since reset, clocks held down for heat, persistence on;
    # GPU 1: healthy counters, an Xid 79 in the kernel log, and an application's Xid 13 (not a host problem).
    stub_gpus(
        count=3,
        health={
            0: {"ecc_uncorrected_volatile": 2, "ecc_uncorrected_aggregate": 5, "persistence_mode": 1,
                "remapped_rows": {"correctable": 0, "uncorrectable": 1, "pending": True, "failure": False},
                "clocks_event_reasons": 0x41},
            1: {"ecc_uncorrected_volatile": 0, "ecc_uncorrected_aggregate": 0, "persistence_mode": 0,
                "remapped_rows": {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False},
                "clocks_event_reasons": 0x1},
            2: {"remapped_rows": {"correctable": 3, "uncorrectable": 512, "pending": False, "failure": True},
                "retired_pages_pending": 1},
        },
    )  # fmt: skip
    tree = gpu_host(tmp_path, 3, stub=nvml_stub)
    tree.write(
        "/dev/kmsg",
        "4,1,100,-;NVRM: Xid (PCI:0000:06:00): 13, pid=42, name=bad, Graphics SM Warp Exception\n"
        "4,2,200,-;NVRM: Xid (PCI:0000:06:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n",
    )
    facts = discover(tree.root, run_command=Commands())
    first, second, third = facts["gpus"]
    # retired_pages_pending: the stub answers NOT_SUPPORTED for GPU 0 (as an Ampere GPU does): left out.
    assert first["health"] == {
        "ecc_uncorrected_volatile": 2, "ecc_uncorrected_aggregate": 5, "persistence_mode": "enabled",
        "remapped_rows": {"correctable": 0, "uncorrectable": 1, "pending": True, "failure": False},
        "clocks_event_reasons": ["gpu_idle", "hw_thermal_slowdown"], "xid_events": [],
    }  # fmt: skip
    assert [e["xid"] for e in second["health"]["xid_events"]] == [13, 79]
    assert second["health"]["persistence_mode"] == "disabled" and third["health"]["retired_pages_pending"] is True
    assert facts["xid_source"] == "/dev/kmsg"
    problems = {p["code"]: p for p in facts["problems"]}
    assert sorted(problems) == [
        "gpu_clocks_throttled", "gpu_ecc_uncorrectable", "gpu_retired_pages_pending", "gpu_row_remap_failed",
        "gpu_row_remap_pending", "gpu_xid_79",
    ]  # fmt: skip
    assert "GPU 1 (0000:06:00.0)" in problems["gpu_xid_79"]["message"]
    assert "reboot" in problems["gpu_xid_79"]["fix"] and "RESTART_BM" in problems["gpu_xid_79"]["fix"]
    assert "nvidia-smi -r -i 0" in problems["gpu_row_remap_pending"]["fix"]
    assert "RMA" in problems["gpu_row_remap_failed"]["fix"]
    assert "hw_thermal_slowdown" in problems["gpu_clocks_throttled"]["message"]


def test_gpu_without_health_counters_has_no_health_problem(tmp_path, nvml_stub, stub_gpus):
    tree = gpu_host(tmp_path, 2, stub=nvml_stub)
    facts = discover(tree.root, run_command=Commands())
    assert [g["health"] for g in facts["gpus"]] == [{"xid_events": []}, {"xid_events": []}]
    assert facts["xid_source"] is None and facts["problems"] == []


def test_fabric_manager_down_on_an_nvswitch_system(tmp_path, nvml_stub, stub_gpus, monkeypatch):
    tree = gpu_host(tmp_path, 2, stub=nvml_stub)
    for bus in ("0000:c0:00.0", "0000:c1:00.0"):
        tree.pci(bus, device="0x22a3", pci_class="0x068000", driver=None)  # NVSwitch (HGX H100), class "bridge, other"
    facts = discover(tree.root, run_command=Commands())
    assert facts["fabric_manager"] == {"nvswitch_count": 2, "state": None}  # not / : systemctl is not asked
    assert "fabric_manager_down" not in codes(facts)
    facts["fabric_manager"]["state"] = "failed"
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery.problems import health_problems

    (down,) = health_problems(facts)
    assert down["code"] == "fabric_manager_down" and "2 NVSwitch(es)" in down["message"]
    assert "systemctl enable --now nvidia-fabricmanager" in down["fix"]
    facts["fabric_manager"]["state"] = "active"
    assert health_problems(facts) == []


@pytest.mark.skipif(
    not os.path.exists("/usr/bin/systemctl") and not os.path.exists("/bin/systemctl"), reason="no systemctl"
)
def test_fabric_manager_state_is_asked_of_systemctl_on_slash_only_with_nvswitches():
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery.discover import _fabric_manager

    switch = {"class": "0x068000", "vendor_id": "0x10de"}
    commands = Commands({"systemctl": (3, "inactive\n", "")})
    assert _fabric_manager("/", [switch], commands) == {"nvswitch_count": 1, "state": "inactive"}
    assert [c[1:] for c in commands.calls] == [["is-active", "nvidia-fabricmanager.service"]]
    gpu_only = Commands()
    assert _fabric_manager("/", [{"class": "0x030200"}], gpu_only) == {"nvswitch_count": 0, "state": None}
    assert gpu_only.calls == []
