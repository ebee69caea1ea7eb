# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The host_files module's work: a role's own small files and its systemd units, in one module run.

A role writes a handful of files it owns outright (systemd units, a udev rule, modprobe files, a JSON of options)
and then enables or starts units. As one ``copy``/``template``/``file``/``systemd_service`` task each, every file
costs the control node a temporary folder, a ``stat``, a transfer and a module run; here the whole set is one module
run, with the same guarantees: a file is written only when its bytes, mode, owner or group differ (atomically, a
temporary file renamed over it), removed only when present, backed up first when asked; the diff names each file;
check mode reports what would change and touches nothing. ``daemon-reload`` runs when a file under a systemd unit
folder changed, before any unit is enabled or started; ``udevadm control --reload-rules`` when a udev rule changed and
udev runs (its control socket exists: a container without udev has none); in check mode a unit whose file is about
to be created is reported as it would be changed, since systemd cannot know it yet.

A path that is a folder, a link or anything but a regular file is refused, naming it: the files here are the role's
own, and a link there is someone else's decision (or an attack) to look at, not to write through.

Standard library only (target Pythons 3.8+).
"""

from __future__ import annotations

import grp
import os
import pwd
import stat
from dataclasses import dataclass

from . import fileio
from .runner import Failure, Result, octal_mode

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from .runner import Host

# Where systemd reads unit files: a change under one of these needs a daemon-reload.
UNIT_DIRS = ("/etc/systemd/", "/run/systemd/", "/usr/lib/systemd/", "/lib/systemd/", "/usr/local/lib/systemd/")
# Where udev reads rules, and the socket through which a running udevd is told to read them again.
UDEV_DIRS = ("/etc/udev/rules.d/", "/run/udev/rules.d/", "/usr/lib/udev/rules.d/", "/lib/udev/rules.d/")
UDEV_CONTROL = "/run/udev/control"
MAX_FILE = 1 << 20  # the files here are small; a larger one at the path is not read for the diff


def _mode(value: Any, where: str) -> int:
    mode = octal_mode(value, f"{where}: mode")
    if not 0 <= mode <= 0o7777:
        raise Failure(f"{where}: mode {value!r} is not an octal mode such as '0644'")
    return mode


def _uid(name: str, where: str) -> int:
    try:
        return pwd.getpwnam(name).pw_uid
    except KeyError:
        raise Failure(f"{where}: owner {name!r} is not a user on this host") from None


def _gid(name: str, where: str) -> int:
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        raise Failure(f"{where}: group {name!r} is not a group on this host") from None


@dataclass(frozen=True)
class FileSpec:
    """One file: ``content`` at ``path`` with ``mode``, ``uid``, ``gid`` (``present``), or no file (``absent``)."""

    path: str
    state: str
    content: bytes
    mode: int
    uid: int
    gid: int
    backup: bool


@dataclass(frozen=True)
class UnitSpec:
    """One systemd unit: ``enabled`` (None: as it is), ``state`` (``started``/``stopped``, None: as it is)."""

    name: str
    enabled: bool | None
    state: str | None


@dataclass(frozen=True)
class FilesRequest:
    files: tuple[FileSpec, ...]
    units: tuple[UnitSpec, ...]

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> FilesRequest:
        files, seen = [], set()
        for index, item in enumerate(params["files"]):
            path = item.get("path") or ""
            where = f"files[{index}] ({path or 'no path'})"
            if not os.path.isabs(path) or os.path.normpath(path) != path:
                raise Failure(f"{where}: path must be an absolute, normalised path")
            if path in seen:
                raise Failure(f"{where}: {path} is named twice; name each file once")
            seen.add(path)
            state = item.get("state") or "present"
            content = item.get("content")
            if state == "present" and content is None:
                raise Failure(f"{where}: a present file needs its content")
            files.append(
                FileSpec(
                    path=path,
                    state=state,
                    content=(content or "").encode("utf-8"),
                    mode=_mode(item.get("mode") or "0644", where),
                    uid=_uid(item.get("owner") or "root", where) if state == "present" else 0,
                    gid=_gid(item.get("group") or "root", where) if state == "present" else 0,
                    backup=bool(item.get("backup")),
                )
            )
        units = []
        for index, item in enumerate(params["units"]):
            name = item.get("name") or ""
            if not name or "/" in name or name.startswith("-"):
                raise Failure(f"units[{index}]: {name!r} is not a unit name such as 'gpufleet-cdi-refresh.service'")
            units.append(UnitSpec(name=name, enabled=item.get("enabled"), state=item.get("state")))
        return cls(tuple(files), tuple(units))


@dataclass
class FilesResult(Result):
    """``host_files``' return values (RETURN)."""

    changed: bool
    changed_files: list[str]
    backups: dict[str, str]
    daemon_reloaded: bool
    udev_reloaded: bool
    units: dict[str, dict[str, Any]]
    diff: list[dict[str, str]] | None = None


