# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The one atomic writer and the one plain reader of host files.

``atomic_write`` writes a temporary file in the target's folder and renames it over the target, so a reader
(an engine, a container start) sees the old file or the new one, never half of one. ``read_text`` reads a
host file that may be missing.

Neither is for untrusted input of unbounded size (``config.json`` of a bundle, an image's files): that is
``hostprog.oci.read_limited``. Neither confines a path inside a container root: that is ``hostprog.cdi_hook``.

Imports only ``os`` (the runtime shim writes through this on every GPU container start).
Standard library only (target Pythons 3.8+).
"""

from __future__ import annotations

import os

# ``typing`` imports ``re`` (milliseconds in every GPU container start): its names are for type checkers only.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable

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


def _temporary(directory: str, base: str, mode: int) -> tuple[int, str]:
    """``(fd, path)`` of a new file next to the target (``mkstemp`` without importing ``tempfile``)."""
    for _attempt in range(100):
        tmp = os.path.join(directory, f".{base}.gpufleet-{os.getpid()}-{os.urandom(4).hex()}")
        try:
            return os.open(tmp, _TMP_FLAGS, mode), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name next to {os.path.join(directory, base)}")


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
