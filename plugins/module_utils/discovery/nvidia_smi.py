# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""``nvidia-smi -q -x`` (the ``nvidia_smi_log`` XML document) as discovery's GPU records.

The document carries ``driver_version``, ``cuda_version`` and one ``<gpu id="00000000:07:00.0">`` per GPU
in NVML index order, with ``product_name``, ``product_architecture`` (R510 and later), ``uuid``,
``minor_number``, ``<pci>`` (``pci_bus_id``, ``pci_device_id`` as ``20B010DE``), ``<fb_memory_usage>``
(``<total>40960 MiB</total>``), ``<mig_mode>`` (``current_mig``: Enabled, Disabled or N/A) and, with MIG
on, ``<mig_devices>`` (index, ``gpu_instance_id``, ``compute_instance_id``, ``fb_memory_usage``; no MIG
UUIDs: those come from NVML only). Values the tool cannot read are placeholders (``N/A``, ``Not Found``...,
see ``PLACEHOLDERS``): None here.

A GPU that fell off the bus makes nvidia-smi print
``Unable to determine the device handle for GPU0000:3B:00.0: Unknown Error`` (or ``GPU is lost``) and
exit non-zero; ``lost_gpus`` finds those addresses.

Standard library only (target Pythons 3.8+).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET  # output of a local root-owned tool, no entities
from typing import Any

from .pci import normalize_bus_id

_LOST = re.compile(r"Unable to determine the device handle for GPU\s*([0-9A-Fa-f:.]+?):?\s", re.IGNORECASE)
_MIB = re.compile(r"^\s*(\d+)\s*MiB\s*$")


# What nvidia-smi writes where it has no value (bare or in brackets, as its XML and text outputs do):
# ``<cuda_version>Not Found</cuda_version>`` when it cannot load libcuda, ``N/A`` for what a GPU does not
# have, ``Not Supported``, ``Unknown Error``, ``Insufficient Permissions`` (an unprivileged user),
# ``GPU is lost``, ``Requested functionality has been deprecated``. Each reads as unknown (None).
PLACEHOLDERS = frozenset(
    word.lower()
    for word in (
        "N/A",
        "Not Found",
        "Not Supported",
        "Not Available",
        "Unknown",
        "Unknown Error",
        "Insufficient Permissions",
        "GPU is lost",
        "Requested functionality has been deprecated",
    )
)
_CUDA = re.compile(r"^\d+\.\d+$")


def is_placeholder(value: str | None) -> bool:
    """True for an empty value or one of nvidia-smi's placeholders (``N/A``, ``[Not Found]``...)."""
    word = (value or "").strip()
    if word.startswith("[") and word.endswith("]"):
        word = word[1:-1].strip()
    return not word or word.lower() in PLACEHOLDERS


def _text(element: ET.Element | None, path: str) -> str | None:
    if element is None:
        return None
    found = element.find(path)
    if found is None or found.text is None:
        return None
    value = found.text.strip()
    return None if is_placeholder(value) else value


def _cuda(value: str | None) -> str | None:
    """``12.2``; anything else (a placeholder this parser does not know yet) is unknown."""
    return value if value is not None and _CUDA.match(value) else None


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _mib(value: str | None) -> int | None:
    match = _MIB.match(value or "")
    return int(match.group(1)) if match else None


def _mig_mode(value: str | None) -> str | None:
    if value is None:
        return None
    return {"enabled": "enabled", "disabled": "disabled"}.get(value.lower())


def _device_id(value: str | None) -> str | None:
    """``20B010DE`` -> ``0x20b010de`` (NVML's pciDeviceId form)."""
    if not value:
        return None
    value = value.lower()
    value = value[2:] if value.startswith("0x") else value
    return "0x" + value if re.fullmatch(r"[0-9a-f]{8}", value) else None


def parse_xml(text: str | bytes) -> dict[str, Any]:
    """``{"driver_version", "cuda_version", "gpus": [...]}`` from ``nvidia-smi -q -x`` output.

    Raises ``ValueError`` on a document that is not XML or not an ``nvidia_smi_log``.
    """
    # The DOCTYPE names a DTD that is never fetched: ElementTree does not load external entities.
    try:
        root = ET.fromstring(text)  # noqa: S314
    except ET.ParseError as exc:
        raise ValueError(f"not XML: {exc}") from exc
    if root.tag != "nvidia_smi_log":
        raise ValueError(f"not an nvidia_smi_log document (root element {root.tag})")
    gpus: list[dict[str, Any]] = []
    for position, gpu in enumerate(root.findall("gpu")):
        pci = gpu.find("pci")
        record: dict[str, Any] = {
            "index": position,
            "name": _text(gpu, "product_name"),
            "architecture": _text(gpu, "product_architecture"),
            "uuid": _text(gpu, "uuid"),
            "minor": _int(_text(gpu, "minor_number")),
            "pci_bus_id": normalize_bus_id(_text(pci, "pci_bus_id") or gpu.get("id")),
            "pci_device_id": _device_id(_text(pci, "pci_device_id")),
            "memory_mib": _mib(_text(gpu, "fb_memory_usage/total")),
            "mig_mode": _mig_mode(_text(gpu, "mig_mode/current_mig")),
            "mig_mode_pending": _mig_mode(_text(gpu, "mig_mode/pending_mig")),
            "vbios_version": _text(gpu, "vbios_version"),
            "serial": _text(gpu, "serial"),
            "persistence_mode": _text(gpu, "persistence_mode"),
        }
        if record["mig_mode"] == "enabled":
            record["mig_devices"] = [
                {
                    "index": _int(_text(mig, "index")),
                    "uuid": None,
                    "gi_id": _int(_text(mig, "gpu_instance_id")),
                    "ci_id": _int(_text(mig, "compute_instance_id")),
                    "memory_mib": _mib(_text(mig, "fb_memory_usage/total")),
                    "multiprocessor_count": _int(_text(mig, "device_attributes/shared/multiprocessor_count")),
                }
                for mig in gpu.findall("mig_devices/mig_device")
            ]
        gpus.append({k: v for k, v in record.items() if v is not None})
    return {
        "driver_version": _text(root, "driver_version"),
        "cuda_version": _cuda(_text(root, "cuda_version")),
        "attached_gpus": _int(_text(root, "attached_gpus")),
        "gpus": gpus,
    }


def lost_gpus(text: str | None) -> list[str]:
    """PCI addresses nvidia-smi could not get a handle for (fallen off the bus), in order."""
    found: list[str] = []
    for match in _LOST.finditer(text or ""):
        bus_id = normalize_bus_id(match.group(1).rstrip(":"))
        if bus_id and bus_id not in found:
            found.append(bus_id)
    return found