@dataclass
class _Found:
    """What is at a file's path now."""

    exists: bool
    data: bytes | None = None  # None: not read (too large)
    mode: int | None = None
    uid: int | None = None
    gid: int | None = None


def _found(path: str) -> _Found:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return _Found(exists=False)
    except OSError as exc:
        raise Failure(f"{path}: cannot be checked ({exc.strerror}); check the path and its folders") from None
    if not stat.S_ISREG(st.st_mode):
        kind = (
            "a link" if stat.S_ISLNK(st.st_mode) else "a folder" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        )
        raise Failure(f"{path} is {kind}; remove or move it (the role writes a regular file there), then run again")
    data = None
    if st.st_size <= MAX_FILE:
        try:
            data = fileio.read_regular(path, MAX_FILE, follow=False)
        except (OSError, ValueError) as exc:
            raise Failure(f"{path}: cannot be read ({exc}); check its permissions") from None
    return _Found(exists=True, data=data, mode=st.st_mode & 0o7777, uid=st.st_uid, gid=st.st_gid)


def _text(data: bytes | None) -> str:
    if data is None:
        return "(not shown: larger than 1 MiB)\n"
    return data.decode("utf-8", errors="replace")


def _file_diff(spec: FileSpec, found: _Found) -> dict[str, str]:
    before = _text(found.data) if found.exists else ""
    after = spec.content.decode("utf-8") if spec.state == "present" else ""
    if spec.state == "present" and found.exists and before == after:  # only the mode, owner or group differ
        before = f"mode {found.mode:04o}, owner {found.uid}, group {found.gid}\n"
        after = f"mode {spec.mode:04o}, owner {spec.uid}, group {spec.gid}\n"
    return {
        "before_header": spec.path if found.exists else f"{spec.path} (absent)",
        "after_header": spec.path if spec.state == "present" else f"{spec.path} (absent)",
        "before": before,
        "after": after,
    }


def _differs(spec: FileSpec, found: _Found) -> bool:
    if spec.state == "absent":
        return found.exists
    if not found.exists:
        return True
    return (found.data, found.mode, found.uid, found.gid) != (spec.content, spec.mode, spec.uid, spec.gid)


def _apply(spec: FileSpec, found: _Found) -> str | None:
    """Make the file as ``spec`` says; the backup's path when one was made."""
    copy = None
    try:
        if found.exists and spec.backup:
            copy = fileio.backup(spec.path)
        if spec.state == "absent":
            os.unlink(spec.path)
            return copy
        if found.exists and found.data == spec.content:  # only the attributes differ
            os.chown(spec.path, spec.uid, spec.gid, follow_symlinks=False)
            os.chmod(spec.path, spec.mode)
            return copy
        uid, gid = spec.uid, spec.gid

        def prepare(tmp: str) -> None:
            if (uid, gid) != (os.geteuid(), os.getegid()):
                os.chown(tmp, uid, gid)
            os.chmod(tmp, spec.mode)  # after a chown, which clears set-ID bits

        fileio.atomic_write(spec.path, spec.content, spec.mode, makedirs=True, prepare=prepare)
    except OSError as exc:
        action = "remove" if spec.state == "absent" else "write"
        raise Failure(
            f"{spec.path}: could not {action} it ({exc.strerror or exc}); check the folder and its permissions"
        ) from None
    return copy


