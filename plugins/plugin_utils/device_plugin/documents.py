# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Every document the device_plugin role applies or writes, in apply order, and the Helm values for NVIDIA's chart
carrying the same settings."""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any, Callable, Iterable

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.device_plugin.config import (
    config_map_data,
    dump_config,
)
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.device_plugin.daemonsets import (
    GFD_SECURITY,
    config_manager_rbac,
    dcgm_exporter_docs,
    device_plugin_daemonset,
    gfd_daemonset,
    gfd_rbac,
    mps_daemonset,
    plugin_security,
    runtime_class,
)
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.device_plugin.labels import node_labels_doc
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.device_plugin.objects import _labels, _meta
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.device_plugin.settings import (
    DEFAULT_CONFIG,
    NODE_CONFIG_LABEL,
    DevicePluginError,
    node_settings,
    normalize,
    uses_cdi,
)
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.device_plugin.validation import (
    validation_pod,
    validation_resource,
)


def documents(
    settings: dict[str, Any] | None,
    nodes: Iterable[dict[str, Any]] = (),
    dump: Callable[[dict[str, Any]], str] = dump_config,
) -> list[tuple[str, str, list[dict[str, Any]]]]:
    """``[(group, file_name, [documents])]`` in apply order; groups are ``cluster``, ``nodes`` and
    ``validation``. ``nodes`` is a list of ``{name, labels}`` with an optional ``config`` (a name of
    ``device_plugin_configs``); ``dump`` turns the config into file text (JSON here; the controller's filter writes
    YAML)."""
    s = normalize(settings)
    data = config_map_data(s, dump)
    text = data["config.yaml"] if "config.yaml" in data else json.dumps(data, sort_keys=True)
    checksum = hashlib.sha256(text.encode()).hexdigest()
    out = []
    if s["create_namespace"]:
        out.append(
            (
                "cluster",
                "00-namespace.yaml",
                [
                    {
                        "apiVersion": "v1",
                        "kind": "Namespace",
                        "metadata": {"name": s["namespace"], "labels": _labels("gpufleet-nvidia")},
                    }
                ],
            )
        )
    if s["runtime_class_name"] and s["runtime_class_create"]:
        out.append(("cluster", "01-runtimeclass.yaml", [runtime_class(s)]))
    out.append(
        (
            "cluster",
            "10-device-plugin-config.yaml",
            [
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": _meta("nvidia-device-plugin-config", s, "nvidia-device-plugin"),
                    "data": data,
                }
            ],
        )
    )
    rbac = config_manager_rbac(s) if s["configs"] else []
    out.append(("cluster", "11-device-plugin.yaml", [*rbac, device_plugin_daemonset(s, checksum)]))
    if s["mps"]:
        out.append(("cluster", "12-mps-control-daemon.yaml", [mps_daemonset(s, checksum)]))
    if s["gfd_enabled"]:
        docs = gfd_rbac(s) if s["gfd_node_feature_api"] or s["configs"] else []
        out.append(("cluster", "20-gpu-feature-discovery.yaml", [*docs, gfd_daemonset(s, checksum)]))
    if s["dcgm_exporter_enabled"]:
        out.append(("cluster", "30-dcgm-exporter.yaml", dcgm_exporter_docs(s)))
    seen = set()
    for node in nodes:
        if node["name"] in seen:
            raise DevicePluginError(f"device_plugin_node_name: node {node['name']!r} is named by two hosts")
        seen.add(node["name"])
        config = node.get("config") or ""
        ns = node_settings(s, config)
        if s["node_labels"] or s["configs"]:
            doc = node_labels_doc(node, ns) if s["node_labels"] else node_labels_doc({"name": node["name"]})
            if s["configs"]:
                # The label config-manager reads; on every node, so a node without a configuration of its own
                # runs the default one rather than whatever an earlier label named.
                doc["metadata"]["labels"][NODE_CONFIG_LABEL] = config or DEFAULT_CONFIG
                doc["metadata"]["labels"] = dict(sorted(doc["metadata"]["labels"].items()))
            out.append(("nodes", f"node-{node['name']}.yaml", [doc]))
    # Validation pods last: they need the plugin running and, without NFD/GFD, the labels in place.
    # With MIG "mixed" and no MIG device in the node's facts there is no resource to ask for: no pod, no false failure.
    if s["validate"]:
        for node in nodes:
            ns = node_settings(s, node.get("config") or "")
            resource = validation_resource(ns, node)
            if resource:
                out.append(
                    ("validation", f"validate-{node['name']}.yaml", [validation_pod(ns, node["name"], resource)])
                )
    return out


def helm_values(settings: dict[str, Any] | None, dump: Callable[[dict[str, Any]], str] = dump_config) -> dict[str, Any]:
    """Values for NVIDIA's ``nvidia-device-plugin`` chart carrying the same settings as the manifests."""
    s = normalize(settings)
    values = {
        "image": {
            "repository": f"{s['image_registry']}/{s['image_repository']}",
            "tag": s["image_tag"],
            "pullPolicy": s["image_pull_policy"],
        },
        # The chart runs config-manager whenever it has a config map, picking by the node's
        # nvidia.com/device-plugin.config label, else "default" (templates/_helpers.tpl hasConfigMap).
        "config": {"map": _helm_config_map(s, dump), "default": DEFAULT_CONFIG},
        "nodeSelector": dict(s["node_selector"]),
        "tolerations": copy.deepcopy(s["tolerations"]),
        "priorityClassName": s["priority_class_name"],
        "nvidiaDriverRoot": s["nvidia_driver_root"],
        # Explicit, as in the manifests: the chart would derive the same from the config map today
        # (requiresCapSysAdmin is true whenever config.map is set), but not for every way of naming a config.
        "securityContext": plugin_security(s),
        "gfd": {"enabled": bool(s["gfd_enabled"]), "securityContext": copy.deepcopy(GFD_SECURITY)},
        # NVIDIA's chart deploys node-feature-discovery (its dependency, chart 0.19.0 in chart 0.20.0's Chart.lock)
        # when nfd.enabled, else when gfd.enabled (Chart.yaml condition "nfd.enabled,gfd.enabled"): GFD's labels
        # reach the node only through NFD. The chart has no value for GFD's NodeFeature API any more (0.17's
        # nfd.enableNodeFeatureApi is gone): the config file carries useNodeFeatureAPI.
        "nfd": {"enabled": bool(s["gfd_enabled"] and s["nfd_enabled"])},
        "cdi": {"nvidiaHookPath": s["cdi_hook_path"] if uses_cdi(s) else None},
        # The MPS daemon in the host's PID namespace, the chart's default at 0.20.0, stated as the manifests run it.
        "mps": {"enableHostPID": True},
        "devicePlugin": {"enabled": True},
    }
    if s["runtime_class_name"]:
        values["runtimeClassName"] = s["runtime_class_name"]
    if s["image_pull_secrets"]:
        values["imagePullSecrets"] = [{"name": n} for n in s["image_pull_secrets"]]
    return values


def _helm_config_map(s: dict[str, Any], dump: Callable[[dict[str, Any]], str]) -> dict[str, str]:
    data = config_map_data(s, dump)
    return {DEFAULT_CONFIG: data.pop("config.yaml")} if "config.yaml" in data else data


def helm_unsupported(settings: dict[str, Any] | None) -> list[str]:
    """Settings NVIDIA's chart 0.20.0 has no value for (its plugin container's env is fixed: templates/
    daemonset-device-plugin.yml), so Helm mode cannot carry them."""
    s = normalize(settings)
    out = []
    for key in ("health_disabled_xids", "health_enabled_xids"):
        if s[key]:
            out.append(
                f"device_plugin_{key} is set, and NVIDIA's chart has no value for the plugin's XID health settings "
                f"(DP_DISABLE_HEALTHCHECKS / DP_ENABLE_HEALTHCHECKS): use device_plugin_mode apply or render_only"
            )
    return out
