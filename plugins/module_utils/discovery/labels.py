# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The node labels NVIDIA's GPU feature discovery (GFD) would set, from discovery's facts.

GFD describes the node by its first GPU (product, memory, family, compute capability), counts all of
them, and adds the driver's and the CUDA driver API's versions, under both the current
(``cuda.driver-version.*``, ``cuda.runtime-version.*``) and the older (``cuda.driver.*``,
``cuda.runtime.*``) names. Every value is a string; a label whose value is unknown is left out.

Standard library only (target Pythons 3.8+).
"""

from __future__ import annotations

import re
from typing import Any

PREFIX = "nvidia.com/"
_INVALID = re.compile(r"[^A-Za-z0-9_.-]")


def sanitize(value: object) -> str:
    """A label value as GFD writes it: spaces become ``-``, other characters outside
    ``[A-Za-z0-9_.-]`` are dropped, at most 63 characters, alphanumeric at both ends."""
    value = _INVALID.sub("", str(value).strip().replace(" ", "-"))[:63]
    return value.strip("-_.")


def gfd_labels(facts: dict[str, Any], machine: str | None = None) -> dict[str, str]:
    """``{label: value}`` for the facts ``discover`` built (``gpus``, ``driver``, ``pci_gpu_count``)."""
    gpus = facts["gpus"]
    labels = {PREFIX + "gpu.present": "true" if gpus or facts.get("pci_gpu_count") else "false"}
    if gpus:
        labels[PREFIX + "gpu.count"] = str(len(gpus))
        first = gpus[0]
        if first.get("name"):
            labels[PREFIX + "gpu.product"] = sanitize(first["name"])
        if first.get("memory_mib") is not None:
            labels[PREFIX + "gpu.memory"] = str(first["memory_mib"])
        if first.get("architecture"):
            labels[PREFIX + "gpu.family"] = sanitize(first["architecture"].lower().split()[0])
        cc = first.get("compute_capability")
        if cc and "." in cc:
            major, minor = cc.split(".", 1)
            labels[PREFIX + "gpu.compute.major"] = major
            labels[PREFIX + "gpu.compute.minor"] = minor
        capable = any(g.get("mig_mode") in ("enabled", "disabled") for g in gpus)
        labels[PREFIX + "mig.capable"] = "true" if capable else "false"
        labels[PREFIX + "gpu.mode"] = "compute"
        labels[PREFIX + "gpu.replicas"] = "1"
        labels[PREFIX + "gpu.sharing-strategy"] = "none"
    driver = facts["driver"]
    version = driver.get("loaded_version") or driver.get("installed_version")
    if version:
        parts = version.split(".")
        major, minor, revision = ([*parts, "", ""])[:3]
        for base in ("cuda.driver-version.", "cuda.driver."):
            labels[PREFIX + base + "major"] = major
            labels[PREFIX + base + "minor"] = minor
            labels[PREFIX + base + ("revision" if base == "cuda.driver-version." else "rev")] = revision
        labels[PREFIX + "cuda.driver-version.full"] = version
    cuda = driver.get("cuda_version")
    if cuda:
        major, minor = ([*cuda.split("."), "0"])[:2]
        for base in ("cuda.runtime-version.", "cuda.runtime."):
            labels[PREFIX + base + "major"] = major
            labels[PREFIX + base + "minor"] = minor or "0"
        labels[PREFIX + "cuda.runtime-version.full"] = cuda
    if machine:
        labels[PREFIX + "gpu.machine"] = sanitize(machine)
    return {k: v for k, v in labels.items() if v != ""}
