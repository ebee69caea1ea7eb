# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""NVML through ctypes, no third-party package: init, driver and CUDA versions, and per GPU its index,
minor, UUID, name, PCI address and device id, memory, compute capability, architecture, MIG mode,
NUMA node and MIG devices; and its health (``health``): uncorrected ECC error counts, row remapping (retired pages
pending before Ampere), the current clocks event (throttle) reasons and persistence mode, each left out where the GPU
answers NOT_SUPPORTED.

Every symbol is looked up when it is needed and a missing one (an older driver, a stub) only leaves its
fields None; an NVML call that fails for one GPU becomes a warning, and ``NVML_ERROR_GPU_IS_LOST`` on a
handle marks a lost GPU. Only loading the library and ``nvmlInit`` are fatal to the source.

Standard library only (target Pythons 3.8+).
"""

from __future__ import annotations

import ctypes
import os
import re
from typing import Any, Callable, Sequence

from ..base.pathsafe import host_path, resolve_in_root
from .pci import normalize_bus_id

SUCCESS = 0
ERROR_NOT_SUPPORTED = 3
ERROR_NOT_FOUND = 6
ERROR_DRIVER_NOT_LOADED = 9
ERROR_LIBRARY_NOT_FOUND = 12
ERROR_GPU_IS_LOST = 15
ERROR_STRINGS = {
    1: "Uninitialized",
    2: "Invalid Argument",
    3: "Not Supported",
    4: "Insufficient Permissions",
    6: "Not Found",
    7: "Insufficient Size",
    9: "Driver Not Loaded",
    10: "Timeout",
    12: "NVML Shared Library Not Found",
    13: "Function Not Found",
    15: "GPU is lost",
    16: "GPU requires restart",
    17: "The operating system has blocked the request",
    18: "RM has detected an NVML/RM version mismatch",
    999: "Unknown Error",
}

# nvmlDeviceArchitecture_t
ARCHITECTURES = {
    2: "Kepler",
    3: "Maxwell",
    4: "Pascal",
    5: "Volta",
    6: "Turing",
    7: "Ampere",
    8: "Ada Lovelace",
    9: "Hopper",
    10: "Blackwell",
}
MIG_MODES = {0: "disabled", 1: "enabled"}
ENABLE_STATES = {0: "disabled", 1: "enabled"}
# nvmlClocksEventReasons (nvml.h ``nvmlClocksEventReason*``, formerly ``nvmlClocksThrottleReason*``): bit -> name.
CLOCKS_EVENT_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
# nvmlMemoryErrorType_t / nvmlEccCounterType_t
MEMORY_ERROR_UNCORRECTED = 1
ECC_COUNTER_VOLATILE, ECC_COUNTER_AGGREGATE = 0, 1
# nvmlBrandType_t, named as ``nvidia-smi -q`` names them (nvml.h: NVML_BRAND_*).
BRANDS = {
    0: "Unknown",
    1: "Quadro",
    2: "Tesla",
    3: "NVS",
    4: "GRID",
    5: "GeForce",
    6: "Titan",
    7: "NVIDIA Virtual Applications",
    8: "NVIDIA Virtual PC",
    9: "NVIDIA Virtual Compute Server",
    10: "NVIDIA RTX Virtual Workstation",
    11: "NVIDIA Cloud Gaming",
    12: "Quadro RTX",
    13: "NVIDIA RTX",
    14: "NVIDIA",
    15: "GeForce RTX",
    16: "Titan RTX",
}


class NvmlError(Exception):
    """NVML answered, with an error that makes it useless for this host."""


class NvmlUnavailable(NvmlError):
    """No NVML here: the library is not installed or no kernel driver is loaded."""


class PciInfo(ctypes.Structure):
    """nvmlPciInfo_t as of the ``_v2``/``_v3`` entry points."""

    _fields_ = [
        ("busIdLegacy", ctypes.c_char * 16),
        ("domain", ctypes.c_uint),
        ("bus", ctypes.c_uint),
        ("device", ctypes.c_uint),
        ("pciDeviceId", ctypes.c_uint),
        ("pciSubSystemId", ctypes.c_uint),
        ("busId", ctypes.c_char * 32),
    ]


class Memory(ctypes.Structure):
    """nvmlMemory_t (bytes)."""

    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


class _Nvml:
    def __init__(self, lib: Any) -> None:
        self.lib = lib

    def fn(self, *names: str) -> Callable[..., int] | None:
        for name in names:
            func = getattr(self.lib, name, None)
            if func is not None:
                func.restype = ctypes.c_int
                return func
        return None

    def error_string(self, rc: int) -> str:
        func = getattr(self.lib, "nvmlErrorString", None)
        if func is not None:
            func.restype = ctypes.c_char_p
            try:
                text = func(rc)
                if text:
                    return text.decode("utf-8", "replace")
            except Exception:  # noqa: S110  # a stub without it: use our own table
                pass
        return ERROR_STRINGS.get(rc, f"NVML error {rc}")

    def call(self, names: str | tuple[str, ...], *args: Any) -> int | None:
        """rc of the first present symbol among ``names`` (a str or tuple), or None when none is."""
        func = self.fn(*((names,) if isinstance(names, str) else names))
        if func is None:
            return None
        return func(*args)

    def string(self, names: str | tuple[str, ...], *args: Any, size: int = 96) -> tuple[int | None, str | None]:
        buf = ctypes.create_string_buffer(size)
        rc = self.call(names, *args, buf, ctypes.c_uint(size))
        return (rc, buf.value.decode("utf-8", "replace") if rc == SUCCESS else None)

    def uint(self, names: str | tuple[str, ...], *args: Any) -> tuple[int | None, int | None]:
        value = ctypes.c_uint(0)
        rc = self.call(names, *args, ctypes.byref(value))
        return (rc, value.value if rc == SUCCESS else None)


def _decode_cuda(version: int) -> str:
    """NVML's CUDA driver version integer (12020) as ``12.2``."""
    return f"{version // 1000}.{(version % 1000) // 10}"


