# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Registering a runtime with CRI-O, as pure functions over TOML text.

CRI-O reads ``/etc/crio/crio.conf`` and then every ``/etc/crio/crio.conf.d/*.conf`` in lexical order,
merging them key by key, so the drop-in only needs our keys:

* ``[crio.runtime.runtimes.<name>]`` with ``runtime_path``, ``runtime_type = "oci"`` and the monitor
  settings (``monitor_path``, ``monitor_cgroup``, ``monitor_env``, ``monitor_exec_cgroup``) copied from
  the default runtime as the other files define it;
* ``[crio.runtime] default_runtime`` when asked.

CDI: CRI-O has no switch for it; CDI injection is always on since CRI-O 1.23 (spec directories in
``crio.runtime.cdi_spec_dirs``, default ``/etc/cdi`` and ``/var/run/cdi``), so ``cdi=true`` changes
nothing here.
"""

from __future__ import annotations

import glob as _glob
import os
import shutil
from typing import Any, Callable, Sequence

from .. import toml as t
from ..base import Job, Planned
from ..common import (
    MANAGED_MARKER,
    Edit,
    RuntimeConfigError,
)
from .facts import CRIO_DROP_IN as DEFAULT_DROP_IN
from .facts import CRIO_PATH as DEFAULT_PATH
from .facts import CrioFacts

MONITOR_KEYS = ("monitor_path", "monitor_cgroup", "monitor_env", "monitor_exec_cgroup")
CDI_NOTE = "CRI-O enables CDI by itself since 1.23 (cdi_spec_dirs); nothing to set"


def monitor_settings(configs: Sequence[tuple[str, str]], name: str = "nvidia") -> list[tuple[str, Any]]:
    """Monitor settings of the default runtime, as CRI-O would merge ``configs`` (path, text) in order."""
    default_runtime = None
    runtimes: dict = {}
    for path, text in configs:
        if not text.strip():
            continue
        doc = t.parse(text, path)
        rt = t.get_table(doc, ["crio", "runtime"], text=text, path=path, create=False)
        if rt is None:
            continue
        if isinstance(rt.get("default_runtime"), str):
            default_runtime = str(rt["default_runtime"])
        table = rt.get("runtimes")
        if t.is_table(table):
            for rname, rtable in table.items():
                if t.is_table(rtable):
                    merged = runtimes.setdefault(rname, {})
                    merged.update({k: t.deepcopy(v) for k, v in rtable.items() if k in MONITOR_KEYS})
    for candidate in (default_runtime, "crun", "runc"):
        if candidate and candidate != name and candidate in runtimes:
            return [(k, runtimes[candidate][k]) for k in MONITOR_KEYS if k in runtimes[candidate]]
    return []


def render_drop_in(
    runtime_path: str,
    *,
    name: str = "nvidia",
    set_as_default: bool | None = False,
    monitor: Sequence[tuple[str, Any]] = (),
) -> str:
    t.require_tomlkit()
    doc = t.tomlkit.parse(
        f"# {MANAGED_MARKER}: registers the {name!r} runtime with CRI-O.\n"
        "# Rewritten on every run and removed by state=absent.\n"
    )
    crio = t.tomlkit.table(is_super_table=True)
    doc["crio"] = crio
    runtime = t.tomlkit.table(is_super_table=not set_as_default)
    if set_as_default:
        runtime["default_runtime"] = name
    doc["crio"]["runtime"] = runtime
    runtimes = t.tomlkit.table(is_super_table=True)
    doc["crio"]["runtime"]["runtimes"] = runtimes
    entry = t.tomlkit.table()
    entry["runtime_path"] = runtime_path
    entry["runtime_type"] = "oci"
    for key, value in monitor:
        entry[key] = value
    doc["crio"]["runtime"]["runtimes"][name] = entry
    out = t.dumps(doc)
    return out if out.endswith("\n") else out + "\n"


def is_ours(text: str | None) -> bool:
    return bool(text) and MANAGED_MARKER in text.split("\n", 1)[0]


def present_drop_in(
    drop_in_text: str | None,
    runtime_path: str,
    *,
    name: str = "nvidia",
    set_as_default: bool | None = False,
    configs: Sequence[tuple[str, str]] = (),
    drop_in: str = DEFAULT_DROP_IN,
) -> Edit:
    """The drop-in's edit; ``configs`` are crio.conf and the other drop-ins (path, text), in order."""
    if drop_in_text and not is_ours(drop_in_text):
        raise RuntimeConfigError(
            "this file exists and was not written by gpufleet.nvidia",
            drop_in,
            1,
            "choose another drop_in path, or remove the file",
        )
    new = render_drop_in(
        runtime_path, name=name, set_as_default=set_as_default, monitor=monitor_settings(configs, name)
    )
    if new == (drop_in_text or ""):
        return Edit(drop_in_text, [])
    return Edit(new, [f"{drop_in}: {'written' if not drop_in_text else 'updated'}"])


def absent_drop_in(drop_in_text: str | None, *, drop_in: str = DEFAULT_DROP_IN) -> Edit:
    if drop_in_text is not None and is_ours(drop_in_text):
        return Edit(None, [f"{drop_in}: removed"])
    return Edit(drop_in_text, [])


def present_main(
    text: str,
    runtime_path: str,
    *,
    name: str = "nvidia",
    set_as_default: bool | None = False,
    path: str = DEFAULT_PATH,
) -> Edit:
    """Register in crio.conf itself (``drop_in=false``); keys we change carry our trailing comment."""
    doc = t.parse(text, path)
    changes: list[str] = []
    rt = t.get_table(doc, ["crio", "runtime"], text=text, path=path, create=True)
    runtimes = t.get_table(rt, ["runtimes"], text=text, path=path, create=True)
    monitor = monitor_settings([(path, text)], name)
    entry = runtimes.get(name)
    if entry is None:
        entry = t.tomlkit.table()
        entry["runtime_path"] = runtime_path
        entry["runtime_type"] = "oci"
        for key, value in monitor:
            entry[key] = value
        runtimes[name] = entry
        changes.append(f"crio.runtime.runtimes.{name}: added with runtime_path {runtime_path}")
    elif not t.is_table(entry):
        raise RuntimeConfigError(
            f"crio.runtime.runtimes.{name} is not a table", path, t.key_line(text, name), "fix the file by hand"
        )
    else:
        for key, value in [("runtime_path", runtime_path), ("runtime_type", "oci"), *monitor]:
            if entry.get(key) != value:
                if key in entry:
                    entry[key] = value
                else:
                    t.add_key(entry, key, value)
                changes.append(f"crio.runtime.runtimes.{name}.{key} -> {value!r}")
    if set_as_default:
        what = t.set_tracked(rt, "default_runtime", name)
        if what:
            changes.append(f"crio.runtime.{what}")
    elif set_as_default is False and rt.get("default_runtime") == name:
        # the way back from set_as_default=true: what our comment says was there, else CRI-O's built-in default
        what = t.unset_tracked(rt, "default_runtime")
        if rt.get("default_runtime") == name:
            del rt["default_runtime"]
            what = "default_runtime: removed (CRI-O falls back to its built-in default)"
        changes.append(f"crio.runtime.{what}")
    return Edit(t.dumps(doc), changes) if changes else Edit(text, [])


def absent_main(text: str, runtime_path: str | None = None, *, name: str = "nvidia", path: str = DEFAULT_PATH) -> Edit:
    if not text.strip():
        return Edit(text, [])
    doc = t.parse(text, path)
    changes: list[str] = []
    rt = t.get_table(doc, ["crio", "runtime"], text=text, path=path, create=False)
    if rt is None:
        return Edit(text, [])
    runtimes = rt.get("runtimes")
    ours = t.is_table(runtimes) and t.is_table(runtimes.get(name))
    if ours and (runtime_path is None or runtimes[name].get("runtime_path") == runtime_path):
        del runtimes[name]
        changes.append(f"crio.runtime.runtimes.{name}: removed")
    if rt.get("default_runtime") == name:
        gone = not (t.is_table(runtimes) and name in runtimes)
        what = t.unset_tracked(rt, "default_runtime", fallback="runc" if gone else None)
        if what:
            changes.append(f"crio.runtime.{what}")
    if changes:
        t.prune_empty(doc, ["crio", "runtime", "runtimes"])
        was_last = t.last_header_is(text, f"runtimes.{name}")
        return Edit(t.trim_after_last(t.dumps(doc), was_last), changes)
    return Edit(text, [])


class Crio(CrioFacts):
    """CRI-O's adapter: its facts (``facts.CrioFacts``) and how to register a runtime with it."""

    SOCKET = "unix:///var/run/crio/crio.sock"

    def plan(self, job: Job) -> list[Planned]:
        p = job.request
        present = p.state == "present"
        if p.cdi:
            job.warn(CDI_NOTE)
        main_text, main_exists = job.read(job.config_path)
        if job.drop_in is None:
            if present:
                edit = present_main(
                    main_text, p.path, name=p.name, set_as_default=p.set_as_default, path=job.config_path
                )
            else:
                edit = absent_main(main_text, p.path, name=p.name, path=job.config_path)
            return [Planned(job.config_path, edit, main_text, main_exists)]
        drop_text, drop_exists = job.read(job.drop_in)
        if present:
            others = [f for f in _files(os.path.join(os.path.dirname(job.drop_in), "*.conf")) if f != job.drop_in]
            edit = present_drop_in(
                drop_text if drop_exists else None,
                p.path,
                name=p.name,
                set_as_default=p.set_as_default,
                configs=[(job.config_path, main_text)] + [(f, job.read(f)[0]) for f in others],
                drop_in=job.drop_in,
            )
        else:
            edit = absent_drop_in(drop_text if drop_exists else None, drop_in=job.drop_in)
        return [Planned(job.drop_in, edit, drop_text, drop_exists)]

    def validate(self, job: Job, tmp: str) -> None:
        binary = job.bin_path("crio")
        if not binary:
            job.result.validated_by = "parse"
            return
        conf_dir = os.path.join(tmp, "crio.conf.d")
        os.mkdir(conf_dir)
        candidate = os.path.join(tmp, "crio.conf")
        with open(candidate, "w", encoding="utf-8") as f:
            f.write(job.new_text(job.config_path) or "")
        if job.drop_in:
            for other in _files(os.path.join(os.path.dirname(job.drop_in), "*.conf")):
                if other != job.drop_in:
                    shutil.copy(other, conf_dir)
            drop_new = job.new_text(job.drop_in)
            if drop_new is not None:
                with open(os.path.join(conf_dir, os.path.basename(job.drop_in)), "w", encoding="utf-8") as f:
                    f.write(drop_new)
        job.check([binary, "--config", candidate, "--config-dir", conf_dir, "config"], "crio config")

    def probe(self, bin_path: Callable[[str], str | None]) -> list[str] | None:
        crictl = bin_path("crictl")
        return [crictl, "--runtime-endpoint", self.SOCKET, "version"] if crictl else None


def _files(pattern: str) -> list[str]:
    return sorted(f for f in _glob.glob(pattern) if os.path.isfile(f))
