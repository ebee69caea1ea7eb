# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The fleet description: YAML in, validated node descriptions out (pure, no Docker).

A fleet file looks like::

    nodes:
      - name: gpu-bookworm
        suite: bookworm            # bookworm | trixie | sid
        driver_state: loaded       # none | installed | loaded (default: loaded with GPUs, none without)
        driver_packages: false     # preinstall Debian's NVIDIA userspace (535 on bookworm)
        engines: [docker, containerd]   # default per suite; [] for none
        gpus:
          - model: A100-SXM4-40GB  # a preset; every field below may be given or overridden
            mig_mode: enabled

Every error names the node and the field, so a typo in a test's fleet is found at once.
"""

from __future__ import annotations

import copy
import re
import uuid
from pathlib import Path
from typing import Any

from plugins.plugin_utils.driver_plan import DEBIAN_COMPUTE

SUITES = ("bookworm", "trixie", "sid")
DRIVER_STATES = ("none", "installed", "loaded")
ENGINES = ("docker", "containerd", "podman")

# What Debian ships per suite (non-free): the stub reports the same versions, so a real package
# and the stub never disagree. Nodes use the suite itself, without -security, so the versions hold.
SUITE_DRIVER = {
    "bookworm": {"driver_version": "535.261.03", "cuda_version": "12.2"},
    "trixie": {"driver_version": "550.163.01", "cuda_version": "12.4"},
    "sid": {"driver_version": "550.163.01", "cuda_version": "12.4"},
}
SUITE_ENGINES = {
    "bookworm": ["docker", "containerd"],  # docker.io 20.10, containerd 1.6 (podman 4.3 on request)
    "trixie": ["docker", "containerd", "podman"],  # docker.io 26, containerd 1.7, podman 5.4
    "sid": ["docker", "containerd"],  # docker.io 28, containerd 2.1
}
ENGINE_PACKAGES = {
    "docker": ["docker.io"],  # + docker-cli from trixie on (a separate, merely recommended, package)
    "containerd": ["containerd"],
    # nftables: netavark (trixie's 1.14 on) sets up podman's default bridge network with the nft program, which
    # Debian's podman only recommends; without it `podman run` as the guides type it fails ("unable to execute nft").
    "podman": ["podman", "crun", "catatonit", "nftables"],
}


def engine_packages(suite: str, engine: str) -> list[str]:
    pkgs = list(ENGINE_PACKAGES[engine])
    if engine == "docker" and suite != "bookworm":
        pkgs.append("docker-cli")
    if engine == "podman" and suite != "bookworm":
        # Rootless podman 5 (tests/integration/test_userns.py), as a host that installs podman with its recommends
        # has it: newuidmap/newgidmap for the user's subordinate ids, and pasta, its default rootless network.
        pkgs += ["uidmap", "passt"]
    return pkgs


# Debian's userspace for a driver_packages node: exactly the driver role's default (compute) set, taken
# from the role's own table so a node cannot drift from what the role installs.
DRIVER_PACKAGES = list(DEBIAN_COMPUTE)

ARCHITECTURES = {
    "kepler": 2,
    "maxwell": 3,
    "pascal": 4,
    "volta": 5,
    "turing": 6,
    "ampere": 7,
    "ada": 8,
    "hopper": 9,
    "blackwell": 10,
}
BRANDS = {
    "unknown": 0,
    "quadro": 1,
    "tesla": 2,
    "nvs": 3,
    "geforce": 5,
    "titan": 6,
    "quadro_rtx": 12,
    "nvidia_rtx": 13,
    "nvidia": 14,
    "geforce_rtx": 15,
}
MIG_MODES = (None, "disabled", "enabled")

# Presets: real names, PCI device ids and memory sizes as NVML reports them.
GPU_MODELS: dict[str, dict[str, Any]] = {
    "A100-SXM4-40GB": {
        "name": "NVIDIA A100-SXM4-40GB",
        "device_id": 0x20B0,
        "subsystem_id": 0x134F10DE,
        "memory_mib": 40960,
        "compute_capability": "8.0",
        "architecture": "ampere",
        "brand": "nvidia",
        "mig_mode": "disabled",
        "max_mig_devices": 7,
    },
    "H100-PCIE": {
        "name": "NVIDIA H100 PCIe",
        "device_id": 0x2331,
        "subsystem_id": 0x162610DE,
        "memory_mib": 81559,
        "compute_capability": "9.0",
        "architecture": "hopper",
        "brand": "nvidia",
        "mig_mode": "disabled",
        "max_mig_devices": 7,
    },
    "L4": {
        "name": "NVIDIA L4",
        "device_id": 0x27B8,
        "subsystem_id": 0x16CA10DE,
        "memory_mib": 23034,
        "compute_capability": "8.9",
        "architecture": "ada",
        "brand": "nvidia",
        "mig_mode": None,
        "max_mig_devices": 0,
    },
    "T4": {
        "name": "Tesla T4",
        "device_id": 0x1EB8,
        "subsystem_id": 0x12A210DE,
        "memory_mib": 15360,
        "compute_capability": "7.5",
        "architecture": "turing",
        "brand": "tesla",
        "mig_mode": None,
        "max_mig_devices": 0,
    },
}
DEFAULT_MODEL = "A100-SXM4-40GB"
GPU_FIELDS = {
    "model",
    "name",
    "uuid",
    "pci_bus_id",
    "device_id",
    "subsystem_id",
    "minor",
    "memory_mib",
    "compute_capability",
    "architecture",
    "brand",
    "mig_mode",
    "max_mig_devices",
    "numa_node",
    "audio",
    "display",
}
NODE_FIELDS = {
    "name",
    "suite",
    "driver_state",
    "driver_packages",
    "engines",
    "gpus",
    "driver_version",
    "cuda_version",
    "device_files",
    "nvlink_domain",
}
# The nvidia module's device-file parameters (NVreg_DeviceFileUID/GID/Mode), nvidia-modprobe's defaults.
DEVICE_FILES_DEFAULT = {"uid": 0, "gid": 0, "mode": 0o666}
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,30}$")
GROUP_RE = re.compile(r"^[a-z][a-z0-9_]{0,30}$")  # a valid Ansible group name
BUS_ID_RE = re.compile(r"^(?:([0-9a-fA-F]{4,8}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$")
VERSION_RE = re.compile(r"^\d+\.\d+(\.\d+)?$")
UVM_MAJOR = 235  # a dynamic major, as /proc/devices would give it; recorded in the node's description
CAPS_MAJOR = 236
# nvidia-caps-imex-channels, the IMEX channel device the driver registers (dynamic; NVIDIA's IMEX guide shows 234
# as an example) - listed only on a node in an NVLink domain, as a stand-in for MNNVL hardware.
IMEX_MAJOR = 237
UUID_NAMESPACE = uuid.UUID("6a4c3a52-3c1e-4f2b-9a0c-67707566c000")


class FleetError(ValueError):
    """A fleet description that cannot be used; the message names the node and field."""


def normalize_bus_id(bus_id: str) -> str:
    """Any PCI address form -> NVML's form, `00000000:3B:00.0`."""
    m = BUS_ID_RE.match(bus_id.strip())
    if not m:
        raise ValueError(f"not a PCI bus id: {bus_id!r} (expected e.g. 0000:3b:00.0)")
    domain, bus, dev, fn = m.groups()
    return f"{int(domain or '0', 16):08X}:{int(bus, 16):02X}:{int(dev, 16):02X}.{fn}"