# Debian keeps the driver's libraries in /usr/lib/<triplet>/nvidia/<flavour>/ (``current``, or ``tesla-535``
# ...), the flavour chosen by the ``nvidia`` alternative; only some sonames get a link on the loader's
# path through the alternative's slaves (libcuda.so.1, libnvidia-ptxjitcompiler.so.1), and
# ``libnvidia-ml.so.1`` is not one of them: it is in no ld.so.cache. These are the sonames found there.
def nvml_candidates(driver_root: str, entries: list[Any]) -> list[str]:
    """What to dlopen, in order: on ``/`` the soname first (the loader's own search, LD_LIBRARY_PATH
    included); then the file behind ``libnvidia-ml.so.1`` in the driver root's ld.so.cache (Debian's
    ``nvidia/<flavour>`` entries included), resolved inside that root. ``entries``: ``cdi.ldcache.LdCacheEntry``
    records."""
    candidates = ["libnvidia-ml.so.1"] if os.path.abspath(driver_root) == "/" else []
    for entry in entries:
        if entry.soname == "libnvidia-ml.so.1" and entry.arch == "x86_64":
            path = host_path(driver_root, resolve_in_root(driver_root, entry.path))
            if path not in candidates:
                candidates.append(path)
    return candidates


def load(library: str | Sequence[str]) -> ctypes.CDLL:
    """The first of ``library`` (a name or path, or a list of them, best first) that dlopen loads."""
    errors: list[str] = []
    for candidate in [library] if isinstance(library, str) else library:
        try:
            return ctypes.CDLL(candidate)
        except OSError as exc:
            errors.append(str(exc) if candidate in str(exc) else f"{candidate}: {exc}")
    reasons = "; ".join(errors or ["no candidate"])
    raise NvmlUnavailable(f"cannot load libnvidia-ml: {reasons}")


def query(library: str | Sequence[str], cdll: Any = None) -> dict[str, Any]:
    """Everything NVML says, as ``{"driver_version", "cuda_version", "gpus", "lost_count", "warnings"}``.

    ``library``: a name or path, or a list of them tried in order (see ``load``). ``cdll`` (tests): an
    already loaded library object to use instead of loading ``library``.
    """
    nv = _Nvml(cdll if cdll is not None else load(library))
    rc = nv.call(("nvmlInit_v2", "nvmlInit"))
    if rc is None:
        name = getattr(nv.lib, "_name", None) or library
        raise NvmlUnavailable(f"{name} has no nvmlInit")
    if rc in (ERROR_DRIVER_NOT_LOADED, ERROR_LIBRARY_NOT_FOUND):
        raise NvmlUnavailable(f"nvmlInit: {nv.error_string(rc)}")
    if rc != SUCCESS:
        raise NvmlError(f"nvmlInit: {nv.error_string(rc)}")
    try:
        return _query(nv)
    finally:
        nv.call("nvmlShutdown")


