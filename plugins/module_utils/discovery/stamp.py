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
fails leaves none. The stamp's functions are pure; ``run_stamp`` below is the ``gpufleet.nvidia.stage_stamp``
module's work, which reads the host and reads and writes the stamp.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import stat
from dataclasses import dataclass

from ..base.fileio import atomic_write, read_text
from ..base.jsonio import loads
from ..base.names import COLLECTION_VERSION
from ..base.runner import Failure, Host, Result
from .nvidia_toolkit import dpkg_stanzas

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from typing import Any

STAMP_DIR = "/var/lib/gpufleet-nvidia/stamps"
FORMAT = 1
# Keys of ansible_facts.nvidia that change without anything the stages own changing: processes holding a GPU, Xid
# events, the kernel the bootloader starts next (a kernel update moves it), what the MIG boot unit did at this boot (the
# partitions it made are in the GPUs' facts) and what discovery derives from them.
# Everything else (driver, engines and their runtimes, toolkit, device nodes, libraries, the CDI spec's driver
# version) is part of a stage's inputs.
VOLATILE_FACTS = frozenset(("gpu_users", "xid_events", "xid_source", "next_boot", "mig_boot", "problems", "warnings"))
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


def with_engine_configs(paths: Iterable[str], facts: Mapping[str, Any] | None) -> list[str]:
    """``paths`` and, after them, each configuration file discovery found for an engine
    (``engines.<name>.config_path``): the runtime stage owns the file an engine reads, wherever it was told to read
    it."""
    out = list(paths)
    for engine in ((facts or {}).get("engines") or {}).values():
        config = (engine or {}).get("config_path") if isinstance(engine, dict) else None
        if config and str(config).startswith("/") and str(config) not in out:
            out.append(str(config))
    return out


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


# The stage_stamp module's work.

_STAGE = re.compile(r"^[a-z][a-z0-9_]*$")


def stamp_path(folder: str, stage: str) -> str:
    """Where the stamp of ``stage`` is."""
    return os.path.join(folder, f"{stage}.json")


def check_stage_name(name: str, where: str) -> None:
    """Refuse a stage name that is not one (the stamp's file name is made of it); ``where`` names the option."""
    if not _STAGE.match(name):
        raise Failure(f"{where}: {name!r} is not a stage name (lower-case letters, digits and _)")


@dataclass(frozen=True)
class StampRequest:
    """What ``stage_stamp`` is asked to do for one stage."""

    stage: str
    state: str
    inputs: object
    facts: dict[str, Any]
    paths: list[str]
    units: list[str]
    packages: list[str]
    published: dict[str, Any]
    dir: str
    stages: tuple[StampRequest, ...] = ()  # several stages stamped in one call (state=present)

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> StampRequest:
        fields = ("inputs", "paths", "units", "packages", "published")
        if params.get("stages"):
            if params["state"] != "present":
                raise Failure(f"stages: stamps several stages with state=present only, not state={params['state']}")
            stages = []
            for index, entry in enumerate(params["stages"]):
                check_stage_name(entry["stage"], f"stages[{index}].stage")
                stages.append(
                    cls(
                        stage=entry["stage"],
                        state="present",
                        facts=params["facts"],
                        dir=params["dir"],
                        **{k: entry[k] for k in fields},
                    )
                )
            names = [one.stage for one in stages]
            twice = sorted({name for name in names if names.count(name) > 1})
            if twice:
                raise Failure(f"stages: {', '.join(twice)} named more than once; stamp each stage once")
            return cls(
                stage="",
                state="present",
                facts=params["facts"],
                dir=params["dir"],
                stages=tuple(stages),
                **{k: params[k] for k in fields},
            )
        check_stage_name(params["stage"] or "", "stage")
        return cls(**{k: params[k] for k in ("stage", "state", "facts", *fields)}, dir=params["dir"])

    @property
    def path(self) -> str:
        return stamp_path(self.dir, self.stage)


@dataclass
class StampResult(Result):
    """``stage_stamp``'s return values (RETURN); ``None``: not returned."""

    stamp: str
    changed: bool = False
    current: bool = False
    published: dict[str, Any] | None = None
    reason: str | None = None
    digest: str | None = None
    stamps: dict[str, str] | None = None


