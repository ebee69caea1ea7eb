# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""NVIDIA functions on the PCI bus, read from sysfs (``<root>/sys/bus/pci/devices``).

Works with no driver at all: this is how a host that still needs one is recognised. Only vendor
``0x10de`` is looked at; of its functions, a *GPU* is a display controller of class ``0x0300xx`` (VGA)
or ``0x0302xx`` (3D controller, every datacenter GPU). The HD-audio (``0x0403``), USB-C (``0x0c03``),
UCSI serial (``0x0c80``) functions of consumer cards and NVSwitch bridges (``0x0680``) are NVIDIA
functions but not GPUs.

Standard library only (target Pythons 3.8+).
"""

from __future__ import annotations

import os
import re
from typing import Any

from ..base.fileio import read_text

NVIDIA_VENDOR = "0x10de"
GPU_CLASS_PREFIXES = ("0x0300", "0x0302")

_BUS_ID = re.compile(r"^(?:([0-9a-fA-F]{4,8}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$")


def normalize_bus_id(value: str | None) -> str | None:
    """Any spelling of a PCI address (NVML's ``00000000:05:00.0``, ``05:00.0``, upper case) in the
    ``0000:05:00.0`` form sysfs uses; None when ``value`` is not a PCI address."""
    if not value:
        return None
    match = _BUS_ID.match(value.strip())
    if not match:
        return None
    domain, bus, device, function = match.groups()
    domain = int(domain, 16) if domain else 0
    return f"{domain:04x}:{bus.lower()}:{device.lower()}.{function}"


def is_gpu_class(pci_class: str | None) -> bool:
    """True for a display controller that is a GPU (VGA ``0x0300xx`` or 3D ``0x0302xx``)."""
    return bool(pci_class) and pci_class.lower().startswith(GPU_CLASS_PREFIXES)


def _read(path: str) -> str | None:
    text = read_text(path, tolerant=True)
    return None if text is None else text.strip()


def read_function(device_dir: str, bus_id: str) -> dict[str, Any]:
    """One PCI function's sysfs attributes as a dict (missing attributes are None)."""
    pci_class = _read(os.path.join(device_dir, "class"))
    device = _read(os.path.join(device_dir, "device"))
    numa = _read(os.path.join(device_dir, "numa_node"))
    try:
        driver = os.path.basename(os.readlink(os.path.join(device_dir, "driver")))
    except OSError:
        driver = None
    try:
        numa_node = int(numa) if numa is not None else None
    except ValueError:
        numa_node = None
    if numa_node is not None and numa_node < 0:
        numa_node = None  # -1: the platform does not say
    return {
        "pci_bus_id": normalize_bus_id(bus_id) or bus_id,
        "vendor_id": _read(os.path.join(device_dir, "vendor")),
        "device_id": device,
        "subsystem_vendor_id": _read(os.path.join(device_dir, "subsystem_vendor")),
        "subsystem_device_id": _read(os.path.join(device_dir, "subsystem_device")),
        "class": pci_class,
        "is_gpu": is_gpu_class(pci_class),
        "driver": driver,
        "numa_node": numa_node,
        "iommu_group": _link_name(os.path.join(device_dir, "iommu_group")),
    }


def _link_name(path: str) -> str | None:
    try:
        return os.path.basename(os.readlink(path))
    except OSError:
        return None


def scan_pci(devices_dir: str) -> list[dict[str, Any]]:
    """Every NVIDIA PCI function under ``devices_dir`` (``<root>/sys/bus/pci/devices``), sorted by
    address. A missing directory is an empty bus, not an error."""
    try:
        names = os.listdir(devices_dir)
    except OSError:
        return []
    found = []
    for name in names:
        device_dir = os.path.join(devices_dir, name)
        if _read(os.path.join(device_dir, "vendor")) != NVIDIA_VENDOR:
            continue
        found.append(read_function(device_dir, name))
    return sorted(found, key=lambda f: f["pci_bus_id"])


def gpu_pci_device_id(device_id: str | None, vendor_id: str | None = NVIDIA_VENDOR) -> str | None:
    """The ``0x20b010de`` form NVML and nvidia-smi print for a PCI device id (device, then vendor)."""
    if not device_id:
        return None
    return f"0x{int(device_id, 16):04x}{int(vendor_id or NVIDIA_VENDOR, 16):04x}"


def read_machine(sys_dir: str) -> str | None:
    """The DMI product name (``/sys/class/dmi/id/product_name``), as GFD's ``gpu.machine`` uses it."""
    return _read(os.path.join(sys_dir, "class", "dmi", "id", "product_name")) or None
