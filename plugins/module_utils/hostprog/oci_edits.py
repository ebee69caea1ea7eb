# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""How a GPU request lands in the bundle's ``config.json``: the request's devices resolved in the shim's index (the
compact JSON sibling of the CDI spec that ``cdi_spec`` writes), their CDI ``containerEdits`` applied, the MIG
capability and IMEX channel nodes added, NVIDIA's legacy hook dropped.

On the runtime shim's start path: standard library only, nothing heavy.
"""

from __future__ import annotations

import os
import stat

from .oci import Request, check_requirements, gpu_request
from .oci_config import RequestError, _q, read_limited

# ``typing`` imports ``re`` (milliseconds in every GPU container start): its names are for type checkers only.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable

LEGACY_HOOK = "nvidia-container-runtime-hook"
# The annotation the shim leaves in config.json: "these GPUs were injected by gpufleet" (the legacy
# hook entry point reads it from the OCI state and then does nothing).
INJECTED_ANNOTATION = "gpufleet.nvidia/injected"
MIG_MINORS = "/proc/driver/nvidia-caps/mig-minors"
MIG_CAP_DIR = "/dev/nvidia-caps"
IMEX_CHANNEL_DIR = "/dev/nvidia-caps-imex-channels"


def _is_legacy_hook(hook: dict) -> bool:
    return os.path.basename(str(hook.get("path", ""))) == LEGACY_HOOK


def has_legacy_hook(config: dict) -> bool:
    return any(_is_legacy_hook(h) for h in ((config.get("hooks") or {}).get("prestart") or ()))


def remove_legacy_hook(config: dict) -> bool:
    """Drop NVIDIA's ``nvidia-container-runtime-hook`` from the prestart hooks; True when one was there."""
    hooks = config.get("hooks") or {}
    prestart = hooks.get("prestart") or []
    kept = [h for h in prestart if not _is_legacy_hook(h)]
    if len(kept) == len(prestart):
        return False
    if kept:
        hooks["prestart"] = kept
    else:
        hooks.pop("prestart", None)
    return True


def mig_cap_path(cap: str, minors_path: str = MIG_MINORS) -> str:
    """``/dev/nvidia-caps/nvidia-cap<minor>`` of the MIG capability ``cap`` (``config``/``monitor``), its minor from
    the driver's ``mig-minors`` (``config 1``); ``RequestError`` when the driver has no MIG capabilities."""
    try:
        text = read_limited(minors_path, 1 << 20, minors_path).decode("ascii", "replace")
    except (OSError, RequestError):
        text = ""
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == cap and parts[1].isdigit() and parts[1].isascii():
            return f"{MIG_CAP_DIR}/nvidia-cap{int(parts[1])}"
    raise RequestError(
        f"NVIDIA_MIG_{cap.upper()}_DEVICES: the driver lists no MIG {cap} capability in {minors_path} "
        "(no MIG-capable GPU, or the nvidia-caps nodes are not set up)"
    )


def special_edits(request: Request, minors_path: str = MIG_MINORS) -> list[dict]:
    """The CDI edits of ``request``'s MIG capabilities and IMEX channels: device nodes, each resolved on the host
    (``apply_edits`` stats them, so a missing node fails the start with its path)."""
    nodes = [mig_cap_path(cap, minors_path) for cap in request.mig_caps]
    nodes += [f"{IMEX_CHANNEL_DIR}/channel{n}" for n in request.imex_channels]
    return [{"deviceNodes": [{"path": path, "hostPath": path} for path in nodes]}] if nodes else []


def resolve_devices(index: dict, names: list[str]) -> list[dict]:
    """The ``containerEdits`` of each requested device name, in order; ``RequestError`` for an unknown
    one. Plain indexes, ``GPU-``/``MIG-`` UUIDs and ``<gpu>:<mig>`` are looked up as the spec names
    them; a UUID also matches when the spec only names devices by index (through ``aliases``)."""
    devices = index.get("devices") or {}
    aliases = index.get("aliases") or {}
    edits = []
    for name in names:
        key = name if name in devices else aliases.get(name)
        if key is None or key not in devices:
            known = ", ".join(sorted(devices)) or "none"
            raise RequestError(f"unknown GPU {_q(name)} requested (this node has: {known})")
        edits.append(devices[key])
    return edits


def _stat_node(path: str) -> tuple[int, int]:
    st = os.stat(path)
    if not stat.S_ISCHR(st.st_mode):
        raise RequestError(f"{path} is not a character device")
    return os.major(st.st_rdev), os.minor(st.st_rdev)


