# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The one home of the NVIDIA device-node rules.

``/dev/nvidia<N>`` is 195:N, ``/dev/nvidiactl`` 195:255, ``/dev/nvidia-modeset`` 195:254;
``/dev/nvidia-uvm`` and ``/dev/nvidia-uvm-tools`` take the dynamic major ``/proc/devices`` lists for
``nvidia-uvm`` (minors 0 and 1); MIG capability nodes ``/dev/nvidia-caps/nvidia-cap<M>`` take the
major of ``nvidia-caps`` and their minors from ``/proc/driver/nvidia-caps/mig-minors`` (every possible one)
or, for the capabilities that exist, the ``DeviceFileMinor`` of each file under ``/proc/driver/nvidia/capabilities``.

Owner and mode of the files, as NVIDIA's ``nvidia-modprobe`` makes them (NVIDIA/nvidia-modprobe,
``modprobe-utils/nvidia-modprobe-utils.c`` at commit 149440ca, ``init_device_file_parameters``, ``mknod_helper``,
``nvidia_uvm_mknod``, ``nvidia_cap_mknod``): ``/dev/nvidia<N>``, ``nvidiactl`` and ``nvidia-modeset`` take
``DeviceFileUID``/``DeviceFileGID``/``DeviceFileMode`` from ``/proc/driver/nvidia/params`` (defaults 0, 0, 0666;
``ModifyDeviceFiles: 0`` means the files are not to be touched); the uvm pair is always root:root 0666; a
capability node takes the same keys from its own capability file, in ``/dev/nvidia-caps`` (root:root 0755).

