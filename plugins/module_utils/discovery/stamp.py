# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A stage's stamp: what lets a no-change ``site.yml`` rerun skip a stage whose last run is still current.

After a stage's role has run to the end on a host, the stamp records three things: a digest of what the stage was
asked (its role variables, the collection version) and of what discovery saw before it ran (``ansible_facts.nvidia``
less what moves on its own: GPU users, Xid events, problems); the state of every file the stage owns (content digest,
type, mode, owner, link target; absent is a state too), of its units (enabled, active) and of its packages
(version, held or not); and the facts the stage
published, to publish again. The next run's check recomputes them: any difference (an admin's edit of
``daemon.json``, a lost device node, an apt upgrade, a changed variable, another driver in the facts) and the stage
runs in full, as without a stamp. The check removes a stamp that is not current before the stage runs, so a stage that
fails leaves none. Pure functions; the module ``gpufleet.nvidia.stage_stamp`` does the reading and writing.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import stat

from ..base.jsonio import loads
from .nvidia_toolkit import dpkg_stanzas

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from typing import Any

STAMP_DIR = "/var/lib/gpufleet-nvidia/stamps"
FORMAT = 1
# Keys of ansible_facts.nvidia that change without anything the stages own changing: processes holding a GPU, Xid
# events and what discovery derives from them. Everything else (driver, engines and their runtimes, toolkit, device
# nodes, libraries, the CDI spec's driver version) is part of a stage's inputs.
VOLATILE_FACTS = frozenset(("gpu_users", "xid_events", "xid_source", "problems", "warnings"))
VOLATILE_GPU_FACTS = frozenset(("health",))
FILE_DIGEST_LIMIT = 64 * 1024 * 1024  # a larger file is stamped by size and mtime only


def stable_facts(facts: Mapping[str, Any] | None) -> dict[str, Any]:
    """``ansible_facts.nvidia`` without the keys that move on their own (``VOLATILE_FACTS``, each GPU's health)."""
    out: dict[str, Any] = {}
    for key, value in (facts or {}).items():
        if key in VOLATILE_FACTS:
            continue
        if key == "gpus" and isinstance(value, list):
            out[key] = [
                {k: v for k, v in gpu.items() if k not in VOLATILE_GPU_FACTS} if isinstance(gpu, dict) else gpu
                for gpu in value
            ]
        else:
            out[key] = value
    return out


def canonical(value: object) -> str:
    """JSON with sorted keys and no spaces: the same value gives the same text on every Python."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def inputs_digest(stage: str, version: str, inputs: object, facts: Mapping[str, Any] | None) -> str:
    """The digest of what the stage was asked and what it found: stage, collection version, inputs, stable facts."""
    text = canonical({"stage": stage, "version": version, "inputs": inputs, "facts": stable_facts(facts)})
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _file_digest(path: str, size: int) -> str:
    h = hashlib.sha256()
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)
    try:
        left = size
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            h.update(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    return h.hexdigest()


def path_state(path: str) -> str:
    """One line that changes when the file at ``path`` does: type, mode, owner and content digest (a regular file),
    target (a link), device numbers (a device node), sorted entry names (a folder), or ``absent``."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "absent"
    except OSError as exc:
        return f"unreadable {exc.errno}"
    head = f"{stat.S_IFMT(st.st_mode):o} {stat.S_IMODE(st.st_mode):o} {st.st_uid}:{st.st_gid}"
    if stat.S_ISLNK(st.st_mode):
        return f"{head} -> {os.readlink(path)}"
    if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
        return f"{head} dev {os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"
    if stat.S_ISDIR(st.st_mode):
        try:
            names = sorted(os.listdir(path))
        except OSError as exc:
            return f"{head} unreadable {exc.errno}"
        return f"{head} dir " + hashlib.sha256("\0".join(names).encode("utf-8", "surrogateescape")).hexdigest()
    if stat.S_ISREG(st.st_mode):
        if st.st_size > FILE_DIGEST_LIMIT:
            return f"{head} size {st.st_size} mtime {st.st_mtime_ns}"
        try:
            return f"{head} sha256 {_file_digest(path, st.st_size)}"
        except OSError as exc:
            return f"{head} unreadable {exc.errno}"
    return head


