# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The CDI spec for ``nvidia.com/gpu``: model, generation and byte-stable rendering.

``build_spec`` is a pure function of the GPUs (dicts shaped like ``ansible_facts.nvidia.gpus``), the
driver files (``cdi.driver_files.find_driver_files``) and the control device nodes; it returns the spec and
the *index*, a compact JSON document the runtime shim reads on every GPU container start instead of the
YAML spec. The index carries what a CDI spec cannot: the capability each mount belongs to (so
``NVIDIA_DRIVER_CAPABILITIES`` can filter mounts at start), the CUDA version ``NVIDIA_REQUIRE_cuda`` is
checked against, and UUID <-> index aliases. It lives outside ``/etc/cdi`` so CDI-aware engines never
see the same device names twice.

Where things go in the container:

* libraries: ``/usr/lib/x86_64-linux-gnu/<real file name>`` (``/usr/lib/i386-linux-gnu`` for compat32),
  the Debian-like layout; the hook adds that folder to the container's ld.so.conf.d and runs
  hook adds their soname links and entries to the container's ``ld.so.cache`` (written by our own code,
  no ldconfig runs) and that folder to its ld.so.conf.d, so a ``/usr/lib64`` image finds them as well;
* binaries: ``/usr/bin/<name>``; loader config files, GSP firmware, IPC sockets: their own paths.