Standard library only (target Pythons 3.8+).
"""

from __future__ import annotations

import hashlib
import os
import re
import stat

from ..base.fileio import FileLimitError, read_regular
from ..base.record import record

NVIDIA_MAJOR = 195
CTL_MINOR = 255
MODESET_MINOR = 254

UVM_MINOR = 0
UVM_TOOLS_MINOR = 1
CAPS_DIR = "/dev/nvidia-caps"
CAPS_DIR_MODE = 0o755
# nvidia-modprobe's NV_DEVICE_FILE_MODE / _UID / _GID and its "modify" default.
DEFAULT_FILE_PARAMS = {"uid": 0, "gid": 0, "mode": 0o666, "modify": True}

# The nodes besides /dev/nvidia<N> that take the driver's DeviceFileUID/GID/Mode (the uvm pair is always 0666).
GROUPED_NODES = ("/dev/nvidiactl", "/dev/nvidia-modeset")

DeviceNode = record("DeviceNode", ("path", "major", "minor"))
# A node to make, with the owner and mode it must have.
DeviceFile = record("DeviceFile", ("node", "uid", "gid", "mode"))

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


def parse_device_file_params(text: str | None) -> dict[str, int | bool]:
    """``/proc/driver/nvidia/params`` or a capability file -> ``{"uid", "gid", "mode", "modify"}``.

    Lines are ``Name: <decimal>``; ``DeviceFileUID``, ``DeviceFileGID``, ``DeviceFileMode`` (438 = 0666) and
    ``ModifyDeviceFiles`` (``DeviceFileModify`` in capability files); what is absent keeps nvidia-modprobe's default.
    """
    params: dict[str, int | bool] = dict(DEFAULT_FILE_PARAMS)
    keys = {"DeviceFileUID": "uid", "DeviceFileGID": "gid", "DeviceFileMode": "mode"}
    for line in (text or "").splitlines():
        name, sep, value = line.partition(":")
        value = value.strip()
        if not sep or not value.isdigit():
            continue
        name = name.strip()
        if name in keys:
            params[keys[name]] = int(value) & 0o777 if name == "DeviceFileMode" else int(value)
        elif name in ("ModifyDeviceFiles", "DeviceFileModify"):
            params["modify"] = int(value) == 1
    return params


def parse_capability_minor(text: str | None) -> int | None:
    """The ``DeviceFileMinor`` of a ``/proc/driver/nvidia/capabilities/...`` file, or None."""
    for line in (text or "").splitlines():
        name, sep, value = line.partition(":")
        if sep and name.strip() == "DeviceFileMinor" and value.strip().isdigit():
            return int(value.strip())
    return None


def cap_node(major: int, minor: int) -> DeviceNode:
    """The node of the capability with this minor: ``/dev/nvidia-caps/nvidia-cap<minor>``."""
    return DeviceNode(f"{CAPS_DIR}/nvidia-cap{minor}", major, minor)


def wanted_device_files(
    gpu_minors: list[int],
    char_majors: dict[str, int],
    modeset: bool,
    params: dict[str, int | bool] | None = None,
    capabilities: list[tuple[int, dict[str, int | bool]]] | None = None,
) -> list[DeviceFile]:
    """Every node the loaded driver provides, with owner and mode (the rules in this module's docstring).

    ``gpu_minors``: the ``Device Minor`` of each GPU the driver registered; ``char_majors``: ``/proc/devices``'
    character majors (the uvm pair only when ``nvidia-uvm`` is there, capabilities only with ``nvidia-caps``);
    ``modeset``: the nvidia-modeset module is loaded; ``params``: ``parse_device_file_params`` of the driver's
    params; ``capabilities``: ``(minor, parse_device_file_params of its file)`` per capability file.
    """
    p = dict(DEFAULT_FILE_PARAMS, **(params or {}))

    def with_params(node: DeviceNode, q: dict[str, int | bool]) -> DeviceFile:
        return DeviceFile(node, int(q["uid"]), int(q["gid"]), int(q["mode"]))

    files = [with_params(gpu_node(m), p) for m in sorted(set(gpu_minors))]
    files.append(with_params(DeviceNode("/dev/nvidiactl", NVIDIA_MAJOR, CTL_MINOR), p))
    if modeset:
        files.append(with_params(DeviceNode("/dev/nvidia-modeset", NVIDIA_MAJOR, MODESET_MINOR), p))
    uvm = char_majors.get("nvidia-uvm")
    if uvm is not None:
        files.append(with_params(DeviceNode("/dev/nvidia-uvm", uvm, UVM_MINOR), DEFAULT_FILE_PARAMS))
        files.append(with_params(DeviceNode("/dev/nvidia-uvm-tools", uvm, UVM_TOOLS_MINOR), DEFAULT_FILE_PARAMS))
    caps = char_majors.get("nvidia-caps")
    if caps is not None:
        seen = set()
        for minor, cap_params in sorted(capabilities or (), key=lambda c: c[0]):
            if minor not in seen:
                seen.add(minor)
                files.append(with_params(cap_node(caps, minor), dict(DEFAULT_FILE_PARAMS, **cap_params)))
    return files


def node_fingerprint(nodes: list[DeviceNode]) -> str:
    """A short stable digest of a set of device nodes (path, major, minor): what the CDI spec was made from."""
    lines = sorted(f"{n.path} {int(n.major)}:{int(n.minor)}" for n in nodes)
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]


# --------------------------------------------------------------------------------------------------
# The device-file parameters when the driver is not loaded: the nvidia module's options in modprobe.d.
#
# modprobe.d(5), kmod's libkmod/libkmod-config.c ``default_config_paths`` (as Debian 12's libkmod2 lists them,
# checked 2026-11-27): ``*.conf`` files in /etc/modprobe.d, /run/modprobe.d, /usr/local/lib/modprobe.d, then
# /usr/lib/modprobe.d and /lib/modprobe.d; a file name in an earlier directory hides the same name in a later one; the
# files are read in the lexical order of their names; ``#`` starts a comment, a trailing ``\`` continues a line;
# ``options <module> <name>=<value>...`` lines add up and, for a name given twice, the kernel keeps the last (it parses
# the options left to right). The nvidia module's ``NVreg_DeviceFileUID``, ``...GID``, ``...Mode`` and
# ``NVreg_ModifyDeviceFiles`` are ``uint`` module parameters: the kernel's ``kstrtouint(value, 0)`` reads ``0x..`` as
# hex, a leading ``0`` as octal (``0660``), anything else as decimal (``432``). The kernel command line
# (``nvidia.NVreg_...``) is not read here.
MODPROBE_DIRS = (
    "/etc/modprobe.d",
    "/run/modprobe.d",
    "/usr/local/lib/modprobe.d",
    "/usr/lib/modprobe.d",
    "/lib/modprobe.d",
)
# the module parameter -> the key of ``parse_device_file_params``
_MODULE_PARAMS = {
    "NVreg_DeviceFileUID": "uid",
    "NVreg_DeviceFileGID": "gid",
    "NVreg_DeviceFileMode": "mode",
    "NVreg_ModifyDeviceFiles": "modify",
}
# A modprobe.d directory holds a few dozen small files; more, or larger, is not configuration.
_MODPROBE_MAX_FILES = 512
_MODPROBE_MAX_BYTES = 1 << 20


def parse_kernel_uint(text: str) -> int | None:
    """A module parameter's value as the kernel reads a ``uint`` (``kstrtouint`` base 0), or None if it is none."""
    value = text.strip()
    if value[:2].lower() == "0x":
        digits, base = value[2:], 16
    elif value.startswith("0") and len(value) > 1:
        digits, base = value[1:], 8
    else:
        digits, base = value, 10
    if not digits or any(c not in "0123456789abcdefABCDEF"[: base + (6 if base == 16 else 0)] for c in digits):
        return None
    number = int(digits, base)
    return number if number < 1 << 32 else None


def parse_modprobe_options(texts: list[str], module: str = "nvidia") -> dict[str, str]:
    """The ``options <module> ...`` of modprobe.d files (their texts in the order modprobe reads them) ->
    ``{parameter: value}``, the last value of a parameter given twice kept."""
    options: dict[str, str] = {}
    for text in texts:
        for line in (text or "").replace("\\\n", " ").splitlines():
            words = line.split()
            if len(words) < 2 or words[0] != "options" or words[1].replace("-", "_") != module:
                continue
            for word in words[2:]:
                if word.startswith("#"):
                    break
                name, sep, value = word.partition("=")
                if sep:
                    options[name] = value.strip('"')
    return options


def params_from_modprobe(texts: list[str]) -> dict[str, int | bool]:
    """``parse_device_file_params``' dict from the nvidia module's modprobe.d options (what the module will take when
    it loads); what is absent or unreadable keeps nvidia-modprobe's default."""
    params: dict[str, int | bool] = dict(DEFAULT_FILE_PARAMS)
    for name, value in parse_modprobe_options(texts).items():
        key = _MODULE_PARAMS.get(name)
        number = parse_kernel_uint(value) if key else None
        if number is None:
            continue
        if key == "modify":
            params[key] = number == 1
        else:
            params[key] = number & 0o777 if key == "mode" else number
    return params


def modprobe_files(root: str = "/") -> list[str]:
    """The ``*.conf`` files of the modprobe.d directories under ``root``, in the order modprobe reads them (a name in
    an earlier directory hides the same name in a later one)."""
    chosen: dict[str, str] = {}
    for directory in MODPROBE_DIRS:
        full = os.path.join(root, directory.lstrip("/"))
        try:
            names = sorted(os.listdir(full))[:_MODPROBE_MAX_FILES]
        except OSError:
            continue
        for name in names:
            if name.endswith(".conf") and name not in chosen:
                chosen[name] = os.path.join(full, name)
    return [chosen[name] for name in sorted(chosen)]


def read_device_file_params(root: str = "/", proc_dir: str | None = None) -> dict[str, int | bool | str]:
    """The device-file parameters of the host under ``root``: the loaded driver's
    (``<proc>/driver/nvidia/params``, ``proc_dir`` defaulting to ``<root>/proc``), else what its modprobe.d options
    will give it when it loads, else nvidia-modprobe's defaults. ``source`` says which."""
    proc = proc_dir if proc_dir is not None else os.path.join(root, "proc")
    params_file = os.path.join(proc, "driver", "nvidia", "params")
    text = _read_small(params_file)
    if text is not None:
        return dict(parse_device_file_params(text), source=params_file[len(root.rstrip("/")) :] or params_file)
    texts = []
    for path in modprobe_files(root):
        content = _read_small(path)
        if content is not None:
            texts.append(content)
    params = params_from_modprobe(texts)
    source = "modprobe.d" if params != DEFAULT_FILE_PARAMS else "default"
    return dict(params, source=source)


def _read_small(path: str) -> str | None:
    """The text of a params or modprobe.d file through the one bounded reader (``base.fileio.read_regular``: a regular
    file only, opened ``O_NONBLOCK``, at most ``_MODPROBE_MAX_BYTES``); None for anything else."""
    try:
        return read_regular(path, _MODPROBE_MAX_BYTES).decode("utf-8", "replace")
    except (OSError, FileLimitError):
        return None


def world_accessible(mode: int) -> bool:
    """Whether anyone may read and write a device file of this mode."""
    return mode & 0o006 == 0o006


def additional_gids(params: dict | None) -> list[int]:
    """The groups a container's process needs to open the GPU device files these parameters make: the files' group
    when they are not readable and writable by anyone and the group is not root's.

    NVIDIA's rule (NVIDIA/nvidia-container-toolkit ``internal/edits/device.go`` ``getAdditionalGIDs``, main at commit
    d34b3046 of 2026-08-21; CHANGELOG "Add support for injecting additional GIDs" under v1.19.0-rc.4, first released
    in v1.19.0 of 2026-03-10): no GID or GID 0 -> none; mode readable and writable by others -> none; else the
    node's GID."""
    p = dict(DEFAULT_FILE_PARAMS, **(params or {}))
    gid, mode = int(p["gid"]), int(p["mode"])
    if gid == 0 or world_accessible(mode):
        return []
    return [gid]