def expand(patterns: Iterable[str], root: str = "/") -> list[str]:
    """The paths the patterns name on the host under ``root``, sorted: a pattern without wildcards names itself
    (present or not); one with wildcards names what matches now (and the folder it looks in, so a new or removed
    match shows as a change of that folder)."""
    found: set[str] = set()
    for pattern in patterns:
        if not pattern.startswith("/"):
            raise ValueError(f"{pattern!r} is not an absolute path")
        if glob.has_magic(pattern):
            base = os.path.dirname(pattern)
            if not glob.has_magic(base):
                found.add(base)
            host = os.path.join(root, pattern.lstrip("/"))
            for match in glob.glob(host):
                found.add("/" + os.path.relpath(match, root))
        else:
            found.add(os.path.normpath(pattern))
    return sorted(found)


def files_state(patterns: Iterable[str], root: str = "/") -> dict[str, str]:
    """``{path: path_state}`` for every path the patterns name (see ``expand``)."""
    return {path: path_state(os.path.join(root, path.lstrip("/"))) for path in expand(patterns, root)}


DPKG_STATUS = "/var/lib/dpkg/status"


def dpkg_packages(text: str, patterns: Iterable[str]) -> dict[str, str]:
    """``{package:arch: "<Status> <Version>"}`` of the packages in dpkg's status file whose names match one of the
    regular expressions in full (the Status line carries a hold: ``hold ok installed``)."""
    names = [re.compile(p) for p in patterns]
    found: dict[str, str] = {}
    for fields in dpkg_stanzas(text):
        name = fields.get("Package")
        if name and any(r.fullmatch(name) for r in names):
            found[f"{name}:{fields.get('Architecture', '')}"] = (
                f"{fields.get('Status', '')} {fields.get('Version', '')}"
            )
    return found


def rpm_packages(text: str, patterns: Iterable[str]) -> dict[str, str]:
    """The same from ``rpm -qa --qf '%{NAME} %{ARCH} %{EPOCHNUM}:%{VERSION}-%{RELEASE}\\n'`` (a versionlock is a
    file of the stage's)."""
    names = [re.compile(p) for p in patterns]
    found: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3 and any(r.fullmatch(parts[0]) for r in names):
            found[f"{parts[0]}:{parts[1]}"] = parts[2]
    return found


def build(
    digest: str,
    patterns: list[str],
    files: Mapping[str, str],
    units: Mapping[str, str],
    *,
    published: object,
    packages: Mapping[str, str] | None = None,
) -> dict:
    """The stamp's record."""
    return {
        "format": FORMAT,
        "inputs": digest,
        "patterns": list(patterns),
        "files": dict(files),
        "units": dict(units),
        "packages": dict(packages or {}),
        "published": published,
    }


def load(text: str | None) -> dict | None:
    """The stamp's record from its file's text; None when there is none or it is not one (a stage then runs)."""
    if not text:
        return None
    try:
        record = loads(text, what="stage stamp")  # every malformed text is a ValueError, deep nesting too
    except ValueError:
        return None
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        return None
    return record


def dump(record: Mapping[str, Any]) -> str:
    return json.dumps(record, sort_keys=True, indent=1) + "\n"


def _first_difference(before: Mapping[str, str], now: Mapping[str, str]) -> str | None:
    for key in sorted(set(before) | set(now)):
        if before.get(key) != now.get(key):
            return key
    return None


def compare(
    record: Mapping[str, Any] | None,
    digest: str,
    patterns: list[str],
    files_now: Mapping[str, str],
    units_now: Mapping[str, str],
    *,
    packages_now: Mapping[str, str] | None = None,
) -> tuple[bool, str]:
    """``(current, why)``: whether the stamp still holds, and in words why not (or that it does)."""
    if record is None:
        return False, "no stamp from an earlier run"
    if record.get("inputs") != digest:
        return False, "the stage's variables or the host's discovered state differ from the stamped run's"
    if list(record.get("patterns") or []) != list(patterns):
        return False, "the stage owns other files than in the stamped run"
    changed = _first_difference(record.get("files") or {}, files_now)
    if changed is not None:
        return False, f"{changed} changed since the stamped run"
    changed = _first_difference(record.get("units") or {}, units_now)
    if changed is not None:
        return False, f"the unit {changed} changed state since the stamped run"
    changed = _first_difference(record.get("packages") or {}, packages_now or {})
    if changed is not None:
        return False, f"the package {changed} changed since the stamped run"
    return True, "the stamped run is current: same variables, discovered state, files and units"
