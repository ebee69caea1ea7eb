# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The one atomic writer and the one plain reader of host files.

``atomic_write`` writes a temporary file in the target's folder and renames it over the target, so a reader
(an engine, a container start) sees the old file or the new one, never half of one. ``read_text`` reads a
host file that may be missing. ``stale_temporaries`` finds the temporary files a writer killed between the
write and the rename left behind (``remove_stale_temporaries`` removes them), and nothing else.

Neither is for untrusted input of unbounded size: that is ``read_regular`` (and ``read_fd`` on an open file), the one
bounded reader of every file an image, a bundle or an admin's option can point at (``config.json``, the image's
``ld.so.cache``, ``nvidia-container-cli --ldcache``, a ``--proc`` tree): only a regular file, opened ``O_NONBLOCK`` (a
FIFO never blocks), never more than its limit read (``/dev/zero`` is refused, not read until memory runs out); any
other file is one ``FileLimitError`` line. Neither confines a path inside a container root: that is
``hostprog.cdi_hook``.

Imports only ``os`` (the runtime shim writes through this on every GPU container start).
Standard library only (target Pythons 3.8+).
"""

from __future__ import annotations

import os

# ``typing`` imports ``re`` (milliseconds in every GPU container start): its names are for type checkers only.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable

_S_IFMT, _S_IFREG, _S_IFLNK = 0o170000, 0o100000, 0o120000  # the stat module's values, without importing it
_KINDS = {0o010000: "a FIFO", 0o020000: "a character device", 0o060000: "a block device", 0o140000: "a socket"}
_KINDS.update({0o040000: "a directory", _S_IFLNK: "a symbolic link"})


class FileLimitError(ValueError):
    """A file that is not read: not a regular file, or larger than its limit; the message is one line naming it."""


def _kind(mode: int) -> str:
    return _KINDS.get(mode & _S_IFMT, "not a regular file")


def read_fd(fd: int, limit: int, what: str) -> bytes:
    """At most ``limit`` bytes from the open file ``fd``; ``FileLimitError`` naming ``what`` when it holds more
    (never more than ``limit + 1`` bytes are read)."""
    data = os.read(fd, limit + 1)
    while data and len(data) <= limit:
        more = os.read(fd, limit + 1 - len(data))
        if not more:
            break
        data += more
    if len(data) > limit:
        raise FileLimitError(f"{what} is larger than {int(limit)} bytes")
    return data


def read_regular(
    path: str,
    limit: int,
    what: str | None = None,
    *,
    follow: bool = True,
    check: Callable[[os.stat_result], object] | None = None,
) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them; ``FileLimitError`` (a ``ValueError``, one
    line naming ``what`` or the path) for anything else, ``OSError`` when it cannot be opened (``FileNotFoundError``).

    ``follow=False``: a link at ``path`` is refused too, checked with ``lstat`` before anything is opened and by
    ``O_NOFOLLOW`` on the open. The open is ``O_NONBLOCK`` (a FIFO, even one swapped in after the ``lstat``, never
    blocks) and the open file is checked again with ``fstat``; ``check(st)``, when given, runs on that ``fstat``
    first (the shim's ownership rule), so what is checked is what is read.
    """
    what = what or path
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC
    if not follow:
        mode = os.lstat(path).st_mode
        if mode & _S_IFMT != _S_IFREG:
            raise FileLimitError(f"{what} is {_kind(mode)}, not a regular file: not read")
        flags |= os.O_NOFOLLOW
    fd = os.open(path, flags)
    try:
        st = os.fstat(fd)
        if check is not None:
            check(st)
        if st.st_mode & _S_IFMT != _S_IFREG:
            raise FileLimitError(f"{what} is {_kind(st.st_mode)}, not a regular file: not read")
        return read_fd(fd, limit, what)
    finally:
        os.close(fd)


_TMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def read_text(path: str, *, tolerant: bool = False, errors: str = "strict", limit: int | None = None) -> str | None:
    """The text of ``path`` (UTF-8), or None when it does not exist.

    ``tolerant=True`` (reading host state, which must never raise): None as well for any other error
    (a folder, no permission, undecodable bytes). ``errors`` is ``open``'s (``"replace"`` to read any bytes).
    ``limit``: read at most that many characters (files under ``/proc`` another process controls).
    """
    try:
        with open(path, encoding="utf-8", errors=errors) as f:
            return f.read(-1 if limit is None else limit)
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError):
        if tolerant:
            return None
        raise


_TMP_MARK = ".gpufleet-"  # a temporary file is ``.<name>.gpufleet-<writer's PID>-<8 hex digits>``
_DIGITS = frozenset("0123456789")
_HEX = frozenset("0123456789abcdef")
STALE_AGE = 3600  # seconds: no write of ours takes this long, whoever holds the PID in its name now


