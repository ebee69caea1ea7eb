# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Registering a runtime in docker's ``daemon.json``, as pure functions (standard library only).

What is kept: every key we do not own, the key order, and the file's indentation (2 or 4 spaces, a
tab, or a one-line file stays one line). What is not kept: the exact spelling of values JSON does not
distinguish (``1.0`` vs ``1.00``, ``\\u00e9`` vs ``é``,
inline arrays are laid out like the rest of the file) -- only when
something changed; a file that needs no change is returned byte-identical.
"""

from __future__ import annotations

import json
import os
import re
from collections import OrderedDict
from typing import Any, Callable

from ...base.names import SHIM
from ..base import Job, Planned
from ..common import (
    FIX_BY_HAND,
    Edit,
    RuntimeConfigError,
    line_of,
)
from .facts import DOCKER_PATH as DEFAULT_PATH
from .facts import DockerFacts, dockerd_flags

# Names dockerd keeps for its built-in runtimes: a daemon.json that registers one of them makes dockerd
# refuse to start ("runtime name 'runc' is reserved"), and `dockerd --validate` (23 to 28) does not notice.
RESERVED_NAMES = ("runc", "io.containerd.runc.v2", "io.containerd.runtime.v1.linux")


def detect_indent(text: str) -> str | None:
    """The indentation unit of a JSON text: ``"\\t"``, ``"  "``, ``"    "``...; ``None`` for a
    one-line (compact) file; four spaces for an empty one (what dockerd's own docs show)."""
    if not text.strip():
        return "    "
    for line in text.splitlines()[1:]:
        m = re.match(r"([ \t]+)\S", line)
        if m:
            ws = m.group(1)
            return "\t" if "\t" in ws else " " * len(ws)
    if "\n" not in text.strip():
        return None
    return "    "


def _load(text: str, path: str) -> OrderedDict[str, Any]:
    if not text.strip():
        return OrderedDict()
    try:
        data = json.loads(text, object_pairs_hook=OrderedDict)
    except ValueError as exc:
        lineno = getattr(exc, "lineno", None)
        msg = getattr(exc, "msg", str(exc))
        raise RuntimeConfigError(f"not valid JSON: {msg}", path, lineno, FIX_BY_HAND) from None
    if not isinstance(data, dict):
        raise RuntimeConfigError(
            f"the top level is a {type(data).__name__}, dockerd expects an object", path, 1, FIX_BY_HAND
        )
    return data


def _dump(data: OrderedDict[str, Any], original: str) -> str:
    indent = detect_indent(original)
    out = json.dumps(data, indent=indent, ensure_ascii=False)
    if not original.strip() or original.endswith("\n"):
        out += "\n"
    return out


def _expect(value: Any, kind: type, what: str, *, text: str, path: str, key: str) -> None:
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        want = {dict: "an object", str: "a string", bool: "true or false"}[kind]
        raise RuntimeConfigError(
            f"{what} is {json.dumps(value)}, dockerd expects {want} there",
            path,
            line_of(text, f'"{key}"'),
            FIX_BY_HAND,
        )


def present(
    text: str,
    runtime_path: str,
    *,
    name: str = "nvidia",
    set_as_default: bool | None = False,
    cdi: bool = False,
    path: str = DEFAULT_PATH,
) -> Edit:
    """Add or update ``runtimes.<name> = {"path": runtime_path, "args": []}``, and when asked
    ``default-runtime`` and ``features.cdi`` (merged into ``features``, never replacing it).

    ``set_as_default``: True makes ``<name>`` the default; False takes ``default-runtime`` away only when it
    names ``<name>`` (the way back from True: dockerd falls back to runc; another default the admin chose is
    never touched); None leaves ``default-runtime`` as it is."""
    if name in RESERVED_NAMES:
        raise RuntimeConfigError(
            f"runtime name {name!r} is reserved by dockerd (it refuses to start with it in runtimes)",
            path,
            None,
            "choose another name, e.g. nvidia; the file was left untouched",
        )
    data = _load(text, path)
    changes: list[str] = []
    runtimes = data.get("runtimes")
    if runtimes is None:
        runtimes = data["runtimes"] = OrderedDict()
    _expect(runtimes, dict, "runtimes", text=text, path=path, key="runtimes")
    entry = runtimes.get(name)
    if entry is None:
        runtimes[name] = OrderedDict([("path", runtime_path), ("args", [])])
        changes.append(f"runtimes.{name}: added with path {runtime_path}")
    else:
        _expect(entry, dict, f"runtimes.{name}", text=text, path=path, key=name)
        if entry.get("path") != runtime_path:
            changes.append(f"runtimes.{name}.path: {entry.get('path')!r} -> {runtime_path!r}")
            entry["path"] = runtime_path
        if "args" not in entry and "runtimeArgs" not in entry:
            entry["args"] = []
            changes.append(f"runtimes.{name}.args: added (empty)")
    if set_as_default:
        current = data.get("default-runtime")
        if current is not None:
            _expect(current, str, "default-runtime", text=text, path=path, key="default-runtime")
        if current != name:
            data["default-runtime"] = name
            changes.append(f"default-runtime: {current!r} -> {name!r}")
    elif set_as_default is False and data.get("default-runtime") == name:
        del data["default-runtime"]
        changes.append(f"default-runtime: {name!r} removed (set_as_default is false; dockerd falls back to runc)")
    if cdi:
        features = data.get("features")
        if features is None:
            features = data["features"] = OrderedDict()
        _expect(features, dict, "features", text=text, path=path, key="features")
        if features.get("cdi") is not True:
            changes.append(f"features.cdi: {features.get('cdi')!r} -> true")
            features["cdi"] = True
    if not changes:
        return Edit(text, [])
    return Edit(_dump(data, text), changes)


def prior(text: str, *, name: str = "nvidia", path: str = DEFAULT_PATH) -> dict[str, Any]:
    """The values ``present`` may replace, as they are in ``text`` before it runs: ``{"runtime": runtimes.<name>,
    "default-runtime": ..., "cdi": features.cdi}``, None for a key that is not there. JSON keeps no comment, so the
    ``container_runtime`` module keeps these in the takeover record (``discovery/takeover.py``) when ``present``
    changes a file that already named the runtime (NVIDIA's ``nvidia-ctk runtime configure`` wrote it), and
    ``absent(was=...)`` puts them back."""
    data = _load(text, path)
    runtimes = data.get("runtimes") if isinstance(data.get("runtimes"), dict) else {}
    features = data.get("features") if isinstance(data.get("features"), dict) else {}
    return {"runtime": runtimes.get(name), "default-runtime": data.get("default-runtime"), "cdi": features.get("cdi")}


def ours(entry: Any, runtime_path: str | None) -> bool:
    """Whether ``runtimes.<name>`` (``entry``) is the one ``present`` writes: its path is ``runtime_path`` or
    names the collection's shim. Values found beside our own entry were left by an earlier ``present`` (or set
    since, over it), not by NVIDIA's toolkit: they are never recorded as the state to give back, or ``absent``
    would put our own runtime back."""
    if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
        return False
    return entry["path"] == runtime_path or entry["path"].rsplit("/", 1)[-1] == SHIM


def _put_back(data: OrderedDict[str, Any], name: str, was: dict[str, Any], changes: list[str]) -> None:
    """``absent`` with a record of what was there: each key back to its recorded value (or away when it was not
    there), where it differs now."""
    runtimes = data.get("runtimes") if isinstance(data.get("runtimes"), dict) else None
    if was.get("runtime") is not None:
        if runtimes is None:
            runtimes = data["runtimes"] = OrderedDict()
        if runtimes.get(name) != was["runtime"]:
            runtimes[name] = was["runtime"]
            changes.append(f"runtimes.{name}: back to {json.dumps(was['runtime'], sort_keys=True)}")
    elif runtimes is not None and name in runtimes:
        del runtimes[name]
        changes.append(f"runtimes.{name}: removed")
        if not runtimes:
            del data["runtimes"]
    if was.get("default-runtime") is not None:
        if data.get("default-runtime") != was["default-runtime"]:
            data["default-runtime"] = was["default-runtime"]
            changes.append(f"default-runtime: back to {was['default-runtime']!r}")
    elif "default-runtime" in data and data["default-runtime"] == name:
        del data["default-runtime"]
        changes.append(f"default-runtime: {name!r} removed (dockerd falls back to runc)")
    features = data.get("features") if isinstance(data.get("features"), dict) else None
    if was.get("cdi") is not None:
        if features is None:
            features = data["features"] = OrderedDict()
        if features.get("cdi") != was["cdi"]:
            features["cdi"] = was["cdi"]
            changes.append(f"features.cdi: back to {json.dumps(was['cdi'])}")
    elif features is not None and "cdi" in features:
        del features["cdi"]
        changes.append("features.cdi: removed")
        if not features:
            del data["features"]


def absent(
    text: str,
    runtime_path: str | None = None,
    *,
    name: str = "nvidia",
    cdi: bool = False,
    path: str = DEFAULT_PATH,
    was: dict[str, Any] | None = None,
) -> Edit:
    """Undo ``present``: drop ``runtimes.<name>`` when it is ours (its path is ``runtime_path``, or
    any path when ``runtime_path`` is not given), ``default-runtime`` when it names it (dockerd would
    not start with a default that does not exist), ``features.cdi`` only when ``cdi`` is true, and the
    ``runtimes``/``features`` objects when that leaves them empty. An object left empty becomes an
    empty text (dockerd reads a missing file and ``{}`` the same).

    ``was`` (``prior`` of the file before ``present`` first changed it): those three keys get exactly those
    values back instead (NVIDIA's runtime entry, its ``features.cdi``), the rest of the file as it is."""
    data = _load(text, path)
    changes: list[str] = []
    if was is not None:
        _put_back(data, name, was, changes)
        if not changes:
            return Edit(text, [])
        return Edit(_dump(data, text) if data else "", changes)
    runtimes = data.get("runtimes")
    if runtimes is not None:
        _expect(runtimes, dict, "runtimes", text=text, path=path, key="runtimes")
        entry = runtimes.get(name)
        if entry is not None:
            ours = runtime_path is None or (isinstance(entry, dict) and entry.get("path") == runtime_path)
            if ours:
                del runtimes[name]
                changes.append(f"runtimes.{name}: removed")
                if not runtimes:
                    del data["runtimes"]
    if data.get("default-runtime") == name and name not in (data.get("runtimes") or {}):
        del data["default-runtime"]
        changes.append(f"default-runtime: {name!r} removed (dockerd falls back to runc)")
    if cdi and isinstance(data.get("features"), dict) and "cdi" in data["features"]:
        del data["features"]["cdi"]
        changes.append("features.cdi: removed")
        if not data["features"]:
            del data["features"]
    if not changes:
        return Edit(text, [])
    if not data:
        return Edit("", changes)
    return Edit(_dump(data, text), changes)


def refuse_flag_conflicts(flags: list[dict[str, str]], new_text: str | None, path: str = DEFAULT_PATH) -> None:
    """Raise ``RuntimeConfigError`` when the candidate ``daemon.json`` sets a key that the docker unit also passes as
    a flag (``facts.dockerd_flags``): dockerd would refuse to start ("the following directives are specified both as
    a flag and in the configuration file"), so nothing is written and no restart is tried."""
    try:
        data = json.loads(new_text) if new_text and new_text.strip() else {}
    except ValueError:
        return  # the editor made it: cannot happen; the engine's own check reports it otherwise
    for found in flags:
        if found["option"] in data:
            key = found["option"]
            raise RuntimeConfigError(
                f"dockerd is started with {found['flag']!r} (from {found['file']}), and {path} would set "
                f'{key!r} too: dockerd refuses to start with both ("the following directives are specified both as '
                'a flag and in the configuration file"); nothing was written',
                found["file"],
                None,
                f"remove {found['flag'].split()[0]} from {found['file']} (daemon.json's {key} replaces it), run "
                "'systemctl daemon-reload', and run again",
            )


class Docker(DockerFacts):
    """docker's adapter: its facts (``facts.DockerFacts``) and how to register a runtime with it."""

    cdi_ignored = (
        "cdi=true: docker {shown} has no CDI support, it ignores features.cdi (docker 25 and later "
        "honour it); use the nvidia runtime for GPU containers on this host"
    )

    VALIDATE_FROM = (23, 0, 0)

    def plan(self, job: Job) -> list[Planned]:
        p = job.request
        text, existed = job.read(job.config_path)
        if p.state == "present":
            edit = present(text, p.path, name=p.name, set_as_default=p.set_as_default, cdi=p.cdi, path=job.config_path)
            was = prior(text, name=p.name, path=job.config_path) if edit.changed else None
            if was and not ours(was["runtime"], p.path) and any(v is not None for v in was.values()):
                job.remember(job.config_path, was)
        else:
            was = job.recorded(job.config_path)
            edit = absent(text, p.path, name=p.name, cdi=p.cdi, path=job.config_path, was=was)
        if edit.changed:
            unit = p.unit or self.unit
            unit = unit if unit.endswith(".service") else unit + ".service"
            # the unit's files are read where the engine runs (``job.unit_root``: a test's tree; the module: "/")
            flags = dockerd_flags(job.unit_root, unit)
            refuse_flag_conflicts(flags, edit.text, job.config_path)
        return [Planned(job.config_path, edit, text, existed)]

    def validate(self, job: Job, tmp: str) -> None:
        dockerd = job.bin_path("dockerd")
        if not (dockerd and job.version and job.version >= self.VALIDATE_FROM):
            job.result.validated_by = "parse"  # the editor parsed and re-serialised it
            return
        candidate = os.path.join(tmp, "daemon.json")
        with open(candidate, "w", encoding="utf-8") as f:
            f.write(job.new_text(job.config_path) or "{}")
        job.check([dockerd, "--validate", "--config-file", candidate], "dockerd --validate")

    def probe(self, bin_path: Callable[[str], str | None]) -> list[str] | None:
        docker = bin_path("docker")
        return [docker, "info"] if docker else None
