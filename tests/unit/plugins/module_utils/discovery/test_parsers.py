# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The pure parsers behind gpu_facts: PCI, procfs, nvidia-smi XML, engines, labels, problems."""

import os
import re
import shutil
import sys
import xml.etree.ElementTree as ET

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery import engines as _engines
from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery import labels as _labels
from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery import problems as _problems
from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery.nvidia_procfs import (
    gpu_from_information,
    parse_information,
    parse_version,
)
from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery.nvidia_smi import (
    is_placeholder,
    lost_gpus,
    parse_xml,
)
from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery.nvml import (
    guess_compute_capability,
    mig_profile,
)
from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery.pci import (
    is_gpu_class,
    normalize_bus_id,
    scan_pci,
)
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils.discovery.discovery_tree import (
    REPO,
    HostTree,
    fixture_text,
    stub_config,
)


@pytest.mark.parametrize(
    "value, expected",
    [
        ("00000000:07:00.0", "0000:07:00.0"),
        ("0000:3B:00.0", "0000:3b:00.0"),
        ("3b:00.1", "0000:3b:00.1"),
        ("00000001:1E:00.0", "0001:1e:00.0"),
        ("GPU-1234", None),
        ("", None),
        (None, None),
    ],
)
def test_normalize_bus_id(value, expected):
    assert normalize_bus_id(value) == expected


@pytest.mark.parametrize(
    "pci_class, gpu",
    [("0x030000", True), ("0x030200", True), ("0x040300", False), ("0x0c0330", False), ("0x068000", False)],
)
def test_gpu_classes(pci_class, gpu):
    assert is_gpu_class(pci_class) is gpu


def test_pci_scan_keeps_nvidia_functions_and_tells_gpus_apart(tmp_path):
    tree = HostTree(tmp_path)
    tree.pci("0000:01:00.0", device="0x2684", pci_class="0x030000")  # RTX 4090, VGA
    tree.pci("0000:01:00.1", device="0x22ba", pci_class="0x040300", driver="snd_hda_intel")  # its audio
    tree.pci("0000:01:00.2", device="0x1ada", pci_class="0x0c0330", driver="xhci_hcd")  # its USB-C
    tree.pci("0000:07:00.0", device="0x20b0", pci_class="0x030200", numa_node=-1)  # A100, 3D
    tree.pci("0000:c1:00.0", device="0x1af1", pci_class="0x068000", driver=None)  # NVSwitch bridge
    tree.pci("0000:00:02.0", device="0x4680", pci_class="0x030000", vendor="0x8086", driver="i915")  # Intel iGPU
    found = scan_pci(tree.path("/sys/bus/pci/devices"))
    assert [f["pci_bus_id"] for f in found] == [
        "0000:01:00.0", "0000:01:00.1", "0000:01:00.2", "0000:07:00.0", "0000:c1:00.0",
    ]  # fmt: skip
    assert [f["pci_bus_id"] for f in found if f["is_gpu"]] == ["0000:01:00.0", "0000:07:00.0"]
    a100 = found[3]
    assert (a100["driver"], a100["numa_node"], a100["device_id"]) == ("nvidia", None, "0x20b0")
    assert found[4]["driver"] is None


def test_pci_scan_of_a_missing_bus_is_empty(tmp_path):
    assert scan_pci(str(tmp_path / "nope")) == []


def test_proc_version_proprietary_and_open():
    assert parse_version(fixture_text("proc-version-proprietary.txt")) == {
        "version": "535.261.03",
        "flavor": "proprietary",
        "gcc": "gcc version 12.2.0 (Debian 12.2.0-14+deb12u1)",
    }
    opened = parse_version(fixture_text("proc-version-open.txt"))
    assert (opened["version"], opened["flavor"]) == ("550.90.07", "open")
    assert parse_version("") == {"version": None, "flavor": None, "gcc": None}


def test_proc_information():
    info = parse_information(fixture_text("proc-information-a100.txt"))
    assert info["Model"] == "NVIDIA A100-SXM4-40GB"
    assert gpu_from_information(info) == {
        "pci_bus_id": "0000:07:00.0",
        "name": "NVIDIA A100-SXM4-40GB",
        "uuid": "GPU-4e6a8b5c-31b2-5f0a-92c4-0d7e3c1b9a10",
        "minor": 0,
        "vbios_version": "92.00.36.00.02",
        "excluded": False,
    }


