# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a stage knows of the stages before it: their published fact when they ran in this play (a cache), else what
``gpu_facts`` reads from the host that an earlier run converged (``ansible_facts.nvidia``: ``toolkit``, ``engines``
with their registered runtimes, ``cdi_spec``). This is what lets ``site.yml --tags runtime,validate`` (an AWX job
template with job tags, a night-time health check) run on a converged fleet.

* ``stage_toolkit(published, nvidia)``: ``gpufleet_toolkit``, else ``nvidia.toolkit``, else None;
* ``stage_runtime(published, nvidia, name)``: ``gpufleet_runtime``, else the same record built from the engines'
  configurations as discovery read them, else None."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..runtime.common import reads_cdi
from ..runtime.registry import INFO

DISCOVERED = "discovered"


def stage_toolkit(published: Mapping[str, Any] | None, nvidia: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The toolkit this host has: the toolkit role's fact from this play, else the one ``gpu_facts`` found."""
    if published:
        return dict(published)
    found = (nvidia or {}).get("toolkit")
    return dict(found) if found else None


def stage_runtime(
    published: Mapping[str, Any] | None, nvidia: Mapping[str, Any] | None, name: str = "nvidia"
) -> dict[str, Any] | None:
    """``gpufleet_runtime`` from this play, else built from the engines' configurations (``gpu_facts``'s
    ``engines.<engine>.runtimes``, ``default_runtime``, ``cdi_enabled``) and its ``cdi_spec``; None when the host
    shows no engine and no spec (nothing to read)."""
    if published:
        return dict(published)
    nvidia = nvidia or {}
    found = nvidia.get("engines") or {}
    spec = nvidia.get("cdi_spec") or None
    engines: dict[str, Any] = {}
    for engine, facts in sorted(found.items()):
        if not (facts or {}).get("installed"):
            continue
        version = facts.get("version") or ""
        if engine in INFO and not INFO[engine].configurable:  # no runtime to register: the CDI spec only
            engines[engine] = {
                "registered": False,
                "default": False,
                "cdi": bool(spec),
                "config_path": None,
                "version": facts.get("version"),
                "changed": False,
                "message": f"uses the CDI spec {spec['path']}" if spec else "no CDI spec on the host",
            }
            continue
        registered = name in (facts.get("runtimes") or [])
        engines[engine] = {
            "registered": registered,
            "default": facts.get("default_runtime") == name,
            "cdi": bool(facts.get("cdi_enabled")) and reads_cdi(engine, version),
            "config_path": facts.get("config_path"),
            "version": facts.get("version"),
            "changed": False,
            "message": f"{name} {'registered' if registered else 'not registered'} (read from the host)",
        }
    if not engines and not spec:
        return None
    return {
        "engines": engines,
        "cdi_spec": {
            "path": (spec or {}).get("path"),
            "driver_version": (spec or {}).get("driver_version"),
            "devices": [],
        },
        "dev_char_links": len([n for n in nvidia.get("device_nodes") or [] if (n or {}).get("char_link_present")]),
        "source": DISCOVERED,
    }
