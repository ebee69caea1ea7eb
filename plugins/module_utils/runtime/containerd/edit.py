# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Registering a runtime with containerd (config v1, v2, v3), as pure functions over TOML text.

Config versions and where the CRI runtimes live:

* v1: ``plugins.cri`` (a non-empty file with no ``version`` key is v1);
* v2: ``plugins."io.containerd.grpc.v1.cri"`` (containerd 1.x; a missing or empty file is v2 there);
* v3: ``plugins."io.containerd.cri.v1.runtime"`` (containerd 2.x; a missing or empty file is v3 there).

Runtimes are ``<cri>.containerd.runtimes.<name>``; the default is ``<cri>.containerd.default_runtime_name``
and CDI is ``<cri>.enable_cdi`` (``cdi_spec_dirs`` is left at its default).

Two ways to register:

* in the main file (``drop_in=false``): the runtime table is added next to the others, keys we change
  carry a trailing ``# gpufleet.nvidia: was <old>`` comment so that ``state=absent`` restores them;
* through a drop-in (default): the drop-in path is appended to the main file's ``imports`` (kept,
  never replaced; nothing is added when an existing glob already matches it) and the drop-in is a file
  we own (marker comment on its first line).

**What "the whole CRI plugin table" means.** containerd before 2.1 merges an imported file into the
main one plugin by plugin: ``plugins.<id>`` of a later file *replaces* ``plugins.<id>`` of an earlier
one, and the plugin then fills every key the winning table does not set with its built-in default. So a
drop-in that only named our runtime would silently drop everything the admin configured under that
plugin (``SystemdCgroup``, registry mirrors, ``sandbox_image``...). On those versions the drop-in
therefore carries a copy of the complete ``plugins.<id>`` table -- every key and sub-table, comments
included -- of the last file before it (main file, then earlier imports in order) that defines that
table, with our runtime (and default, and ``enable_cdi``) added. Other plugins' tables are not copied
(they are not replaced by ours). Built-in defaults are not copied either (the plugin applies them
anyway). The copy is a snapshot: every run refreshes it, so re-run the module after editing the CRI
table of the main file. From 2.1 on, imports are merged key by key and the drop-in holds only our keys.
"""

from __future__ import annotations

import fnmatch
import glob as _glob
import os
from typing import Any, Callable, Sequence

from .. import toml as t
from ..base import Job, Planned
from ..common import (
    FIX_BY_HAND,
    MANAGED_MARKER,
    Edit,
    RuntimeConfigError,
)
from .facts import CONTAINERD_DROP_IN as DEFAULT_DROP_IN
from .facts import CONTAINERD_PATH as DEFAULT_PATH
from .facts import CRI_PLUGIN, ContainerdFacts, default_version, effective_cri, whole_table_needed

RUNTIME_TYPE = "io.containerd.runc.v2"
LEGACY_LINUX_TYPE = "io.containerd.runtime.v1.linux"
# The runtime types that run an OCI runtime binary named in the options (BinaryName, or Runtime for the
# legacy v1 linux runtime): those a copy for our runtime can be made of.
RUNC_TYPES = ("io.containerd.runc.v1", RUNTIME_TYPE, LEGACY_LINUX_TYPE)


def detect_version(text: str, path: str = DEFAULT_PATH, empty_version: int = 2) -> int:
    if not text.strip():
        return empty_version
    doc = t.parse(text, path)
    return _version_of(doc, text, path)


def _version_of(doc: Any, text: str, path: str) -> int:
    version = doc.get("version", 1)
    if isinstance(version, bool) or version not in CRI_PLUGIN:
        raise RuntimeConfigError(
            f"version = {version!r}: containerd knows config versions 1, 2 and 3",
            path,
            t.key_line(text, "version"),
            FIX_BY_HAND,
        )
    return int(version)


def _load(text: str, path: str, empty_version: int) -> tuple[Any, int, bool]:
    """(document, version, was_empty)."""
    if not text.strip():
        doc = t.parse(text, path)
        return doc, empty_version, True
    doc = t.parse(text, path)
    return doc, _version_of(doc, text, path), False


def _cri(doc: Any, version: int, *, text: str, path: str, create: bool) -> Any:
    return t.get_table(doc, ["plugins", CRI_PLUGIN[version]], text=text, path=path, create=create)


def _source_runtime(runtimes: Any, default_name: str, name: str) -> Any | None:
    """The runtime whose table ours copies: the default runtime, else ``runc``, else ``crun``, as NVIDIA's
    ``engine.GetLowLevelRuntimes`` orders them (names starting with ``nvidia`` skipped; nvidia-container-toolkit
    v1.20.0, pkg/config/engine/engine.go and pkg/config/engine/containerd/config.go GetDefaultRuntimeOptions).
    Unlike NVIDIA's, a runtime of a type that does not run an OCI runtime binary (kata, gVisor...) is skipped
    too: a copy of it would ignore ``BinaryName`` and start containers without the GPU."""
    for candidate in (default_name, "runc", "crun"):
        if candidate == name or candidate.startswith("nvidia"):
            continue
        table = runtimes.get(candidate)
        if t.is_table(table) and str(table.get("runtime_type") or RUNTIME_TYPE) in RUNC_TYPES:
            return table
    return None


def _wanted_type(source: Any | None) -> str:
    """The runtime type of ours: the source's (``io.containerd.runc.v1`` stays v1), else runc.v2 (NVIDIA's
    ``AddRuntimeWithOptions`` sets its ``RuntimeType`` only when the copied table has none)."""
    if source is not None and source.get("runtime_type"):
        return str(source["runtime_type"])
    return RUNTIME_TYPE


def _needs_runtime_option(version: int, runtime_type: str) -> bool:
    """``options.Runtime`` names the binary for ``io.containerd.runtime.v1.linux`` (its ``RuncOptions`` have no
    ``BinaryName``); NVIDIA writes it on every config version 1 (v1.20.0, pkg/config/engine/containerd/
    config_v1.go AddRuntimeWithOptions). The runc shims ignore the key."""
    return version == 1 or runtime_type == LEGACY_LINUX_TYPE


def _set_option(opts: Any, key: str, value: Any) -> None:
    if key in opts:
        opts[key] = value
    else:
        t.add_key(opts, key, value)


_PREFIX = "plugins.<cri>."  # how a change names the CRI plugin's table, whichever version's name it has


def _register(
    cri: Any,
    runtime_path: str,
    *,
    name: str,
    set_as_default: bool | None,
    cdi: bool,
    track: bool,
    text: str,
    path: str,
    version: int,
    source: Any | None = None,
) -> list[str]:
    """Add/update the runtime in a CRI plugin table; returns the changes."""
    changes: list[str] = []
    ctd = t.get_table(cri, ["containerd"], text=text, path=path, create=True)
    runtimes = t.get_table(ctd, ["runtimes"], text=text, path=path, create=True)
    default_name = ctd.get("default_runtime_name", "runc")
    if track and default_name == name:
        # our own default (an earlier set_as_default): the options follow the default it replaced, as on the run
        # that set it, or a second run would copy another runtime's (found by the property tests)
        default_name = t.tracked_before(ctd, "default_runtime_name", "runc")
    if source is None:
        source = _source_runtime(runtimes, str(default_name), name)
    if source is None and not any(t.is_table(v) for v in runtimes.values()):
        changes.append(_write_builtin_default(runtimes, str(default_name) if default_name != name else "runc", track))
    existing = runtimes.get(name)
    if existing is not None and not t.is_table(existing):
        raise RuntimeConfigError(f"runtimes.{name} is not a table", path, t.key_line(text, name), FIX_BY_HAND)
    wanted_type = _wanted_type(source)
    binary_keys = ["BinaryName", "Runtime"] if _needs_runtime_option(version, wanted_type) else ["BinaryName"]
    wanted = {"source": source, "wanted_type": wanted_type, "binary_keys": binary_keys, "runtime_path": runtime_path}
    if existing is None:
        changes.append(_add_runtime(runtimes, name, **wanted, text=text, path=path))
    else:
        changes += _update_runtime(existing, name, **wanted, text=text, path=path)
    changes += _set_default(ctd, name, set_as_default, track)
    if cdi:
        what = t.set_tracked(cri, "enable_cdi", True, track=track)
        if what:
            changes.append(f"{_PREFIX}{what}")
    return changes


def _write_builtin_default(runtimes: Any, builtin: str, track: bool) -> str:
    """A runtimes table in the file replaces containerd's built-in one (runc) instead of adding to it (seen with
    `containerd config dump` on 1.6): the built-in default is named explicitly."""
    runtimes[builtin] = t.tomlkit.table()
    runtimes[builtin]["runtime_type"] = RUNTIME_TYPE
    if track:
        runtimes[builtin].comment(t.TRACK_PREFIX + "added")
    return f"{_PREFIX}containerd.runtimes.{builtin}: containerd's built-in default written out"


def _add_runtime(
    runtimes: Any,
    name: str,
    *,
    source: Any | None,
    wanted_type: str,
    binary_keys: list[str],
    runtime_path: str,
    text: str,
    path: str,
) -> str:
    """A new runtime table. NVIDIA's tool copies the whole table of the default runtime (runtime_type,
    runtime_root, runtime_engine, privileged_without_host_devices, options...) and sets the binary in it
    (v1.20.0, pkg/config/engine/containerd/config.go GetDefaultRuntimeOptions, AddRuntimeWithOptions)."""
    if source is not None:
        new = t.deepcopy(source)
        new.trivia.indent = ""
    else:
        new = t.tomlkit.table()
    _set_option(new, "runtime_type", wanted_type)
    runtimes[name] = new
    entry = runtimes[name]
    if source is not None:
        entry.trivia.indent = source.trivia.indent
    opts = t.get_table(entry, ["options"], text=text, path=path, create=False)
    if opts is None:
        entry["options"] = t.tomlkit.table()
        opts = entry["options"]
    for key in binary_keys:
        _set_option(opts, key, runtime_path)
    copied = "" if source is None else ", copied from the default runtime"
    return f"{_PREFIX}containerd.runtimes.{name}: added with BinaryName {runtime_path} ({wanted_type}{copied})"


def _update_runtime(
    entry: Any,
    name: str,
    *,
    source: Any | None,
    wanted_type: str,
    binary_keys: list[str],
    runtime_path: str,
    text: str,
    path: str,
) -> list[str]:
    """An existing runtime table brought to the type, binary and default runtime's options it needs."""
    changes = []
    where = f"{_PREFIX}containerd.runtimes.{name}"
    if entry.get("runtime_type") != wanted_type:
        changes.append(f"{where}.runtime_type -> {wanted_type}")
        _set_option(entry, "runtime_type", wanted_type)
    if source is not None:
        for key, value in source.items():
            if key not in entry and not t.is_table(value):
                changes.append(f"{where}.{key} -> {value!r} (from default)")
                t.add_key(entry, key, t.deepcopy(value))
    opts = t.get_table(entry, ["options"], text=text, path=path, create=True)
    for key in binary_keys:
        if opts.get(key) != runtime_path:
            changes.append(f"{where}.options.{key} -> {runtime_path}")
            _set_option(opts, key, runtime_path)
    src_opts = source.get("options") if source is not None else None
    if t.is_table(src_opts):
        for key, value in src_opts.items():
            if key in ("BinaryName", "Runtime"):
                continue
            if key not in opts or (key == "SystemdCgroup" and opts[key] != value):
                # SystemdCgroup must match the other runtimes (and the kubelet): it follows them.
                changes.append(f"{where}.options.{key} -> {value!r} (from default)")
                _set_option(opts, key, t.deepcopy(value))
    return changes


