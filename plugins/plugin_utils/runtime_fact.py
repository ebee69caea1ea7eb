# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The runtime role's published fact (``gpufleet_runtime``) from what its tasks returned: a pure function.

Controller side (the ``runtime_fact`` filter). What each engine is (its drop-in, its main file) comes from
the engine adapters' read side (``module_utils.runtime.registry``), whether its version reads CDI from
``module_utils.runtime.common.reads_cdi``: the same rules the module and gpu_facts use.
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Sequence

from ansible_collections.gpufleet.nvidia.plugins.module_utils.runtime import registry
from ansible_collections.gpufleet.nvidia.plugins.module_utils.runtime.common import reads_cdi


def default_config_file(engine: str) -> str | None:
    """Where container_runtime writes for ``engine`` with its defaults (the drop-in, else the main file)."""
    facts = registry.FACTS.get(engine)
    return (facts.drop_in or facts.config_path) if facts else None


def cdi_for(engine: str, wanted: bool, nvidia: Mapping[str, Any]) -> bool:
    """Whether the role turns CDI on for ``engine``: wanted, and the engine's version reads CDI specs."""
    version = ((nvidia.get("engines") or {}).get(engine) or {}).get("version") or ""
    return bool(wanted) and reads_cdi(engine, version)


def engine_record(result: Mapping[str, Any], settings: Mapping[str, Any], nvidia: Mapping[str, Any]) -> dict[str, Any]:
    """One engine's entry from its ``container_runtime`` loop result (``item`` is the engine's name)."""
    engine = result["item"]
    skipped = bool(result.get("skipped"))
    known = (nvidia.get("engines") or {}).get(engine) or {}
    if skipped:
        message = f"would register once {settings.get('tomlkit_package', 'tomlkit')} is installed (check mode)"
    else:
        message = "; ".join(result.get("changes") or []) or "registered, unchanged"
    return {
        "registered": not skipped,
        "default": bool(settings.get("set_as_default")),
        "cdi": cdi_for(engine, settings.get("cdi"), nvidia),
        "config_path": result.get("config_file") or default_config_file(engine),
        "version": result.get("engine_version") or known.get("version"),
        "changed": bool(result.get("changed")) or skipped,
        "message": message,
    }


def runtime_fact(
    results: Sequence[Mapping[str, Any]],
    nvidia: Mapping[str, Any],
    installed: Sequence[str],
    settings: Mapping[str, Any],
    *,
    spec: Mapping[str, Any] | None = None,
    links: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """``gpufleet_runtime``: ``engines`` (one entry per registered engine, and podman when installed),
    ``cdi_spec`` (``path``, ``driver_version``, ``devices``) and ``dev_char_links`` (a count)."""
    nvidia = nvidia or {}
    spec = spec or {}
    engines: dict[str, Any] = {}
    for result in results or []:
        engines[result["item"]] = engine_record(result, settings, nvidia)
    spec_path = settings.get("cdi_spec_path")
    for engine in registry.NAMES:
        if engine not in (installed or []) or registry.INFO[engine].configurable:
            continue
        engines[engine] = {
            "registered": False,
            "default": False,
            "cdi": bool(settings.get("driver")),
            "config_path": None,
            "version": ((nvidia.get("engines") or {}).get(engine) or {}).get("version"),
            "changed": False,
            "message": f"uses the CDI spec {spec_path} (--device nvidia.com/gpu=...)",
        }
    return {
        "engines": engines,
        "cdi_spec": {
            "path": spec_path,
            "driver_version": spec.get("driver_version"),
            "devices": list(spec.get("devices") or []),
        },
        "dev_char_links": _links(links, nvidia),
    }


def _links(links: Mapping[str, Any] | None, nvidia: Mapping[str, Any]) -> int:
    """How many /dev/char links there are: what the link program reported, else the device nodes known."""
    stdout = (links or {}).get("stdout")
    if stdout is not None:
        return int(json.loads(stdout)["links"])
    nodes: list[Any] = list(nvidia.get("device_nodes") or [])
    return len(nodes)


def default_runtime_problem(
    toolkit: Mapping[str, Any] | None, set_as_default: bool, kubernetes_node: bool, host: str = "this host"
) -> str:
    """Why ``nvidia`` must not become the engines' default runtime on this host, or ``""`` when it may.

    On a Kubernetes node every pod then starts through the nvidia runtime, also pods that asked the device plugin
    for no GPU. That is safe only when the runtime does not take ``NVIDIA_VISIBLE_DEVICES`` (set by NVIDIA's CUDA
    images, or by the pod itself) from an unprivileged container as an allocation: the toolkit's
    ``accept_envvar_unprivileged`` must be false there (the toolkit role's default on Kubernetes nodes). An operator
    who turned it back on and keeps the default gets this message and the runtime stage fails before it writes
    anything: a warning would leave every GPU open to every pod."""
    if not set_as_default or not kubernetes_node:
        return ""
    toolkit = toolkit or {}
    if toolkit.get("accept_envvar_unprivileged") is False:
        return ""
    if toolkit.get("provider") == "nvidia":
        fix_toolkit = (
            "set accept-nvidia-visible-devices-envvar-when-unprivileged = false in "
            "/etc/nvidia-container-runtime/config.toml (nvidia-ctk config --in-place --set "
            "accept-nvidia-visible-devices-envvar-when-unprivileged=false)"
        )
    else:
        fix_toolkit = (
            "leave toolkit_accept_envvar_unprivileged unset (it is false on Kubernetes nodes) or set it to false, "
            "and run the toolkit stage"
        )
    return (
        f"{host}: runtime_set_as_default is true on a Kubernetes node whose nvidia runtime takes "
        "NVIDIA_VISIBLE_DEVICES from unprivileged containers as a GPU allocation (accept_envvar_unprivileged is "
        "not false): with nvidia as the default runtime every pod whose image sets NVIDIA_VISIBLE_DEVICES=all "
        "(NVIDIA's CUDA images do) would get every GPU past the device plugin. Nothing was changed. Fix: "
        f"{fix_toolkit}; or set runtime_set_as_default: false (pods then need a RuntimeClass with handler nvidia)"
    )
