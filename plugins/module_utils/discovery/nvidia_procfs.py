# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The NVIDIA kernel module's own view: ``/proc/driver/nvidia/version`` and
``/proc/driver/nvidia/gpus/<bus-id>/information``, plus ``/sys/module/nvidia``.

``version`` looks like (proprietary, then open kernel module)::

    NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.261.03  Wed Jul 30 13:50:43 UTC 2025
    NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  535.261.03  Release Build  (dvs-builder@...)  ...
    GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)

``information`` is ``Key: <tabs> value`` lines (Model, IRQ, GPU UUID, Video BIOS, Bus Type, DMA Size,
DMA Mask, Bus Location, Device Minor, GPU Excluded). The UUID reads ``GPU-????????-...`` until the GPU
has been initialised once (persistence mode off and nothing has opened it): that is "unknown".

Standard library only (target Pythons 3.8+).
"""

from __future__ import annotations

import os
import re
from typing import Any

from ..base.fileio import read_text
from .pci import normalize_bus_id

_NVRM = re.compile(r"^NVRM version:\s*(?P<text>.*?)\s+(?P<version>\d+\.\d+(?:\.\d+)?)(?:\s|$)")
_GCC = re.compile(r"^GCC version:\s*(?P<gcc>.*)$")


def parse_version(text: str | None) -> dict[str, str | None]:
    """``/proc/driver/nvidia/version`` -> ``{"version", "flavor", "gcc"}`` (None values when absent).

    ``flavor`` is ``open`` for the open GPU kernel modules ("Open Kernel Module"), else ``proprietary``.
    """
    result = {"version": None, "flavor": None, "gcc": None}
    for line in (text or "").splitlines():
        match = _NVRM.match(line.strip())
        if match:
            result["version"] = match.group("version")
            result["flavor"] = "open" if "open kernel module" in match.group("text").lower() else "proprietary"
            continue
        match = _GCC.match(line.strip())
        if match:
            result["gcc"] = match.group("gcc").strip()
    return result


def parse_information(text: str | None) -> dict[str, str]:
    """One GPU's ``information`` file -> ``{key: value}`` with the keys as the driver writes them."""
    info = {}
    for line in (text or "").splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip():
            info[key.strip()] = value.strip()
    return info


def gpu_from_information(info: dict[str, str], bus_dir_name: str | None = None) -> dict[str, Any]:
    """The GPU record (discovery's common shape) one ``information`` file gives."""
    uuid = info.get("GPU UUID") or None
    if uuid and "?" in uuid:
        uuid = None
    minor = info.get("Device Minor")
    try:
        minor = int(minor) if minor is not None else None
    except ValueError:
        minor = None
    return {
        "pci_bus_id": normalize_bus_id(info.get("Bus Location") or bus_dir_name),
        "name": info.get("Model") or None,
        "uuid": uuid,
        "minor": minor,
        # upper case, as NVML and nvidia-smi give it (the driver's file writes the hex digits in lower case)
        "vbios_version": None if "?" in (info.get("Video BIOS") or "?") else info["Video BIOS"].upper(),
        "excluded": (info.get("GPU Excluded") or "").lower() == "yes" if "GPU Excluded" in info else None,
    }


def read_gpus(proc_dir: str) -> list[dict[str, Any]] | None:
    """Every GPU the kernel module registered (``<proc>/driver/nvidia/gpus/*/information``), or None
    when the directory is not there (module not loaded)."""
    gpus_dir = os.path.join(proc_dir, "driver", "nvidia", "gpus")
    try:
        names = sorted(os.listdir(gpus_dir))
    except OSError:
        return None
    gpus = []
    for name in names:
        text = read_text(os.path.join(gpus_dir, name, "information"), tolerant=True)
        if text is not None:
            gpus.append(gpu_from_information(parse_information(text), name))
    return gpus


def read_version(proc_dir: str) -> dict[str, str | None] | None:
    """``parse_version`` of ``<proc>/driver/nvidia/version``, or None when the file is not there."""
    text = read_text(os.path.join(proc_dir, "driver", "nvidia", "version"), tolerant=True)
    return None if text is None else parse_version(text)


def module_state(sys_dir: str, name: str = "nvidia") -> dict[str, Any]:
    """``/sys/module/<name>``: ``{"present", "version", "taint", "initstate"}``. A built-in has no
    ``initstate``; a module being loaded or unloaded says ``coming``/``going``."""
    base = os.path.join(sys_dir, "module", name)
    present = os.path.isdir(base)
    state = {"present": present, "version": None, "taint": None, "initstate": None}
    if present:
        for key in ("version", "taint", "initstate"):
            value = read_text(os.path.join(base, key), tolerant=True)
            state[key] = value.strip() if value is not None else None
    return state


def module_loaded(state: dict[str, Any]) -> bool:
    """A ``module_state`` that is a live module (or a built-in one, which has no ``initstate``)."""
    return bool(state["present"]) and state["initstate"] in (None, "live")