def test_proc_information_before_the_gpu_was_initialised_has_no_uuid():
    gpu = gpu_from_information(parse_information(fixture_text("proc-information-uninitialised.txt")))
    assert (gpu["uuid"], gpu["vbios_version"], gpu["pci_bus_id"], gpu["minor"]) == (None, None, "0000:00:1e.0", 0)


def test_smi_v100_on_470_has_no_architecture_element():
    result = parse_xml(fixture_text("nvidia-smi-v100-470.xml"))
    assert (result["driver_version"], result["cuda_version"], result["attached_gpus"]) == ("470.223.02", "11.4", 2)
    first, second = result["gpus"]
    assert first == {
        "index": 0,
        "name": "Tesla V100-SXM2-16GB",
        "uuid": "GPU-6a2a1a1c-9c1e-1d7e-7c6b-2f1f0a3b8e01",
        "minor": 0,
        "pci_bus_id": "0000:00:1e.0",
        "pci_device_id": "0x1db110de",
        "memory_mib": 16160,
        "vbios_version": "88.00.4F.00.09",
        "serial": "0323217043861",
        "persistence_mode": "Enabled",
    }
    assert (second["index"], second["minor"], second["pci_bus_id"]) == (1, 1, "0000:00:1f.0")
    assert guess_compute_capability(first["name"]) == ("7.0", "Volta")


def test_smi_a100_with_mig():
    (gpu,) = parse_xml(fixture_text("nvidia-smi-a100-mig-535.xml"))["gpus"]
    assert (gpu["architecture"], gpu["mig_mode"], gpu["mig_mode_pending"], gpu["memory_mib"]) == (
        "Ampere",
        "enabled",
        "enabled",
        40960,
    )
    assert gpu["mig_devices"] == [
        {"index": 0, "uuid": None, "gi_id": 1, "ci_id": 0, "memory_mib": 19968, "multiprocessor_count": 42},
        {"index": 1, "uuid": None, "gi_id": 7, "ci_id": 0, "memory_mib": 4864, "multiprocessor_count": 14},
    ]


def test_smi_535_real_tool_over_the_stub():
    """``nvidia-smi-535-stub.xml`` is Debian's real nvidia-smi 535 over the stub NVML (tests/tools/smi_fixtures.py):
    what it says is what the stub was told."""
    result = parse_xml(fixture_text("nvidia-smi-535-stub.xml"))
    config = stub_config(count=2, mig=True)
    assert (result["driver_version"].split(".")[0], result["cuda_version"], result["attached_gpus"]) == (
        "535",
        "12.2",
        2,
    )
    for gpu, want in zip(result["gpus"], config["gpus"]):
        assert (gpu["name"], gpu["uuid"], gpu["minor"], gpu["memory_mib"]) == (
            want["name"],
            want["uuid"],
            want["minor"],
            want["memory_total"] // (1024 * 1024),
        )
        assert gpu["pci_bus_id"] == normalize_bus_id(want["pci_bus_id"])
        assert gpu["pci_device_id"] == "0x%08x" % want["pci_device_id"]
    a100, h100 = result["gpus"]
    assert (a100["architecture"], a100["mig_mode"], a100["mig_mode_pending"]) == ("Ampere", "enabled", "enabled")
    assert a100["mig_devices"] == []  # the stub serves no GPU instance: nvidia-smi prints <mig_devices>None</...>
    assert (h100["architecture"], h100["mig_mode"]) == ("Hopper", "disabled")
    assert "serial" not in h100 and "vbios_version" not in h100  # the stub answers N/A


def _load_smi_fixtures():
    sys.path.insert(0, os.path.join(REPO, "tests", "tools"))
    try:
        import smi_fixtures
    finally:
        sys.path.pop(0)
    return smi_fixtures


@pytest.mark.skipif(not shutil.which("gcc"), reason="gcc is needed to build the stub NVML")
def test_smi_fixtures_are_what_the_real_tool_says_now(debian_driver_tree):
    smi_fixtures = _load_smi_fixtures()
    for name, text in smi_fixtures.generate().items():
        assert smi_fixtures.same(fixture_text(name), text), f"{name}: run tests/tools/smi_fixtures.py"