def _query(nv: _Nvml) -> dict[str, Any]:
    warnings: list[str] = []
    result: dict[str, Any] = {
        "driver_version": None,
        "cuda_version": None,
        "gpus": [],
        "lost_count": 0,
        "warnings": warnings,
    }
    rc, result["driver_version"] = nv.string("nvmlSystemGetDriverVersion", size=80)
    cuda = ctypes.c_int(0)
    rc = nv.call(("nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion"), ctypes.byref(cuda))
    if rc == SUCCESS and cuda.value:
        result["cuda_version"] = _decode_cuda(cuda.value)
    rc, count = nv.uint(("nvmlDeviceGetCount_v2", "nvmlDeviceGetCount"))
    if rc != SUCCESS:
        raise NvmlError(f"nvmlDeviceGetCount: {nv.error_string(rc if rc is not None else 13)}")
    for index in range(count):
        handle = ctypes.c_void_p()
        rc = nv.call(
            ("nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex"), ctypes.c_uint(index), ctypes.byref(handle)
        )
        if rc != SUCCESS:
            result["lost_count"] += 1  # counted by the driver, unreachable: GPU_IS_LOST or worse
            warnings.append(f"GPU {index}: no handle: {nv.error_string(rc if rc is not None else 13)}")
            continue
        result["gpus"].append(_device(nv, handle, index, warnings))
    return result


def _device(nv: _Nvml, handle: ctypes.c_void_p, index: int, warnings: list[str]) -> dict[str, Any]:
    gpu: dict[str, Any] = {"index": index}
    rc, gpu["name"] = nv.string("nvmlDeviceGetName", handle)
    rc, gpu["uuid"] = nv.string("nvmlDeviceGetUUID", handle)
    rc, gpu["minor"] = nv.uint("nvmlDeviceGetMinorNumber", handle)
    pci = PciInfo()
    rc = nv.call(("nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetPciInfo_v2"), handle, ctypes.byref(pci))
    if rc == SUCCESS:
        gpu["pci_bus_id"] = normalize_bus_id(pci.busId.decode("ascii", "replace")) or normalize_bus_id(
            f"{pci.domain:04x}:{pci.bus:02x}:{pci.device:02x}.0"
        )
        gpu["pci_device_id"] = f"0x{pci.pciDeviceId:08x}"
    elif rc == ERROR_GPU_IS_LOST:
        gpu["lost"] = True
    memory = Memory()
    if nv.call("nvmlDeviceGetMemoryInfo", handle, ctypes.byref(memory)) == SUCCESS:
        gpu["memory_mib"] = memory.total // (1024 * 1024)
    major, minor = ctypes.c_int(0), ctypes.c_int(0)
    if nv.call("nvmlDeviceGetCudaComputeCapability", handle, ctypes.byref(major), ctypes.byref(minor)) == SUCCESS:
        gpu["compute_capability"] = f"{major.value}.{minor.value}"
    rc, brand = nv.uint("nvmlDeviceGetBrand", handle)
    if brand is not None:
        gpu["brand"] = BRANDS.get(brand, "Unknown")
    rc, arch = nv.uint("nvmlDeviceGetArchitecture", handle)
    if arch is not None:
        gpu["architecture"] = ARCHITECTURES.get(arch)
    rc, numa = nv.uint("nvmlDeviceGetNumaNodeId", handle)
    if numa is not None and numa < 0x7FFFFFFF:
        gpu["numa_node"] = numa
    current, pending = ctypes.c_uint(0), ctypes.c_uint(0)
    rc = nv.call("nvmlDeviceGetMigMode", handle, ctypes.byref(current), ctypes.byref(pending))
    if rc == SUCCESS:
        gpu["mig_mode"] = MIG_MODES.get(current.value)
        gpu["mig_mode_pending"] = MIG_MODES.get(pending.value)
        if current.value == 1:
            gpu["mig_devices"] = _mig_devices(nv, handle, index, warnings)
    elif rc not in (None, ERROR_NOT_SUPPORTED):
        warnings.append(f"GPU {index}: nvmlDeviceGetMigMode: {nv.error_string(rc)}")
    gpu["health"] = health(nv, handle) or None
    return {k: v for k, v in gpu.items() if v is not None}


