# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""containerd as this collection knows it: ``INFO`` (plain data, read by the registry) and the read side
(``ContainerdFacts``: ``/etc/containerd/config.toml`` and the files its ``imports`` name). The write side is
``edit.Containerd``. Standard library only (target Pythons 3.8+; TOML through ``base.toml_loader``).
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

from ..base import Engine, EngineInfo, Glob, Version, dig, runtime_paths

CONTAINERD_PATH = "/etc/containerd/config.toml"
CONTAINERD_DROP_IN = "/etc/containerd/conf.d/99-gpufleet-nvidia.toml"
CRI_PLUGIN = {1: "cri", 2: "io.containerd.grpc.v1.cri", 3: "io.containerd.cri.v1.runtime"}

INFO = EngineInfo(
    name="containerd",
    service="containerd.service",
    configurable=True,
    cri=True,
    config_paths=(CONTAINERD_PATH, "/etc/containerd/conf.d/*"),
    created_dirs=("/etc/containerd/conf.d",),
    config_format="toml",
    cdi_from=(1, 7, 0),
    cdi_0_6_from=(1, 7, 12),
    cdi_additional_gids_from=(1, 7, 16),
    # enable_cdi from 1.7, on by default from 2.0 (the DRA driver v0.4.1's prerequisites page, read 2026-11-28)
    dra_cdi_from=(1, 7, 0),
    # the CRI plugin with the systemd cgroup driver: runc's ``slice:prefix:name`` with prefix ``cri-containerd``
    cgroup_patterns=(r"cri-containerd-({id})\.scope",),
    shim_namespace="k8s.io",
    owns_shims=True,
    validate_rank=2,
    validate_check="ctr",
    validate_modes=("runtime",),
)


def default_version(engine_version: tuple[int, int, int] | None) -> int:
    """The config version containerd assumes for a missing or empty file: 3 on 2.x, else 2."""
    return 3 if engine_version and engine_version[0] >= 2 else 2


def whole_table_needed(engine_version: tuple[int, int, int] | None) -> bool:
    """Whether imports replace plugin tables wholesale (before 2.1; unknown versions count as old)."""
    return not engine_version or tuple(engine_version[:2]) < (2, 1)


def file_version(data: Mapping[str, Any], main_version: int | None = None) -> Any:
    """A file's config version as containerd reads it: its ``version``; without one, the main file's for an
    imported file (containerd merges imports into the main file before it reads the version), 1 for the main
    file itself."""
    if "version" in data:
        return data["version"]
    return main_version if main_version is not None else 1


def effective_cri(
    docs: Sequence[Mapping[str, Any] | None], version: int, replace_tables: bool = True
) -> Mapping[str, Any] | None:
    """The CRI plugin table containerd uses, from ``docs`` (the main file, then the imports in containerd's
    order; empty or None ones are skipped). The one rule of the editor and of discovery:

    * an imported file of another config version (``file_version``) does not count;
    * before 2.1 (``replace_tables``) the last file that defines the table replaces it whole (the very
      table object of that file is returned, so that the editor can copy it with its comments);
    * from 2.1 on the tables are merged key by key (a new plain dict).
    """
    found: Mapping[str, Any] | None = None
    for index, doc in enumerate(docs):
        if not doc:
            continue
        if file_version(doc, version if index else None) != version:
            continue
        cri = dig(doc, "plugins", CRI_PLUGIN[version])
        if not isinstance(cri, Mapping):
            continue
        found = cri if replace_tables or found is None else _merged(found, cri)
    return found


def _merged(low: Mapping[str, Any], high: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(low)
    for key, value in high.items():
        out[key] = (
            _merged(out[key], value) if isinstance(out.get(key), Mapping) and isinstance(value, Mapping) else value
        )
    return out


def import_patterns(main: Mapping[str, Any] | None, config_path: str) -> list[str]:
    """The main file's ``imports`` as absolute patterns (relative ones are relative to the main file's folder)."""
    entries = (main or {}).get("imports")
    base = os.path.dirname(config_path)
    return [
        entry if os.path.isabs(entry) else os.path.join(base, entry)
        for entry in (entries if isinstance(entries, list) else [])
        if isinstance(entry, str)
    ]


class ContainerdFacts(Engine):
    """containerd: ``/etc/containerd/config.toml`` and the files its ``imports`` name (globs, in order), config
    v1, v2 or v3. ``enable_cdi`` when set, else CDI is on by default from 2.0."""

    info = INFO
    name = INFO.name
    binaries = ("containerd",)
    packages = ("containerd.io", "containerd")
    binary = "containerd"
    unit = "containerd"
    config_path = CONTAINERD_PATH
    drop_in = CONTAINERD_DROP_IN
    empty_main_is_default = True
    main_decides_all = True

    def config_files(self, main: Mapping[str, Any] | None, glob: Glob, config_path: str = "") -> list[str]:
        found: list[str] = []
        for pattern in import_patterns(main, config_path or self.config_path):
            found += [f for f in glob(pattern) if f not in found]
        return found

    def read(self, files: Sequence[tuple[str, Mapping[str, Any] | None]], version: Version) -> dict[str, Any]:
        main = (files[0][1] if files else None) or {}
        raw = file_version(main) if main else default_version(version)
        config_version = raw if raw in CRI_PLUGIN and not isinstance(raw, bool) else None
        cri = (
            effective_cri([data for _path, data in files], config_version, whole_table_needed(version))
            if config_version
            else None
        ) or {}
        runtimes = dig(cri, "containerd", "runtimes")
        cdi = cri.get("enable_cdi")
        return {
            "config_version": config_version,
            "runtimes": sorted(set(runtimes if isinstance(runtimes, Mapping) else ()) | {"runc"}),
            "runtime_paths": runtime_paths(runtimes, ("options", "BinaryName")),
            "default_runtime": dig(cri, "containerd", "default_runtime_name") or "runc",
            "cdi_enabled": bool(cdi) if cdi is not None else (version or ())[:1] >= (2,),
        }
