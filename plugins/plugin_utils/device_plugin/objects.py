# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The small builders the device_plugin role's Kubernetes objects share: labels, metadata, host paths, pod specs,
DaemonSets, environment variables."""

from __future__ import annotations

import copy
from typing import Any, Iterable


def _labels(component: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": component, "app.kubernetes.io/part-of": "gpufleet-nvidia"}


def _meta(name: str, s: dict[str, Any], component: str, namespaced: bool = True) -> dict[str, Any]:
    meta = {"name": name, "labels": _labels(component)}
    if namespaced:
        meta["namespace"] = s["namespace"]
    return meta


def _host_path(name: str, path: str, kind: str | None = None) -> dict[str, Any]:
    volume = {"name": name, "hostPath": {"path": path}}
    if kind:
        volume["hostPath"]["type"] = kind
    return volume


def _pod_spec(
    s: dict[str, Any],
    containers: list[dict[str, Any]],
    volumes: list[dict[str, Any]],
    service_account: str | None = None,
) -> dict[str, Any]:
    spec = {
        "nodeSelector": dict(s["node_selector"]),
        "tolerations": copy.deepcopy(s["tolerations"]),
        "containers": containers,
        "volumes": volumes,
    }
    if s["priority_class_name"]:
        spec["priorityClassName"] = s["priority_class_name"]
    if s["runtime_class_name"]:
        spec["runtimeClassName"] = s["runtime_class_name"]
    if s["image_pull_secrets"]:
        spec["imagePullSecrets"] = [{"name": n} for n in s["image_pull_secrets"]]
    if service_account:
        spec["serviceAccountName"] = service_account
    else:
        spec["automountServiceAccountToken"] = False
    return spec


def _daemonset(
    name: str, s: dict[str, Any], component: str, pod_spec: dict[str, Any], annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    template_meta = {"labels": _labels(component)}
    if annotations:
        template_meta["annotations"] = annotations
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": _meta(name, s, component),
        "spec": {
            "selector": {"matchLabels": _labels(component)},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {"metadata": template_meta, "spec": pod_spec},
        },
    }


def _env(pairs: Iterable[tuple[str, object]]) -> list[dict[str, Any]]:
    return [{"name": k, "value": str(v)} for k, v in pairs]


def _field_env(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def _config_volume() -> dict[str, Any]:
    return {"name": "config", "configMap": {"name": "nvidia-device-plugin-config"}}
