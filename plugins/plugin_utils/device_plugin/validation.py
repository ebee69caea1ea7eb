# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The validation pod the device_plugin role runs on each GPU node: one GPU asked for, through the resource the node
advertises."""

from __future__ import annotations

import copy
import hashlib
import re
from typing import Any

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.device_plugin.objects import _labels
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.device_plugin.settings import (
    GPU_RESOURCE,
    SHARED_SUFFIX,
    image,
)

MIG_PREFIX = "nvidia.com/mig-"


def validation_pod_name(node_name: str) -> str:
    digest = hashlib.sha256(node_name.encode()).hexdigest()[:8]
    base = re.sub(r"[^a-z0-9-]", "-", node_name.lower())[:40].strip("-")
    return f"gpufleet-validate-{base}-{digest}"


def node_mig_profiles(node: dict[str, Any]) -> list[str]:
    """The MIG profiles of a node's MIG devices (``gpu_facts``' ``gpus[].mig_devices[].profile``), in GPU order."""
    profiles = []
    for gpu in node.get("gpus") or []:
        for mig in (gpu or {}).get("mig_devices") or []:
            profile = (mig or {}).get("profile")
            if profile and profile not in profiles:
                profiles.append(str(profile))
    return profiles


def validation_resource(s: dict[str, Any], node: dict[str, Any]) -> str | None:
    """The resource the node advertises that the validation pod asks for one of; None when the render cannot know it.

    k8s-device-plugin v0.20.0 (internal/rm/rm.go, the MIG strategies' resources, re-read 2026-11-27): with MIG ``none``
    or ``single`` the GPUs (or their MIG devices) are ``nvidia.com/gpu``; with ``mixed`` each MIG profile is its own
    ``nvidia.com/mig-<profile>`` (a ``+`` of the profile, as in ``1g.10gb+me``, written ``.``) and a node whose GPUs
    are all in MIG mode has no ``nvidia.com/gpu``. With renaming a shared resource is advertised only as
    ``<name>.shared``."""
    if s["mig_strategy"] == "mixed":
        profiles = node_mig_profiles(node)
        if not profiles:
            return None
        name = MIG_PREFIX + profiles[0].replace("+", ".")
    else:
        name = GPU_RESOURCE
    sharing = s["time_slicing"] or s["mps"]
    if sharing and sharing["rename_by_default"] and any(r["name"] == name for r in sharing["resources"]):
        name += SHARED_SUFFIX
    return name


def validation_pod(s: dict[str, Any], node_name: str, resource: str = GPU_RESOURCE) -> dict[str, Any]:
    container = {
        "name": "gpu-check",
        "image": image(s, "validate_image"),
        "imagePullPolicy": s["image_pull_policy"],
        "resources": {"limits": {resource: 1}, "requests": {resource: 1}},
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
    }
    if s["validate_command"]:
        container["command"] = list(s["validate_command"])
    spec = {
        "restartPolicy": "Never",
        "nodeSelector": {"kubernetes.io/hostname": node_name},
        "tolerations": copy.deepcopy(s["tolerations"]),
        "containers": [container],
        "automountServiceAccountToken": False,
    }
    if s["runtime_class_name"]:
        spec["runtimeClassName"] = s["runtime_class_name"]
    if s["image_pull_secrets"]:
        spec["imagePullSecrets"] = [{"name": n} for n in s["image_pull_secrets"]]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": validation_pod_name(node_name),
            "namespace": s["namespace"],
            "labels": dict(_labels("gpufleet-validate"), **{"gpufleet.nvidia/node": node_name[:63].strip("-_.")}),
        },
        "spec": spec,
    }