def _element_paths(text, skip=()):
    paths = set()

    def walk(element, prefix):
        path = f"{prefix}/{element.tag}"
        if element.tag in skip:
            return
        paths.add(path)
        for child in element:
            walk(child, path)

    walk(ET.fromstring(text), "")  # noqa: S314  # a fixture of this tree
    return paths


def test_hand_written_535_fixture_has_only_what_real_535_prints():
    """The hand-written MIG fixture (``nvidia-smi-a100-mig-535.xml``) claims driver 535: every element it has
    outside ``<mig_devices>`` (which the stub cannot make nvidia-smi print) is one the real 535 prints."""
    real = _element_paths(fixture_text("nvidia-smi-535-stub.xml"))
    hand = _element_paths(fixture_text("nvidia-smi-a100-mig-535.xml"), skip=("mig_devices",))
    assert hand - real == set()
    assert len(hand) > 50


# The seq_printf formats of NVIDIA/open-gpu-kernel-modules kernel-open/nvidia/nv-procfs.c (commit 1739a20efc4a, read
# 2026-11-23): nv_procfs_read_version and nv_procfs_read_gpu_info ("GPU UUID" and "GPU Firmware" only when known).
PROCFS_FORMATS = {
    "version": [r"NVRM version: \S.*", r"GCC version:  \S.*"],
    "information": [
        r"Model: \t\t \S.*",
        r"IRQ:   \t\t \d+",
        r"GPU UUID: \t \S+",
        r"Video BIOS: \t \S+",
        r"Bus Type: \t PCIe?",
        r"DMA Size: \t \d+ bits",
        r"DMA Mask: \t 0x[0-9a-f]+",
        r"Bus Location: \t [0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]",
        r"Device Minor: \t \d+",
        r"GPU Firmware: \t \S+",
        r"GPU Excluded:\t (Yes|No)",
    ],
}


@pytest.mark.parametrize(
    "name",
    [
        "proc-version-proprietary.txt",
        "proc-version-open.txt",
        "proc-information-a100.txt",
        "proc-information-uninitialised.txt",
    ],
)
def test_hand_written_procfs_fixtures_follow_the_kernel_modules_formats(name):
    formats = PROCFS_FORMATS["version" if "version" in name else "information"]
    lines = fixture_text(name).splitlines()
    matched = [next((i for i, f in enumerate(formats) if re.fullmatch(f, line)), None) for line in lines]
    assert None not in matched, [line for line, m in zip(lines, matched) if m is None]
    assert matched == sorted(matched)  # in the order the module prints them


def test_smi_h100_and_consumer_card():
    (h100,) = parse_xml(fixture_text("nvidia-smi-h100-550.xml"))["gpus"]
    assert (h100["name"], h100["minor"], h100["mig_mode"], h100["pci_bus_id"], h100["pci_device_id"]) == (
        "NVIDIA H100 80GB HBM3",
        3,
        "disabled",
        "0000:1b:00.0",
        "0x233010de",
    )
    (rtx,) = parse_xml(fixture_text("nvidia-smi-rtx4090-550.xml"))["gpus"]
    assert (rtx["architecture"], rtx["memory_mib"]) == ("Ada Lovelace", 24564)
    assert "mig_mode" not in rtx and "serial" not in rtx  # N/A is no value
    assert guess_compute_capability(rtx["name"], rtx["architecture"]) == ("8.9", "Ada Lovelace")


def test_smi_placeholders_read_as_unknown():
    """nvidia-smi writes ``<cuda_version>Not Found</cuda_version>`` when it cannot load libcuda, and bracketed
    placeholders where a query fails (the rtx4090 capture with those values put in)."""
    result = parse_xml(fixture_text("nvidia-smi-rtx4090-550-no-libcuda.xml"))
    assert (result["driver_version"], result["cuda_version"]) == ("550.120", None)
    (rtx,) = result["gpus"]
    for key in ("architecture", "persistence_mode", "serial", "vbios_version", "mig_mode"):
        assert key not in rtx, key
    assert (rtx["name"], rtx["uuid"], rtx["memory_mib"]) == (
        "NVIDIA GeForce RTX 4090",
        "GPU-0f3e2d1c-aa55-6b7c-8d9e-102938475665",
        24564,
    )