def sysfs_bus_id(bus_id: str) -> str:
    """NVML's `00000000:3B:00.0` -> sysfs's `0000:3b:00.0`."""
    nvml = normalize_bus_id(bus_id)
    return f"{nvml[4:8]}{nvml[8:]}".lower()


def _int(value: Any, where: str) -> int:
    if isinstance(value, bool):
        raise FleetError(f"{where}: expected an integer, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value, 0)
        except ValueError:
            pass
    raise FleetError(f"{where}: expected an integer (or 0x hex string), got {value!r}")


def _gpu(node: str, index: int, raw: Any, count: int = 1) -> dict[str, Any]:
    where = f"node {node!r} gpus[{index}]"
    if raw is None:
        raw = {}
    if isinstance(raw, str):
        raw = {"model": raw}
    if not isinstance(raw, dict):
        raise FleetError(f"{where}: expected a mapping or a model name, got {type(raw).__name__}")
    unknown = sorted(set(raw) - GPU_FIELDS)
    if unknown:
        raise FleetError(f"{where}: unknown field(s) {', '.join(unknown)}; known: {', '.join(sorted(GPU_FIELDS))}")
    model = raw.get("model", DEFAULT_MODEL)
    if model not in GPU_MODELS:
        raise FleetError(f"{where}.model: unknown model {model!r}; known: {', '.join(sorted(GPU_MODELS))}")
    gpu: dict[str, Any] = {"model": model, **copy.deepcopy(GPU_MODELS[model])}
    gpu.update({k: v for k, v in raw.items() if k != "model"})
    gpu["index"] = index
    gpu["minor"] = _int(gpu.get("minor", index), f"{where}.minor")
    if not 0 <= gpu["minor"] < 254:
        raise FleetError(f"{where}.minor: {gpu['minor']} is outside 0..253 (254 and 255 are modeset and ctl)")
    gpu["uuid"] = str(gpu.get("uuid") or f"GPU-{uuid.uuid5(UUID_NAMESPACE, f'{node}/{index}')}")
    if not re.match(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", gpu["uuid"]):
        raise FleetError(f"{where}.uuid: {gpu['uuid']!r} is not GPU-<lowercase uuid>")
    try:
        gpu["pci_bus_id"] = normalize_bus_id(str(gpu.get("pci_bus_id") or f"0000:{0x17 + 0x20 * index:02x}:00.0"))
    except ValueError as exc:
        raise FleetError(f"{where}.pci_bus_id: {exc}") from None
    for key in ("device_id", "subsystem_id", "memory_mib", "max_mig_devices"):
        gpu[key] = _int(gpu[key], f"{where}.{key}")
    if not 0 < gpu["device_id"] <= 0xFFFF:
        raise FleetError(f"{where}.device_id: {gpu['device_id']:#x} is not a 16-bit PCI device id")
    # A node's GPUs sit on NUMA node 0, or half on 0 and half on 1 when there are more than 4 (two sockets, as a DGX
    # or HGX board); NVIDIA's device plugin reads /sys/bus/pci/devices/<bus id>/numa_node for its topology
    # (k8s-device-plugin v0.20.0, internal/rm/nvml_devices.go GetNumaNode) and a negative value means none.
    # "numa_node": -1 in the fleet file gives the platform-does-not-say case.
    default_numa = 0 if count <= 4 else index * 2 // count
    gpu["numa_node"] = _int(gpu.get("numa_node", default_numa), f"{where}.numa_node")
    cc = str(gpu["compute_capability"])
    if not re.match(r"^\d+\.\d+$", cc):
        raise FleetError(f"{where}.compute_capability: {cc!r} is not MAJOR.MINOR")
    gpu["compute_capability"] = cc
    if gpu["architecture"] not in ARCHITECTURES:
        raise FleetError(f"{where}.architecture: {gpu['architecture']!r} unknown; known: {', '.join(ARCHITECTURES)}")
    if gpu["brand"] not in BRANDS:
        raise FleetError(f"{where}.brand: {gpu['brand']!r} unknown; known: {', '.join(BRANDS)}")
    if gpu["mig_mode"] not in MIG_MODES:
        raise FleetError(f"{where}.mig_mode: {gpu['mig_mode']!r}; expected enabled, disabled or null (no MIG)")
    if gpu["mig_mode"] is not None and gpu["max_mig_devices"] == 0:
        raise FleetError(f"{where}.mig_mode: model {model} has no MIG (max_mig_devices is 0)")
    gpu["audio"] = bool(gpu.get("audio", index == 0))
    gpu["display"] = bool(gpu.get("display", False))
    return gpu


def validate_node(raw: Any, position: int) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise FleetError(f"nodes[{position}]: expected a mapping, got {type(raw).__name__}")
    name = raw.get("name")
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise FleetError(f"nodes[{position}].name: {name!r} must match {NAME_RE.pattern}")
    where = f"node {name!r}"
    unknown = sorted(set(raw) - NODE_FIELDS)
    if unknown:
        raise FleetError(f"{where}: unknown field(s) {', '.join(unknown)}; known: {', '.join(sorted(NODE_FIELDS))}")
    suite = raw.get("suite", "bookworm")
    if suite not in SUITES:
        raise FleetError(f"{where}.suite: {suite!r}; expected one of {', '.join(SUITES)}")
    gpus_raw = raw.get("gpus") or []
    if isinstance(gpus_raw, int) and not isinstance(gpus_raw, bool):
        gpus_raw = [{}] * gpus_raw  # each is copied by _gpu
    if not isinstance(gpus_raw, list):
        raise FleetError(f"{where}.gpus: expected a list (or a count), got {type(gpus_raw).__name__}")
    gpus = [_gpu(name, i, g, len(gpus_raw)) for i, g in enumerate(gpus_raw)]
    for key, label in (("uuid", "UUID"), ("pci_bus_id", "PCI bus id"), ("minor", "minor number")):
        seen = [g[key] for g in gpus]
        dupes = sorted({str(v) for v in seen if seen.count(v) > 1})
        if dupes:
            raise FleetError(f"{where}.gpus: duplicate {label}(s) {', '.join(dupes)}")
    state = raw.get("driver_state", "loaded" if gpus else "none")
    if state not in DRIVER_STATES:
        raise FleetError(f"{where}.driver_state: {state!r}; expected one of {', '.join(DRIVER_STATES)}")
    packages = raw.get("driver_packages", False)
    if not isinstance(packages, bool):
        raise FleetError(f"{where}.driver_packages: expected true or false, got {packages!r}")
    engines = raw.get("engines", SUITE_ENGINES[suite])
    if engines is None or engines == "none":
        engines = []
    if not isinstance(engines, list) or any(e not in ENGINES for e in engines):
        raise FleetError(f"{where}.engines: {engines!r}; expected a list drawn from {', '.join(ENGINES)}")
    device_files = _device_files(raw.get("device_files"), where)
    domain = raw.get("nvlink_domain")
    if domain is not None and (not isinstance(domain, str) or not GROUP_RE.match(domain)):
        raise FleetError(f"{where}.nvlink_domain: {domain!r} must match {GROUP_RE.pattern} (an inventory group name)")
    if domain is not None and not gpus:
        raise FleetError(f"{where}.nvlink_domain: a node without GPUs is in no NVLink domain")
    versions = dict(SUITE_DRIVER[suite])
    for key in ("driver_version", "cuda_version"):
        if key in raw:
            if packages:
                raise FleetError(f"{where}.{key}: fixed by the suite's packages when driver_packages is true")
            if not VERSION_RE.match(str(raw[key])):
                raise FleetError(f"{where}.{key}: {raw[key]!r} is not a dotted version")
            versions[key] = str(raw[key])
    return {
        "name": name,
        "suite": suite,
        "driver_state": state,
        "driver_packages": packages,
        "engines": sorted(set(engines), key=ENGINES.index),
        "gpus": gpus,
        "device_files": device_files,
        "nvlink_domain": domain,
        **versions,
    }


def _device_files(raw: Any, where: str) -> dict[str, int]:
    """``device_files: {uid, gid, mode}`` (mode as an int or an octal string such as ``"0660"``): the nvidia module's
    NVreg_DeviceFile* options the node simulates; absent keys keep the driver's defaults (0, 0, 0666)."""
    if raw is None:
        return dict(DEVICE_FILES_DEFAULT)
    if not isinstance(raw, dict) or set(raw) - set(DEVICE_FILES_DEFAULT):
        raise FleetError(f"{where}.device_files: expected a mapping of uid, gid and mode, got {raw!r}")
    result = dict(DEVICE_FILES_DEFAULT)
    for key, given in raw.items():
        value = given
        if key == "mode" and isinstance(given, str):
            try:
                value = int(given, 8)
            except ValueError:
                raise FleetError(f"{where}.device_files.mode: {given!r} is not an octal mode") from None
        if isinstance(value, bool) or not isinstance(value, int) or value < 0 or (key == "mode" and value > 0o777):
            raise FleetError(f"{where}.device_files.{key}: {value!r} is out of range")
        result[key] = value
    return result


def validate_fleet(data: Any, source: str = "fleet") -> list[dict[str, Any]]:
    """A parsed fleet document -> the list of complete node descriptions; FleetError when wrong."""
    if not isinstance(data, dict) or "nodes" not in data:
        raise FleetError(f"{source}: expected a mapping with a 'nodes' list")
    extra = sorted(set(data) - {"nodes"})
    if extra:
        raise FleetError(f"{source}: unknown top-level field(s) {', '.join(extra)}")
    if not isinstance(data["nodes"], list) or not data["nodes"]:
        raise FleetError(f"{source}: 'nodes' must be a non-empty list")
    try:
        nodes = [validate_node(raw, i) for i, raw in enumerate(data["nodes"])]
    except FleetError as exc:
        raise FleetError(f"{source}: {exc}") from None
    names = [n["name"] for n in nodes]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise FleetError(f"{source}: duplicate node name(s) {', '.join(dupes)}")
    return nodes


def load_fleet(path: str | Path) -> list[dict[str, Any]]:
    import yaml

    text = Path(path).read_text(encoding="utf-8")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise FleetError(f"{path}: not valid YAML: {exc}") from None
    return validate_fleet(data, str(path))


def cuda_version_int(version: str) -> int:
    """`12.2` -> 12020, as nvmlSystemGetCudaDriverVersion reports it."""
    major, minor = (int(p) for p in version.split(".")[:2])
    return major * 1000 + minor * 10


def node_config(node: dict[str, Any]) -> dict[str, Any]:
    """The node-side JSON (/etc/gpufleet-sim/gpus.json) that the stub NVML and setup script read."""
    gpus = []
    for g in node["gpus"]:
        major, minor = (int(p) for p in g["compute_capability"].split("."))
        gpus.append(
            {
                "index": g["index"],
                "name": g["name"],
                "uuid": g["uuid"],
                "pci_bus_id": g["pci_bus_id"],
                "pci_device_id": (g["device_id"] << 16) | 0x10DE,
                "pci_subsystem_id": g["subsystem_id"],
                "minor": g["minor"],
                "memory_total": g["memory_mib"] * 1024 * 1024,
                "cc_major": major,
                "cc_minor": minor,
                "architecture": ARCHITECTURES[g["architecture"]],
                "brand": BRANDS[g["brand"]],
                "mig_mode": {None: -1, "disabled": 0, "enabled": 1}[g["mig_mode"]],
                "max_mig_devices": g["max_mig_devices"],
                "numa_node": g["numa_node"],
            }
        )
    return {
        "node": node["name"],
        "driver_state": node["driver_state"],
        "driver_version": node["driver_version"],
        "cuda_version": cuda_version_int(node["cuda_version"]),
        "nvml_version": f"{node['cuda_version'].split('.')[0]}.{node['driver_version']}",
        "uvm_major": UVM_MAJOR,
        "caps_major": CAPS_MAJOR,
        "imex_major": IMEX_MAJOR if node.get("nvlink_domain") else None,
        "device_files": dict(node.get("device_files") or DEVICE_FILES_DEFAULT),
        "gpus": gpus,
    }
