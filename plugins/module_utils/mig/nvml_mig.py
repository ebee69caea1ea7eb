# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Apply a MIG plan (``layout.plan``) through NVML with ctypes: MIG mode, GPU instances at their placements and one
compute instance spanning each, as mig-parted makes them.

Entry points and structures are nvml.h's (github.com/NVIDIA/go-nvml ``gen/nvml/nvml.h`` at commit 2f9e261f, checked
2026-11-23; all present in Debian's 535 libnvidia-ml): nvmlDeviceSetMigMode, nvmlDeviceGetGpuInstanceProfileInfo,
nvmlDeviceGetGpuInstancePossiblePlacements_v2, nvmlDeviceGetMemoryInfo,
nvmlDeviceGetGpuInstances, nvmlGpuInstanceGetInfo, nvmlDeviceCreateGpuInstanceWithPlacement,
nvmlGpuInstanceGetComputeInstanceProfileInfo, nvmlGpuInstanceCreateComputeInstance,
nvmlGpuInstanceGetComputeInstances, nvmlComputeInstanceDestroy, nvmlGpuInstanceDestroy.

Standard library only (target Pythons 3.8+).
"""

from __future__ import annotations

import ctypes
import math
from typing import Any, Sequence

from ..discovery.nvml import SUCCESS, Memory, NvmlError, NvmlUnavailable, _Nvml, load

ERROR_NOT_SUPPORTED = 3
# nvml.h NVML_GPU_INSTANCE_PROFILE_*: 1_SLICE 0, 2_SLICE 1, 3_SLICE 2, 4_SLICE 3, 7_SLICE 4, 8_SLICE 5, 6_SLICE 6,
# 1_SLICE_REV1 7, 2_SLICE_REV1 8, 1_SLICE_REV2 9, 1/2/4_SLICE_GFX 10-12, 1/2_SLICE_NO_ME 13-14, 1/2_SLICE_ALL_ME
# 15-16 (PROFILE_COUNT 17; NVML 12.9 and later, read 2026-11-27 in NVIDIA's nvml.h as pynvml ships it).
GI_PROFILE_ENUMS = tuple(range(17))
# The suffix each enum adds to a profile's name, as nvidia-smi and mig-parted name them: media extensions (+me),
# graphics (+gfx), no media engines (-me), all media engines (+me.all). REV2 (9) is the one-slice profile with two
# memory slices, named by its memory alone (1g.10gb on an A100-40GB).
GI_PROFILE_SUFFIX = {7: "+me", 8: "+me", 10: "+gfx", 11: "+gfx", 12: "+gfx", 13: "-me", 14: "-me", 15: "+me.all",
                     16: "+me.all"}  # fmt: skip
# nvml.h NVML_COMPUTE_INSTANCE_PROFILE_<n>_SLICE per compute-slice count: each GPU instance gets the compute instance
# that spans it.
CI_PROFILE_ENUM = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}
MAX_PLACEMENTS = 16


def profile_name(slices: int, memory_mib: int, device_bytes: int, enum: int) -> str:
    """A GPU-instance profile's name from what NVML reports, as NVIDIA's go-nvlib names it (pkg/nvlib/device/
    mig_profile.go, getMigMemorySizeInGB, read 2026-11-27): the instance's share of the GPU's memory rounded up to an
    eighth, times the GPU's memory in whole GiB (rounded up), rounded: 4864 MiB of an A100's 40960 -> ``1g.5gb``."""
    gib = 1024**3
    share = (memory_mib * 1024 * 1024) / device_bytes if device_bytes else 0.0
    share = math.ceil(share * 8) / 8
    total_gb = (device_bytes + gib - 1) // gib
    gb = math.floor(share * total_gb + 0.5)  # Go's math.Round: halves away from zero
    return f"{slices}g.{gb}gb{GI_PROFILE_SUFFIX.get(enum, '')}"


class GpuInstancePlacement(ctypes.Structure):
    """nvmlGpuInstancePlacement_t."""

    _fields_ = [("start", ctypes.c_uint), ("size", ctypes.c_uint)]


class GpuInstanceProfileInfo(ctypes.Structure):
    """nvmlGpuInstanceProfileInfo_t."""

    _fields_ = [
        *((name, ctypes.c_uint) for name in (
            "id", "isP2pSupported", "sliceCount", "instanceCount", "multiprocessorCount", "copyEngineCount",
            "decoderCount", "encoderCount", "jpegCount", "ofaCount",
        )),
        ("memorySizeMB", ctypes.c_ulonglong),
    ]  # fmt: skip


class GpuInstanceInfo(ctypes.Structure):
    """nvmlGpuInstanceInfo_t."""

    _fields_ = [
        ("device", ctypes.c_void_p),
        ("id", ctypes.c_uint),
        ("profileId", ctypes.c_uint),
        ("placement", GpuInstancePlacement),
    ]


class ComputeInstanceProfileInfo(ctypes.Structure):
    """nvmlComputeInstanceProfileInfo_t."""

    _fields_ = [
        (name, ctypes.c_uint)
        for name in (
            "id", "sliceCount", "instanceCount", "multiprocessorCount", "sharedCopyEngineCount", "sharedDecoderCount",
            "sharedEncoderCount", "sharedJpegCount", "sharedOfaCount",
        )
    ]  # fmt: skip


class MigError(NvmlError):
    """An NVML call of the apply failed; the message names the GPU, the call and NVML's words."""