def units_state(host: Host, units: list[str]) -> dict[str, str]:
    """``{unit: "<UnitFileState> <ActiveState>"}`` from one ``systemctl show``; ``no systemd`` without one."""
    if not units:
        return {}
    systemctl = host.get_bin_path("systemctl")
    if not systemctl or not os.path.isdir("/run/systemd/system"):
        return {unit: "no systemd" for unit in units}
    rc, out, err = host.run_command(
        [systemctl, "show", "--property=Id,LoadState,UnitFileState,ActiveState", "--", *units]
    )
    if rc != 0:
        return {unit: f"systemctl show failed: {err.strip()[:200]}" for unit in units}
    blocks = out.strip().split("\n\n")
    found: dict[str, str] = {}
    for unit, block in zip(units, blocks):
        props = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        found[unit] = " ".join(props.get(k, "") for k in ("LoadState", "UnitFileState", "ActiveState"))
    for unit in units:
        found.setdefault(unit, "unknown")
    return found


def packages_state(host: Host, patterns: list[str]) -> dict[str, str]:
    """The installed packages whose names match ``patterns``, from dpkg's status file, else ``rpm -qa``."""
    if not patterns:
        return {}
    text = read_text(DPKG_STATUS, tolerant=True, errors="replace")
    if text is not None:
        return dpkg_packages(text, patterns)
    rpm = host.get_bin_path("rpm")
    if not rpm:
        return {}
    rc, out, err = host.run_command([rpm, "-qa", "--qf", "%{NAME} %{ARCH} %{EPOCHNUM}:%{VERSION}-%{RELEASE}\\n"])
    if rc != 0:
        return {"rpm": f"rpm -qa failed: {err.strip()[:200]}"}
    return rpm_packages(out, patterns)


def remove_stamp(request: StampRequest, host: Host, result: StampResult) -> StampResult:
    """``state=absent``: the stamp goes, and its folders with their last file."""
    path = request.path
    result.reason = "stamp removed" if os.path.lexists(path) else "no stamp"
    if not host.check_mode and os.path.lexists(path):
        try:
            os.unlink(path)
            # the folder and the collection's state folder above it go with their last file
            for folder in (request.dir, os.path.dirname(request.dir)):
                if os.path.isdir(folder) and not os.listdir(folder):
                    os.rmdir(folder)
        except OSError as exc:
            raise Failure(f"cannot remove the stamp {path}: {exc}; remove it by hand", **result.fields()) from None
    return result


def check_stamp(request: StampRequest, host: Host, result: StampResult, now: tuple) -> StampResult:
    """``state=check``: whether the stamp is current; one that is not is removed (outside check mode)."""
    digest, patterns, files, units, packages = now
    path = request.path
    record = load(read_text(path, tolerant=True))
    current, why = compare(record, digest, patterns, files, units, packages_now=packages)
    result.current, result.reason = current, why
    if current:
        result.published = record.get("published") or {}
    elif record is not None and not host.check_mode:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise Failure(
                f"cannot remove the stale stamp {path}: {exc}; remove it by hand", **result.fields()
            ) from None
    return result


def write_stamp(request: StampRequest, host: Host, result: StampResult, now: tuple) -> StampResult:
    """``state=present``: stamp the stage as it is now."""
    digest, patterns, files, units, packages = now
    record = build(digest, patterns, files, units, published=request.published, packages=packages)
    result.reason = "stamped"
    if not host.check_mode:
        try:
            atomic_write(request.path, dump(record), 0o600, makedirs=True)
        except OSError as exc:
            raise Failure(
                f"cannot write the stamp {request.path}: {exc.strerror or exc}; check {request.dir} (the next run "
                "runs the stage in full without it)",
                **result.fields(),
            ) from None
    return result


def run_stamp(request: StampRequest, host: Host) -> StampResult:
    """The ``stage_stamp`` module: check, write or remove a stage's stamp (or stamp each of ``request.stages``)."""
    if request.stages:
        stamps = {one.stage: run_stamp(one, host).stamp for one in request.stages}
        return StampResult(stamp=request.dir, published={}, reason="stamped", stamps=stamps)
    result = StampResult(stamp=request.path, published={})
    if request.state == "absent":
        return remove_stamp(request, host, result)
    # check and present: the host's side of the stamp, as it is now
    try:
        files = files_state(request.paths)
    except ValueError as exc:
        raise Failure(f"paths: {exc}; give the stage's files as absolute paths", **result.fields()) from None
    try:
        packages = packages_state(host, request.packages)
    except re.error as exc:
        raise Failure(f"packages: {exc}; give regular expressions of package names", **result.fields()) from None
    units = units_state(host, request.units)
    patterns = request.paths + request.packages
    result.digest = inputs_digest(request.stage, COLLECTION_VERSION, request.inputs, request.facts)
    now = (result.digest, patterns, files, units, packages)
    if request.state == "check":
        return check_stamp(request, host, result, now)
    return write_stamp(request, host, result, now)