def _set_default(ctd: Any, name: str, set_as_default: bool | None, track: bool) -> list[str]:
    """``default_runtime_name`` set to the runtime, or given back (``set_as_default: false``)."""
    if set_as_default:
        what = t.set_tracked(ctd, "default_runtime_name", name, track=track)
        return [f"{_PREFIX}containerd.{what}"] if what else []
    if set_as_default is False and track and ctd.get("default_runtime_name") == name:
        # The way back from set_as_default=true in the admin's own file: what our comment says was there, else
        # containerd's built-in default (runc). A drop-in is rewritten whole, so it needs nothing here.
        what = t.unset_tracked(ctd, "default_runtime_name")
        if ctd.get("default_runtime_name") == name:
            del ctd["default_runtime_name"]
            what = "default_runtime_name: removed (containerd falls back to runc)"
        return [f"{_PREFIX}containerd.{what}"]
    return []


def _finish(doc: Any, original: str, changes: list[str]) -> Edit:
    if not changes:
        return Edit(original, [])
    return Edit(t.dumps(doc), changes)


def present_main(
    text: str,
    runtime_path: str,
    *,
    name: str = "nvidia",
    set_as_default: bool | None = False,
    cdi: bool = False,
    path: str = DEFAULT_PATH,
    empty_version: int = 2,
) -> Edit:
    """Register the runtime in the main config file itself."""
    doc, version, empty = _load(text, path, empty_version)
    changes: list[str] = []
    if empty:
        t.set_tracked(doc, "version", version)
        changes.append(f"version = {version} (the file was empty)")
    cri = _cri(doc, version, text=text, path=path, create=True)
    changes += _register(
        cri,
        runtime_path,
        name=name,
        set_as_default=set_as_default,
        cdi=cdi,
        track=True,
        text=text,
        path=path,
        version=version,
    )
    if len(changes) == 1 and empty:
        changes = []
    return _finish(doc, text, [c.replace("<cri>", CRI_PLUGIN[version]) for c in changes])


