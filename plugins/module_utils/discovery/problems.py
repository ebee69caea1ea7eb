# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Problems discovery can see on a host, each as ``{code, message, fix}``.

The codes are stable (roles and the fleet report key on them); messages name the object concerned.
Every check is a small pure function of facts already gathered plus a few files under the root: it takes a
``Host`` and returns its problems, ``[]`` when it sees none. The tables list the checks in the order their problems
are reported: ``CHECKS`` (``check``, everything), ``HEALTH_CHECKS`` (``health_problems``, the GPUs' own health, with
``GPU_CHECKS`` run per GPU) and ``TOOLKIT_CHECKS`` (``toolkit_problems``, conflicts between toolkits). A check is
added by writing its function and naming it in its table; ``tests/tools/problem_docs.py`` documents its codes.

Standard library only (target Pythons 3.8+).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Sequence

from ..base.fileio import read_text
from ..base.pathsafe import host_path
from ..cdi.devices import DeviceNode, char_link
from .gpu_watch_state import gpu_watch_problems
from .imex import imex_problems
from .mig_boot_check import mig_boot_failed
from .next_boot import next_boot_problems
from .nvidia_toolkit import spec_conflicts
from .xid import HOST_BUCKETS
from .xid import action as xid_action

SECURE_BOOT_VAR = "SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"
CDI_SPEC_FILES = (
    "/etc/cdi/nvidia.yaml",
    "/etc/cdi/nvidia.json",
    "/var/run/cdi/nvidia.yaml",
    "/var/run/cdi/nvidia.json",
)
CDI_STAMP = "gpufleet.nvidia/driver-version"

