# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The engine adapters by name, in discovery's order (see ``base.Engine``)."""

from __future__ import annotations

from .base import Engine
from .containerd import Containerd
from .crio import Crio
from .docker import Docker
from .facts import Podman

ENGINES: dict[str, Engine] = {engine.name: engine for engine in (Docker(), Containerd(), Crio(), Podman())}
# The engines the container_runtime module registers a runtime with (podman has no daemon to register with).
CONFIGURABLE = ("docker", "containerd", "crio")


def adapter(name: str) -> Engine:
    return ENGINES[name]
