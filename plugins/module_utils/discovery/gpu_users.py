# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Which processes hold an NVIDIA device open, and which container (engine, id) each one runs in.

The question the driver role asks before it changes the driver or reboots: "is anything still using a GPU?".
Asking one engine (``docker ps`` + ``inspect``) misses ``--gpus`` containers whose device request names no
driver, ``NVIDIA_VISIBLE_DEVICES`` containers under the ``nvidia`` runtime, CDI devices, Kubernetes pods under
containerd or CRI-O, podman, and plain host processes. The kernel knows the answer for all of them: every open
file of every process is a link in ``/proc/<pid>/fd``, and a process holding ``/dev/nvidia*`` (or ``nvidiactl``,
``nvidia-uvm``, ``nvidia-caps/*``) there is using the driver, whatever started it. This is what ``fuser
/dev/nvidia*`` and ``lsof`` do.

Each such process is named by pid and command, with the device paths it holds, and the container it runs in,
told by the cgroup path in ``/proc/<pid>/cgroup`` (both the cgroup v2 ``0::`` line and the v1 hierarchies):

* docker: ``docker-<id>.scope`` (systemd cgroup driver) or ``/docker/<id>`` (cgroupfs); moby
  ``daemon/oci_linux.go`` (scope prefix ``docker``, cgroupfs parent ``/docker``), docker 20.10 - 28;
* containerd's CRI plugin (Kubernetes): ``cri-containerd-<id>.scope`` (systemd driver: runc's
  ``slice:prefix:name`` with prefix ``cri-containerd``) or ``<kubepods parent>/pod<uid>/<id>`` (cgroupfs);
  containerd ``internal/cri/server/podsandbox/helpers_linux.go`` ``getCgroupsPath`` (v2.0; ``pkg/cri/...`` in 1.6/1.7);
* CRI-O: ``crio-<id>.scope`` or ``<parent>/crio-<id>``; cri-o ``internal/config/cgmgr`` (``crioPrefix = "crio"``);
  its monitor's ``crio-conmon-<id>.scope`` is not a container;
* podman: ``libpod-<id>.scope`` (systemd cgroup manager, under ``machine.slice`` or a user's slice when rootless)
  or ``/libpod_parent/libpod-<id>`` (cgroupfs, sometimes with a ``/ctr`` child); ``podman-run(1)``
  ``--cgroup-parent``, and podman 5.4 on the simulated cgroup v1 node (``tests/integration/test_gpu_users.py``);
* Kubernetes pods in general: ``kubepods`` slices carry the pod UID (``pod<uid>``, ``_`` for ``-`` in the
  systemd form), whatever the runtime;
* other containerd clients (``ctr run``, nerdctl's own namespace): containerd's default cgroup is
  ``/<namespace>/<id>`` (``pkg/oci/spec.go`` ``populateDefaultUnixSpec``), which names no engine: such a
  process is recognised by its ``containerd-shim*`` ancestor, whose command line carries ``-namespace`` and
  ``-id`` (namespace ``moby`` is docker, ``k8s.io`` Kubernetes).

When the host under ``root`` is itself a container (a simulated node, a kind node), every cgroup path starts
with the one its PID 1 sits in; that prefix is stripped first, so the host's own processes are not taken for
the outer container.

Bounded: at most ``max_pids`` processes and ``max_fds`` descriptors in all are looked at and ``max_users``
reported (``truncated`` says when a bound was reached); links are only read (``readlink``), never followed or
opened; a process that exits or refuses (EACCES: another user's, without root) while it is read is skipped and
counted. Standard library only (target Pythons 3.8+).
"""

from __future__ import annotations

import os
import re
from typing import Iterable

from ..base.fileio import read_text
from ..runtime.registry import INFO, cgroup_patterns

DEVICE_PREFIX = "/dev/nvidia"
MAX_PIDS = 65536
MAX_FDS = 1_000_000
MAX_USERS = 256
_MAX_ANCESTORS = 32
_HEX64 = "[0-9a-f]{64}"

# (pattern over a cgroup path, engine), from every engine's ``cgroup_patterns``. The last match in a path wins (nested
# engines: the innermost).
_CGROUP_PATTERNS = tuple(cgroup_patterns())
_KUBEPODS = re.compile(r"kubepods")
_POD_UID = re.compile(r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})")
_KUBE_CONTAINER = re.compile(rf"/({_HEX64})(?:\.scope)?(?:/|$)")
# containerd namespace -> the engine whose containers run there; a shim of another namespace is the shims' owner's
_SHIM_NAMESPACES = {info.shim_namespace: name for name, info in INFO.items() if info.shim_namespace}
_SHIM_OWNER = next(name for name, info in INFO.items() if info.owns_shims)


def _read(path: str, limit: int = 65536) -> str | None:
    return read_text(path, tolerant=True, errors="replace", limit=limit)


def parse_cgroup(text: str) -> dict[str, str]:
    """``/proc/<pid>/cgroup`` as {hierarchy key: path}: ``0`` for the v2 line, else the controllers
    (``name=systemd``, ``memory``, ...) of each v1 line."""
    paths = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        key = "0" if parts[0] == "0" and not parts[1] else parts[1]
        paths[key] = parts[2]
    return paths


def host_cgroup_base(pid1_cgroup: dict[str, str]) -> dict[str, str]:
    """Per hierarchy, the cgroup the host under ``root`` lives in: PID 1's, less a trailing ``/init.scope``
    (``/`` on a host that is not a container)."""
    base = {}
    for key, path in pid1_cgroup.items():
        inner = path[: -len("/init.scope")] if path.endswith("/init.scope") else path
        base[key] = inner.rstrip("/")
    return base


def _relative(path: str, base: str) -> str:
    if base and (path == base or path.startswith(base + "/")):
        return path[len(base) :] or "/"
    return path


def _ordered(paths: dict[str, str]) -> list[str]:
    keys = ["0", "name=systemd", *sorted(k for k in paths if k not in ("0", "name=systemd"))]
    return [k for k in keys if k in paths]


def container_of(cgroup: dict[str, str], base: dict[str, str] | None = None) -> dict[str, str | None] | None:
    """The container a process runs in from its cgroup paths: ``{engine, id, pod_uid, namespace}`` (the
    containerd namespace, known only from a shim), None when the paths
    name no container. ``engine`` is ``kubernetes`` for a pod whose cgroupfs path does not say the runtime."""
    base = base or {}
    for key in _ordered(cgroup):
        path = _relative(cgroup[key], base.get(key, ""))
        found = None
        for pattern, engine in _CGROUP_PATTERNS:
            for match in pattern.finditer(path):
                if found is None or match.start() > found[0]:
                    found = (match.start(), engine, match.group(1))
        pod = _POD_UID.search(path) if _KUBEPODS.search(path) else None
        pod_uid = pod.group(1).replace("_", "-") if pod else None
        if found is not None:
            return {"engine": found[1], "id": found[2], "pod_uid": pod_uid, "namespace": None}
        if pod is not None:
            tail = path[pod.end() :]
            match = _KUBE_CONTAINER.search(tail)
            cid = match.group(1) if match else None
            return {"engine": "kubernetes", "id": cid, "pod_uid": pod_uid, "namespace": None}
    return None


# The kernel keeps a process's command name in 16 bytes with its NUL (TASK_COMM_LEN, include/linux/sched.h), so
# /proc/<pid>/stat and comm show at most 15: NVIDIA's nvidia-persistenced is "nvidia-persiste", nv-fabricmanager
# "nv-fabricmanage".
COMM_LEN = 15


def command_in(command: str | None, names: Iterable[str]) -> bool:
    """Whether ``command`` (a name as ``/proc`` shows it) is one of ``names`` (programs' full names), the kernel's
    15-byte cut taken into account."""
    if not command:
        return False
    return any(command == n or (len(command) == COMM_LEN and n[:COMM_LEN] == command) for n in map(str, names))


def _stat_fields(proc: str, pid: str) -> tuple[str, int] | None:
    """(command name, parent pid) from ``/proc/<pid>/stat``; the name is between the first ``(`` and the
    last ``)`` (it may hold either)."""
    text = _read(os.path.join(proc, pid, "stat"), 4096)
    if not text:
        return None
    left, right = text.find("("), text.rfind(")")
    if left < 0 or right < left:
        return None
    rest = text[right + 1 :].split()
    try:
        return text[left + 1 : right], int(rest[1])
    except (IndexError, ValueError):
        return None


def _shim_of(proc: str, pid: str, parents: dict[str, tuple[str, int] | None]) -> dict[str, str | None] | None:
    """The containerd shim among the ancestors of ``pid`` (``{namespace, id}`` from its command line), or None."""
    current = pid
    for _step in range(_MAX_ANCESTORS):
        if current not in parents:
            parents[current] = _stat_fields(proc, current)
        fields = parents[current]
        if fields is None or fields[1] <= 1:
            return None
        parent = str(fields[1])
        if parent not in parents:
            parents[parent] = _stat_fields(proc, parent)
        if parents[parent] is not None and parents[parent][0].startswith("containerd-shim"):
            argv = (_read(os.path.join(proc, parent, "cmdline"), 8192) or "").split("\0")
            shim = {"namespace": None, "id": None}
            for position, arg in enumerate(argv[:-1]):
                if arg in ("-namespace", "--namespace"):
                    shim["namespace"] = argv[position + 1]
                elif arg in ("-id", "--id"):
                    shim["id"] = argv[position + 1]
            return shim
        current = parent
    return None


def _devices(fd_dir: str, budget: list[int]) -> tuple[list[str], bool]:
    """The NVIDIA device paths among the open files in ``fd_dir`` (sorted, unique) and whether the budget
    of descriptors ran out. Raises OSError when the directory cannot be listed."""
    held = set()
    with os.scandir(fd_dir) as entries:
        for entry in entries:
            if budget[0] <= 0:
                return sorted(held), True
            budget[0] -= 1
            try:
                target = os.readlink(entry.path)
            except OSError:
                continue  # closed meanwhile
            if target.startswith(DEVICE_PREFIX) and " (deleted)" not in target:
                held.add(target)
    return sorted(held), False


def gpu_users(
    root: str = "/",
    max_pids: int = MAX_PIDS,
    max_fds: int = MAX_FDS,
    max_users: int = MAX_USERS,
    exclude_pids: tuple[int, ...] = (),
) -> dict[str, object]:
    """The processes under ``root``'s ``/proc`` holding ``/dev/nvidia*`` open.

    Returns ``{processes: [{pid, command, devices, container: {engine, id, pod_uid, namespace} | None}], scanned,
    unreadable, truncated}``; processes sorted by pid. ``exclude_pids`` are left out (the caller itself).
    """
    proc = os.path.join(root, "proc")
    result = {"processes": [], "scanned": 0, "unreadable": 0, "truncated": False}
    try:
        names = [n for n in os.listdir(proc) if n.isdigit()]
    except OSError:
        return result
    names.sort(key=int)
    if len(names) > max_pids:
        names = names[:max_pids]
        result["truncated"] = True
    skip = {str(p) for p in exclude_pids}
    base = host_cgroup_base(parse_cgroup(_read(os.path.join(proc, "1", "cgroup")) or ""))
    budget = [max_fds]
    parents = {}
    processes = []
    for pid in names:
        if pid in skip:
            continue
        fd_dir = os.path.join(proc, pid, "fd")
        if os.path.islink(fd_dir):
            continue  # never the case in a real /proc; a fixture link is not followed
        result["scanned"] += 1
        try:
            held, exhausted = _devices(fd_dir, budget)
        except FileNotFoundError:
            continue  # exited
        except OSError:
            result["unreadable"] += 1  # EACCES (another user's, without root), or gone mid-read
            continue
        if exhausted:
            result["truncated"] = True
        if held:
            if len(processes) >= max_users:
                result["truncated"] = True
                break
            fields = _stat_fields(proc, pid)
            parents[pid] = fields
            container = container_of(parse_cgroup(_read(os.path.join(proc, pid, "cgroup")) or ""), base)
            if container is None or container["engine"] == "kubernetes" or container["id"] is None:
                shim = _shim_of(proc, pid, parents)
                if shim is not None:
                    engine = _SHIM_NAMESPACES.get(shim["namespace"] or "", _SHIM_OWNER)
                    if container is None:
                        container = {"engine": engine, "id": shim["id"], "pod_uid": None, "namespace": None}
                    else:
                        container["engine"] = engine
                        container["id"] = container["id"] or shim["id"]
                    container["namespace"] = shim["namespace"]
            processes.append(
                {
                    "pid": int(pid),
                    "command": fields[0] if fields else None,
                    "devices": held,
                    "container": container,
                }
            )
        if exhausted:
            break
    result["processes"] = processes
    return result