@pytest.mark.parametrize(
    "value",
    [
        "",
        "N/A",
        "[N/A]",
        "Not Found",
        "[Not Found]",
        "Not Supported",
        "[Not Supported]",
        "Unknown Error",
        "[Unknown Error]",
        "Insufficient Permissions",
        "[Insufficient Permissions]",
        "GPU is lost",
        "[GPU is lost]",
        "Requested functionality has been deprecated",
        " not found ",
    ],
)
def test_smi_every_placeholder_is_unknown(value):
    assert is_placeholder(value)
    xml = f"<nvidia_smi_log><driver_version>{value}</driver_version><cuda_version>{value}</cuda_version>"
    xml += f"<gpu id='00000000:01:00.0'><product_name>{value}</product_name></gpu></nvidia_smi_log>"
    result = parse_xml(xml)
    assert result["driver_version"] is None and result["cuda_version"] is None
    assert "name" not in result["gpus"][0]


@pytest.mark.parametrize(
    ("value", "cuda"), [("12.4", "12.4"), ("11.8", "11.8"), ("Nicht gefunden", None), ("12", None)]
)
def test_smi_cuda_version_is_a_version_or_unknown(value, cuda):
    xml = f"<nvidia_smi_log><cuda_version>{value}</cuda_version></nvidia_smi_log>"
    assert parse_xml(xml)["cuda_version"] == cuda


@pytest.mark.parametrize("text", ["", "Failed to initialize NVML: Driver/library version mismatch", "<html/>"])
def test_smi_rejects_what_is_not_its_xml(text):
    with pytest.raises(ValueError):
        parse_xml(text)


def test_smi_lost_gpus():
    assert lost_gpus(fixture_text("nvidia-smi-lost-unknown.txt")) == ["0000:3b:00.0"]
    assert lost_gpus(fixture_text("nvidia-smi-lost-gpu-is-lost.txt")) == ["0000:5e:00.0"]
    assert lost_gpus("all good") == []


def test_mig_profile_and_cc_table():
    assert mig_profile("NVIDIA A100-SXM4-40GB MIG 1g.5gb") == "1g.5gb"
    assert mig_profile("NVIDIA A100-SXM4-40GB") is None
    assert guess_compute_capability("NVIDIA A10G") == ("8.6", "Ampere")
    assert guess_compute_capability("NVIDIA H100 80GB HBM3") == ("9.0", "Hopper")
    assert guess_compute_capability("Some Future GPU") == (None, None)


def _facts(gpus, driver=None, pci_gpu_count=None):
    return {
        "gpus": gpus,
        "pci_gpu_count": len(gpus) if pci_gpu_count is None else pci_gpu_count,
        "driver": dict(
            {"installed_version": None, "loaded_version": None, "loaded": False, "cuda_version": None}, **(driver or {})
        ),
    }


def test_gfd_labels():
    gpu = {"name": "NVIDIA A100-SXM4-40GB", "memory_mib": 40960, "architecture": "Ampere", "compute_capability": "8.0"}
    labels = _labels.gfd_labels(
        _facts([gpu, dict(gpu, mig_mode="enabled")], {"loaded_version": "535.261.03", "cuda_version": "12.2"}),
        machine="DGX A100",
    )
    assert labels == {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.count": "2",
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
        "nvidia.com/gpu.memory": "40960",
        "nvidia.com/gpu.family": "ampere",
        "nvidia.com/gpu.compute.major": "8",
        "nvidia.com/gpu.compute.minor": "0",
        "nvidia.com/mig.capable": "true",
        "nvidia.com/gpu.mode": "compute",
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/cuda.driver-version.major": "535",
        "nvidia.com/cuda.driver-version.minor": "261",
        "nvidia.com/cuda.driver-version.revision": "03",
        "nvidia.com/cuda.driver-version.full": "535.261.03",
        "nvidia.com/cuda.driver.major": "535",
        "nvidia.com/cuda.driver.minor": "261",
        "nvidia.com/cuda.driver.rev": "03",
        "nvidia.com/cuda.runtime-version.major": "12",
        "nvidia.com/cuda.runtime-version.minor": "2",
        "nvidia.com/cuda.runtime-version.full": "12.2",
        "nvidia.com/cuda.runtime.major": "12",
        "nvidia.com/cuda.runtime.minor": "2",
        "nvidia.com/gpu.machine": "DGX-A100",
    }
    assert all(isinstance(v, str) for v in labels.values())


