# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The engine adapters with their write side (each configurable engine's ``edit.py``), by name, in the registry's
order; an engine without one (podman) keeps its read side. What the container_runtime module plans with."""

from __future__ import annotations

from .base import Engine
from .containerd.edit import Containerd
from .crio.edit import Crio
from .docker.edit import Docker
from .registry import FACTS

_EDITORS = {engine.name: engine for engine in (Docker(), Containerd(), Crio())}
ADAPTERS: dict[str, Engine] = {name: _EDITORS.get(name, facts) for name, facts in FACTS.items()}


def adapter(name: str) -> Engine:
    return ADAPTERS[name]
