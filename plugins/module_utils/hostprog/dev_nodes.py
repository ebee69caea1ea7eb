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
On a member of an NVLink domain (the ``imex`` role's record ``/etc/gpufleet/imex.json`` under ``--dev-root`` lists
``channels``), ``/dev/nvidia-caps-imex-channels/channel<N>`` for each, with the major of
``nvidia-caps-imex-channels``, root-owned and 0666 in a 0755 directory: the nodes the NVIDIA IMEX guide has the
administrator make with ``mknod`` after every boot ("IMEX Channels",
https://docs.nvidia.com/multi-node-nvlink-systems/imex-guide/imexchannels.html, read 2026-11-28).
Every value read is checked first: a GPU minor from 0 to 253, a capability minor within the kernel's 20 bits, a
major within 12, an owner or group within ``uid_t``; a malformed one is one line (file and value) in ``malformed``
and on stderr, and everything else is still made. Only regular files of at most 1 MiB are read there.
A node that exists with the right number is kept (its mode and owner set right), anything else at that path
(a wrong number, a link, a file) is replaced. No ``/proc/driver/nvidia`` (module not loaded, ``modprobe``
failed) is not an error: there is nothing to create.

``gpufleet-nvidia-devices [--proc DIR] [--dev-root DIR] [--dry-run]`` prints one JSON object
(``{"loaded", "modify", "nodes", "created", "replaced", "fixed", "errors", "malformed", "reason"}``); exit status 0,
or 1 when a node could not be made or a value was malformed. ``--proc`` defaults to ``$GPUFLEET_NVIDIA_PROC`` or
``/proc``: a simulated node (``tests/sim``) points it at a stand-in, as runc refuses mounts under ``/proc``.

Standard library only (target Pythons 3.8+).
"""

from __future__ import annotations

import json
import os
import stat
import sys
from typing import Any

from ..base.fileio import FileLimitError, read_regular
from ..base.oneline import error_line, excerpt
from ..cdi.devices import (
    CAPS_DIR,
    CAPS_DIR_MODE,
    MODESET_MINOR,
    DeviceFile,
    DeviceNode,
    parse_capability_minor,
    parse_device_file_params,
    parse_proc_devices,
    wanted_device_files,
)
from ..discovery.imex import CHANNEL_DIR, PROC_NAME, read_record, record_channels
from ..discovery.nvidia_procfs import parse_information

NAME = "gpufleet-nvidia-devices"
PROC_ENV = "GPUFLEET_NVIDIA_PROC"
# A capability tree is a few levels deep (gpu<N>/mig/gi<M>/ci<K>/access) and has a few hundred files at most.
_CAPS_MAX_DEPTH = 8
_CAPS_MAX_FILES = 4096


def loaded_modules(text: str | None) -> set[str]:
    """``/proc/modules`` -> module names, ``-`` written ``_`` (as the kernel names them)."""
    return {line.split()[0].replace("-", "_") for line in (text or "").splitlines() if line.split()}


# Values the kernel writes that a node number or owner can take; anything else in a file is malformed.
MAX_PROC_BYTES = 1 << 20  # a /proc file of the driver is a few hundred bytes
MAX_MAJOR = (1 << 12) - 1  # the kernel's MAJORBITS
MAX_MINOR = (1 << 20) - 1  # MINORBITS
MAX_GPU_MINOR = MODESET_MINOR - 1  # 254 and 255 are nvidia-modeset and nvidiactl
MAX_ID = (1 << 32) - 2  # uid_t/gid_t; -1 means "no change"
_PARAM_LIMITS = {"DeviceFileUID": MAX_ID, "DeviceFileGID": MAX_ID}


def _read(path: str, problems: list[str]) -> str | None:
    """The text of a /proc (or ``--proc``) file: only a regular file, at most ``MAX_PROC_BYTES`` (``read_regular``);
    None when it is missing or unreadable; one line in ``problems`` when it is not a regular file or too large."""
    try:
        return read_regular(path, MAX_PROC_BYTES).decode("utf-8", "replace")
    except FileLimitError as exc:
        problems.append(str(exc))
    except OSError:
        pass
    return None


def _number(value: str, limit: int) -> int | None:
    """``value`` as a decimal number from 0 to ``limit`` (ASCII digits only), else None."""
    if not (value.isdigit() and value.isascii() and len(value) <= 20):
        return None
    number = int(value)
    return number if number <= limit else None


def checked_values(path: str, text: str | None, limits: dict[str, int], problems: list[str]) -> str:
    """``text`` (``Key: value`` lines) without the lines of ``limits``' keys whose value is not a number from 0 to
    that limit: each such line is one message in ``problems`` naming ``path``, the key and the value; what is left
    is read as if the line were absent (the key keeps nvidia-modprobe's default, the node is skipped)."""
    kept = []
    for line in (text or "").splitlines():
        key, sep, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if sep and key in limits and _number(value, limits[key]) is None:
            problems.append(f"{path}: {key} {excerpt(value)} is not a number from 0 to {limits[key]}: ignored")
            continue
        kept.append(line)
    return "\n".join(kept)


def checked_devices(path: str, text: str | None, problems: list[str]) -> str:
    """``/proc/devices`` without the lines whose number is no major (1 to ``MAX_MAJOR``); each such line of an NVIDIA
    driver (``nvidia*``) is a line in ``problems``, another driver's is dropped silently (not ours to judge)."""
    kept = []
    for line in (text or "").splitlines():
        parts = line.split(None, 1)
        if len(parts) == 2 and parts[0][:1].isdigit() and not (_number(parts[0], MAX_MAJOR) or 0):
            if parts[1].strip().startswith("nvidia"):
                problems.append(
                    f"{path}: major {excerpt(parts[0])} of {excerpt(parts[1])} is not from 1 to {MAX_MAJOR}"
                )
            continue
        kept.append(line)
    return "\n".join(kept)


def read_gpu_minors(proc_dir: str, problems: list[str]) -> list[int]:
    """The ``Device Minor`` of every GPU under ``<proc>/driver/nvidia/gpus``; a minor that is not a number from 0 to
    ``MAX_GPU_MINOR`` is one line in ``problems`` and that GPU is skipped."""
    gpus_dir = os.path.join(proc_dir, "driver", "nvidia", "gpus")
    try:
        names = sorted(os.listdir(gpus_dir))
    except OSError:
        return []
    minors = []
    for name in names:
        path = os.path.join(gpus_dir, name, "information")
        text = checked_values(path, _read(path, problems), {"Device Minor": MAX_GPU_MINOR}, problems)
        minor = parse_information(text).get("Device Minor")
        if minor is not None:
            minors.append(int(minor))
    return minors


def read_capabilities(proc_dir: str, problems: list[str] | None = None) -> list[tuple[int, dict[str, Any]]]:
    """``(minor, params)`` of every capability file under ``<proc>/driver/nvidia/capabilities``, in path order; a
    malformed minor, owner or group is one line in ``problems`` (the file is skipped, or the value ignored)."""
    problems = [] if problems is None else problems
    limits = dict(_PARAM_LIMITS, DeviceFileMinor=MAX_MINOR)
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
            path = os.path.join(dirpath, name)
            text = checked_values(path, _read(path, problems), limits, problems)
            minor = parse_capability_minor(text)
            if minor is not None:
                found.append((minor, parse_device_file_params(text)))
    return found


# IMEX channel nodes: the mode and directory mode the IMEX guide shows for the default channel.
IMEX_CHANNEL_MODE = 0o666
IMEX_DIR_MODE = 0o755


def imex_channel_files(channels: list[int], char_majors: dict[str, int]) -> list[DeviceFile]:
    """The channel nodes asked for, when the driver registered ``nvidia-caps-imex-channels`` (else none)."""
    major = char_majors.get(PROC_NAME)
    if major is None:
        return []
    return [
        DeviceFile(DeviceNode(f"{CHANNEL_DIR}/channel{c}", major, c), 0, 0, IMEX_CHANNEL_MODE)
        for c in sorted(set(channels))
    ]


def wanted(
    proc_dir: str, problems: list[str] | None = None, imex_channels: list[int] | None = None
) -> tuple[bool, bool, list[DeviceFile]]:
    """``(loaded, modify, files)``: whether the driver is loaded (``<proc>/driver/nvidia``), whether its params allow
    touching the files, and the files it provides (with the IMEX channels of ``imex_channels``). Each malformed value
    met is one line in ``problems`` (naming its file and the value); the other values are still used."""
    problems = [] if problems is None else problems
    if not os.path.isdir(os.path.join(proc_dir, "driver", "nvidia")):
        return False, True, []
    params_path = os.path.join(proc_dir, "driver", "nvidia", "params")
    params = parse_device_file_params(
        checked_values(params_path, _read(params_path, problems), _PARAM_LIMITS, problems)
    )
    devices_path = os.path.join(proc_dir, "devices")
    majors = parse_proc_devices(checked_devices(devices_path, _read(devices_path, problems), problems))
    minors = read_gpu_minors(proc_dir, problems)
    modeset = "nvidia_modeset" in loaded_modules(_read(os.path.join(proc_dir, "modules"), problems))
    files = wanted_device_files(minors, majors["character"], modeset, params, read_capabilities(proc_dir, problems))
    files += imex_channel_files(imex_channels or [], majors["character"])
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
    malformed: list[str] = []
    record, error = read_record(dev_root)
    if error:
        malformed.append(error)
    loaded, modify, files = wanted(proc_dir, malformed, record_channels(record))
    report: dict[str, Any] = {
        "loaded": loaded,
        "modify": modify,
        "nodes": [f.node.path for f in files],
        "created": [],
        "replaced": [],
        "fixed": [],
        "errors": [],
        "malformed": malformed,
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
            parent = os.path.dirname(f.node.path)
            if parent in (CAPS_DIR, CHANNEL_DIR) and not dry_run:
                mode = CAPS_DIR_MODE if parent == CAPS_DIR else IMEX_DIR_MODE
                caps = os.path.join(dev, parent[len("/dev/") :])
                if os.path.islink(caps) or (os.path.lexists(caps) and not os.path.isdir(caps)):
                    os.unlink(caps)
                os.makedirs(caps, mode, exist_ok=True)
                os.chmod(caps, mode)
            action = state(full, f)
            if action != "ok" and not dry_run:
                _make(full, f, action)
        except (OSError, OverflowError, ValueError) as exc:
            report["errors"].append(f"{f.node.path}: {getattr(exc, 'strerror', None) or exc}")
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
        sys.stderr.write(error_line(NAME, exc))
        return 2
    try:
        report = apply(options["proc"], options["dev_root"], options["dry_run"])
    except Exception as exc:  # one line for the journal, never a traceback at boot
        sys.stderr.write(error_line(NAME, f"internal error ({type(exc).__name__}: {exc})"))
        return 1
    sys.stdout.write(json.dumps(report, sort_keys=True) + "\n")
    for problem in report["malformed"]:
        sys.stderr.write(error_line(NAME, f"malformed driver value: {problem}"))
    for error in report["errors"]:
        sys.stderr.write(error_line(NAME, f"cannot create {error}"))
    return 1 if report["errors"] or report["malformed"] else 0
