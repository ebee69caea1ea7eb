# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""``gpufleet-nvidia-devices``: create the NVIDIA device nodes the loaded driver provides.

The NVIDIA kernel modules create no device files themselves: NVIDIA's driver README ("Device Node Creation")
leaves it to ``nvidia-modprobe`` (a setuid helper that the CUDA driver library runs on first use), to udev
rules or to the administrator. A host that boots without the uvm module loaded, or on which nothing has
opened a GPU yet, has no ``/dev/nvidia-uvm``; container engines and the CDI refresh that start then see none,
and CUDA fails inside every container. ``gpufleet-nvidia-devices.service`` (installed by the ``runtime`` role)
loads ``nvidia``, ``nvidia-uvm`` and ``nvidia-modeset`` with ``modprobe`` (``ExecStartPre``) and then runs this
program, before the engines and ``gpufleet-cdi-refresh.service``: what the GPU Operator's driver container does
with ``nvidia-modprobe -u -m -c0``, without depending on the ``nvidia-modprobe`` package (not in every
distribution's main archive; Debian ships it in ``contrib``, RHEL-likes only in NVIDIA's repository) and for every
GPU and capability at once.

The rules (one home: ``cdi/devices.py``) follow ``nvidia-modprobe``: ``/dev/nvidia<N>`` for each GPU the driver
registered (``Device Minor`` in ``/proc/driver/nvidia/gpus/*/information``), ``/dev/nvidiactl``,
``/dev/nvidia-modeset`` when ``nvidia_modeset`` is loaded (``/proc/modules``), the uvm pair with ``nvidia-uvm``'s
major from ``/proc/devices``, and ``/dev/nvidia-caps/nvidia-cap<M>`` for each file under
``/proc/driver/nvidia/capabilities`` (its ``DeviceFileMinor``; major of ``nvidia-caps``). Owner and mode come
from ``/proc/driver/nvidia/params`` (or the capability file); ``ModifyDeviceFiles: 0`` leaves every file alone.
A node that exists with the right number is kept (its mode and owner set right), anything else at that path
(a wrong number, a link, a file) is replaced. No ``/proc/driver/nvidia`` (module not loaded, ``modprobe``
failed) is not an error: there is nothing to create.

``gpufleet-nvidia-devices [--proc DIR] [--dev-root DIR] [--dry-run]`` prints one JSON object
(``{"loaded", "modify", "nodes", "created", "replaced", "fixed", "errors", "reason"}``); exit status 0, or 1 when a
node could not be made. ``--proc`` defaults to ``$GPUFLEET_NVIDIA_PROC`` or ``/proc``: a simulated node
(``tests/sim``) points it at a stand-in, as runc refuses mounts under ``/proc``.

Standard library only (target Pythons 3.8+).
"""

from __future__ import annotations

import json
import os
import stat
import sys
from typing import Any

from ..base.fileio import read_text
from ..cdi.devices import (
    CAPS_DIR,
    CAPS_DIR_MODE,
    DeviceFile,
    parse_capability_minor,
    parse_device_file_params,
    parse_proc_devices,
    wanted_device_files,
)
from ..discovery.nvidia_procfs import read_gpus

NAME = "gpufleet-nvidia-devices"
PROC_ENV = "GPUFLEET_NVIDIA_PROC"
# A capability tree is a few levels deep (gpu<N>/mig/gi<M>/ci<K>/access) and has a few hundred files at most.
_CAPS_MAX_DEPTH = 8
_CAPS_MAX_FILES = 4096


def loaded_modules(text: str | None) -> set[str]:
    """``/proc/modules`` -> module names, ``-`` written ``_`` (as the kernel names them)."""
    return {line.split()[0].replace("-", "_") for line in (text or "").splitlines() if line.split()}


def read_capabilities(proc_dir: str) -> list[tuple[int, dict[str, Any]]]:
    """``(minor, params)`` of every capability file under ``<proc>/driver/nvidia/capabilities``, in path order."""
    top = os.path.join(proc_dir, "driver", "nvidia", "capabilities")
    found: list[tuple[int, dict[str, Any]]] = []
    for dirpath, dirnames, filenames in os.walk(top):
        depth = dirpath[len(top) :].count(os.sep)
        if depth >= _CAPS_MAX_DEPTH:
            dirnames[:] = []
        dirnames.sort()
        for name in sorted(filenames):
            if len(found) >= _CAPS_MAX_FILES:
                return found
            text = read_text(os.path.join(dirpath, name), tolerant=True, errors="replace")
            minor = parse_capability_minor(text)
            if minor is not None:
                found.append((minor, parse_device_file_params(text)))
    return found


def wanted(proc_dir: str) -> tuple[bool, bool, list[DeviceFile]]:
    """``(loaded, modify, files)``: whether the driver is loaded (``<proc>/driver/nvidia``), whether its params allow
    touching the files, and the files it provides."""
    if not os.path.isdir(os.path.join(proc_dir, "driver", "nvidia")):
        return False, True, []
    params = parse_device_file_params(read_text(os.path.join(proc_dir, "driver", "nvidia", "params"), tolerant=True))
    majors = parse_proc_devices(read_text(os.path.join(proc_dir, "devices"), tolerant=True, errors="replace") or "")
    minors = [g["minor"] for g in read_gpus(proc_dir) or () if g.get("minor") is not None]
    modeset = "nvidia_modeset" in loaded_modules(read_text(os.path.join(proc_dir, "modules"), tolerant=True))
    files = wanted_device_files(minors, majors["character"], modeset, params, read_capabilities(proc_dir))
    return True, bool(params["modify"]), files


def state(full: str, f: DeviceFile) -> str:
    """``ok``, ``fix`` (right node, wrong mode or owner), ``replace`` (something else there) or ``create``."""
    try:
        st = os.lstat(full)
    except FileNotFoundError:
        return "create"
    if not stat.S_ISCHR(st.st_mode) or st.st_rdev != os.makedev(f.node.major, f.node.minor):
        return "replace"
    if stat.S_IMODE(st.st_mode) != f.mode or st.st_uid != f.uid or st.st_gid != f.gid:
        return "fix"
    return "ok"


def _make(full: str, f: DeviceFile, action: str) -> None:
    if action == "replace":
        if os.path.isdir(full) and not os.path.islink(full):
            raise OSError(f"{full} is a directory")
        os.unlink(full)
    if action in ("create", "replace"):
        os.mknod(full, stat.S_IFCHR | 0o600, os.makedev(f.node.major, f.node.minor))
    os.chown(full, f.uid, f.gid, follow_symlinks=False)
    os.chmod(full, f.mode)


def apply(proc_dir: str = "/proc", dev_root: str = "/", dry_run: bool = False) -> dict[str, Any]:
    """Create what is missing under ``<dev_root>/dev``; returns the report ``main`` prints."""
    loaded, modify, files = wanted(proc_dir)
    report: dict[str, Any] = {
        "loaded": loaded,
        "modify": modify,
        "nodes": [f.node.path for f in files],
        "created": [],
        "replaced": [],
        "fixed": [],
        "errors": [],
        "reason": "",
    }
    if not loaded:
        report["reason"] = f"the nvidia kernel module is not loaded ({proc_dir}/driver/nvidia is missing)"
        return report
    if not modify:
        report["reason"] = "ModifyDeviceFiles is 0 in the driver's params: device files are left alone"
        return report
    dev = os.path.join(dev_root, "dev")
    for f in files:
        full = os.path.join(dev, f.node.path[len("/dev/") :])
        try:
            if f.node.path.startswith(CAPS_DIR + "/") and not dry_run:
                caps = os.path.join(dev, CAPS_DIR[len("/dev/") :])
                if os.path.islink(caps) or (os.path.lexists(caps) and not os.path.isdir(caps)):
                    os.unlink(caps)
                os.makedirs(caps, CAPS_DIR_MODE, exist_ok=True)
                os.chmod(caps, CAPS_DIR_MODE)
            action = state(full, f)
            if action != "ok" and not dry_run:
                _make(full, f, action)
        except OSError as exc:
            report["errors"].append(f"{f.node.path}: {exc.strerror or exc}")
            continue
        if action != "ok":
            report[{"create": "created", "replace": "replaced", "fix": "fixed"}[action]].append(f.node.path)
    report["reason"] = f"{len(files)} device node(s) provided by the loaded driver"
    return report


def parse_args(argv: list[str]) -> dict[str, Any]:
    args = list(argv[1:])
    options: dict[str, Any] = {"proc": os.environ.get(PROC_ENV) or "/proc", "dev_root": "/", "dry_run": False}
    while args:
        arg = args.pop(0)
        if arg == "--dry-run":
            options["dry_run"] = True
        elif arg in ("--proc", "--dev-root") and args:
            options[arg[2:].replace("-", "_")] = args.pop(0)
        else:
            raise ValueError(f"unknown argument {arg!r} (usage: {NAME} [--proc DIR] [--dev-root DIR] [--dry-run])")
    return options


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv if argv is None else argv
    try:
        options = parse_args(argv)
    except ValueError as exc:
        sys.stderr.write(f"{NAME}: {exc}\n")
        return 2
    report = apply(options["proc"], options["dev_root"], options["dry_run"])
    sys.stdout.write(json.dumps(report, sort_keys=True) + "\n")
    for error in report["errors"]:
        sys.stderr.write(f"{NAME}: cannot create {error}\n")
    return 1 if report["errors"] else 0
