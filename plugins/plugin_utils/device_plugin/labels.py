# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The labels the device_plugin role puts on a GPU node, and the partial Node that carries them."""

from __future__ import annotations

from typing import Any

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.device_plugin.settings import (
    _DNS_LABEL,
    GPU_RESOURCE,
    DevicePluginError,
)

PRESENT_LABEL = "nvidia.com/gpu.present"


def node_name_ok(name: str | None) -> bool:
    return bool(name) and len(name) <= 253 and all(_DNS_LABEL.match(p) for p in name.split("."))


# The labels whose value GFD derives from the plugin's config or from MIG devices (k8s-device-plugin v0.20.0, re-read
# 2026-11-27, internal/lm/resource.go baseLabeler: <resource>.product with "-SHARED" when shared and not renamed,
# .count, .replicas, .sharing-strategy; mig-strategy.go: under MIG "single" nvidia.com/gpu.* describe the MIG devices,
# under "mixed" nvidia.com/mig-<profile>.*; nvml.go: mps.capable).
_RESOURCE_LABELS = ("gpu.product", "gpu.count", "gpu.memory", "gpu.replicas", "gpu.sharing-strategy")


def node_labels(s: dict[str, Any], labels: dict[str, Any]) -> dict[str, str]:
    """The labels the role puts on a GPU node, never contradicting GFD's.

    With GFD on, ``nvidia.com/gpu.present``, which GFD never writes (the default node selector needs it), and labels
    outside ``nvidia.com/``: every other ``nvidia.com/`` label is GFD's (through NFD) and the role leaves it alone.
    With GFD off, ``gpu_facts``' labels with the config-dependent ones as GFD would write them: replicas, sharing
    strategy and the ``-SHARED`` product for a shared ``nvidia.com/gpu``, ``mps.capable``; under MIG the per-resource
    labels (which then describe MIG devices) are left out and ``nvidia.com/mig.strategy`` is set."""
    labels = {str(k): str(v) for k, v in (labels or {}).items()}
    if s["gfd_enabled"]:
        return {k: v for k, v in labels.items() if k == PRESENT_LABEL or not k.startswith("nvidia.com/")}
    if s["mig_strategy"] != "none":
        for key in _RESOURCE_LABELS:
            labels.pop("nvidia.com/" + key, None)
        labels["nvidia.com/mig.strategy"] = s["mig_strategy"]
        return labels
    if "nvidia.com/gpu.count" not in labels:
        return labels  # no GPU read (driver not loaded): GFD would write none of these either
    sharing = s["time_slicing"] or s["mps"]
    shared = next((r for r in (sharing or {}).get("resources", []) if r["name"] == GPU_RESOURCE), None)
    if shared:
        labels["nvidia.com/gpu.replicas"] = str(shared["replicas"])
        labels["nvidia.com/gpu.sharing-strategy"] = "mps" if s["mps"] else "time-slicing"
        if "nvidia.com/gpu.product" in labels and not shared.get("rename"):
            labels["nvidia.com/gpu.product"] = labels["nvidia.com/gpu.product"] + "-SHARED"
    else:
        labels["nvidia.com/gpu.replicas"] = "1"
        labels["nvidia.com/gpu.sharing-strategy"] = "none"
    labels["nvidia.com/mps.capable"] = "true" if s["mps"] else "false"
    return labels


def node_labels_doc(node: dict[str, Any], s: dict[str, Any] | None = None) -> dict[str, Any]:
    """A partial Node carrying the role's labels (``node_labels``): a merge patch for the API, a server-side apply for
    GitOps."""
    name = node["name"]
    labels = node.get("labels") or {}
    if s is not None:
        labels = node_labels(s, labels)
    if not node_name_ok(name):
        raise DevicePluginError(f"device_plugin_node_name: {name!r} is not a valid Kubernetes node name")
    return {
        "apiVersion": "v1",
        "kind": "Node",
        # Sorted: the same labels give the same file whatever order discovery listed them in.
        "metadata": {"name": name, "labels": {k: str(labels[k]) for k in sorted(labels)}},
    }
