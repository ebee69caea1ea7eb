# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Apply a MIG plan (``layout.plan``) through NVML with ctypes: MIG mode, GPU instances at their placements and one
compute instance spanning each, as mig-parted makes them.

Entry points and structures are nvml.h's (github.com/NVIDIA/go-nvml ``gen/nvml/nvml.h`` at commit 2f9e261f, checked
2026-11-23; all present in Debian's 535 libnvidia-ml): nvmlDeviceSetMigMode, nvmlDeviceGetGpuInstanceProfileInfo,
nvmlDeviceGetGpuInstances, nvmlGpuInstanceGetInfo, nvmlDeviceCreateGpuInstanceWithPlacement,
nvmlGpuInstanceGetComputeInstanceProfileInfo, nvmlGpuInstanceCreateComputeInstance,
nvmlGpuInstanceGetComputeInstances, nvmlComputeInstanceDestroy, nvmlGpuInstanceDestroy.

Standard library only (target Pythons 3.8+).
"""

from __future__ import annotations

import ctypes
from typing import Any, Sequence

from ..discovery.nvml import SUCCESS, NvmlError, NvmlUnavailable, _Nvml, load
from .layout import CI_PROFILE_ENUM, GI_PROFILE_ENUMS, PROFILES_BY_MODEL

ERROR_NOT_SUPPORTED = 3


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

    def create(self, handle: ctypes.c_void_p, model: str, profile: str, start: int, what: str) -> None:
        table = PROFILES_BY_MODEL[model]
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
            self.create(handle, step["model"], profile, start, what)


__all__ = ["PROFILES_BY_MODEL", "MigError", "Session"]
