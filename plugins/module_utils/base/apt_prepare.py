# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The apt_prepare module's work: what the driver role asks apt before it installs or removes, in one module run.

1. An interrupted dpkg run (its journal left in ``/var/lib/dpkg/updates``, what apt checks before every install) is
   finished with ``dpkg --configure -a``, as apt asks, so a run killed in the middle of an install recovers by itself.
2. The package lists are updated when apt knows no candidate for a package the transaction names (lists emptied, a
   repository just added), when the caller says the sources changed (``update_cache``), or when they are older than
   ``cache_valid_time`` (the age ``ansible.builtin.apt`` reads: the mtime of apt's update-success-stamp, else of the
   lists folder; 0 updates every run).
3. The archive components the packages come from (Debian's contrib, non-free, non-free-firmware): a package of
   ``components`` with no candidate after the update fails the run, naming the component to enable and where.
4. Which packages the transaction would change, decided as ``ansible.builtin.apt`` decides it, from dpkg's database:
   for ``present`` a package not installed, or installed at a version its ``=VERSION`` (an fnmatch pattern, as apt's
   module takes it) does not match; for ``absent`` (a purge) every installed package, or one whose configuration
   files are left, whose name matches a name pattern.

Standard library only (target Pythons 3.8+).
"""

from __future__ import annotations

import fnmatch
import os
import re
import time
from dataclasses import dataclass

from .runner import Failure, Result

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from .runner import Host


@dataclass(frozen=True)
class Paths:
    """Where dpkg and apt keep what this module reads (tests point them at a copy)."""

    dpkg_updates: str = "/var/lib/dpkg/updates"
    update_stamp: str = "/var/lib/apt/periodic/update-success-stamp"
    lists: str = "/var/lib/apt/lists"


PATHS = Paths()
# How apt-get update is retried when a source fails (a mirror's hiccup): seconds slept before each retry.
UPDATE_RETRY_DELAYS = (1, 2)
NONINTERACTIVE = {"DEBIAN_FRONTEND": "noninteractive"}
# dpkg's package states (db:Status-Status) that a purge changes: anything but not-installed.
_GONE = "not-installed"
_SPEC = re.compile(r"^[a-z0-9*?\[][a-z0-9+.*?\[\]-]*(:[a-z0-9-]+)?(=\S+)?$")


def parse_policy(stdout: str) -> dict[str, str]:
    """``apt-cache policy PKG...`` output -> {package: candidate}; a package apt does not know is absent."""
    found: dict[str, str] = {}
    current = None
    for line in stdout.splitlines():
        head = re.match(r"^(\S+):$", line)
        if head:
            current = head.group(1)
            found[current] = "(none)"
            continue
        cand = re.match(r"^\s+Candidate:\s*(\S+)", line)
        if cand and current:
            found[current] = cand.group(1)
    return found


def missing_components(policy: dict[str, str], needed: dict[str, str]) -> list[str]:
    """Archive components (contrib, non-free, non-free-firmware) whose packages have no apt candidate.
    ``policy``: package -> candidate (``(none)`` or empty when apt knows no version); ``needed``: package -> the
    component it lives in."""
    missing = []
    for package in stale_lists(policy, list(needed)):
        if needed[package] not in missing:
            missing.append(needed[package])
    return missing


def parse_installed(stdout: str) -> dict[str, tuple[str, str]]:
    """``dpkg-query -W -f '${Package}\\t${Version}\\t${db:Status-Status}\\n'`` -> {package: (version, status)}.
    A package of several architectures is listed once per architecture; an installed one wins."""
    found: dict[str, tuple[str, str]] = {}
    for line in stdout.splitlines():
        fields = line.split("\t")
        if len(fields) != 3 or not fields[0]:
            continue
        name, version, status = fields
        if name not in found or found[name][1] != "installed":
            found[name] = (version, status)
    return found


def split_spec(spec: str) -> tuple[str, str]:
    """``name[:arch][=version]`` -> (name without its architecture, version pattern or '')."""
    name, _sep, version = spec.partition("=")
    return name.split(":")[0], version


def pending(packages: tuple[str, ...], state: str, installed: dict[str, tuple[str, str]]) -> list[str]:
    """The packages of the transaction that ``ansible.builtin.apt`` would change (see the module's description)."""
    out: list[str] = []
    for spec in packages:
        name, version = split_spec(spec)
        matches = fnmatch.filter(installed, name) if any(c in name for c in "*?[") else [name] * (name in installed)
        if state == "absent":
            out += [n for n in matches if installed[n][1] != _GONE and n not in out]
            continue
        ok = [n for n in matches if installed[n][1] == "installed" and fnmatch.fnmatch(installed[n][0], version or "*")]
        if not ok and spec not in out:
            out.append(spec)
    return out


def stale_lists(policy: dict[str, str], names: list[str]) -> list[str]:
    """The names apt has no candidate for (not listed, or ``Candidate: (none)``): the lists need an update."""
    return [n for n in names if policy.get(n, "(none)") in ("(none)", "")]


@dataclass(frozen=True)
class PrepareRequest:
    packages: tuple[str, ...]
    state: str
    candidates: tuple[str, ...]
    components: dict[str, str]
    cache_valid_time: int
    update_cache: bool
    recover: bool

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> PrepareRequest:
        for key in ("packages", "candidates"):
            for spec in params[key] or []:
                if not _SPEC.match(spec or ""):
                    raise Failure(
                        f"{key}: {spec!r} is not a Debian package name, such as 'nvidia-driver' "
                        "or 'nvidia-open-580=580.95.05-*'"
                    )
        components = dict(params["components"] or {})
        for package, component in components.items():
            if not _SPEC.match(package) or "=" in package or not component:
                raise Failure(
                    f"components: {package!r}: {component!r} must map a package name to its archive component, "
                    "such as firmware-nvidia-gsp: non-free-firmware"
                )
        if params["cache_valid_time"] < 0:
            raise Failure(
                f"cache_valid_time: {params['cache_valid_time']} must be 0 (update every run) or a number of seconds"
            )
        return cls(
            packages=tuple(params["packages"] or ()),
            state=params["state"],
            candidates=tuple(params["candidates"] or ()),
            components=components,
            cache_valid_time=params["cache_valid_time"],
            update_cache=params["update_cache"],
            recover=params["recover"],
        )


@dataclass
class PrepareResult(Result):
    """``apt_prepare``'s return values (RETURN)."""

    changed: bool
    recovered: bool
    cache_updated: bool
    update_reasons: list[str]
    pending: list[str]


def _tool(host: Host, name: str) -> str:
    path = host.get_bin_path(name)
    if not path:
        raise Failure(f"{name} not found: apt_prepare is for Debian and Ubuntu hosts (dnf on Red Hat)")
    return path


def _run(host: Host, argv: list[str], what: str, **kwargs: Any) -> str:
    rc, out, err = host.run_command(argv, **kwargs)
    if rc != 0:
        tail = (err or out).strip()[-1500:]
        typed = " ".join([os.path.basename(argv[0]), *argv[1:]])
        raise Failure(f"{what} failed (exit {rc}): {tail}; run '{typed}' on the host to see why")
    return out


def journal(paths: Paths) -> list[str]:
    """dpkg's journal of an interrupted run: the files in its updates folder."""
    try:
        return sorted(e.name for e in os.scandir(paths.dpkg_updates) if e.is_file())
    except FileNotFoundError:
        return []


def lists_age(paths: Paths, now: float) -> float | None:
    """Seconds since the package lists were last updated, as ``ansible.builtin.apt`` reads it; ``None``: never."""
    for path in (paths.update_stamp, paths.lists):
        try:
            return now - os.stat(path).st_mtime
        except FileNotFoundError:
            continue
    return None


def _update(host: Host) -> None:
    argv = [_tool(host, "apt-get"), "update", "-q"]
    for delay in (*UPDATE_RETRY_DELAYS, None):
        rc, out, err = host.run_command(argv, environ_update=NONINTERACTIVE)
        if rc == 0:
            return
        if delay is None:
            tail = (err or out).strip()[-1500:]
            raise Failure(
                f"apt-get update failed (exit {rc}, {len(UPDATE_RETRY_DELAYS) + 1} tries): {tail}; "
                "fix or remove the failing source (/etc/apt/sources.list.d, /etc/apt/sources.list), then run again"
            )
        time.sleep(delay)


def prepare(request: PrepareRequest, host: Host, paths: Paths | None = None) -> PrepareResult:
    """The ``apt_prepare`` module (see the module docstring for the steps); ``paths``: ``PATHS`` by default."""
    paths = paths or PATHS
    recovered = False
    left = journal(paths) if request.recover else []
    if left:
        recovered = True
        if not host.check_mode:
            _run(
                host,
                [_tool(host, "dpkg"), "--configure", "-a"],
                "dpkg --configure -a (finishing an interrupted dpkg run)",
                environ_update=NONINTERACTIVE,
            )
    reasons: list[str] = []
    updated = False
    if request.state == "present":
        names = [split_spec(s)[0] for s in request.packages + request.candidates]
        names = [n for n in dict.fromkeys(names) if not any(c in n for c in "*?[")]
        probe = list(dict.fromkeys(names + list(request.components)))
        policy_argv = [_tool(host, "apt-cache"), "policy"]
        policy = parse_policy(_run(host, policy_argv + probe, "apt-cache policy")) if probe else {}
        unknown = stale_lists(policy, names)
        if request.update_cache:
            reasons.append("the sources changed")
        if unknown:
            reasons.append("no candidate for " + ", ".join(unknown))
        age = lists_age(paths, time.time())
        if age is None:
            reasons.append("the lists were never updated")
        elif request.cache_valid_time == 0 or age > request.cache_valid_time:
            reasons.append(f"the lists are {age:.0f} s old (cache_valid_time {request.cache_valid_time} s)")
        if reasons:
            updated = True
            if not host.check_mode:
                _update(host)
                policy = parse_policy(_run(host, policy_argv + probe, "apt-cache policy")) if probe else {}
        missing = missing_components(policy, request.components)
        if missing:
            where = ", ".join(p for p in stale_lists(policy, list(request.components)))
            msg = (
                f"apt has no candidate for {where}: enable the {', '.join(missing)} component(s) of the Debian archive "
                "in /etc/apt/sources.list.d/debian.sources (Components:) or /etc/apt/sources.list, then run again"
            )
            if not (host.check_mode and updated):
                raise Failure(msg, recovered=recovered, cache_updated=updated)
            host.warn(f"check mode, the lists not updated: {msg}")
    query = [_tool(host, "dpkg-query"), "-W", "-f", "${Package}\t${Version}\t${db:Status-Status}\n"]
    # dpkg-query -W exits 1 only when a named package is unknown; none is named here
    installed = parse_installed(_run(host, query, "dpkg-query -W"))
    changes = pending(request.packages, request.state, installed)
    return PrepareResult(
        changed=recovered, recovered=recovered, cache_updated=updated, update_reasons=reasons, pending=changes
    )
