# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The engines this collection knows, in discovery's order, and every list of engines derived from them.

Each engine is a folder (``docker/``, ``containerd/``, ``crio/``, ``podman/``): ``facts.py`` holds its ``INFO`` (plain
data, ``base.EngineInfo``) and its read side, ``edit.py`` its write side (``adapters.ADAPTERS``). This file is the one
list of them: discovery, the modules, the controller's plugins and the roles (through the ``engines`` filters) take
their lists of engines from here. Imports the read side only (no editor, no ``tomlkit``), so the host programs'
discovery and the controller read it as they are.
"""

from __future__ import annotations

import re
from typing import Pattern

from .base import Engine, EngineInfo
from .containerd.facts import ContainerdFacts
from .crio.facts import CrioFacts
from .docker.facts import DockerFacts
from .podman.facts import Podman

# name -> the read side of the engine adapter (``base.Engine``)
FACTS: dict[str, Engine] = {engine.name: engine for engine in (DockerFacts(), ContainerdFacts(), CrioFacts(), Podman())}
ENGINES = FACTS
INFO: dict[str, EngineInfo] = {name: engine.info for name, engine in FACTS.items()}
NAMES = tuple(INFO)
# The engines the container_runtime module registers a runtime with, and those of them whose files are TOML.
CONFIGURABLE = tuple(name for name, info in INFO.items() if info.configurable)
TOML = tuple(name for name in CONFIGURABLE if INFO[name].config_format == "toml")
# The Kubernetes CRI engines (the device plugin's runtimes).
CRI = tuple(name for name, info in INFO.items() if info.cri)
# engine -> the command that stops one of its containers (the driver role's drain)
STOPPABLE = {name: info.stop_cli for name, info in INFO.items() if info.stop_cli}
# The order validate checks engines in.
VALIDATE_ORDER = tuple(sorted(NAMES, key=lambda name: INFO[name].validate_rank))
_HEX64 = "[0-9a-f]{64}"


def cgroup_patterns() -> list[tuple[Pattern[str], str]]:
    """``(compiled pattern over a cgroup path, engine)`` for every engine's ``cgroup_patterns``."""
    return [
        (re.compile(pattern.replace("{id}", _HEX64)), name)
        for name, info in INFO.items()
        for pattern in info.cgroup_patterns
    ]


def units(names: tuple[str, ...] | list[str] = NAMES) -> list[str]:
    """The systemd units of ``names`` (every engine by default), in the registry's order."""
    return [INFO[name].service for name in NAMES if name in names]


def selected(names: object, trait: str = "all", field: str = "name") -> list:
    """The engines of ``names`` (a list; ``"all"`` or None: every engine) that have ``trait`` (``configurable``,
    ``toml``, ``cri``, ``stoppable``, or ``all``), in the registry's order: their ``field`` of ``EngineInfo``
    (``name``, ``service``, ...), a field that holds several names or paths giving each of them."""
    having = {"all": NAMES, "configurable": CONFIGURABLE, "toml": TOML, "cri": CRI, "stoppable": tuple(STOPPABLE)}
    if trait not in having:
        raise ValueError(f"engine trait {trait!r}: one of {', '.join(having)}")
    if field not in EngineInfo._fields:
        raise ValueError(f"engine field {field!r}: one of {', '.join(EngineInfo._fields)}")
    if names is None or names == "all":
        wanted = set(NAMES)
    elif isinstance(names, (list, tuple)):
        wanted = {str(name) for name in names}
    else:
        raise ValueError(f"engines: a list of engine names or 'all', not {names!r}")
    out: list = []
    for name in having[trait]:
        if name in wanted:
            value = getattr(INFO[name], field)
            several = isinstance(value, tuple) and all(isinstance(item, str) for item in value)
            out += list(value) if several else [value]
    return out