def _drop_empty_version(doc: Any) -> bool:
    """True when only our own ``version`` key is left: the file goes back to empty."""
    keys = list(doc)
    return bool(keys == ["version"] and doc.item("version").trivia.comment.lstrip("#").strip().endswith("added"))


def absent_main(
    text: str,
    runtime_path: str | None = None,
    *,
    name: str = "nvidia",
    cdi: bool = False,
    path: str = DEFAULT_PATH,
    empty_version: int = 2,
) -> Edit:
    """Undo ``present_main``: the runtime when it is ours (its ``BinaryName`` is ``runtime_path``,
    any when not given), ``default_runtime_name`` and ``enable_cdi`` back to what our comment says
    they were (a default naming the removed runtime without our comment goes back to ``runc``), and
    the tables that only held them."""
    if not text.strip():
        return Edit(text, [])
    doc, version, _empty = _load(text, path, empty_version)
    cri_id = CRI_PLUGIN[version]
    changes: list[str] = []
    cri = _cri(doc, version, text=text, path=path, create=False)
    if cri is not None:
        ctd = cri.get("containerd")
        runtimes = ctd.get("runtimes") if t.is_table(ctd) else None
        if t.is_table(runtimes) and t.is_table(runtimes.get(name)):
            binary = (runtimes[name].get("options") or {}).get("BinaryName")
            if runtime_path is None or binary == runtime_path:
                del runtimes[name]
                changes.append(f"plugins.{cri_id}.containerd.runtimes.{name}: removed")
                for other in list(runtimes):
                    table = runtimes[other]
                    if t.is_table(table) and table.trivia.comment.lstrip("#").strip() == t.TRACK_PREFIX + "added":
                        del runtimes[other]
                        changes.append(f"plugins.{cri_id}.containerd.runtimes.{other}: removed (we had written it)")
        if t.is_table(ctd) and ctd.get("default_runtime_name") == name:
            gone = not (t.is_table(runtimes) and name in runtimes)
            what = t.unset_tracked(ctd, "default_runtime_name", fallback="runc" if gone else None)
            if what:
                changes.append(f"plugins.{cri_id}.containerd.{what}")
        if cdi:
            what = t.unset_tracked(cri, "enable_cdi")
            if what:
                changes.append(f"plugins.{cri_id}.{what}")
        if changes:
            t.prune_empty(doc, ["plugins", cri_id, "containerd", "runtimes"])
            if t.is_table(doc.get("plugins")) and t.is_table(doc["plugins"].get(cri_id)):
                t.make_implicit_if_bare(doc["plugins"][cri_id], "containerd")
                t.make_implicit_if_bare(doc["plugins"], cri_id)
    if changes and _drop_empty_version(doc):
        return Edit("", changes)
    if not changes:
        return Edit(text, [])
    was_last = t.last_header_is(text, f"runtimes.{name}")
    return Edit(t.trim_after_last(t.dumps(doc), was_last), changes)


