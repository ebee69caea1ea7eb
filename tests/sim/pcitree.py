# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The sysfs fixtures a simulated node sees (pure generation, plus a writer and a host reader).

Two trees are made per node and bind-mounted into it (runc allows mounts under /sys, not /proc):

* `/sys/bus/pci/devices`: one plain directory per PCI function, holding the attributes discovery
  reads (vendor, device, class, subsystem ids, revision, numa_node, irq, modalias, a `driver` link).
  The host's real functions are copied in (so the node still looks like the machine it runs on) and
  the configured GPUs are added: vendor 0x10de, class 0x030200 (3D controller; 0x030000 when
  `display: true`), plus an NVIDIA HD-audio function (class 0x040300) beside the first GPU, which
  discovery must not count as a GPU. The real tree holds symlinks into /sys/devices; here they are
  directories, which is what readers that `os.listdir` and read attributes care about.
* `/sys/module`: sysfs cannot mkdir, so the node gets a generated copy of the host's module list
  (empty directories with `initstate`) with `nvidia/`, `nvidia_uvm/`, `nvidia_modeset/` added when
  the driver state is `loaded` (`nvidia/version` holds the driver version). The copy is mounted
  read-write, so a test can flip the state from inside the node (`mkdir /sys/module/nvidia`).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, Union

from .model import sysfs_bus_id

NVIDIA_VENDOR = "0x10de"
AUDIO_DEVICE_ID = 0x22BA
PCI_ATTRS = ("vendor", "device", "class", "subsystem_vendor", "subsystem_device", "revision", "numa_node", "irq")


class Link(str):
    """A symlink target in a generated tree."""


Entry = Union[str, Link, None]  # file content, symlink, or directory
Tree = dict  # relative path -> Entry


def _function(attrs: dict[str, str], driver: str | None) -> Tree:
    tree: Tree = {}
    for key, value in attrs.items():
        tree[key] = f"{value}\n"
    if driver:
        tree["driver"] = Link(f"../../../bus/pci/drivers/{driver}")
    return tree


def _modalias(vendor: int, device: int, sub_vendor: int, sub_device: int, cls: int) -> str:
    return (
        f"pci:v{vendor:08X}d{device:08X}sv{sub_vendor:08X}sd{sub_device:08X}"
        f"bc{cls >> 16:02X}sc{(cls >> 8) & 0xFF:02X}i{cls & 0xFF:02X}"
    )


def pci_tree(gpus: list[dict[str, Any]], driver_state: str, host: dict[str, Tree] | None = None) -> Tree:
    """The `/sys/bus/pci/devices` fixture: host functions (as given) plus the GPUs and the audio function."""
    tree: Tree = {}
    for bdf, attrs in sorted((host or {}).items()):
        tree[bdf] = None
        for key, value in attrs.items():
            tree[f"{bdf}/{key}"] = value
    for gpu in gpus:
        bdf = sysfs_bus_id(gpu["pci_bus_id"])
        sub_vendor, sub_device = gpu["subsystem_id"] & 0xFFFF, gpu["subsystem_id"] >> 16
        cls = 0x030000 if gpu.get("display") else 0x030200
        functions = [(bdf, gpu["device_id"], cls, "nvidia" if driver_state == "loaded" else None)]
        if gpu.get("audio"):
            functions.append((bdf[:-1] + "1", AUDIO_DEVICE_ID, 0x040300, None))
        for fbdf, device, fcls, driver in functions:
            attrs = {
                "vendor": NVIDIA_VENDOR,
                "device": f"0x{device:04x}",
                "class": f"0x{fcls:06x}",
                "subsystem_vendor": f"0x{sub_vendor:04x}",
                "subsystem_device": f"0x{sub_device:04x}",
                "revision": "0xa1",
                "numa_node": str(gpu.get("numa_node", -1)),
                "irq": "0",
                "modalias": _modalias(0x10DE, device, sub_vendor, sub_device, fcls),
                "enable": "1",
                "boot_vga": "0",
            }
            tree[fbdf] = None
            for key, value in _function(attrs, driver).items():
                tree[f"{fbdf}/{key}"] = value
    return tree


def module_tree(host_modules: list[str], driver_state: str, driver_version: str) -> Tree:
    """The `/sys/module` fixture: the host's module names, plus nvidia's when the driver is loaded."""
    tree: Tree = {}
    names = set(host_modules) - {"nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_drm"}
    for name in sorted(names):
        tree[name] = None
    if driver_state == "loaded":
        for name in ("nvidia", "nvidia_uvm", "nvidia_modeset"):
            tree[name] = None
            tree[f"{name}/initstate"] = "live\n"
            tree[f"{name}/refcnt"] = "0\n"
            tree[f"{name}/version"] = f"{driver_version}\n"
    return tree


def read_host_pci(root: str = "/sys/bus/pci/devices") -> dict[str, Tree]:
    """The host's PCI functions with the attributes discovery reads (NVIDIA ones left out)."""
    out: dict[str, Tree] = {}
    if not os.path.isdir(root):
        return out
    for bdf in sorted(os.listdir(root)):
        attrs: Tree = {}
        for key in (*PCI_ATTRS, "modalias", "enable"):
            try:
                with open(os.path.join(root, bdf, key), encoding="ascii", errors="replace") as f:
                    attrs[key] = f.read()
            except OSError:
                continue
        if attrs.get("vendor", "").strip() == NVIDIA_VENDOR:
            continue
        driver = os.path.join(root, bdf, "driver")
        if os.path.islink(driver):
            attrs["driver"] = Link(f"../../../bus/pci/drivers/{os.path.basename(os.readlink(driver))}")
        out[bdf] = attrs
    return out


def read_host_modules(root: str = "/sys/module") -> list[str]:
    try:
        return sorted(os.listdir(root))
    except OSError:
        return []


def write_tree(tree: Tree, dest: str | Path) -> None:
    """Write a generated tree under `dest` (replacing what was there)."""
    dest = Path(dest)
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for rel in sorted(tree):
        entry = tree[rel]
        path = dest / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if entry is None:
            path.mkdir(exist_ok=True)
        elif isinstance(entry, Link):
            os.symlink(str(entry), path)
        else:
            path.write_text(entry, encoding="ascii")
