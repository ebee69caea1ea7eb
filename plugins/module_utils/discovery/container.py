# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Whether the host under ``root`` is a container, from the marks container managers leave in its files.

The driver role needs the answer (a container can neither build nor load the kernel module). The evidence
that ``/.dockerenv``, ``systemd-detect-virt --container`` and Ansible's virtualization facts rest on, read from
files under ``root`` (so a host root mounted at ``/host`` is judged, not the
container discovery runs in), first match wins:

* ``/run/systemd/container`` and ``/run/host/container-manager`` (what systemd-detect-virt reads first);
* ``container=`` in PID 1's environment (LXC, systemd-nspawn, podman);
* ``/.dockerenv`` (docker) and ``/run/.containerenv`` (podman);
* ``/proc/vz`` without ``/proc/bc`` (an OpenVZ container);
* a ``docker``, ``lxc``, ``kubepods`` or ``containerd`` cgroup of PID 1 (cgroup v1 hosts).

Standard library only (target Pythons 3.8+).
"""

from __future__ import annotations

import os

from ..base.fileio import read_text
from ..base.pathsafe import host_path

_CGROUP_MARKS = (("/docker/", "docker"), ("/lxc/", "lxc"), ("/kubepods", "containerd"), ("/containerd/", "containerd"))


def _read(path: str, limit: int = 65536) -> str | None:
    return read_text(path, tolerant=True, errors="replace", limit=limit)


def detect_container(root: str = "/") -> str | None:
    """The container manager the host under ``root`` runs in (``docker``, ``podman``, ``lxc``, ``openvz`` ...,
    or ``container`` when the kind is not named), None on a host that is not a container."""
    for marker in ("/run/systemd/container", "/run/host/container-manager"):
        text = _read(host_path(root, marker))
        if text is not None and text.strip():
            return text.strip().splitlines()[0]
    environ = _read(host_path(root, "/proc/1/environ"))
    for item in (environ or "").split("\0"):
        if item.startswith("container=") and item[len("container=") :]:
            return item[len("container=") :]
    if os.path.exists(host_path(root, "/.dockerenv")):
        return "docker"
    if os.path.exists(host_path(root, "/run/.containerenv")):
        return "podman"
    if os.path.isdir(host_path(root, "/proc/vz")) and not os.path.isdir(host_path(root, "/proc/bc")):
        return "openvz"
    cgroup = _read(host_path(root, "/proc/1/cgroup")) or ""
    for line in cgroup.splitlines():
        path = line.split(":", 2)[-1]
        for mark, name in _CGROUP_MARKS:
            if mark in path:
                return name
    return None