def _imports_match(imports: Sequence[Any], main_path: str, drop_in: str) -> bool:
    base = os.path.dirname(main_path)
    for entry in imports:
        if not isinstance(entry, str):
            continue
        pattern = entry if os.path.isabs(entry) else os.path.join(base, entry)
        if pattern == drop_in or fnmatch.fnmatchcase(drop_in, pattern):
            return True
    return False


def _header(name: str, whole: bool, version: int) -> str:
    lines = [
        f"# {MANAGED_MARKER}: registers the {name!r} runtime with containerd.",
        "# Rewritten on every run and removed by state=absent; edit the main config file instead.",
    ]
    if whole:
        lines += [
            f'# containerd before 2.1 lets an imported plugins."{CRI_PLUGIN[version]}" table replace the',
            "# main file's, so this file carries a copy of the whole table (refreshed on every run).",
        ]
    return "\n".join(lines) + "\n"


def cri_source(
    main_text: str, imports: Sequence[tuple[str, str]], version: int, main_path: str = DEFAULT_PATH
) -> Any | None:
    """The CRI plugin table containerd would use without our drop-in (``effective_cri`` before 2.1), as a
    tomlkit table: that of the last file (main file, then ``imports`` in containerd's order, ours excluded)
    that defines it."""
    docs = []
    for index, (file_path, file_text) in enumerate([(main_path, main_text), *imports]):
        if not file_text.strip():
            continue
        doc = t.parse(file_text, file_path)
        if index == 0 or "version" in doc:
            _version_of(doc, file_text, file_path)  # a version containerd does not know is refused
        docs.append(doc)
    return effective_cri(docs, version, replace_tables=True)


