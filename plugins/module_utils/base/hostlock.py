# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""One ``site.yml`` run at a time on a host: an ``flock`` on a file under ``/run``, kept by a small holder process.

Why an flock held by a process, not a lock file that names its owner: the kernel drops an flock the moment its
holder is gone (killed, or the host rebooted: the process is gone and ``/run`` is a tmpfs), so a lock is never
judged stale by guessing. A lock file with an owner would need the owner's liveness, and the owner of a run is the
control node's ``ansible-playbook``, which the host cannot see. Ansible's modules end with each task, so
``acquire`` forks a holder that keeps the lock until ``release`` ends it or its lease runs out: a run killed on the
control node (no release) frees its hosts after the lease, not never.

The lock file holds the holder's description (JSON: ``owner``, ``pid``, ``started``, ``lease_until``), written by
the process that holds the lock, for the message a waiting run gives. Standard library only (target Pythons 3.8+).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import signal
import time
from dataclasses import dataclass, field

from .runner import Failure, Host, Result

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable

DEFAULT_PATH = "/run/gpufleet-nvidia/site.lock"


class LockBusy(Exception):
    """Another run holds the lock (``holder``: its description, possibly empty) after ``waited`` seconds."""

    def __init__(self, path: str, holder: dict[str, Any], waited: float) -> None:
        self.path = path
        self.holder = holder
        self.waited = waited
        super().__init__(busy_message(path, holder, waited))


def _when(stamp: Any) -> str:
    if not isinstance(stamp, (int, float)):
        return "?"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(stamp))


def busy_message(path: str, holder: dict[str, Any], waited: float) -> str:
    pid = holder.get("pid", "?")
    return (
        f"another run holds this host's lock {path} (owner {holder.get('owner', '?')!r}, holder PID {pid}, "
        f"since {_when(holder.get('started'))}, lease until {_when(holder.get('lease_until'))}); waited "
        f"{int(waited)}s. Let that run finish and rerun, or wait longer (gpufleet_lock_timeout). When no run is going "
        f"on (its control node was killed), end the holder on this host: kill {pid} (the lock goes with it; it also "
        "goes by itself when the lease ends or the host reboots)."
    )


def read_holder(path: str) -> dict[str, Any]:
    """The holder's description written in the lock file ({} when there is none or it cannot be read)."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.loads(f.read(4096) or "{}")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return False
        raise
    return True


def _hold(fd: int, lease: float) -> None:
    """The holder's body (in the forked child): keep ``fd`` (and its flock) open until the lease ends or a signal."""
    try:
        os.setsid()
        os.chdir("/")
        devnull = os.open(os.devnull, os.O_RDWR)
        for n in (0, 1, 2):
            os.dup2(devnull, n)
        os.closerange(3, fd)
        os.closerange(fd + 1, 65536)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        end = time.time() + lease
        while True:
            left = end - time.time()
            if left <= 0:
                break
            time.sleep(min(left, 60))
    finally:
        os._exit(0)


def _open(path: str) -> int:
    os.makedirs(os.path.dirname(path) or ".", 0o755, exist_ok=True)
    return os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0), 0o644)


def acquire(
    path: str,
    owner: str,
    timeout: float,
    lease: float,
    *,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    fork: Callable[[], int] = os.fork,
) -> tuple[bool, dict[str, Any]]:
    """Take the lock for ``owner``, waiting at most ``timeout`` seconds: ``(taken_now, holder)``.

    ``taken_now`` is False when ``owner`` holds it already (a second play of the same run). Raises ``LockBusy``
    when another owner keeps it past the timeout.
    """
    fd = _open(path)
    try:
        start = clock()
        while not _try_lock(fd):
            holder = read_holder(path)
            if holder.get("owner") == owner and _alive(holder.get("pid")):
                return False, holder
            waited = clock() - start
            if waited >= timeout:
                raise LockBusy(path, holder, waited)
            sleep(min(1.0, max(timeout - waited, 0.01)))
        now = time.time()
        holder = {"owner": owner, "pid": None, "started": now, "lease_until": now + lease}
        pid = fork()
        if pid == 0:
            _hold(fd, lease)
        holder["pid"] = pid
        data = json.dumps(holder, sort_keys=True).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
        return True, holder
    finally:
        os.close(fd)


def release(
    path: str, owner: str, *, sleep: Callable[[float], None] = time.sleep, wait: float = 10
) -> tuple[bool, dict[str, Any]]:
    """End ``owner``'s holder: ``(released, holder)``. Nothing happens when the lock is free or another owner's."""
    if not os.path.exists(path):
        return False, {}
    fd = _open(path)
    try:
        if _try_lock(fd):
            return False, {}  # nobody holds it (lease ended, holder killed, host rebooted)
        holder = read_holder(path)
        pid = holder.get("pid")
        if holder.get("owner") != owner or not _alive(pid):
            return False, holder
        os.kill(pid, signal.SIGTERM)
        for _attempt in range(int(wait * 10)):
            if _try_lock(fd):
                break
            sleep(0.1)
        return True, holder
    finally:
        os.close(fd)


# The host_lock module's work.


@dataclass(frozen=True)
class LockRequest:
    """Take (``present``) or give back (``absent``) the lock at ``path`` for ``owner``."""

    owner: str
    state: str
    path: str
    timeout: int
    lease: int

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> LockRequest:
        return cls(params["owner"], params["state"], params["path"], params["timeout"], params["lease"])


@dataclass
class LockResult(Result):
    """``host_lock``'s return values (RETURN)."""

    changed: bool = False
    acquired: bool = False
    released: bool = False
    holder: dict[str, Any] = field(default_factory=dict)


def run_lock(request: LockRequest, host: Host) -> LockResult:
    """The ``host_lock`` module: ``acquire`` or ``release``; a busy lock fails naming its holder."""
    result = LockResult()
    try:
        if request.state == "present":
            result.acquired, result.holder = acquire(request.path, request.owner, request.timeout, request.lease)
        else:
            result.released, result.holder = release(request.path, request.owner)
    except LockBusy as exc:
        result.holder = exc.holder
        raise Failure(str(exc), path=exc.path, **result.fields()) from None
    except OSError as exc:
        raise Failure(f"{request.path}: cannot use the host's lock file: {exc}", **result.fields()) from None
    return result