def test_gfd_labels_without_gpus_and_family_of_two_words():
    assert _labels.gfd_labels(_facts([])) == {"nvidia.com/gpu.present": "false"}
    labels = _labels.gfd_labels(_facts([{"name": "NVIDIA L4", "architecture": "Ada Lovelace"}]))
    assert labels["nvidia.com/gpu.family"] == "ada"
    assert labels["nvidia.com/mig.capable"] == "false"
    assert _labels.sanitize("NVIDIA GeForce RTX 4090 (rev a1)") == "NVIDIA-GeForce-RTX-4090-rev-a1"


def test_dpkg_versions():
    status = (
        "Package: docker.io\nStatus: install ok installed\nVersion: 20.10.24+dfsg1-1+deb12u1\n\n"
        "Package: containerd\nStatus: deinstall ok config-files\nVersion: 1.6.20~ds1-1+b1\n\n"
        "Package: podman\nStatus: install ok installed\nVersion: 4.3.1+ds1-8+deb12u1\n\n"
        "Package: cri-o\nStatus: install ok installed\nVersion: 2:1.28.1-1\n"
    )
    assert _engines.dpkg_versions(status, ["docker.io", "containerd", "podman", "cri-o"]) == {
        "docker.io": "20.10.24",
        "podman": "4.3.1",
        "cri-o": "1.28.1",
    }


def _dpkg(package, version):
    return f"Package: {package}\nStatus: install ok installed\nVersion: {version}\n"


def _engine_tree(tmp_path, binaries, dpkg=""):
    tree = HostTree(tmp_path)
    for binary in binaries:
        tree.write("/usr/bin/" + binary, "#!/bin/sh\n", mode=0o755)
    tree.write("/var/lib/dpkg/status", dpkg)
    return tree


def test_engines_docker_daemon_json(tmp_path):
    tree = _engine_tree(tmp_path, ["dockerd"], _dpkg("docker.io", "20.10.24-1"))
    tree.write(
        "/etc/docker/daemon.json",
        '{"runtimes": {"nvidia": {"path": "/usr/bin/nvidia-container-runtime", "args": []}},'
        ' "default-runtime": "nvidia", "features": {"cdi": true}}',
    )
    docker = _engines.detect(tree.root)["docker"]
    assert docker == {
        "installed": True,
        "binary": "/usr/bin/dockerd",
        "version": "20.10.24",
        "config_path": "/etc/docker/daemon.json",
        "runtimes": ["nvidia", "runc"],
        "runtime_paths": {"nvidia": "/usr/bin/nvidia-container-runtime"},
        "default_runtime": "nvidia",
        "cdi_enabled": True,
        "unit_flags": [],  # no docker unit in the tree
    }


def test_engines_docker_defaults_and_bad_json(tmp_path):
    tree = _engine_tree(tmp_path, ["dockerd"], _dpkg("docker-ce", "5:28.3.0-1"))
    assert _engines.detect(tree.root)["docker"]["cdi_enabled"] is True  # on by default from 28.2
    tree.write("/etc/docker/daemon.json", "{not json")
    warnings = []
    docker = _engines.detect(tree.root, warnings=warnings)["docker"]
    assert docker["default_runtime"] == "runc"
    assert warnings and "daemon.json" in warnings[0]


@pytest.mark.parametrize(
    "config, version, expected",
    [
        ("", "1.6.20", (["runc"], "runc", False)),
        (
            'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n  enable_cdi = true\n'
            '[plugins."io.containerd.grpc.v1.cri".containerd]\n  default_runtime_name = "nvidia"\n'
            '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n'
            '  runtime_type = "io.containerd.runc.v2"\n',
            "1.7.24",
            (["nvidia", "runc"], "nvidia", True),
        ),
        (
            '[plugins.cri.containerd.runtimes.nvidia]\n  runtime_type = "io.containerd.runc.v1"\n',
            "1.6.20",
            (["nvidia", "runc"], "runc", False),
        ),
        (
            'version = 3\n[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.nvidia]\n'
            '  runtime_type = "io.containerd.runc.v2"\n',
            "2.1.1",
            (["nvidia", "runc"], "runc", True),
        ),
    ],
    ids=["empty", "v2", "v1", "v3"],
)
def test_engines_containerd(tmp_path, config, version, expected):
    tree = _engine_tree(tmp_path, ["containerd"], _dpkg("containerd", version))
    tree.write("/etc/containerd/config.toml", config)
    found = _engines.detect(tree.root)["containerd"]
    assert (found["runtimes"], found["default_runtime"], found["cdi_enabled"]) == expected