def render_drop_in(
    runtime_path: str,
    *,
    version: int,
    name: str = "nvidia",
    set_as_default: bool | None = False,
    cdi: bool = False,
    whole_table: bool = True,
    source_cri: Any | None = None,
    path: str = DEFAULT_DROP_IN,
) -> str:
    """The drop-in's full text (deterministic: the same inputs give the same bytes)."""
    doc = t.tomlkit.parse(_header(name, whole_table and source_cri is not None, version))
    doc.add("version", version)
    doc.add(t.tomlkit.nl())
    plugins = t.tomlkit.table(is_super_table=True)
    doc["plugins"] = plugins
    cri_id = CRI_PLUGIN[version]
    source_runtime = None
    if source_cri is not None:
        ctd = source_cri.get("containerd")
        runtimes = ctd.get("runtimes") if t.is_table(ctd) else None
        if t.is_table(runtimes):
            source_runtime = _source_runtime(runtimes, str(ctd.get("default_runtime_name", "runc")), name)
    if whole_table and source_cri is not None:
        cri = t.deepcopy(source_cri)
        cri.trivia.indent = ""
        doc["plugins"][cri_id] = cri
        # our own runtime entry is rewritten from scratch, never inherited from the copy
        ctd = cri.get("containerd")
        if t.is_table(ctd) and t.is_table(ctd.get("runtimes")) and name in ctd["runtimes"]:
            del ctd["runtimes"][name]
        cri = doc["plugins"][cri_id]
    else:
        doc["plugins"][cri_id] = t.tomlkit.table(is_super_table=True)
        cri = doc["plugins"][cri_id]
    _register(
        cri,
        runtime_path,
        name=name,
        set_as_default=set_as_default,
        cdi=cdi,
        track=False,
        text="",
        path=path,
        version=version,
        source=source_runtime,
    )
    out = t.dumps(doc)
    return out if out.endswith("\n") else out + "\n"