def _is_socket(path: str) -> bool:
    try:
        return stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        return False


def _systemctl(host: Host, *args: str) -> tuple[int, str, str]:
    binary = host.get_bin_path("systemctl")
    if not binary:
        raise Failure(f"systemctl not found on the host: 'systemctl {' '.join(args)}' needs systemd")
    return host.run_command([binary, *args])


def _unit(spec: UnitSpec, host: Host, unknown: bool) -> dict[str, Any]:
    """Enable/start/stop ``spec``'s unit as asked; what it is now and what was (or would be) done."""
    done: list[str] = []
    if unknown:  # check mode, its file not written yet: systemd cannot answer for it
        if spec.enabled:
            done.append("enable")
        if spec.state == "started":
            done.append("start")
        return {"enabled": spec.enabled, "active": spec.state == "started" or None, "done": done}
    enabled = _systemctl(host, "is-enabled", spec.name)[0] == 0
    active = _systemctl(host, "is-active", spec.name)[0] == 0
    steps = []
    if spec.enabled is not None and spec.enabled != enabled:
        steps.append(("enable" if spec.enabled else "disable", "enabled", spec.enabled))
    if spec.state == "started" and not active:
        steps.append(("start", "active", True))
    elif spec.state == "stopped" and active:
        steps.append(("stop", "active", False))
    now = {"enabled": enabled, "active": active}
    for verb, key, value in steps:
        done.append(verb)
        if not host.check_mode:
            rc, out, err = _systemctl(host, verb, spec.name)
            if rc != 0:
                raise Failure(
                    f"systemctl {verb} {spec.name} failed (exit {rc}): {(err or out).strip()}; "
                    f"see journalctl -u {spec.name}",
                    done=done[:-1],
                )
        now[key] = value
    return {**now, "done": done}


def apply_files(request: FilesRequest, host: Host) -> FilesResult:
    """The ``host_files`` module: write or remove each file as asked, reload systemd when a unit file changed, then
    enable, start or stop each unit."""
    changed_files, diffs, backups, new_units = [], [], {}, set()
    found_all = [_found(spec.path) for spec in request.files]  # every path checked before any is written
    for spec, found in zip(request.files, found_all):
        if not _differs(spec, found):
            continue
        changed_files.append(spec.path)
        if host.diff:
            diffs.append(_file_diff(spec, found))
        if not found.exists and spec.path.startswith(UNIT_DIRS):
            new_units.add(os.path.basename(spec.path))
        if not host.check_mode:
            copy = _apply(spec, found)
            if copy:
                backups[spec.path] = copy
    reload = any(path.startswith(UNIT_DIRS) for path in changed_files)
    if reload and not host.check_mode:
        rc, out, err = _systemctl(host, "daemon-reload")
        if rc != 0:
            raise Failure(
                f"systemctl daemon-reload failed (exit {rc}): {(err or out).strip()}", changed_files=changed_files
            )
    rules = [path for path in changed_files if path.startswith(UDEV_DIRS)]
    udev = bool(rules) and _is_socket(UDEV_CONTROL)
    if udev and not host.check_mode:
        binary = host.get_bin_path("udevadm")
        if not binary:
            raise Failure(f"udevadm not found on the host, yet {UDEV_CONTROL} exists", changed_files=changed_files)
        rc, out, err = host.run_command([binary, "control", "--reload-rules"])
        if rc != 0:
            raise Failure(
                f"udevadm control --reload-rules failed (exit {rc}): {(err or out).strip()}; the rules written are "
                f"{', '.join(rules)}",
                changed_files=changed_files,
            )
    units = {}
    for unit in request.units:
        units[unit.name] = _unit(unit, host, unknown=host.check_mode and unit.name in new_units)
    result = FilesResult(
        changed=bool(changed_files) or any(u["done"] for u in units.values()),
        changed_files=changed_files,
        backups=backups,
        daemon_reloaded=reload,
        udev_reloaded=udev,
        units=units,
    )
    if host.diff:
        result.diff = diffs
    return result