def test_engines_containerd_reads_its_drop_ins(tmp_path):
    tree = _engine_tree(tmp_path, ["containerd"])
    tree.write("/etc/containerd/config.toml", 'version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n')
    tree.write(
        "/etc/containerd/conf.d/99-nvidia.toml",
        '[plugins."io.containerd.grpc.v1.cri"]\n  enable_cdi = true\n'
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n  runtime_type = "io.containerd.runc.v2"\n',
    )
    found = _engines.detect(tree.root)["containerd"]
    assert (found["runtimes"], found["cdi_enabled"], found["config_version"]) == (["nvidia", "runc"], True, 2)


def test_engines_crio_and_podman(tmp_path):
    tree = _engine_tree(tmp_path, ["crio", "podman"])
    tree.write("/etc/crio/crio.conf", '[crio.runtime]\ndefault_runtime = "runc"\n')
    tree.write("/etc/crio/crio.conf.d/99-nvidia.conf", '[crio.runtime.runtimes.nvidia]\nruntime_path = "/x"\n')
    tree.write("/etc/containers/containers.conf", '[engine]\nruntime = "runc"\n[engine.runtimes]\nnvidia = ["/x"]\n')
    engines = _engines.detect(tree.root)
    assert (engines["crio"]["runtimes"], engines["crio"]["default_runtime"]) == (["nvidia", "runc"], "runc")
    assert (engines["podman"]["runtimes"], engines["podman"]["default_runtime"]) == (["crun", "nvidia", "runc"], "runc")
    assert engines["docker"]["installed"] is False


def test_engines_without_a_toml_parser_warn_and_leave_fields_empty(tmp_path, monkeypatch):
    monkeypatch.setattr(_engines, "_toml_loads", None)
    tree = _engine_tree(tmp_path, ["containerd"])
    tree.write("/etc/containerd/config.toml", "version = 2\n")
    warnings = []
    containerd = _engines.detect(tree.root, warnings=warnings)["containerd"]
    assert containerd["installed"] is True and containerd["default_runtime"] is None
    assert "no TOML parser" in warnings[0]


def test_engines_version_from_the_binary_only_on_the_real_root(tmp_path):
    tree = _engine_tree(tmp_path, ["podman"])
    calls = []

    def run(argv):
        calls.append(argv)
        return 0, "podman version 4.3.1\n", ""

    assert _engines.detect(tree.root, run)["podman"]["version"] is None
    assert calls == []  # a binary under another root is not this machine's to run


def test_cdi_spec_versions(tmp_path):
    tree = HostTree(tmp_path)
    tree.write(
        "/etc/cdi/nvidia.yaml",
        'cdiVersion: 0.6.0\nkind: nvidia.com/gpu\nannotations:\n  gpufleet.nvidia/driver-version: "535.216.01"\n'
        "containerEdits:\n  mounts:\n  - hostPath: /usr/lib/x86_64-linux-gnu/libcuda.so.535.216.01\n",
    )
    tree.write(
        "/var/run/cdi/nvidia.json",
        '{"cdiVersion":"0.5.0","containerEdits":{"mounts":[{"hostPath":"/usr/lib/libnvidia-ml.so.550.90.07"}]}}',
    )
    assert _problems.cdi_spec_versions(tree.root) == {
        "/etc/cdi/nvidia.yaml": ("535.216.01", {"535.216.01"}),
        "/var/run/cdi/nvidia.json": (None, {"550.90.07"}),
    }


def test_secure_boot_variable(tmp_path):
    tree = HostTree(tmp_path)
    assert _problems.secure_boot_enabled(tree.path("/sys")) is None
    tree.secure_boot(True)
    assert _problems.secure_boot_enabled(tree.path("/sys")) is True
    tree.secure_boot(False)
    assert _problems.secure_boot_enabled(tree.path("/sys")) is False


