# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Resolve paths inside a root directory without ever leaving it.

A driver root (``/run/nvidia/driver``), a mounted host root (``/host``) and a container's rootfs all
hold symbolic links written for the system that lives there: an absolute link target means "from that
root", and ``..`` stops at it. Following such links with the caller's own ``os.path.realpath`` walks out
of the root; that is the class of bug behind CVE-2024-0132. These helpers walk one component at a time
with ``lstat``/``readlink`` and treat the root as ``/``, like ``chroot`` would, without needing one.

Standard library only; shared by the modules and the host programs.
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat

MAX_SYMLINKS = 40  # the kernel's own limit for one path walk


class PathEscapeError(OSError):
    """A path could not be resolved inside its root (link loop, or a component that is not a directory)."""


def resolve_in_root(root: str, path: str, max_symlinks: int = MAX_SYMLINKS) -> str:
    """Return ``path`` resolved inside ``root``, as an absolute path in the root's own terms.

    Every symbolic link met on the way is followed as the system inside ``root`` would see it: absolute
    targets restart from ``root``, ``..`` never climbs above it. Components that do not exist are kept
    as they are (there is nothing to follow), so the result may name a file still to be created.
    """
    pending = list(reversed(path.split("/")))
    resolved = ""  # relative to root, no leading slash
    followed = 0
    while pending:
        part = pending.pop()
        if part in ("", "."):
            continue
        if part == "..":
            resolved = posixpath.dirname(resolved)
            continue
        candidate = posixpath.join(resolved, part) if resolved else part
        try:
            st = os.lstat(os.path.join(root, candidate))
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTDIR):
                resolved = candidate
                continue
            raise
        if stat.S_ISLNK(st.st_mode):
            followed += 1
            if followed > max_symlinks:
                raise PathEscapeError(errno.ELOOP, f"too many levels of symbolic links resolving {path} in {root}")
            target = os.readlink(os.path.join(root, candidate))
            if target.startswith("/"):
                resolved = ""
            pending.extend(reversed(target.split("/")))
            continue
        if pending and not stat.S_ISDIR(st.st_mode) and any(p not in ("", ".") for p in pending):
            raise PathEscapeError(errno.ENOTDIR, f"{candidate} is not a directory (resolving {path} in {root})")
        resolved = candidate
    return "/" + resolved


def host_path(root: str, inner_path: str) -> str:
    """The path on this machine of ``inner_path`` (absolute, in the root's terms) under ``root``."""
    return os.path.join(root, inner_path.lstrip("/")) if inner_path != "/" else os.path.abspath(root)


def resolve_host_path(root: str, path: str) -> str:
    """``resolve_in_root`` then ``host_path``: where to open ``path`` of the system under ``root``."""
    return host_path(root, resolve_in_root(root, path))