class Session:
    """NVML initialised once for a module run: ``with Session(library) as s: s.apply(step)``."""

    def __init__(self, library: str | Sequence[str], cdll: Any = None) -> None:
        self.nv = _Nvml(cdll if cdll is not None else load(library))

    def __enter__(self) -> Session:
        rc = self.nv.call(("nvmlInit_v2", "nvmlInit"))
        if rc != SUCCESS:
            raise NvmlUnavailable(f"nvmlInit: {self.nv.error_string(rc if rc is not None else 13)}")
        return self

    def __exit__(self, *exc: object) -> None:
        self.nv.call("nvmlShutdown")

    def _check(self, rc: int | None, what: str) -> None:
        if rc != SUCCESS:
            raise MigError(f"{what}: {self.nv.error_string(rc if rc is not None else 13)}")

    def handle(self, uuid: str) -> ctypes.c_void_p:
        handle = ctypes.c_void_p()
        self._check(self.nv.call("nvmlDeviceGetHandleByUUID", uuid.encode(), ctypes.byref(handle)), f"GPU {uuid}")
        return handle

    def _profile_ids(self, handle: ctypes.c_void_p) -> dict[int, int]:
        """GI profile enum -> profile id, for the profiles the GPU answers."""
        ids = {}
        for enum in GI_PROFILE_ENUMS:
            info = GpuInstanceProfileInfo()
            if (
                self.nv.call("nvmlDeviceGetGpuInstanceProfileInfo", handle, ctypes.c_uint(enum), ctypes.byref(info))
                == 0
            ):
                ids[enum] = info.id
        return ids

    def profiles(self, handle: ctypes.c_void_p) -> dict[str, tuple[int, int, int, tuple[int, ...], int]]:
        """The GPU's MIG profiles as NVML lists them: name -> (GI profile enum, compute slices, memory slices,
        placement starts, instances at most), smallest first; empty when NVML lists none (no MIG, or MIG off on some
        drivers)."""
        memory = Memory()
        if self.nv.call("nvmlDeviceGetMemoryInfo", handle, ctypes.byref(memory)) != SUCCESS:
            return {}
        table: dict[str, tuple[int, int, int, tuple[int, ...], int]] = {}
        for enum in GI_PROFILE_ENUMS:
            info = GpuInstanceProfileInfo()
            rc = self.nv.call("nvmlDeviceGetGpuInstanceProfileInfo", handle, ctypes.c_uint(enum), ctypes.byref(info))
            if rc != SUCCESS or not info.sliceCount:
                continue
            array = (GpuInstancePlacement * MAX_PLACEMENTS)()
            count = ctypes.c_uint(MAX_PLACEMENTS)
            rc = self.nv.call(
                "nvmlDeviceGetGpuInstancePossiblePlacements_v2", handle, ctypes.c_uint(info.id), array,
                ctypes.byref(count),
            )  # fmt: skip
            if rc != SUCCESS or not count.value:
                continue
            starts = tuple(sorted(array[k].start for k in range(count.value)))
            name = profile_name(info.sliceCount, info.memorySizeMB, memory.total, enum)
            table[name] = (enum, info.sliceCount, array[0].size, starts, info.instanceCount)
        # smallest first: by compute slices, memory slices, then enum (1g.5gb, 1g.5gb+me, 1g.10gb, 2g.10gb, ...)
        return dict(sorted(table.items(), key=lambda item: (item[1][1], item[1][2], item[1][0])))

    def gpu_instances(self, handle: ctypes.c_void_p) -> list[tuple[ctypes.c_void_p, GpuInstanceInfo]]:
        found = []
        for profile_id in self._profile_ids(handle).values():
            array = (ctypes.c_void_p * 8)()
            count = ctypes.c_uint(8)
            rc = self.nv.call(
                "nvmlDeviceGetGpuInstances", handle, ctypes.c_uint(profile_id), array, ctypes.byref(count)
            )
            if rc != SUCCESS:
                continue
            for k in range(count.value):
                gi = ctypes.c_void_p(array[k])
                info = GpuInstanceInfo()
                self._check(self.nv.call("nvmlGpuInstanceGetInfo", gi, ctypes.byref(info)), "nvmlGpuInstanceGetInfo")
                found.append((gi, info))
        return found

    def destroy_all(self, handle: ctypes.c_void_p, what: str) -> int:
        """Every compute and GPU instance of the GPU destroyed; how many GPU instances there were."""
        instances = self.gpu_instances(handle)
        for gi, info in instances:
            for ci_enum in sorted(set(CI_PROFILE_ENUM.values())):
                ci_info = ComputeInstanceProfileInfo()
                rc = self.nv.call(
                    "nvmlGpuInstanceGetComputeInstanceProfileInfo", gi, ctypes.c_uint(ci_enum), ctypes.c_uint(0),
                    ctypes.byref(ci_info),
                )  # fmt: skip
                if rc != SUCCESS:
                    continue
                array = (ctypes.c_void_p * 8)()
                count = ctypes.c_uint(8)
                rc = self.nv.call(
                    "nvmlGpuInstanceGetComputeInstances", gi, ctypes.c_uint(ci_info.id), array, ctypes.byref(count)
                )
                for k in range(count.value if rc == SUCCESS else 0):
                    self._check(
                        self.nv.call("nvmlComputeInstanceDestroy", ctypes.c_void_p(array[k])),
                        f"{what}: nvmlComputeInstanceDestroy (GPU instance {info.id})",
                    )
            self._check(self.nv.call("nvmlGpuInstanceDestroy", gi), f"{what}: nvmlGpuInstanceDestroy ({info.id})")
        return len(instances)

    def set_mig_mode(self, handle: ctypes.c_void_p, enabled: bool, what: str) -> None:
        status = ctypes.c_int(0)
        rc = self.nv.call("nvmlDeviceSetMigMode", handle, ctypes.c_uint(1 if enabled else 0), ctypes.byref(status))
        self._check(rc, f"{what}: nvmlDeviceSetMigMode({int(enabled)})")
        if status.value != SUCCESS:
            raise MigError(
                f"{what}: MIG mode set but not active ({self.nv.error_string(status.value)}); reset the GPU "
                f"('nvidia-smi -r') or reboot, then run again"
            )

    def create(self, handle: ctypes.c_void_p, table: dict[str, Any], profile: str, start: int, what: str) -> None:
        gi_enum, slices, size, _starts, _most = table[profile]
        info = GpuInstanceProfileInfo()
        rc = self.nv.call("nvmlDeviceGetGpuInstanceProfileInfo", handle, ctypes.c_uint(gi_enum), ctypes.byref(info))
        self._check(rc, f"{what}: nvmlDeviceGetGpuInstanceProfileInfo({profile})")
        placement = GpuInstancePlacement(start, size)
        gi = ctypes.c_void_p()
        rc = self.nv.call(
            "nvmlDeviceCreateGpuInstanceWithPlacement", handle, ctypes.c_uint(info.id), ctypes.byref(placement),
            ctypes.byref(gi),
        )  # fmt: skip
        self._check(rc, f"{what}: nvmlDeviceCreateGpuInstanceWithPlacement({profile} at memory slice {start})")
        ci_info = ComputeInstanceProfileInfo()
        ci_enum = ctypes.c_uint(CI_PROFILE_ENUM[slices])
        rc = self.nv.call(
            "nvmlGpuInstanceGetComputeInstanceProfileInfo", gi, ci_enum, ctypes.c_uint(0), ctypes.byref(ci_info)
        )
        self._check(rc, f"{what}: nvmlGpuInstanceGetComputeInstanceProfileInfo({profile})")
        ci = ctypes.c_void_p()
        rc = self.nv.call("nvmlGpuInstanceCreateComputeInstance", gi, ctypes.c_uint(ci_info.id), ctypes.byref(ci))
        self._check(rc, f"{what}: nvmlGpuInstanceCreateComputeInstance({profile})")

    def apply(self, step: dict[str, Any]) -> None:
        """One GPU's step of ``layout.plan``: destroy, MIG mode, create, in that order."""
        what = f"GPU {step['index']} ({step['name']})"
        handle = self.handle(step["uuid"])
        if step["destroy"]:
            self.destroy_all(handle, what)
        if step["set_mig_mode"] is not None:
            self.set_mig_mode(handle, step["set_mig_mode"], what)
            if step["set_mig_mode"]:
                handle = self.handle(step["uuid"])  # the mode change may reset the GPU: its handle again
        for profile, start in step["create"]:
            self.create(handle, step["table"], profile, start, what)


__all__ = ["MigError", "Session", "profile_name"]