def _is_id(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 32


def _node_owner(node: dict, user: object) -> dict:
    """The ``fileMode``/``uid``/``gid`` of a device node in the container: the index's group and mode (the host's
    device-file parameters, where they are not root:root 0666) owned by the container's user ``user`` (its uid; the
    index's owner when there is none), else 0666 root:root.

    The container's user, not the host's owner: the shim edits the bundle's ``config.json`` only, and the engine
    starts ``docker exec``/``kubectl exec`` processes from its own copy of the spec, without the group the shim adds;
    as the node's owner such a process of the same user still opens its GPU (the CDI library gives a node that names
    no owner to the container's user in the same way, pkg/cdi/container-edits.go ``Apply``)."""
    mode, uid, gid = node.get("fileMode"), node.get("uid"), node.get("gid")
    if not (_is_id(mode) and mode <= 0o777 and _is_id(uid) and _is_id(gid)):
        return {"fileMode": 0o666, "uid": 0, "gid": 0}
    return {"fileMode": mode, "uid": user if _is_id(user) else uid, "gid": gid}


def apply_edits(
    config: dict,
    edits: list[dict],
    capabilities: tuple[str, ...] | list[str],
    mount_capabilities: dict[str, list[str]] | None = None,
    stat_node: Callable[[str], tuple[int, int]] = _stat_node,
) -> dict:
    """Apply CDI ``containerEdits`` dicts to ``config`` in place.

    Device nodes go to ``linux.devices`` and to the ``linux.resources.devices`` allow list with the
    major/minor the host node has now (``stat_node(hostPath)``); mounts whose required capabilities
    (``mount_capabilities[containerPath]``, a list) are not all in ``capabilities`` are skipped; hooks
    and env are appended. A node is made with the group and mode the index gives it (the host's device-file
    parameters, ``cdi/spec.node_owner``), owned by the container's user (``_node_owner``), else root:root 0666;
    the edits' ``additionalGids`` (the group
    of device files not open to everyone) join ``process.user.additionalGids``, so the container's user may open
    them, as the CDI library does for a CDI-aware engine. Everything is de-duplicated (by path, destination, hook,
    env key, group), so applying the same edits twice, or after a CDI-aware engine did, changes nothing.
    """
    mount_capabilities = mount_capabilities or {}
    wanted = set(capabilities)
    linux = config.setdefault("linux", {})
    devices = linux.get("devices") or []
    allow = (linux.get("resources") or {}).get("devices") or []
    mounts = config.get("mounts") or []
    hooks = config.get("hooks") or {}
    process = config.setdefault("process", {})
    env = process.get("env") or []
    have_paths = {d.get("path") for d in devices}
    have_dest = {m.get("destination") for m in mounts}
    have_env = {e.partition("=")[0] for e in env}
    have_allow = {(a.get("type"), a.get("major"), a.get("minor")) for a in allow if a.get("allow")}

    for edit in edits:
        for node in edit.get("deviceNodes") or ():
            path = node["path"]
            host = node.get("hostPath") or path
            if "major" in node and "minor" in node:
                major, minor = node["major"], node["minor"]
            else:
                try:
                    major, minor = stat_node(host)
                except OSError as exc:
                    reason = exc.strerror or exc
                    raise RequestError(f"GPU device node {host} is missing on this host ({reason})") from None
            if path not in have_paths:
                have_paths.add(path)
                owner = _node_owner(node, (process.get("user") or {}).get("uid"))
                devices.append({"path": path, "type": "c", "major": major, "minor": minor, **owner})
            if ("c", major, minor) not in have_allow:
                have_allow.add(("c", major, minor))
                allow.append({"allow": True, "type": "c", "major": major, "minor": minor, "access": "rwm"})
        for mount in edit.get("mounts") or ():
            dest = mount["containerPath"]
            if dest in have_dest:
                continue
            if not wanted.issuperset(mount_capabilities.get(dest, ())):
                continue
            have_dest.add(dest)
            entry = {"destination": dest, "source": mount["hostPath"], "options": list(mount.get("options") or [])}
            entry["type"] = mount.get("type") or "bind"
            mounts.append(entry)
        for hook in edit.get("hooks") or ():
            name = hook.get("hookName")
            entry = {k: hook[k] for k in ("path", "args", "env", "timeout") if k in hook}
            bucket = hooks.setdefault(name, [])
            if entry not in bucket:
                bucket.append(entry)
        for item in edit.get("env") or ():
            key = item.partition("=")[0]
            if key not in have_env:
                have_env.add(key)
                env.append(item)

    linux["devices"] = devices
    if allow:
        linux.setdefault("resources", {})["devices"] = allow
    config["mounts"] = mounts
    if hooks:
        config["hooks"] = hooks
    process["env"] = env
    gids = [g for edit in edits for g in edit.get("additionalGids") or () if _is_id(g) and g != 0]
    if gids:
        user = process.setdefault("user", {"uid": 0, "gid": 0})
        have = user.get("additionalGids") or []
        user["additionalGids"] = have + [g for g in dict.fromkeys(gids) if g not in have]
    return config


def inject(
    config: dict,
    index: dict,
    stat_node: Callable[[str], tuple[int, int]] = _stat_node,
    accept_envvar_unprivileged: bool = True,
    accept_volume_mounts: bool = False,
    *,
    accept_cdi_annotations_unprivileged: bool = True,
    request: Request | None = None,
    mig_minors: str = MIG_MINORS,
) -> bool:
    """The shim's whole job on ``create``: find the request, check it, apply the edits.

    Returns True when ``config`` was changed (it is changed in place), False for a container that does
    not ask for GPUs (only NVIDIA's legacy hook may have been removed: then True as well).
    ``request``: the caller's ``gpu_request(config, ...)``, when it already has it (computed here otherwise);
    ``mig_minors``: the driver's MIG minors file (a test's copy).
    Raises ``RequestError`` with the one-line reason the start must fail with.
    """
    legacy = remove_legacy_hook(config)
    if request is None:
        request = gpu_request(
            config, accept_envvar_unprivileged, accept_volume_mounts, accept_cdi_annotations_unprivileged
        )
    if request is None:
        return legacy
    names = request.devices
    device_edits = resolve_devices(index, names)
    check_requirements(request.env, index.get("cudaVersion"), index.get("driverVersion"))
    provided = set(index.get("capabilities") or request.capabilities)
    missing = [c for c in request.capabilities if c not in provided]
    if missing and request.env.get("NVIDIA_DRIVER_CAPABILITIES", "").strip() != "all":
        raise RequestError(
            "driver capabilities {} requested but the CDI spec was generated without them".format(",".join(missing))
        )
    edits = [index.get("containerEdits") or {}, *device_edits, *special_edits(request, mig_minors)]
    apply_edits(config, edits, request.capabilities, index.get("mountCapabilities"), stat_node)
    config.setdefault("annotations", {})[INJECTED_ANNOTATION] = ",".join(names) or "none"
    return True