Version rules (CDI ``specs-go/version.go``): device names starting with a digit and ``hostPath`` on
device nodes need 0.5.0, top-level ``annotations`` need 0.6.0, ``additionalGids`` in container edits need 0.7.0
(``requiresV070``, container-device-interface v0.7.0 of 2024-03-16; read at cncf-tags/container-device-interface
commit 05ae4b5b, 2026-11-27). ``cdi_version`` 0.7.0 is written only for a host whose device files are not open to
everyone (``device_files``: the driver's ``NVreg_DeviceFileGID``/``...Mode``, such as 0660 for group ``video``): the
GPU device nodes then carry the host's owner, group and mode, and the spec's ``containerEdits`` carry
``additionalGids: [<group>]``, so the container's process (any user) is in the group that may open them, as NVIDIA's
specs do from nvidia-container-toolkit 1.19.0 (``devices.additional_gids``). Below 0.7.0 (an engine on the host reads
no newer, ``runtime.common.cdi_spec_version``) the spec keeps the nodes as it always wrote them (no owner, group or
mode: the engine's CDI library makes them owned by the container's user and runc gives them mode 0666), so a
non-root container keeps its GPU there; the index, which the shim reads and no engine parses, always carries the
host's owner and mode and the group. ``cdi_version``
0.6.0 (the default) carries the driver version, CUDA version and device-node fingerprint as annotations;
0.5.0 (for engines whose CDI library reads no more: podman before 4.7, ``runtime.common.cdi_spec_version``)
has no place for them in the spec, so the index keeps them (``specAnnotations``) and the YAML rendering writes
them as comment lines under the header, where ``generate.spec_stamp`` and discovery read them the same way.

Standard library only; PyYAML is never needed (the YAML is rendered here, deterministically).
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from ..base.fileio import read_text
from ..base.pathsafe import host_path, resolve_in_root
from ..base.version import compare as compare_versions
from .devices import (
    GROUPED_NODES,
    additional_gids,
    control_nodes,
    gpu_minor_of,
    node_fingerprint,
    parse_mig_minors,
    parse_proc_devices,
    read_device_file_params,
    scan_device_nodes,
    world_accessible,
)
from .driver_files import (
    CAPABILITIES,
    CONTAINER_LIBDIRS,
    CONTAINER_LINKS,
    FIRMWARE_DIR,
    MPS_PIPE_DIR,
    DriverFile,
    find_driver_files,
    parse_capabilities,
)

KIND = "nvidia.com/gpu"
CDI_VERSION = "0.6.0"
CDI_VERSIONS = ("0.5.0", "0.6.0", "0.7.0")  # what build_spec writes (runtime.common.CDI_SPEC_VERSIONS says the same)
# The first version with ``additionalGids`` (container-device-interface specs-go/version.go ``requiresV070``).
ADDITIONAL_GIDS_VERSION = "0.7.0"
DRIVER_VERSION_ANNOTATION = "gpufleet.nvidia/driver-version"
CUDA_VERSION_ANNOTATION = "gpufleet.nvidia/cuda-version"
# ``devices.node_fingerprint`` of the NVIDIA device nodes the spec was made from: the boot-time refresh renders the
# spec again when the nodes on the host are no longer those (a uvm module loaded after the spec was written).
NODES_ANNOTATION = "gpufleet.nvidia/device-nodes"
MOUNT_OPTIONS = ("ro", "nosuid", "nodev", "bind")
HOOK_PATH = "/usr/local/bin/gpufleet-cdi-hook"
HOOK_ENV = ("PATH=/usr/sbin:/usr/bin:/sbin:/bin",)
# Seconds the engine gives the hook (OCI ``hooks[].timeout``, CDI ``hooks[].timeout``). Its work takes
# milliseconds and reads nothing that can block; the limit stops a hook that hangs anyway from holding the start.
HOOK_TIMEOUT = 10
INDEX_FORMAT = 1
DEFAULT_INDEX_PATH = "/etc/gpufleet/cdi-nvidia.json"
NAME_STRATEGIES = ("index", "uuid")

# The CUDA version each driver branch ships (libcuda's cuDriverGetVersion), newest first.
CUDA_BY_BRANCH = (
    (580, "13.0"),
    (575, "12.9"),
    (570, "12.8"),
    (565, "12.7"),
    (560, "12.6"),
    (555, "12.5"),
    (550, "12.4"),
    (545, "12.3"),
    (535, "12.2"),
    (530, "12.1"),
    (525, "12.0"),
    (520, "11.8"),
    (515, "11.7"),
    (510, "11.6"),
    (495, "11.5"),
    (470, "11.4"),
    (465, "11.3"),
    (460, "11.2"),
    (455, "11.1"),
    (450, "11.0"),
)

_DEVICE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$")
_CUDA_VERSION = re.compile(r"^\d+\.\d+$")


def cuda_version_for(driver_version: str | None) -> str | None:
    """The CUDA version a driver version supports (``535.261.03`` -> ``12.2``), or None if unknown."""
    try:
        branch = int(str(driver_version).split(".", maxsplit=1)[0])
    except ValueError:
        return None
    for first, cuda in CUDA_BY_BRANCH:
        if branch >= first:
            return cuda
    return None


def container_libdir(arch: str) -> str:
    return CONTAINER_LIBDIRS.get(arch, (f"/usr/lib/{arch}-linux-gnu",))[0]


def _mig_enabled(gpu: dict[str, Any]) -> bool:
    mode = gpu.get("mig_mode")
    if isinstance(mode, dict):
        mode = mode.get("current")
    return mode is True or str(mode).strip().lower() in ("enabled", "enable", "on", "true", "1")


def _mig_nodes(gpu: dict[str, Any], mig: dict[str, Any], mig_minors: dict[str, int] | None) -> list[str]:
    """The nvidia-caps nodes of one MIG device (GPU instance and compute instance access). The ids under any of the
    names callers use: discovery's ``gi_id``/``ci_id`` (gpu_facts), ``gi``/``ci``, ``gpu_instance_id``/..."""
    gi = next((mig[k] for k in ("gi_id", "gi", "gpu_instance_id") if mig.get(k) is not None), None)
    ci = next((mig[k] for k in ("ci_id", "ci", "compute_instance_id") if mig.get(k) is not None), None)
    nodes = []
    if gi is None or not mig_minors:
        return nodes
    keys = [f"gpu{int(gpu['minor'])}/gi{int(gi)}/access"]
    if ci is not None:
        keys.append(f"gpu{int(gpu['minor'])}/gi{int(gi)}/ci{int(ci)}/access")
    for key in keys:
        if key in mig_minors:
            nodes.append(f"/dev/nvidia-caps/nvidia-cap{int(mig_minors[key])}")
    return nodes


def _node(path: str, dev_root: str) -> dict[str, str]:
    entry = {"path": path}
    host = host_path(dev_root, path) if dev_root not in ("", "/") else path
    if host != path:
        entry["hostPath"] = host
    return entry


def node_owner(device_files: dict[str, Any] | None) -> dict[str, int] | None:
    """The ``fileMode``/``uid``/``gid`` a GPU device node gets in a container when the host's device files are not
    open to everyone (``device_files``: ``devices.read_device_file_params``), else None (the nodes stay as before)."""
    if not device_files or world_accessible(int(device_files.get("mode", 0o666))):
        return None
    return {"fileMode": int(device_files["mode"]), "uid": int(device_files["uid"]), "gid": int(device_files["gid"])}


def _with_owner(edits: dict[str, Any], owner: dict[str, int]) -> dict[str, Any]:
    """A copy of ``edits`` whose device nodes carry ``owner`` where it applies."""
    copy = json.loads(json.dumps(edits))
    for node in copy.get("deviceNodes") or ():
        if node["path"] in GROUPED_NODES or gpu_minor_of(node["path"]) is not None:
            node.update(owner)
    return copy


def _gpu_names(gpu: dict[str, Any], strategy: tuple[str, ...]) -> list[str]:
    names = []
    if "index" in strategy:
        names.append(str(gpu["index"]))
    if "uuid" in strategy and gpu.get("uuid"):
        names.append(gpu["uuid"])
    if not names:  # uuid wanted, none known: the index is the only name there is
        names.append(str(gpu["index"]))
    return names


def build_spec(
    gpus: list[dict[str, Any]],
    files: list[DriverFile],
    control: list[str],
    driver_version: str,
    *,
    driver_root: str = "/",
    dev_root: str = "/",
    device_name_strategy: tuple[str, ...] | list[str] = NAME_STRATEGIES,
    capabilities: tuple[str, ...] | list[str] = CAPABILITIES,
    hook_path: str = HOOK_PATH,
    cuda_version: str | None = None,
    mig_minors: dict[str, int] | None = None,
    extra_mounts: tuple[tuple[str, str, str], ...] | list[tuple[str, str, str]] = (),
    node_fingerprint: str | None = None,
    cdi_version: str = CDI_VERSION,
    device_files: dict[str, Any] | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Return ``(spec, index)`` for the GPUs and driver files given.

    ``gpus``: dicts with ``index``, ``minor`` and optionally ``uuid``, ``mig_mode``, ``mig_devices``
    (each with ``index``, ``uuid``, ``gi``, ``ci``); ``files``: ``DriverFile``s whose paths are in the
    driver root's terms; ``control``: container paths (``/dev/nvidiactl``...); ``driver_root`` and
    ``dev_root``: where those live *in host terms* (what the engine will open). ``extra_mounts``:
    ``(hostPath, containerPath, capability)`` triples (the MPS pipe directory). ``node_fingerprint``: the
    ``devices.node_fingerprint`` of the nodes found (``gather`` gives it), recorded as ``NODES_ANNOTATION``.
    ``device_files``: the driver's device-file parameters (``devices.read_device_file_params``; ``gather`` gives
    them): when the files are not open to everyone, the index's GPU nodes carry their owner and mode and its edits
    the group (``additionalGids``), and so does the spec at ``cdi_version`` 0.7.0 (the module docstring).
    """
    strategy, cuda_version = _checked_args(cdi_version, device_name_strategy, cuda_version, driver_version)
    devices, aliases = _gpu_devices(gpus, strategy, dev_root, mig_minors)
    wanted = set(capabilities)
    found = _file_mounts(files, wanted, driver_root, driver_version, extra_mounts)
    common = _common_edits(control, dev_root, found, _hook(hook_path, found, wanted))
    return _spec_and_index(
        devices,
        common,
        _annotations(driver_version, cuda_version, node_fingerprint),
        aliases=aliases,
        mount_caps=found.caps,
        wanted=wanted,
        cdi_version=cdi_version,
        driver_version=driver_version,
        cuda_version=cuda_version,
        device_files=device_files,
    )


def _checked_args(
    cdi_version: str, device_name_strategy: tuple[str, ...] | list[str], cuda_version: str | None, driver_version: str
) -> tuple[tuple[str, ...], str | None]:
    """``build_spec``'s arguments checked: ``(name strategy, CUDA version)``; ``ValueError`` naming a bad one."""
    if cdi_version not in CDI_VERSIONS:
        raise ValueError(f"cdi_version: {cdi_version!r} is not one this collection writes ({', '.join(CDI_VERSIONS)})")
    strategy = tuple(device_name_strategy)
    bad = sorted(set(strategy) - set(NAME_STRATEGIES))
    if bad or not strategy:
        raise ValueError("device_name_strategy: unknown {}; valid: index, uuid".format(", ".join(bad)))
    if cuda_version is None:
        cuda_version = cuda_version_for(driver_version)
    elif not _CUDA_VERSION.match(str(cuda_version)):
        # nvidia-smi's "Not Found" (no libcuda) or another placeholder passed on from a fact: the spec and the
        # index the shim checks NVIDIA_REQUIRE_CUDA against never carry it
        raise ValueError(
            f"cuda_version: {cuda_version!r} is not a CUDA version (major.minor, such as 12.2); "
            "leave it out to take the driver branch's"
        )
    return strategy, cuda_version


def _gpu_devices(
    gpus: list[dict[str, Any]], strategy: tuple[str, ...], dev_root: str, mig_minors: dict[str, int] | None
) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The spec's devices (each GPU under its names, its MIG devices, ``all``) and the index's aliases (the names
    of a device that the strategy leaves out, each to the name the spec has)."""
    devices, aliases, all_nodes = [], {}, []
    for gpu in sorted(gpus, key=lambda g: int(g["index"])):
        node = f"/dev/nvidia{int(gpu['minor'])}"
        all_nodes.append(node)
        names = _gpu_names(gpu, strategy)
        for name in names:
            devices.append({"name": name, "containerEdits": {"deviceNodes": [_node(node, dev_root)]}})
        for alias in (str(gpu["index"]), gpu.get("uuid")):
            if alias and alias not in names:
                aliases[alias] = names[0]
        if _mig_enabled(gpu):
            mig_devices, mig_aliases = _mig_devices(gpu, node, strategy, dev_root, mig_minors)
            devices += mig_devices
            aliases.update(mig_aliases)
    if all_nodes:
        devices.append({"name": "all", "containerEdits": {"deviceNodes": [_node(n, dev_root) for n in all_nodes]}})
    for device in devices:
        if not _DEVICE_NAME.match(device["name"]):
            raise ValueError("GPU name {!r} is not a valid CDI device name".format(device["name"]))
    return devices, aliases


def _mig_devices(
    gpu: dict[str, Any], node: str, strategy: tuple[str, ...], dev_root: str, mig_minors: dict[str, int] | None
) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The MIG devices of ``gpu`` (whose node is ``node``) and their aliases: ``<gpu>:<mig>`` and/or the MIG UUID,
    each with the GPU's node and the MIG device's nvidia-caps nodes."""
    devices, aliases = [], {}
    for mig in sorted(gpu.get("mig_devices") or (), key=lambda m: int(m.get("index", 0))):
        paths = [node, *_mig_nodes(gpu, mig, mig_minors)]
        edits = {"deviceNodes": [_node(p, dev_root) for p in paths]}
        mig_names = []
        if "index" in strategy or not mig.get("uuid"):
            mig_names.append("{}:{}".format(gpu["index"], mig.get("index", 0)))
        if "uuid" in strategy and mig.get("uuid"):
            mig_names.append(mig["uuid"])
        for name in mig_names:
            devices.append({"name": name, "containerEdits": json.loads(json.dumps(edits))})
        for alias in ("{}:{}".format(gpu["index"], mig.get("index", 0)), mig.get("uuid")):
            if alias and alias not in mig_names:
                aliases[alias] = mig_names[0]
    return devices, aliases


class _Mounts:
    """The spec's mounts, each container path once, with the capabilities each belongs to (``caps``, the index's
    ``mountCapabilities``); the library folders, ``(arch, soname)`` pairs and ``--library`` values for the hook."""

    def __init__(self) -> None:
        self.mounts: list[dict[str, Any]] = []
        self.caps: dict[str, list[str]] = {}
        self.folders: list[str] = []
        self.sonames: set[tuple[str, str]] = set()
        self.libraries: list[str] = []

    def add(self, host: str, container: str, caps: list[str]) -> None:
        if container in self.caps:
            return
        self.caps[container] = caps
        self.mounts.append({"hostPath": host, "containerPath": container, "options": list(MOUNT_OPTIONS)})


def _file_mounts(
    files: list[DriverFile],
    wanted: set[str],
    driver_root: str,
    driver_version: str,
    extra_mounts: tuple[tuple[str, str, str], ...] | list[tuple[str, str, str]],
) -> _Mounts:
    """The mounts of the driver files (and ``extra_mounts``) of the ``wanted`` capabilities, each where it goes in
    the container (the module docstring)."""
    found = _Mounts()
    for item in files:
        if item.capability not in wanted:
            continue
        if item.kind == "library":
            if item.arch == "i386" and "compat32" not in wanted:
                continue
            folder = container_libdir(item.arch)
            if folder not in found.folders:
                found.folders.append(folder)
            caps = [item.capability] + (["compat32"] if item.arch == "i386" else [])
            found.sonames.add((item.arch, item.name))
            container = folder + "/" + os.path.basename(item.resolved)
            if container not in found.caps:
                found.libraries.append(f"{item.arch}::{item.name}::{container}")
            found.add(host_path(driver_root, item.resolved), container, caps)
        elif item.kind == "binary":
            found.add(host_path(driver_root, item.resolved), "/usr/bin/" + item.name, [item.capability])
        elif item.kind == "firmware":
            container = f"{FIRMWARE_DIR}/{driver_version}/{item.name}"
            found.add(host_path(driver_root, item.resolved), container, [item.capability])
        elif item.kind == "ipc":
            found.add(item.resolved, item.path, [item.capability])
        else:  # loader configuration (ICD files)
            found.add(host_path(driver_root, item.resolved), item.path, [item.capability])
    for host, container, capability in extra_mounts:
        if capability in wanted:
            found.add(host, container, [capability])
    return found


def _hook(hook_path: str, found: _Mounts, wanted: set[str]) -> dict[str, Any]:
    """The ``createContainer`` hook: the library folders, the libraries and the links of the ``wanted``
    capabilities (``CONTAINER_LINKS``) to set up in the container."""
    args = [os.path.basename(hook_path), "apply"]
    for folder in found.folders:
        args += ["--folder", folder]
    for library in found.libraries:
        args += ["--library", library]
    for capability in CAPABILITIES:
        if capability not in wanted:
            continue
        for name, target in CONTAINER_LINKS.get(capability, ()):
            for arch, soname in sorted(found.sonames):
                if soname == target:
                    args += ["--link", f"{target}::{container_libdir(arch)}/{name}"]
    return {
        "hookName": "createContainer",
        "path": hook_path,
        "args": args,
        "env": list(HOOK_ENV),
        "timeout": HOOK_TIMEOUT,
    }


def _common_edits(control: list[str], dev_root: str, found: _Mounts, hook: dict[str, Any]) -> dict[str, Any]:
    """The edits every device shares: the control nodes, the driver files' mounts, the hook."""
    common = {}
    if control:
        common["deviceNodes"] = [_node(p, dev_root) for p in control]
    if found.mounts:
        common["mounts"] = found.mounts
    common["hooks"] = [hook]
    return common


def _annotations(driver_version: str, cuda_version: str | None, node_fingerprint: str | None) -> dict[str, str]:
    annotations = {DRIVER_VERSION_ANNOTATION: str(driver_version)}
    if cuda_version:
        annotations[CUDA_VERSION_ANNOTATION] = str(cuda_version)
    if node_fingerprint:
        annotations[NODES_ANNOTATION] = str(node_fingerprint)
    return annotations


def _spec_and_index(
    devices: list[dict[str, Any]],
    common: dict[str, Any],
    annotations: dict[str, str],
    *,
    aliases: dict[str, str],
    mount_caps: dict[str, list[str]],
    wanted: set[str],
    cdi_version: str,
    driver_version: str,
    cuda_version: str | None,
    device_files: dict[str, Any] | None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The spec and the index from their parts; the index's nodes always carry the host's owner and group where the
    device files are not open to everyone, the spec's only from ``ADDITIONAL_GIDS_VERSION`` (the module docstring)."""
    spec = {"cdiVersion": cdi_version, "kind": KIND}
    if cdi_version != CDI_VERSIONS[0]:
        spec["annotations"] = annotations
    owner = node_owner(device_files)
    gids = additional_gids(device_files) if owner else []
    index_devices = {d["name"]: d["containerEdits"] for d in devices}
    index_common = common
    if owner:
        index_devices = {name: _with_owner(edits, owner) for name, edits in index_devices.items()}
        index_common = dict(_with_owner(common, owner), **({"additionalGids": gids} if gids else {}))
        if compare_versions(cdi_version, ">=", ADDITIONAL_GIDS_VERSION):
            devices = [dict(d, containerEdits=index_devices[d["name"]]) for d in devices]
            common = index_common
    spec.update(devices=devices, containerEdits=common)
    index = {
        "gpufleetIndex": INDEX_FORMAT,
        "kind": KIND,
        "driverVersion": str(driver_version),
        "cudaVersion": cuda_version,
        "capabilities": [c for c in CAPABILITIES if c in wanted],
        "devices": index_devices,
        "aliases": aliases,
        "containerEdits": index_common,
        "mountCapabilities": mount_caps,
    }
    if "annotations" not in spec:
        index["specAnnotations"] = annotations
    return spec, index


_CONTROL_ORDER = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset")


def gather(
    root: str = "/",
    driver_root: str = "/",
    dev_root: str = "/",
    *,
    capabilities: str | list | tuple | None = None,
    gpus: list[dict[str, Any]] | None = None,
    driver_version: str | None = None,
    proc_dir: str | None = None,
) -> tuple[str, dict[str, Any]]:
    """Read what ``build_spec`` needs from a host (or a host mounted at ``root``).

    ``driver_root`` and ``dev_root`` are in host terms (what the engines will open), read under ``root``.
    ``gpus`` defaults to one GPU per ``/dev/nvidia<N>`` node found (index = order, minor = N), for a
    caller without ``gpu_facts``. Control nodes: ``/dev/nvidiactl`` always (a GPU container without it
    is useless, and a missing one must fail loudly at start), the uvm pair when the module registered
    its major or the nodes exist, ``/dev/nvidia-modeset`` when it exists. The device-file parameters come from
    ``<proc_dir>/driver/nvidia/params`` (``proc_dir`` defaults to ``<root>/proc``), else the modprobe.d options.
    Returns ``(driver_version, keyword arguments for build_spec)``.
    """
    capabilities = parse_capabilities(capabilities if capabilities is not None else "all")
    driver_dir = host_path(root, driver_root)
    try:
        version, files = find_driver_files(driver_dir, capabilities, driver_version, root=root)
    except OSError as exc:
        raise ValueError(f"cannot read the driver root's ld.so.cache under {driver_dir}: {exc}") from None
    if version is None:
        raise ValueError(
            f"no NVIDIA driver userspace found in the ld.so.cache under {driver_dir} (or, without one, in its "
            "library directories)"
        )
    majors = parse_proc_devices(read_text(host_path(root, "/proc/devices"), tolerant=True, errors="replace") or "")[
        "character"
    ]
    present = {n.path: n for n in scan_device_nodes(os.path.join(host_path(root, dev_root), "dev"))}
    control = [n.path for n in control_nodes(majors, modeset="/dev/nvidia-modeset" in present)]
    control += [p for p in ("/dev/nvidia-uvm", "/dev/nvidia-uvm-tools") if p in present and p not in control]
    control.sort(key=_CONTROL_ORDER.index)
    if gpus is None:
        minors = sorted(m for m in (gpu_minor_of(p) for p in present) if m is not None)
        gpus = [{"index": i, "minor": m} for i, m in enumerate(minors)]
    mig_minors = parse_mig_minors(
        read_text(host_path(root, "/proc/driver/nvidia-caps/mig-minors"), tolerant=True, errors="replace") or ""
    )
    extra = []
    mps = resolve_in_root(root, MPS_PIPE_DIR)
    if os.path.isdir(host_path(root, mps)):
        extra.append((mps, MPS_PIPE_DIR, "compute"))
    return version, {
        "gpus": gpus,
        "files": files,
        "control": control,
        "driver_version": version,
        "driver_root": driver_root,
        "dev_root": dev_root,
        "capabilities": capabilities,
        "mig_minors": mig_minors,
        "extra_mounts": extra,
        "node_fingerprint": node_fingerprint(list(present.values())),
        "device_files": read_device_file_params(root, proc_dir),
    }


# --------------------------------------------------------------------------------------------------
# Rendering: byte-stable for the same input (idempotence is a byte comparison).


def render_json(document: object, compact: bool = False) -> str:
    if compact:
        return json.dumps(document, separators=(",", ":"), ensure_ascii=True) + "\n"
    return json.dumps(document, indent=2, ensure_ascii=True) + "\n"


_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _scalar(value: object) -> str:
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return "null"
    if isinstance(value, int):
        return str(value)
    return json.dumps(str(value), ensure_ascii=True)  # a JSON string is a valid YAML double-quoted scalar


def _key(key: str) -> str:
    return key if _PLAIN_KEY.match(key) else json.dumps(key, ensure_ascii=True)


def _is_scalar(value: object) -> bool:
    return not isinstance(value, (dict, list)) or not value


def _empty(value: object) -> str:
    return "{}" if isinstance(value, dict) else "[]"


def _yaml(value: dict | list, indent: int, lines: list[str]) -> None:
    pad = " " * indent
    if isinstance(value, dict):
        for key, item in value.items():
            if _is_scalar(item):
                text = _empty(item) if isinstance(item, (dict, list)) else _scalar(item)
                lines.append(f"{pad}{_key(key)}: {text}")
            else:
                lines.append(f"{pad}{_key(key)}:")
                _yaml(item, indent + 2, lines)
    else:
        for item in value:
            if _is_scalar(item):
                text = _empty(item) if isinstance(item, (dict, list)) else _scalar(item)
                lines.append(f"{pad}- {text}")
            else:
                sub = []
                _yaml(item, indent + 2, sub)
                lines.append(f"{pad}- {sub[0][indent + 2 :]}")
                lines.extend(sub[1:])


def render_yaml(document: dict | list, header: str | None = None) -> str:
    """Block-style YAML with every string double-quoted: deterministic, and read back by any YAML 1.1
    or 1.2 parser (the engines' Go YAML included) as exactly ``document``."""
    lines = [f"# {line}" for line in (header or "").splitlines()] if header else []
    lines.append("---")
    _yaml(document, 0, lines)
    return "\n".join(lines) + "\n"


def render(document: dict | list, fmt: str = "yaml", header: str | None = None) -> str:
    if fmt == "json":
        return render_json(document)
    if fmt == "yaml":
        return render_yaml(document, header)
    raise ValueError(f"unknown format {fmt!r} (yaml or json)")