def _temporary(directory: str, base: str, mode: int) -> tuple[int, str]:
    """``(fd, path)`` of a new file next to the target (``mkstemp`` without importing ``tempfile``)."""
    for _attempt in range(100):
        tmp = os.path.join(directory, f".{base}{_TMP_MARK}{os.getpid()}-{os.urandom(4).hex()}")
        try:
            return os.open(tmp, _TMP_FLAGS, mode), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name next to {os.path.join(directory, base)}")


def _writer_pid(name: str, base: str) -> int | None:
    """The writer's PID when ``name`` is exactly the name ``_temporary`` gives a temporary file of ``base``."""
    prefix = f".{base}{_TMP_MARK}"
    if not name.startswith(prefix):
        return None
    pid, sep, tag = name[len(prefix) :].partition("-")
    if not sep or not pid or not set(pid) <= _DIGITS or pid[0] == "0" or len(tag) != 8 or not set(tag) <= _HEX:
        return None
    return int(pid)


def _running(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # another user's process (EPERM): it runs
    return True


def stale_temporaries(
    path: str,
    *,
    max_age: float = STALE_AGE,
    now: float | None = None,
    running: Callable[[int], bool] = _running,
) -> list[str]:
    """The temporary files ``atomic_write`` left next to ``path`` when its writer was killed before the rename.

    Only a regular file (not a link, not a folder) whose name is exactly ours for ``path``
    (``.<name>.gpufleet-<PID>-<8 lowercase hex digits>``) counts, and only when its writer is gone (no process
    has that PID) or it is older than ``max_age`` seconds (the PID was reused since). A file of any other name,
    an admin's included, is never one. A folder that cannot be read has none.
    """
    import time  # noqa: PLC0415  # not on the shim's path

    directory = os.path.dirname(path) or "."
    base = os.path.basename(path)
    now = time.time() if now is None else now
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    found = []
    for name in sorted(names):
        pid = _writer_pid(name, base)
        if pid is None:
            continue
        candidate = os.path.join(directory, name)
        try:
            st = os.lstat(candidate)
        except OSError:
            continue
        if st.st_mode & 0o170000 != 0o100000:  # S_ISREG without importing stat
            continue
        if now - st.st_mtime >= max_age or not running(pid):
            found.append(candidate)
    return found


def remove_stale_temporaries(path: str, **kwargs: Any) -> list[str]:
    """Remove what ``stale_temporaries(path, **kwargs)`` finds; -> the paths removed (one another process removed
    first is not among them)."""
    removed = []
    for candidate in stale_temporaries(path, **kwargs):
        try:
            os.unlink(candidate)
        except FileNotFoundError:
            continue
        removed.append(candidate)
    return removed


def atomic_write(
    path: str,
    data: str | bytes,
    mode: int | None = None,
    *,
    fsync: bool = True,
    makedirs: bool = False,
    default_mode: int = 0o644,
    prepare: Callable[[str], None] | None = None,
) -> None:
    """Replace ``path`` with ``data`` atomically.

    The permissions are ``mode`` when given; otherwise those of the file being replaced (its owner and group
    too, as far as this process may set them), or ``default_mode`` for a new file. ``fsync=False`` skips
    flushing to disk (the runtime shim: a bundle's ``config.json`` lives as long as the container start).
    ``makedirs`` creates the missing folders (mode 0755). ``prepare(tmp)`` runs on the complete temporary
    file just before the rename (an SELinux context, say). The temporary file is removed on any failure.
    """
    directory = os.path.dirname(path) or "."
    if makedirs and not os.path.isdir(directory):
        os.makedirs(directory, 0o755)
    try:
        old = os.stat(path)
    except FileNotFoundError:
        old = None
    fd, tmp = _temporary(directory, os.path.basename(path), 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            f.flush()
            if mode is None and old is not None:
                try:
                    if (old.st_uid, old.st_gid) != (os.geteuid(), os.getegid()):
                        os.fchown(f.fileno(), old.st_uid, old.st_gid)
                except PermissionError:
                    pass  # not ours to give away: the file keeps this process's owner
            os.fchmod(f.fileno(), mode if mode is not None else (old.st_mode & 0o7777 if old else default_mode))
            if fsync:
                os.fsync(f.fileno())
        if prepare is not None:
            prepare(tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise


def backup(path: str) -> str:
    """A copy of ``path`` next to it, named as Ansible's ``backup_local`` names one
    (``<path>.<pid>.<YYYY-mm-dd@HH:MM:SS>~``), with the original's mode and times; returns its path."""
    import time  # noqa: PLC0415  # not on the shim's path

    with open(path, "rb") as f:
        data = f.read()
    st = os.stat(path)
    copy = f"{path}.{os.getpid()}.{time.strftime('%Y-%m-%d@%H:%M:%S~', time.localtime())}"
    atomic_write(copy, data, st.st_mode & 0o7777)
    os.utime(copy, ns=(st.st_atime_ns, st.st_mtime_ns))
    return copy