def is_ours(drop_in_text: str | None) -> bool:
    return bool(drop_in_text) and MANAGED_MARKER in drop_in_text.split("\n", 1)[0]


def present_drop_in(
    main_text: str,
    drop_in_text: str | None,
    runtime_path: str,
    *,
    name: str = "nvidia",
    set_as_default: bool | None = False,
    cdi: bool = False,
    path: str = DEFAULT_PATH,
    drop_in: str = DEFAULT_DROP_IN,
    empty_version: int = 2,
    whole_table: bool = True,
    imports: Sequence[tuple[str, str]] = (),
) -> tuple[Edit, Edit]:
    """Register through a drop-in: (edit of the main file, edit of the drop-in).

    ``imports`` are the other imported files as (path, text), in containerd's order, ours excluded;
    they decide which CRI table the drop-in copies (see the module docstring)."""
    if drop_in_text and not is_ours(drop_in_text):
        raise RuntimeConfigError(
            "this file exists and was not written by gpufleet.nvidia",
            drop_in,
            1,
            "choose another drop_in path, or remove the file",
        )
    doc, version, empty = _load(main_text, path, empty_version)
    changes: list[str] = []
    if empty:
        t.set_tracked(doc, "version", version)
    imports_list = doc.get("imports")
    if imports_list is None:
        item = t.add_key(doc, "imports", [drop_in])
        item.comment("gpufleet.nvidia: added")
        changes.append(f"imports: added with {drop_in}")
    elif not isinstance(imports_list, list):
        raise RuntimeConfigError(
            "imports is not an array of paths", path, t.key_line(main_text, "imports"), FIX_BY_HAND
        )
    elif not _imports_match(imports_list, path, drop_in):
        imports_list.append(drop_in)
        changes.append(f"imports: {drop_in} appended")
    main_edit = _finish(doc, main_text, changes)
    source = cri_source(main_text, imports, version, path)
    new_drop_in = render_drop_in(
        runtime_path,
        version=version,
        name=name,
        set_as_default=set_as_default,
        cdi=cdi,
        whole_table=whole_table,
        source_cri=source,
        path=drop_in,
    )
    if new_drop_in == (drop_in_text or ""):
        drop_edit = Edit(drop_in_text, [])
    else:
        drop_edit = Edit(new_drop_in, [f"{drop_in}: {'written' if not drop_in_text else 'updated'}"])
    return main_edit, drop_edit


def absent_drop_in(
    main_text: str,
    drop_in_text: str | None,
    *,
    path: str = DEFAULT_PATH,
    drop_in: str = DEFAULT_DROP_IN,
    empty_version: int = 2,
) -> tuple[Edit, Edit]:
    """Undo ``present_drop_in``: our entry in ``imports`` (and ``imports`` itself when we added it),
    and the drop-in when it carries our marker (``Edit(None, ...)`` means delete it)."""
    changes: list[str] = []
    if main_text.strip():
        doc, _version, _empty = _load(main_text, path, empty_version)
        imports_list = doc.get("imports")
        if isinstance(imports_list, list) and drop_in in imports_list:
            imports_list.remove(drop_in)
            changes.append(f"imports: {drop_in} removed")
            if not imports_list:
                what = t.unset_tracked(doc, "imports")
                if what:
                    changes[-1] = "imports: removed (we had added it)"
        main_edit = Edit("", changes) if changes and _drop_empty_version(doc) else _finish(doc, main_text, changes)
    else:
        main_edit = Edit(main_text, [])
    if drop_in_text is not None and is_ours(drop_in_text):
        drop_edit = Edit(None, [f"{drop_in}: removed"])
    else:
        drop_edit = Edit(drop_in_text, [])
    return main_edit, drop_edit


