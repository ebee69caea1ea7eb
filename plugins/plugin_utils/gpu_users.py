# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the driver role does about the processes holding a GPU (``ansible_facts.nvidia.gpu_users``).

Controller only, pure. ``gate(gpu_users, ...)`` is the rule the driver role applies before it changes the driver
packages and before it reboots: nothing may hold ``/dev/nvidia*`` open then (a CUDA process whose driver
userspace changes under it, or whose kernel module goes away, dies or corrupts its work). It refuses, naming
each process and container and the variable that changes the answer, unless told to drain: then it says which
containers to stop, by engine. Only docker and podman containers are stopped (``docker stop`` / ``podman stop``
by id: both engines keep a stopped container stopped, whatever its restart policy). A Kubernetes pod would be
started again by the kubelet (the node must be drained with ``kubectl drain``), a ``ctr``/CRI-O container has no
stop command this role can rely on (no ``crictl`` on the hosts), and a host process belongs to someone: for
those the role refuses, with the reason. ``describe`` is the one wording of a process, for the messages and the
fleet report.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery.gpu_users import command_in
from ansible_collections.gpufleet.nvidia.plugins.module_utils.runtime.registry import STOPPABLE
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.mapping import get as _get

# Driver daemons that hold the devices by design and stop with the driver: they never block.
DEFAULT_IGNORE = ("nvidia-persistenced", "nv-fabricmanager")
_KUBERNETES_FIX = "drain the Kubernetes node first (kubectl drain <node> --ignore-daemonsets)"


class GateError(ValueError):
    """The input is not ``ansible_facts.nvidia.gpu_users``, or ``checked_gate``'s ``drain`` or ``ignore`` is not what
    it takes."""


def processes(gpu_users: Any) -> list[dict[str, Any]]:
    """The processes of a ``gpu_users`` fact as plain dicts ``{pid, command, devices, engine, container_id,
    pod_uid, namespace}``; ``engine`` is None for a process in no container."""
    if gpu_users is None:
        return []
    if not isinstance(gpu_users, Mapping):
        raise GateError("gpu_users must be ansible_facts.nvidia.gpu_users (a dict with 'processes'), from gpu_facts")
    out = []
    for proc in _get(gpu_users, "processes", []):
        container = _get(proc, "container")
        out.append(
            {
                "pid": _get(proc, "pid"),
                "command": str(_get(proc, "command", "?")),
                "devices": [str(d) for d in _get(proc, "devices", [])],
                "engine": str(_get(container, "engine")) if container else None,
                "container_id": _get(container, "id") if container else None,
                "pod_uid": _get(container, "pod_uid") if container else None,
                "namespace": _get(container, "namespace") if container else None,
            }
        )
    return out


def describe(proc: Mapping[str, Any]) -> str:
    """``pid 4242 (python3) in docker container 4f3c2b1a0e9d holds /dev/nvidia0, /dev/nvidiactl``."""
    text = f"pid {proc['pid']} ({proc['command']})"
    if proc["engine"]:
        cid = str(proc["container_id"] or "?")
        text += f" in {proc['engine']} container {cid[:12] if len(cid) == 64 else cid}"
        if proc["pod_uid"]:
            text += f" of pod {proc['pod_uid']}"
    else:
        text += " on the host"
    return text + " holds " + ", ".join(proc["devices"])


def _blocker(proc: Mapping[str, Any]) -> str | None:
    """Why the role cannot stop this process itself, None when it can (a docker or podman container)."""
    engine = proc["engine"]
    if engine in STOPPABLE and proc["container_id"]:
        return None
    if proc["pod_uid"] or engine == "kubernetes" or proc["namespace"] == "k8s.io":
        return f"a Kubernetes pod: {_KUBERNETES_FIX}"
    if engine:
        return f"a {engine} container the role does not stop (only {' and '.join(STOPPABLE)} ones): stop it yourself"
    return "a host process: stop it yourself"


