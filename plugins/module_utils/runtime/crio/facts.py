# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""CRI-O as this collection knows it: ``INFO`` (plain data, read by the registry) and the read side (``CrioFacts``:
``/etc/crio/crio.conf`` then ``crio.conf.d/*.conf``). The write side is ``edit.Crio``. Standard library only
(target Pythons 3.8+; TOML through ``base.toml_loader``).
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

from ..base import Engine, EngineInfo, Glob, Version, dig, runtime_paths

CRIO_PATH = "/etc/crio/crio.conf"
CRIO_DROP_IN = "/etc/crio/crio.conf.d/99-gpufleet-nvidia.conf"

INFO = EngineInfo(
    name="crio",
    service="crio.service",
    configurable=True,
    cri=True,
    config_paths=(CRIO_PATH, "/etc/crio/crio.conf.d/*"),
    config_format="toml",
    cdi_from=(1, 23, 0),
    cdi_0_6_from=(1, 28, 0),
    cdi_additional_gids_from=(1, 30, 0),
    # CDI on by default (the DRA driver v0.4.1's prerequisites page, read 2026-11-28)
    dra_cdi_from=(1, 27, 0),
    # cri-o internal/config/cgmgr (``crioPrefix = "crio"``); its monitor's ``crio-conmon-<id>.scope`` is no container
    cgroup_patterns=(r"crio-({id})(?:\.scope)?(?:/|$)",),
    validate_rank=3,
)


def drop_in_dir(config_path: str) -> str:
    """The folder of drop-ins CRI-O reads next to its main file."""
    return os.path.join(os.path.dirname(config_path), "crio.conf.d")


class CrioFacts(Engine):
    """CRI-O: ``/etc/crio/crio.conf`` then ``crio.conf.d/*.conf`` in lexical order, merged key by key. CDI is
    always on (1.23 and later); the built-in default runtime is runc, crun from 1.31 on."""

    info = INFO
    name = INFO.name
    binaries = ("crio",)
    packages = ("cri-o",)
    binary = "crio"
    unit = "crio"
    config_path = CRIO_PATH
    drop_in = CRIO_DROP_IN
    CRUN_DEFAULT_FROM = (1, 31, 0)

    def config_files(self, main: Mapping[str, Any] | None, glob: Glob, config_path: str = "") -> list[str]:
        return glob(os.path.join(drop_in_dir(config_path or self.config_path), "*.conf"))

    def read(self, files: Sequence[tuple[str, Mapping[str, Any] | None]], version: Version) -> dict[str, Any]:
        runtimes: set = set()
        paths: dict[str, str] = {}
        default = None
        for _path, data in files:
            runtime = dig(data, "crio", "runtime") or {}
            runtimes.update(runtime.get("runtimes") or {})
            paths.update(runtime_paths(runtime.get("runtimes"), ("runtime_path",)))
            default = runtime.get("default_runtime") or default
        default = default or ("crun" if (version or ()) >= self.CRUN_DEFAULT_FROM else "runc")
        return {
            "runtimes": sorted(runtimes | {default}),
            "runtime_paths": paths,
            "default_runtime": default,
            "cdi_enabled": True,
        }