def health(nv: _Nvml, handle: ctypes.c_void_p) -> dict[str, Any]:
    """What NVML says of the GPU's health; a value the GPU does not support (NOT_SUPPORTED, a missing symbol, any
    error) is left out, so ``{}`` on a GPU without these counters."""
    out: dict[str, Any] = {}
    for key, counter in (
        ("ecc_uncorrected_volatile", ECC_COUNTER_VOLATILE),
        ("ecc_uncorrected_aggregate", ECC_COUNTER_AGGREGATE),
    ):
        count = ctypes.c_ulonglong(0)
        rc = nv.call(
            "nvmlDeviceGetTotalEccErrors",
            handle,
            ctypes.c_int(MEMORY_ERROR_UNCORRECTED),
            ctypes.c_int(counter),
            ctypes.byref(count),
        )
        if rc == SUCCESS:
            out[key] = count.value
    corr, unc, pending, failure = (ctypes.c_uint(0) for _i in range(4))
    rc = nv.call("nvmlDeviceGetRemappedRows", handle, *(ctypes.byref(v) for v in (corr, unc, pending, failure)))
    if rc == SUCCESS:
        out["remapped_rows"] = {
            "correctable": corr.value,
            "uncorrectable": unc.value,
            "pending": bool(pending.value),
            "failure": bool(failure.value),
        }
    rc, retired_pending = nv.uint("nvmlDeviceGetRetiredPagesPendingStatus", handle)
    if retired_pending is not None:
        out["retired_pages_pending"] = bool(retired_pending)
    reasons = ctypes.c_ulonglong(0)
    rc = nv.call(
        ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"),
        handle,
        ctypes.byref(reasons),
    )
    if rc == SUCCESS:
        out["clocks_event_reasons"] = [name for bit, name in CLOCKS_EVENT_REASONS.items() if reasons.value & bit]
    rc, persistence = nv.uint("nvmlDeviceGetPersistenceMode", handle)
    if persistence is not None:
        out["persistence_mode"] = ENABLE_STATES.get(persistence, str(persistence))
    return out


def _mig_devices(nv: _Nvml, handle: ctypes.c_void_p, gpu_index: int, warnings: list[str]) -> list[dict[str, Any]]:
    devices: list[dict[str, Any]] = []
    rc, count = nv.uint("nvmlDeviceGetMaxMigDeviceCount", handle)
    for slot in range(count or 0):
        mig = ctypes.c_void_p()
        rc = nv.call("nvmlDeviceGetMigDeviceHandleByIndex", handle, ctypes.c_uint(slot), ctypes.byref(mig))
        if rc == ERROR_NOT_FOUND:
            continue  # an empty slot
        if rc != SUCCESS:
            if rc is not None:
                warnings.append(f"GPU {gpu_index} MIG {slot}: {nv.error_string(rc)}")
            break
        device: dict[str, Any] = {"index": slot}
        rc, device["uuid"] = nv.string("nvmlDeviceGetUUID", mig)
        rc, name = nv.string("nvmlDeviceGetName", mig)
        device["name"] = name
        device["profile"] = mig_profile(name)
        rc, device["gi_id"] = nv.uint("nvmlDeviceGetGpuInstanceId", mig)
        rc, device["ci_id"] = nv.uint("nvmlDeviceGetComputeInstanceId", mig)
        memory = Memory()
        rc = nv.call("nvmlDeviceGetMemoryInfo", mig, ctypes.byref(memory))
        device["memory_mib"] = memory.total // (1024 * 1024) if rc == SUCCESS else None
        devices.append(device)
    return devices


_PROFILE = re.compile(r"\bMIG\s+(\S+)\s*$")


def mig_profile(name: str | None) -> str | None:
    """``NVIDIA A100-SXM4-40GB MIG 1g.5gb`` -> ``1g.5gb`` (None when the name carries none)."""
    match = _PROFILE.search(name or "")
    return match.group(1) if match else None


# Compute capability from the product name when no source gave it (nvidia-smi -q and procfs do not).
# First match wins; architectures by the same table. Conservative: unknown names stay None.
_CC_TABLE = (
    (r"\bB(100|200)\b|\bGB200\b", "10.0", "Blackwell"),
    (r"\bRTX 50\d0|RTX PRO \d+ Blackwell", "12.0", "Blackwell"),
    (r"\b(H100|H200|H800|H20|GH200)\b", "9.0", "Hopper"),
    (r"\b(L4|L40S?|L20)\b|RTX 40\d0|RTX \d+ Ada", "8.9", "Ada Lovelace"),
    (r"\b(A100|A800|A30)\b", "8.0", "Ampere"),
    (r"\b(A10G?|A16|A2|A40)\b|RTX 30\d0|RTX A\d+", "8.6", "Ampere"),
    (r"\bT4\b|RTX 20\d0|GTX 16\d0|Quadro RTX|TITAN RTX", "7.5", "Turing"),
    (r"\bV100|TITAN V\b", "7.0", "Volta"),
    (r"\bP100\b", "6.0", "Pascal"),
    (r"\b(P4|P40|P6)\b|GTX 10\d0|TITAN Xp", "6.1", "Pascal"),
)
_CC_BY_ARCH = {"Volta": "7.0", "Turing": "7.5", "Hopper": "9.0", "Ada Lovelace": "8.9"}


def guess_compute_capability(name: str | None, architecture: str | None = None) -> tuple[str | None, str | None]:
    """``(compute_capability, architecture)`` from a product name (and architecture when known)."""
    for pattern, cc, arch in _CC_TABLE:
        if name and re.search(pattern, name):
            return cc, arch
    if architecture in _CC_BY_ARCH:
        return _CC_BY_ARCH[architecture], architecture
    return None, None