def gate(
    gpu_users: Any,
    drain: bool = False,
    ignore: Iterable[str] | None = DEFAULT_IGNORE,
    reason: str = "the driver change",
    host: str = "",
    *,
    stop_timeout: int | None = None,
    setting: str = "driver_drain",
) -> dict[str, Any]:
    """What the driver role does before ``reason`` (``the driver change``, ``the reboot``).

    Returns ``{busy, refuse, message, stop, users, ignored, warnings}``: ``users`` the processes that block
    (``processes()``), ``ignored`` those whose command is in ``ignore``; ``stop`` the commands to run (``{engine,
    id, argv}``, one per container) when draining, with the engine's own stop timeout (``-t <stop_timeout>``: the
    seconds between SIGTERM and SIGKILL, ``docker stop`` and ``podman stop`` alike) when given; ``stoppable`` the same
    commands for the containers a drain could stop even when something else refuses (what check mode reports);
    ``refuse`` and ``message`` when the role must stop the host. ``setting`` is the variable that asked for the drain,
    as the message names it.
    """
    ignore_set = {str(i) for i in (ignore or ())}
    every = processes(gpu_users)
    users = [p for p in every if not command_in(p["command"], ignore_set)]
    ignored = [p for p in every if command_in(p["command"], ignore_set)]
    warnings = []
    if _get(gpu_users, "truncated", False):
        warnings.append("the scan of /proc stopped at its bounds; processes beyond them were not looked at")
    if _get(gpu_users, "unreadable", 0):
        warnings.append(f"{_get(gpu_users, 'unreadable')} processes' open files could not be read (not root?)")
    result = {"busy": bool(users), "refuse": False, "message": "", "stop": [], "users": users, "ignored": ignored}
    result["stoppable"] = []
    result["warnings"] = warnings
    if not users:
        return result
    prefix = f"{host}: " if host else ""
    named = "; ".join(describe(p) for p in users)
    if not drain:
        result["refuse"] = True
        result["message"] = (
            f"{prefix}refusing {reason}: {len(users)} process(es) hold an NVIDIA GPU: {named}. "
            "Stop them, or set driver_drain=true to have the role stop the docker and podman containers among them "
            "(Kubernetes pods: kubectl drain the node; host processes: stop them yourself); "
            f"driver daemons that may stay are listed in driver_drain_ignore ({', '.join(sorted(ignore_set))})."
        )
        return result
    stoppable: list[dict[str, Any]] = []
    seen = set()
    for proc in users:
        key = (proc["engine"], proc["container_id"])
        if _blocker(proc) is None and key not in seen:
            seen.add(key)
            timeout = ["-t", str(int(stop_timeout))] if stop_timeout is not None else []
            argv = [STOPPABLE[proc["engine"]], "stop", *timeout, str(proc["container_id"])]
            stoppable.append({"engine": proc["engine"], "id": proc["container_id"], "argv": argv})
    result["stoppable"] = stoppable
    blocked = [(p, _blocker(p)) for p in users]
    blocked = [(p, why) for p, why in blocked if why]
    if blocked:
        result["refuse"] = True
        result["message"] = (
            f"{prefix}refusing {reason} although {setting}=true: "
            + "; ".join(f"{describe(p)}, {why}" for p, why in blocked)
            + ". The role stops only docker and podman containers."
        )
        return result
    result["stop"] = stoppable
    return result


def checked_gate(
    gpu_users: Any,
    drain: Any = False,
    ignore: Any = DEFAULT_IGNORE,
    reason: Any = "the driver change",
    host: Any = "",
    *,
    stop_timeout: Any = None,
    setting: Any = "driver_drain",
) -> dict[str, Any]:
    """``gate`` on the arguments as a playbook passes them: ``GateError`` when ``drain`` is not a bool or ``ignore``
    is not a list of names (a string, a mapping or null is not); ``reason`` and ``host`` as strings."""
    if not isinstance(drain, bool):
        raise GateError(f"drain must be a bool (driver_drain | gpufleet.nvidia.as_bool), got {drain!r}")
    if ignore is None or isinstance(ignore, (str, bytes, Mapping)) or not isinstance(ignore, Iterable):
        raise GateError(f"ignore must be a list of command names, got {ignore!r}")
    if stop_timeout is not None and (isinstance(stop_timeout, bool) or not isinstance(stop_timeout, int)):
        raise GateError(f"stop_timeout must be a number of seconds (as_int), got {stop_timeout!r}")
    return gate(
        gpu_users,
        drain=drain,
        ignore=ignore,
        reason=str(reason),
        host=str(host),
        stop_timeout=stop_timeout,
        setting=str(setting),
    )