_STAMP = re.compile(r"""["']?gpufleet\.nvidia/driver-version["']?\s*:\s*["']?(\d+\.\d+(?:\.\d+)?)""")
UVM_NODES = ("/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
# A deviceNodes entry of /dev/nvidia-uvm (YAML ``path: "/dev/nvidia-uvm"`` or JSON ``"path": "/dev/nvidia-uvm"``).
_UVM_IN_SPEC = re.compile(r"""["']?path["']?\s*:\s*["']?/dev/nvidia-uvm["'\s,}]""")
_LIB_VERSION = re.compile(r"\.so\.(\d{3,}\.\d+(?:\.\d+)?)\b")

Problem = Dict[str, str]


def problem(code: str, message: str, fix: str) -> Problem:
    return {"code": code, "message": message, "fix": fix}


@dataclass(frozen=True)
class Host:
    """What the checks read: ``facts`` (the ``nvidia`` dict being built), the root its files are read under, and
    what discovery saw beside the facts: the nouveau module loaded, Secure Boot (None: not an EFI boot or not known),
    the nvidia module's taint flags and ``toolkit.shadowed``'s pairs."""

    facts: dict[str, Any]
    root: str = "/"
    nouveau_loaded: bool = False
    secure_boot: bool | None = None
    nvidia_taint: str | None = None
    shadowed: Sequence[tuple[str, str]] = ()

    @property
    def driver(self) -> dict[str, Any]:
        return self.facts["driver"]

    @property
    def installed(self) -> str | None:
        return self.driver["installed_version"]

    @property
    def loaded_version(self) -> str | None:
        return self.driver["loaded_version"]

    @property
    def loaded(self) -> bool:
        return self.driver["loaded"]


Check = Callable[[Host], List[Problem]]


def secure_boot_enabled(sys_dir: str) -> bool | None:
    """True/False from the EFI variable (4 attribute bytes, then 1 = on), None when not an EFI boot
    or the variable cannot be read."""
    path = os.path.join(sys_dir, "firmware", "efi", "efivars", SECURE_BOOT_VAR)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    if len(data) < 5:
        return None
    return data[4] == 1


def cdi_spec_versions(root: str) -> dict[str, tuple[str | None, set[str]]]:
    """``{spec path: (stamped version or None, {versions in library file names})}`` for the NVIDIA
    CDI specs present under ``root``. Read with regular expressions: the spec is YAML or JSON and a
    YAML parser is not in the standard library; the stamp is the cdi_spec module's top-level
    annotation ``gpufleet.nvidia/driver-version``."""
    found: dict[str, tuple[str | None, set[str]]] = {}
    for inner in CDI_SPEC_FILES:
        try:
            with open(host_path(root, inner), encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError:
            continue
        match = _STAMP.search(text)
        found[inner] = (match.group(1) if match else None, set(_LIB_VERSION.findall(text)))
    return found


# The driver and its kernel module.


def nouveau_loaded(host: Host) -> list[Problem]:
    if not host.nouveau_loaded:
        return []
    return [
        problem(
            "nouveau_loaded",
            "the nouveau kernel module is loaded; it claims the GPUs and the nvidia module cannot bind them",
            "blacklist nouveau (/etc/modprobe.d/blacklist-nouveau.conf: 'blacklist nouveau' and "
            "'options nouveau modeset=0'), rebuild the initramfs and reboot",
        )
    ]


def driver_not_installed(host: Host) -> list[Problem]:
    facts = host.facts
    if not facts["pci_gpu_count"] or host.installed or host.loaded:
        return []
    return [
        problem(
            "driver_not_installed",
            f"{facts['pci_gpu_count']} NVIDIA GPU(s) on the PCI bus but no NVIDIA driver is installed",
            "install the driver (role gpufleet.nvidia.driver)",
        )
    ]


def driver_not_loaded(host: Host) -> list[Problem]:
    """An installed driver whose module is not loaded: with Secure Boot on, probably refused as unsigned."""
    installed = host.installed
    if not installed or host.loaded:
        return []
    if host.secure_boot:
        return [
            problem(
                "secure_boot_module_not_loaded",
                f"Secure Boot is on and the nvidia kernel module (userspace {installed} installed) is not loaded; "
                "an unsigned module is refused by a kernel enforcing signatures",
                "sign the module with a key enrolled in MOK (DKMS: mokutil --import the DKMS key, then "
                "reboot and enroll it), or use signed prebuilt modules",
            )
        ]
    return [
        problem(
            "driver_not_loaded",
            f"NVIDIA driver {installed} is installed but its kernel module is not loaded",
            "reboot, or load it with 'modprobe nvidia' and check dmesg if that fails",
        )
    ]


def unsigned_module_loaded(host: Host) -> list[Problem]:
    if not (host.secure_boot and host.loaded and host.nvidia_taint and "E" in host.nvidia_taint):
        return []
    return [
        problem(
            "unsigned_module_loaded",
            "Secure Boot is on and the loaded nvidia kernel module is unsigned (taint 'E'): signature "
            "enforcement is off now and the module will be refused once it is on",
            "sign the module with a key enrolled in MOK",
        )
    ]


def driver_version_mismatch(host: Host) -> list[Problem]:
    installed, loaded_version = host.installed, host.loaded_version
    if not (installed and loaded_version and installed != loaded_version):
        return []
    return [
        problem(
            "driver_version_mismatch",
            f"the installed NVIDIA userspace is {installed} but the loaded kernel module is {loaded_version} "
            "(NVML fails with 'Driver/library version mismatch')",
            f"reboot so that the {installed} kernel module is loaded",
        )
    ]


def device_char_links_missing(host: Host) -> list[Problem]:
    missing_links = [n for n in host.facts["device_nodes"] if not n.get("char_link_present", True)]
    if not missing_links:
        return []
    listed = ", ".join(f"{n['path']} ({n['char_link']})" for n in missing_links)
    return [
        problem(
            "device_char_links_missing",
            f"device node(s) without their /dev/char link: {listed}; containers lose GPU access "
            "('Failed to initialize NVML: Unknown Error') after 'systemctl daemon-reload'",
            "create the /dev/char/<major>:<minor> links (role gpufleet.nvidia.runtime does), "
            "or run 'nvidia-ctk system create-dev-char-symlinks --create-all'",
        )
    ]


def gpus_not_visible(host: Host) -> list[Problem]:
    """GPUs on the PCI bus that the loaded driver does not see: none of them, or some."""
    facts = host.facts
    if not host.loaded:
        return []
    if facts["pci_gpu_count"] and facts["gpu_count"] == 0:
        return [
            problem(
                "no_gpu_visible",
                f"{facts['pci_gpu_count']} NVIDIA GPU(s) on the PCI bus but the loaded driver sees none",
                "check dmesg for NVRM errors (unsupported GPU, RmInitAdapter failed, GPU excluded)",
            )
        ]
    if facts["pci_gpu_count"] > facts["gpu_count"]:
        return [
            problem(
                "gpus_not_visible",
                f"{facts['pci_gpu_count']} NVIDIA GPU(s) on the PCI bus but the driver sees {facts['gpu_count']}",
                "check dmesg for NVRM/Xid errors; a GPU may have fallen off the bus",
            )
        ]
    return []


def gpu_lost(host: Host) -> list[Problem]:
    lost = [g for g in host.facts["gpus"] if g.get("lost")]
    if not lost:
        return []
    lost_ids = ", ".join(g["pci_bus_id"] or str(g["minor"]) for g in lost)
    return [
        problem(
            "gpu_lost",
            f"GPU(s) {lost_ids} fell off the bus ('GPU is lost' / 'Unable to determine the device handle')",
            "check dmesg for Xid 79; reset the GPU (nvidia-smi -r) or reboot; replace it if it recurs",
        )
    ]


def docker_unit_runtime_flag(host: Host) -> list[Problem]:
    """A runtime flag of dockerd's unit that daemon.json sets too (now, or once the runtime role registers ours)."""
    found = []
    # the engines whose facts carry their unit's flags (``unit_flags``: docker's, ``runtime.docker.facts``)
    engines = [facts or {} for facts in (host.facts.get("engines") or {}).values()]
    for docker, flag in [(facts, flag) for facts in engines for flag in facts.get("unit_flags") or ()]:
        key = flag["option"]
        in_file = (key == "runtimes" and len(docker.get("runtimes") or ()) > 1) or (
            key == "default-runtime" and (docker.get("default_runtime") or "runc") != "runc"
        )
        now = (
            f"{docker.get('config_path')} sets {key!r} as well, so dockerd refuses to start now"
            if in_file
            else f"registering the nvidia runtime in {docker.get('config_path')} (role gpufleet.nvidia.runtime) sets "
            f"{key!r} there, and dockerd then refuses to start"
        )
        found.append(
            problem(
                "docker_unit_runtime_flag",
                f'dockerd is started with {flag["flag"]!r} (from {flag["file"]}); {now} ("the following '
                'directives are specified both as a flag and in the configuration file")',
                f"remove {flag['flag'].split()[0]} from {flag['file']} (daemon.json's {key} replaces it), then "
                "'systemctl daemon-reload && systemctl restart docker'",
            )
        )
    return found


def cdi_spec_stale(host: Host) -> list[Problem]:
    """An NVIDIA CDI spec for another driver version than the installed one (its stamp, else its library names)."""
    installed = host.installed
    if not installed:
        return []
    found = []
    for path, (stamp, lib_versions) in sorted(cdi_spec_versions(host.root).items()):
        if stamp is not None:
            stale = stamp != installed
            seen = stamp
        else:
            stale = bool(lib_versions) and lib_versions != {installed}
            seen = ", ".join(sorted(lib_versions))
        if stale:
            found.append(
                problem(
                    "cdi_spec_stale",
                    f"CDI spec {path} was generated for driver {seen} but {installed} is installed",
                    "regenerate it (module gpufleet.nvidia.cdi_spec, or 'nvidia-ctk cdi generate')",
                )
            )
    return found


# The GPUs' own health: XID events whose NVIDIA resolution is the host's (reset, reboot, support), uncorrected ECC
# errors since the last reset, a pending or failed row remap (pending page retirement before Ampere) and clocks the
# hardware slowed down. Actions per NVIDIA's Xid catalog and "GPU Memory Error Management"
# (https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/: a remap takes effect at the next GPU reset; a remapping
# failure is an RMA case).

# Clocks event reasons that mean the hardware is protecting itself (heat, power supply), not a setting or idling
# (nvml.h nvmlClocksEventReason*: HwSlowdown, HwThermalSlowdown, HwPowerBrakeSlowdown, SwThermalSlowdown).
BAD_CLOCK_REASONS = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "sw_thermal_slowdown")


def _gpu_name(gpu: dict[str, Any]) -> str:
    return f"GPU {gpu.get('index')} ({gpu.get('pci_bus_id') or gpu.get('uuid') or '?'})"


def fabric_manager_down(host: Host) -> list[Problem]:
    fabric = host.facts.get("fabric_manager") or {}
    if not fabric.get("nvswitch_count") or fabric.get("state") in (None, "active"):
        return []
    # NVIDIA Fabric Manager user guide (https://docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide/): on
    # NVSwitch systems CUDA initialisation fails (cudaErrorSystemNotReady) until Fabric Manager has configured the
    # switches; its package version must match the driver's.
    return [
        problem(
            "fabric_manager_down",
            f"{fabric['nvswitch_count']} NVSwitch(es) on the PCI bus but nvidia-fabricmanager is "
            f"{fabric['state']}; CUDA fails on every GPU ('system not yet initialized', cudaErrorSystemNotReady)",
            "install the nvidia-fabricmanager package of the driver's exact version and start it "
            "('systemctl enable --now nvidia-fabricmanager'); 'journalctl -u nvidia-fabricmanager' says why it "
            "stopped",
        )
    ]


def gpu_xids(host: Host) -> list[Problem]:
    """One problem per GPU and XID whose bucket of NVIDIA's catalog is a host problem (``HOST_BUCKETS``)."""
    by_bus = {g.get("pci_bus_id"): g for g in host.facts.get("gpus") or ()}
    found = []
    for event in host.facts.get("xid_events") or ():
        bucket, meaning, todo = xid_action(event["xid"])
        if bucket not in HOST_BUCKETS:
            continue
        gpu = by_bus.get(event["pci_bus_id"])
        who = _gpu_name(gpu) if gpu else f"GPU {event['pci_bus_id']}"
        index = str(gpu.get("index")) if gpu and gpu.get("index") is not None else "<index>"
        found.append(
            problem(
                f"gpu_xid_{event['xid']}",
                f"{who} logged Xid {event['xid']} ({meaning}) {event['count']} time(s) since boot; last: "
                f"{event['last_message'][:160]!r}",
                f"{todo.replace('<index>', index)} (NVIDIA Xid catalog: {bucket})",
            )
        )
    return found


def gpu_ecc_uncorrectable(gpu: dict[str, Any]) -> list[Problem]:
    health = gpu.get("health") or {}
    who, index = _gpu_name(gpu), gpu.get("index")
    volatile = health.get("ecc_uncorrected_volatile")
    if not volatile:
        return []
    return [
        problem(
            "gpu_ecc_uncorrectable",
            f"{who} has {volatile} uncorrected ECC error(s) since its last reset "
            f"({health.get('ecc_uncorrected_aggregate', '?')} over its life)",
            f"drain the GPU and reset it ('nvidia-smi -r -i {index}') or reboot, so that the failing rows are "
            "remapped; contact NVIDIA support if errors come back after the reset",
        )
    ]


def gpu_row_remap(gpu: dict[str, Any]) -> list[Problem]:
    """A failed row remapping (no spare row left), else a pending one."""
    rows = (gpu.get("health") or {}).get("remapped_rows") or {}
    who, index = _gpu_name(gpu), gpu.get("index")
    if rows.get("failure"):
        return [
            problem(
                "gpu_row_remap_failed",
                f"{who} failed a row remapping: a memory bank has no spare row left "
                f"({rows.get('uncorrectable', '?')} rows remapped for uncorrectable errors)",
                "drain the GPU and take it out of service: NVIDIA's RMA policy covers a remapping failure "
                "(contact NVIDIA support or the system vendor)",
            )
        ]
    if rows.get("pending"):
        return [
            problem(
                "gpu_row_remap_pending",
                f"{who} has a row remapping pending: it takes effect only at the next GPU reset",
                f"drain the GPU and reset it ('nvidia-smi -r -i {index}') or reboot",
            )
        ]
    return []


def gpu_retired_pages_pending(gpu: dict[str, Any]) -> list[Problem]:
    if not (gpu.get("health") or {}).get("retired_pages_pending"):
        return []
    who, index = _gpu_name(gpu), gpu.get("index")
    return [
        problem(
            "gpu_retired_pages_pending",
            f"{who} has retired pages pending: they are blacklisted only after the driver reloads",
            f"drain the GPU and reset it ('nvidia-smi -r -i {index}'), reload the driver or reboot",
        )
    ]


def gpu_clocks_throttled(gpu: dict[str, Any]) -> list[Problem]:
    reasons = (gpu.get("health") or {}).get("clocks_event_reasons") or ()
    slowed = [r for r in reasons if r in BAD_CLOCK_REASONS]
    if not slowed:
        return []
    who = _gpu_name(gpu)
    return [
        problem(
            "gpu_clocks_throttled",
            f"{who} runs with clocks held down by {', '.join(slowed)}",
            "check the GPU's cooling (temperature, fans, airflow) and power supply (cables, PSU); "
            "'nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER' shows the details",
        )
    ]


# The checks of one GPU's health counters, in order; ``gpus_health`` runs them GPU by GPU.
GPU_CHECKS: tuple[Callable[[dict[str, Any]], list[Problem]], ...] = (
    gpu_ecc_uncorrectable,
    gpu_row_remap,
    gpu_retired_pages_pending,
    gpu_clocks_throttled,
)


def gpus_health(host: Host) -> list[Problem]:
    return [p for gpu in host.facts.get("gpus") or () for gpu_check in GPU_CHECKS for p in gpu_check(gpu)]


HEALTH_CHECKS: tuple[Check, ...] = (fabric_manager_down, gpu_xids, gpus_health)


def health_problems(facts: dict[str, Any]) -> list[Problem]:
    """The GPUs' own health (``HEALTH_CHECKS``), from ``facts`` alone."""
    return run_checks(HEALTH_CHECKS, Host(facts))


# Conflicts between toolkits: two CDI specs for one device (``facts['nvidia_toolkit']['cdi_specs']``), a launcher of
# ours shadowing NVIDIA's program on ``PATH`` (``shadowed``), and an engine that registers a runtime whose program is
# gone (``engines.<engine>.runtime_paths``).

REFRESH_UNITS = "nvidia-cdi-refresh.path nvidia-cdi-refresh.service"
PATH_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")


def _on_path(root: str, program: str) -> bool:
    candidates = [program] if program.startswith("/") else [f"{d}/{program}" for d in PATH_DIRS]
    return any(os.path.exists(host_path(root, c)) for c in candidates)


def _spec_conflict_fix(conflict: dict[str, Any]) -> str:
    second = conflict["paths"][1]
    mask = (
        f"; NVIDIA's refresh unit writes {second} again unless stopped: 'systemctl mask --now {REFRESH_UNITS}'"
        if any(p.startswith("/var/run/cdi/") for p in conflict["paths"])
        else ""
    )
    return (
        f"keep one spec per kind: move the one you do not use out of the spec name pattern, e.g. "
        f"'mv {second} {second}.disabled' (the CDI cache loads only *.json and *.yaml), or run the "
        f"gpufleet.nvidia.runtime role, which moves another spec for its devices aside with a backup{mask}"
    )


def cdi_spec_conflicts(host: Host) -> list[Problem]:
    """Two CDI specs defining one device: in one directory the cache drops it, else the later directory wins."""
    found = []
    for conflict in spec_conflicts((host.facts.get("nvidia_toolkit") or {}).get("cdi_specs") or []):
        first, second = conflict["paths"]
        devices = ", ".join(conflict["devices"][:4]) + (" ..." if len(conflict["devices"]) > 4 else "")
        fix = _spec_conflict_fix(conflict)
        if conflict["dropped"]:
            found.append(
                problem(
                    "cdi_spec_conflict",
                    f"CDI specs {first} and {second} both define {devices}: the CDI cache drops a device two specs "
                    "of one directory define, so no CDI-aware engine (podman, docker 25+, containerd, CRI-O) can "
                    "start a container with it ('unresolvable CDI devices')",
                    fix,
                )
            )
        else:
            found.append(
                problem(
                    "cdi_spec_shadowed",
                    f"CDI specs {first} and {second} both define {devices}: the engines use {second} (its "
                    f"directory comes later in the CDI spec directories) and ignore {first}",
                    fix,
                )
            )
    return found


def nvidia_program_shadowed(host: Host) -> list[Problem]:
    return [
        problem(
            "nvidia_program_shadowed",
            f"{mine} (installed by gpufleet.nvidia) shadows NVIDIA's {theirs} on PATH: NVIDIA's runtime and "
            f"anyone typing {os.path.basename(theirs)} get ours",
            f"keep one toolkit: remove {mine} (the toolkit role's nvidia provider installs only its helpers) or "
            "NVIDIA's packages (toolkit_provider: native, toolkit_nvidia_state: absent)",
        )
        for mine, theirs in host.shadowed
    ]


def runtime_program_missing(host: Host) -> list[Problem]:
    found = []
    for engine, info in sorted((host.facts.get("engines") or {}).items()):
        for name, program in sorted((info.get("runtime_paths") or {}).items()):
            if _on_path(host.root, program):
                continue
            default = " (its default runtime: every container fails)" if info.get("default_runtime") == name else ""
            found.append(
                problem(
                    "runtime_program_missing",
                    f"{engine}'s configuration ({info.get('config_path')}) registers runtime {name!r} as "
                    f"{program}, which does not exist{default}",
                    f"install the toolkit that provides {program} again, or register the one installed now "
                    "(role gpufleet.nvidia.runtime, or runtime_path); then restart the engine",
                )
            )
    return found


TOOLKIT_CHECKS: tuple[Check, ...] = (cdi_spec_conflicts, nvidia_program_shadowed, runtime_program_missing)


def toolkit_problems(facts: dict[str, Any], root: str, shadowed: Sequence[tuple[str, str]] = ()) -> list[Problem]:
    """Conflicts between toolkits (``TOOLKIT_CHECKS``); ``shadowed`` is ``toolkit.shadowed``'s pairs."""
    return run_checks(TOOLKIT_CHECKS, Host(facts, root, shadowed=shadowed))


# The driver provides ``/dev/nvidia-uvm`` (the uvm module is loaded): the node missing on the host, or missing from a
# CDI spec, is a CUDA that fails in every container while ``nvidia-smi`` works.


def uvm_device_missing(host: Host) -> list[Problem]:
    if not host.driver.get("uvm_loaded"):
        return []
    present = {n["path"] for n in host.facts["device_nodes"]}
    missing = [p for p in UVM_NODES if p not in present]
    if not missing:
        return []
    return [
        problem(
            "uvm_device_missing",
            f"the nvidia-uvm module is loaded but {', '.join(missing)} does not exist; CUDA fails in containers "
            "(cudaErrorNoDevice / 'no CUDA-capable device is detected') while nvidia-smi works",
            "create the nodes: 'systemctl restart gpufleet-nvidia-devices' (role gpufleet.nvidia.runtime installs "
            "it), or 'nvidia-modprobe -u -c0'; then regenerate the CDI spec ('systemctl restart "
            "gpufleet-cdi-refresh')",
        )
    ]


def cdi_spec_uvm_missing(host: Host) -> list[Problem]:
    if not host.driver.get("uvm_loaded"):
        return []
    found = []
    for inner in CDI_SPEC_FILES:
        text = read_text(host_path(host.root, inner), tolerant=True, errors="replace")
        if text is not None and not _UVM_IN_SPEC.search(text):
            found.append(
                problem(
                    "cdi_spec_uvm_missing",
                    f"CDI spec {inner} lists no /dev/nvidia-uvm though the nvidia-uvm module is loaded; CUDA fails "
                    "in containers started from it",
                    "create the node first (see uvm_device_missing), then regenerate the spec: 'systemctl restart "
                    "gpufleet-cdi-refresh' (it renders the spec again when the device nodes changed) or the module "
                    "gpufleet.nvidia.cdi_spec",
                )
            )
    return found


# Every check, in the order its problems are reported. The functions above stand in the order of the troubleshooting
# guide's sections, which tests/tools/problem_docs.py takes from this file's text, so a check moves in the table,
# not in the file.
CHECKS: tuple[Check, ...] = (
    nouveau_loaded,
    driver_not_installed,
    driver_not_loaded,
    unsigned_module_loaded,
    driver_version_mismatch,
    next_boot_problems,
    device_char_links_missing,
    uvm_device_missing,
    cdi_spec_uvm_missing,
    gpus_not_visible,
    gpu_lost,
    mig_boot_failed,
    docker_unit_runtime_flag,
    *HEALTH_CHECKS,
    gpu_watch_problems,
    imex_problems,
    *TOOLKIT_CHECKS,
    cdi_spec_stale,
)


def run_checks(checks: Sequence[Check], host: Host) -> list[Problem]:
    """The problems of ``checks`` on ``host``, check by check in the table's order."""
    return [p for each in checks for p in each(host)]


def check(
    facts: dict[str, Any],
    root: str,
    *,
    nouveau_loaded: bool,
    secure_boot: bool | None,
    nvidia_taint: str | None,
    shadowed: Sequence[tuple[str, str]] = (),
) -> list[Problem]:
    """Every problem in ``facts`` (the ``nvidia`` dict being built), in ``CHECKS``' order; ``shadowed`` is
    ``toolkit.shadowed``'s pairs."""
    return run_checks(CHECKS, Host(facts, root, nouveau_loaded, secure_boot, nvidia_taint, shadowed))


def char_link_present(root: str, node: DeviceNode) -> bool:
    """Whether ``/dev/char/<major>:<minor>`` exists (as any kind of entry) under ``root``."""
    return os.path.lexists(host_path(root, char_link(node)))
