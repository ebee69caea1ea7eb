# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Why a node cannot serve the device plugin's device list strategies: its runtime facts (the ``runtime`` role's
``gpufleet_runtime``) or the device requests its toolkit honours (the ``toolkit`` role's ``gpufleet_toolkit``)."""

from __future__ import annotations

import json
from typing import Any, Iterable, Sequence

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.device_plugin.settings import CDI_STRATEGIES, DEFAULTS

# volume-mounts (k8s-device-plugin v0.20.0, re-read 2026-11-27, internal/plugin/server.go,
# updateResponseForDeviceMounts): for each allocated device the container gets a mount of /dev/null on
# /var/run/nvidia-container-devices/<id> (<id> as deviceIDStrategy says), plus
# NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices, which replaces the list envvar would set (Allocate runs
# envvar first, then volume-mounts). The runtime honours the mounts only with NVIDIA's
# accept-nvidia-visible-devices-as-volume-mounts (the shim's "accept_volume_mounts"), and then the variable from an
# unprivileged container can be ignored: the default, which the toolkit role pairs with accept_envvar_unprivileged=false
# on Kubernetes nodes, so a pod gets only what the plugin allocated.
VOLUME_MOUNTS_ROOT = "/var/run/nvidia-container-devices"


# The strategies' stand-in for the DRA driver (device_plugin_gpu_allocation=dra): CDI devices through the engine, and
# its own nvidia-cdi-hook copied to the host where the toolkit has none, so no toolkit setting has to fit.
DRA = "dra"


def toolkit_problems(toolkit: dict[str, Any] | None, strategies: Sequence[str]) -> list[str]:
    """Why the device requests the node's runtime honours (the ``toolkit`` role's ``gpufleet_toolkit`` fact) and the
    plugin's device list strategies do not fit together; ``[]`` when they do, or when the fact says nothing."""
    if not toolkit or DRA in strategies:
        return []
    envvar = toolkit.get("accept_envvar_unprivileged")
    mounts = toolkit.get("accept_volume_mounts")
    nvidia = toolkit.get("provider") == "nvidia"
    chosen = f"device_plugin_device_list_strategy {list(strategies)}"
    problems = []
    if "volume-mounts" in strategies and mounts is False:
        fix = (
            "run nvidia-ctk config --in-place --set accept-nvidia-visible-devices-as-volume-mounts=true "
            "--set accept-nvidia-visible-devices-envvar-when-unprivileged=false (the toolkit role does not edit "
            "NVIDIA's /etc/nvidia-container-runtime/config.toml)"
            if nvidia
            else "set toolkit_accept_volume_mounts: true and run the toolkit stage (it is the default on Kubernetes "
            "nodes: is this host in device_plugin_node_group?)"
        )
        problems.append(
            f"{chosen} has volume-mounts, but gpufleet_toolkit.accept_volume_mounts is false on this node: its "
            "nvidia runtime would not read the plugin's device mounts (and would take the "
            f"NVIDIA_VISIBLE_DEVICES={VOLUME_MOUNTS_ROOT} the plugin sets with them for a device); {fix}, or choose "
            "another device_plugin_device_list_strategy"
        )
    cdi = [x for x in strategies if x in CDI_STRATEGIES]
    if cdi and toolkit.get("provider") == "native":
        problems.append(
            f"{chosen} has {', '.join(cdi)}: the device plugin then writes its own CDI spec, whose hooks run NVIDIA's "
            "nvidia-cdi-hook (device_plugin_cdi_hook_path), which the native toolkit provider does not install, so "
            "every GPU pod would fail to start; choose device_plugin_device_list_strategy: [volume-mounts] (the "
            "default), or toolkit_provider: nvidia"
        )
    if list(strategies) == ["envvar"] and envvar is False:
        fix = (
            "accept-nvidia-visible-devices-envvar-when-unprivileged = true in /etc/nvidia-container-runtime/config.toml"
            if nvidia
            else "toolkit_accept_envvar_unprivileged: true"
        )
        problems.append(
            f"{chosen} passes devices only through NVIDIA_VISIBLE_DEVICES, but gpufleet_toolkit."
            "accept_envvar_unprivileged is false on this node: its nvidia runtime ignores that variable from "
            "unprivileged containers, so pods would get no GPU; set device_plugin_device_list_strategy: "
            "[volume-mounts] (the default) or a CDI strategy (cdi-annotations, cdi-cri), or, to let any "
            f"container's own NVIDIA_VISIBLE_DEVICES take GPUs past the device plugin again, {fix}"
        )
    return problems


def runtime_problems(runtime: dict[str, Any] | None, engine: str, strategies: Iterable[str]) -> list[str]:
    """Why the ``runtime`` role's facts (``gpufleet_runtime``) say this node cannot run the plugin;
    ``[]`` when it can."""
    if not runtime:
        return [
            "gpufleet_runtime is not set on this host and gpu_facts found no container engine there: run the runtime "
            "stage first (site.yml --tags runtime) so "
            f"{engine} has the nvidia runtime, or set device_plugin_check_runtime=false if it is managed elsewhere"
        ]
    facts = (runtime.get("engines") or {}).get(engine)
    if not facts:
        return [
            f"gpufleet_runtime.engines has no {engine}: the runtime role did not find {engine} on this Kubernetes node"
        ]
    problems = []
    if not facts.get("registered"):
        problems.append(
            f"{engine} does not have the nvidia runtime registered (gpufleet_runtime.engines.{engine}.registered "
            f"is false{': ' + facts['message'] if facts.get('message') else ''}); run the runtime role for {engine} "
            "first"
        )
    cdi = [x for x in strategies if x in CDI_STRATEGIES]
    if DRA in strategies and not facts.get("cdi"):
        # The DRA driver's prerequisites page at v0.4.1 (read 2026-11-28): the runtime must read CDI, default in
        # containerd 2.0+ and CRI-O 1.27+, enable_cdi in containerd 1.7's CRI plugin, none in containerd 1.6.
        problems.append(
            f"device_plugin_gpu_allocation=dra needs CDI in {engine}, but gpufleet_runtime.engines.{engine}.cdi is "
            f"false ({engine} too old for CDI, such as containerd 1.6, or runtime_cdi: false): the DRA driver hands "
            "out GPUs only as CDI devices; set runtime_cdi: true on containerd 1.7+ or CRI-O, or keep "
            "device_plugin_gpu_allocation=device_plugin"
        )
    elif cdi and not facts.get("cdi"):
        problems.append(
            f"device_plugin_device_list_strategy {', '.join(cdi)} needs CDI in {engine}, but "
            f"gpufleet_runtime.engines.{engine}.cdi is false ({engine} too old for CDI, such as containerd 1.6, or "
            "runtime_cdi: false): nothing would apply the plugin's CDI devices, and the nvidia runtime does not "
            "take them from a pod's cdi.k8s.io/ annotations on a Kubernetes node "
            "(toolkit_accept_cdi_annotations_unprivileged is false there: any pod could set one and take every GPU); "
            "set runtime_cdi: true on "
            "containerd 1.7+ or CRI-O, or choose device_plugin_device_list_strategy: [volume-mounts] (the default)"
        )
    return problems


def node_problems(
    runtime: dict[str, Any] | None,
    engine: str = DEFAULTS["container_engine"],
    strategies: str | list[str] | None = None,
    toolkit: dict[str, Any] | None = None,
) -> list[str]:
    """``runtime_problems`` then ``toolkit_problems`` of one node, on plain copies of the facts (Ansible's tagged
    strings and lazy containers as JSON types); ``strategies`` a list or a comma-separated string, none meaning the
    role's default ``device_list_strategy``."""
    runtime = json.loads(json.dumps(runtime)) if runtime else None
    toolkit = json.loads(json.dumps(toolkit)) if toolkit else None
    if isinstance(strategies, str):
        strategies = [s.strip() for s in strategies.split(",") if s.strip()]
    strategies = list(strategies or DEFAULTS["device_list_strategy"])
    return runtime_problems(runtime, engine, strategies) + toolkit_problems(toolkit, strategies)