# ---------------------------------------------------------------- nvidia-smi XML: generated documents
from xml.sax.saxutils import escape  # noqa: E402

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_smi_text = st.one_of(st.sampled_from(["N/A", "[N/A]", "Not Supported", "", "  ", "Enabled", "Disabled"]), st.text())
_xml_text = _smi_text.map(lambda s: "".join(c for c in s if c in "\t\n\r" or " " <= c <= "\ud7ff" or c >= "\ue000"))
_TAGS = ["gpu", "pci", "pci_bus_id", "uuid", "product_name", "minor_number", "fb_memory_usage", "total", "mig_mode",
         "current_mig", "mig_devices", "mig_device", "index", "driver_version", "attached_gpus"]  # fmt: skip
_elements = st.recursive(
    _xml_text.map(escape),
    lambda inner: st.builds(
        lambda tag, body, attr: f"<{tag}{attr}>{''.join(body)}</{tag}>",
        st.sampled_from(_TAGS),
        st.lists(inner, max_size=4),
        st.sampled_from(["", ' id="00000000:07:00.0"', ' id="x"']),
    ),
    max_leaves=20,
)


@settings(max_examples=150, deadline=None)
@given(st.one_of(st.text(max_size=200), _elements.map(lambda body: f"<nvidia_smi_log>{body}</nvidia_smi_log>")))
def test_any_nvidia_smi_output_is_a_record_or_a_value_error(text):
    """Whatever nvidia-smi prints (a driver mid-upgrade, a truncated pipe, fields in odd places): records of the
    documented types, or a ValueError; never another exception."""
    try:
        result = parse_xml(text)
    except ValueError:
        return
    assert set(result) == {"driver_version", "cuda_version", "attached_gpus", "gpus"}
    for gpu in result["gpus"]:
        assert isinstance(gpu["index"], int)
        for key in ("minor", "memory_mib"):
            assert isinstance(gpu.get(key, 0), int)
        assert gpu.get("pci_bus_id") is None or normalize_bus_id(gpu["pci_bus_id"]) == gpu["pci_bus_id"]
        assert gpu.get("mig_mode") in (None, "enabled", "disabled")
        for value in gpu.values():
            assert value not in ("", "N/A", "[N/A]", "Not Supported")


_gpu_fields = st.fixed_dictionaries(
    {
        "uuid": st.from_regex(r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", fullmatch=True),
        "name": st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 -&<>", min_size=1, max_size=30).map(str.strip),
        "minor": st.integers(0, 255),
        "bus": st.integers(0, 255),
        "memory_mib": st.integers(0, 1 << 20),
    }
)


@settings(max_examples=60, deadline=None)
@given(st.lists(_gpu_fields, max_size=8, unique_by=lambda g: g["bus"]))
def test_generated_gpus_come_back_as_written(gpus):
    body = "".join(
        f'<gpu id="00000000:{g["bus"]:02X}:00.0"><product_name>{escape(g["name"])}</product_name><uuid>{g["uuid"]}'
        f"</uuid><minor_number>{g['minor']}</minor_number><pci><pci_bus_id>00000000:{g['bus']:02X}:00.0</pci_bus_id>"
        f"</pci><fb_memory_usage><total>{g['memory_mib']} MiB</total></fb_memory_usage></gpu>"
        for g in gpus
    )
    doc = f'<?xml version="1.0" ?><!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd"><nvidia_smi_log>{body}'
    result = parse_xml(doc + f"<attached_gpus>{len(gpus)}</attached_gpus></nvidia_smi_log>")
    assert result["attached_gpus"] == len(gpus)
    assert [
        (r["index"], r["uuid"], r.get("name"), r["minor"], r["pci_bus_id"], r["memory_mib"]) for r in result["gpus"]
    ] == [
        # a name that is one of nvidia-smi's placeholder words ("UNKNOWN") reads as unknown, as any such value does
        (
            i,
            g["uuid"],
            None if is_placeholder(g["name"]) else g["name"],
            g["minor"],
            f"0000:{g['bus']:02x}:00.0",
            g["memory_mib"],
        )
        for i, g in enumerate(gpus)
    ]
