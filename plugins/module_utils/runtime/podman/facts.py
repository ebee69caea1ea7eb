# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""podman as this collection knows it: ``INFO`` (plain data, read by the registry) and the read side (``Podman``:
``containers.conf``). podman has no daemon to register a runtime with, so there is no write side. Standard library
only (target Pythons 3.8+; TOML through ``base.toml_loader``).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..base import Engine, EngineInfo, Glob, Version

PODMAN_DEFAULTS = "/usr/share/containers/containers.conf"
PODMAN_PATH = "/etc/containers/containers.conf"
PODMAN_DROP_IN_DIR = "/etc/containers/containers.conf.d"

INFO = EngineInfo(
    name="podman",
    service="podman.service",
    config_format="toml",
    cdi_from=None,
    cdi_0_6_from=(4, 7, 0),
    cdi_additional_gids_from=(5, 1, 0),
    # podman-run(1) --cgroup-parent: ``libpod-<id>.scope`` (systemd) or ``/libpod_parent/libpod-<id>`` (cgroupfs)
    cgroup_patterns=(r"libpod-({id})(?:\.scope)?(?:/|$)",),
    stop_cli="podman",
    validate_rank=1,
    validate_check="cli",
    validate_image_present=("image", "exists"),
    validate_modes=("cdi",),
)


class Podman(Engine):
    """podman, read only: it has no daemon to register a runtime with (containers use the CDI spec).
    ``containers.conf``: the distribution's defaults, then ``/etc/containers`` and its ``.d`` folder. CDI is
    always on (4.1 and later); the default runtime is crun."""

    info = INFO
    name = INFO.name
    binaries = ("podman",)
    packages = ("podman",)
    binary = "podman"
    config_path = PODMAN_PATH

    def config_files(self, main: Mapping[str, Any] | None, glob: Glob, config_path: str = "") -> list[str]:
        return glob(PODMAN_DROP_IN_DIR + "/*.conf")

    def files_before_main(self) -> list[str]:
        """Read before the main file: the distribution's defaults."""
        return [PODMAN_DEFAULTS]

    def read(self, files: Sequence[tuple[str, Mapping[str, Any] | None]], version: Version) -> dict[str, Any]:
        runtimes: set = set()
        default = None
        for _path, data in files:
            engine = (data or {}).get("engine") or {}
            runtimes.update(engine.get("runtimes") or {})
            default = engine.get("runtime") or default
        return {
            "runtimes": sorted(runtimes | {"crun", "runc"}),
            "default_runtime": default or "crun",
            "cdi_enabled": True,
        }