class Containerd(ContainerdFacts):
    """containerd's adapter: its facts (``facts.ContainerdFacts``) and how to register a runtime with it."""

    cdi_ignored = (
        "cdi=true: containerd {shown} ignores enable_cdi (CDI support comes with containerd 1.7); "
        "the key is written but has no effect until containerd is upgraded"
    )

    def plan(self, job: Job) -> list[Planned]:
        p = job.request
        present = p.state == "present"
        text, existed = job.read(job.config_path)
        empty_version = default_version(job.version)
        job.result.config_version = detect_version(text, job.config_path, empty_version)
        if job.drop_in is None:
            kw = {"name": p.name, "cdi": p.cdi, "path": job.config_path, "empty_version": empty_version}
            if present:
                edit = present_main(text, p.path, set_as_default=p.set_as_default, **kw)
            else:
                edit = absent_main(text, p.path, **kw)
            return [Planned(job.config_path, edit, text, existed)]
        drop_text, drop_exists = job.read(job.drop_in)
        kw = {"path": job.config_path, "drop_in": job.drop_in, "empty_version": empty_version}
        if present:
            main_edit, drop_edit = present_drop_in(
                text,
                drop_text if drop_exists else None,
                p.path,
                name=p.name,
                set_as_default=p.set_as_default,
                cdi=p.cdi,
                whole_table=whole_table_needed(job.version),
                imports=self._imports(job, text),
                **kw,
            )
        else:
            main_edit, drop_edit = absent_drop_in(text, drop_text if drop_exists else None, **kw)
        return [
            Planned(job.config_path, main_edit, text, existed),
            Planned(job.drop_in, drop_edit, drop_text, drop_exists),
        ]

    def _imports(self, job: Job, main_text: str) -> list[tuple[str, str]]:
        """The other imported files (path, text), in containerd's order, ours excluded."""
        if not main_text.strip():
            return []
        try:
            main = t.parse(main_text, job.config_path)
        except RuntimeConfigError:  # the editor reports it with the line
            return []
        return [(f, job.read(f)[0]) for f in self.config_files(main, _files, job.config_path) if f != job.drop_in]

    def validate(self, job: Job, tmp: str) -> None:
        binary = job.bin_path("containerd")
        if not binary:
            job.result.validated_by = "parse"
            return
        text = job.new_text(job.config_path)
        if job.drop_in:
            candidate_drop = os.path.join(tmp, os.path.basename(job.drop_in))
            with open(candidate_drop, "w", encoding="utf-8") as f:
                f.write(job.new_text(job.drop_in))
            text = retarget_imports(text, job.config_path, job.drop_in, candidate_drop)
        candidate = os.path.join(tmp, "config.toml")
        with open(candidate, "w", encoding="utf-8") as f:
            f.write(text)
        out = job.check([binary, "--config", candidate, "config", "dump"], "containerd config dump")
        if job.request.state == "present" and f"runtimes.{job.request.name}]" not in out:
            job.fail(
                "containerd reads the candidate config but does not see runtime "
                f"{job.request.name!r} in it (a config version this containerd does not know, or an "
                "import after the drop-in that replaces the CRI plugin table); nothing was written",
                config_dump=out,
            )

    def probe(self, bin_path: Callable[[str], str | None]) -> list[str] | None:
        ctr = bin_path("ctr")
        return [ctr, "version"] if ctr else None


def retarget_imports(text: str, config_path: str, drop_in: str, candidate_drop: str | None) -> str:
    """The candidate main file with our drop-in's import pointing at the candidate drop-in, and relative
    imports made absolute (the candidate lives in a temporary directory)."""
    if not text.strip():
        return text
    doc = t.tomlkit.parse(text)
    imports = doc.get("imports")
    if not isinstance(imports, list):
        return text
    base = os.path.dirname(config_path)
    new = []
    for entry in imports:
        if entry == drop_in:
            if candidate_drop:
                new.append(candidate_drop)
            continue
        new.append(entry if os.path.isabs(entry) else os.path.join(base, entry))
    if candidate_drop and candidate_drop not in new:
        new.append(candidate_drop)  # our drop-in matched through a glob: the candidate must win over the live copy
    doc["imports"] = new
    return t.tomlkit.dumps(doc)


def _files(pattern: str) -> list[str]:
    return sorted(f for f in _glob.glob(pattern) if os.path.isfile(f))
