# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The one home of the NVIDIA device-node rules.

``/dev/nvidia<N>`` is 195:N, ``/dev/nvidiactl`` 195:255, ``/dev/nvidia-modeset`` 195:254;
``/dev/nvidia-uvm`` and ``/dev/nvidia-uvm-tools`` take the dynamic major ``/proc/devices`` lists for
``nvidia-uvm`` (minors 0 and 1); MIG capability nodes ``/dev/nvidia-caps/nvidia-cap<M>`` take the
major of ``nvidia-caps`` and their minors from ``/proc/driver/nvidia-caps/mig-minors``.

Standard library only (target Pythons 3.8+).
"""

from __future__ import annotations

import os
import re
import stat

from ..base.record import record

NVIDIA_MAJOR = 195
CTL_MINOR = 255
MODESET_MINOR = 254

DeviceNode = record("DeviceNode", ("path", "major", "minor"))

_GPU_NODE = re.compile(r"^/dev/nvidia(\d+)$")


def gpu_node(minor: int) -> DeviceNode:
    """The device node of the GPU with this minor number."""
    return DeviceNode(f"/dev/nvidia{minor}", NVIDIA_MAJOR, minor)


def gpu_minor_of(path: str) -> int | None:
    """The minor number in a ``/dev/nvidia<N>`` path, or None for any other node."""
    match = _GPU_NODE.match(path)
    return int(match.group(1)) if match else None


def parse_proc_devices(text: str) -> dict[str, dict[str, int]]:
    """``/proc/devices`` -> ``{"character": {name: major}, "block": {name: major}}``."""
    result: dict[str, dict[str, int]] = {"character": {}, "block": {}}
    section = None
    for raw in text.splitlines():
        line = raw.strip()
        if line.lower().startswith("character devices"):
            section = "character"
        elif line.lower().startswith("block devices"):
            section = "block"
        elif section and line:
            parts = line.split(None, 1)
            if len(parts) == 2 and parts[0].isdigit():
                result[section].setdefault(parts[1], int(parts[0]))
    return result


def control_nodes(char_majors: dict[str, int], modeset: bool = True) -> list[DeviceNode]:
    """The control nodes a GPU container needs, given ``/proc/devices``' character majors.

    ``nvidia-uvm`` nodes are listed only when the uvm module registered its major.
    """
    nodes = [DeviceNode("/dev/nvidiactl", NVIDIA_MAJOR, CTL_MINOR)]
    uvm = char_majors.get("nvidia-uvm")
    if uvm is not None:
        nodes.append(DeviceNode("/dev/nvidia-uvm", uvm, 0))
        nodes.append(DeviceNode("/dev/nvidia-uvm-tools", uvm, 1))
    if modeset:
        nodes.append(DeviceNode("/dev/nvidia-modeset", NVIDIA_MAJOR, MODESET_MINOR))
    return nodes


def parse_mig_minors(text: str) -> dict[str, int]:
    """``/proc/driver/nvidia-caps/mig-minors`` -> ``{capability-name: minor}``.

    Lines look like ``gpu0/gi1/ci0/access 21`` or ``config 1``.
    """
    minors: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            minors[parts[0]] = int(parts[1])
    return minors


def scan_device_nodes(dev_dir: str) -> list[DeviceNode]:
    """Every NVIDIA character device under ``dev_dir`` (``<root>/dev``), as ``DeviceNode``s whose
    ``path`` is in ``/dev/...`` terms; sorted by path. Nothing there is not an error."""
    found: list[DeviceNode] = []
    candidates: list[str] = []
    try:
        candidates = [n for n in os.listdir(dev_dir) if n.startswith("nvidia")]
    except OSError:
        return found
    for name in candidates:
        full = os.path.join(dev_dir, name)
        if name == "nvidia-caps" and os.path.isdir(full):
            for cap in sorted(os.listdir(full)):
                _append_char(found, os.path.join(full, cap), "/dev/nvidia-caps/" + cap)
        else:
            _append_char(found, full, "/dev/" + name)
    return sorted(found, key=lambda n: (n.path.rstrip("0123456789"), len(n.path), n.path))


def _append_char(found: list[DeviceNode], full: str, inner: str) -> None:
    try:
        st = os.lstat(full)
    except OSError:
        return
    if stat.S_ISCHR(st.st_mode):
        found.append(DeviceNode(inner, os.major(st.st_rdev), os.minor(st.st_rdev)))


def char_link(node: DeviceNode) -> str:
    """The ``/dev/char/<major>:<minor>`` link systemd's device cgroup rules and NVML rely on."""
    return f"/dev/char/{node.major}:{node.minor}"
