# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A Kubernetes node's drain for a GPU change, as pure functions: the cordon and uncordon patches, which of the
node's pods hold a GPU, the Eviction each gets, and what the API server's answer to an eviction means.

Controller only, pure; the calls themselves go through kubernetes.core with the admin's kubeconfig. Rules, from
the Kubernetes documentation for the versions the device_plugin role claims (1.29 to 1.37), written 2026-11-27 (only the
API-initiated eviction page was re-read that day; re-read the others when the drain is wired):

* https://kubernetes.io/docs/reference/kubernetes-api/cluster-resources/node-v1/ : ``spec.unschedulable``
  (``kubectl cordon`` sets it to true, ``uncordon`` back to false); the node controller then adds the taint
  ``node.kubernetes.io/unschedulable:NoSchedule``
  (https://kubernetes.io/docs/reference/labels-annotations-taints/#node-kubernetes-io-unschedulable).
* https://kubernetes.io/docs/concepts/scheduling-eviction/api-eviction/ : an Eviction (``policy/v1``) is POSTed
  to ``/api/v1/namespaces/<ns>/pods/<name>/eviction``; ``200 OK`` or ``201 Created``: the eviction is allowed and
  the pod is deleted; ``429 Too Many Requests``: a PodDisruptionBudget does not allow it now (retry later);
  ``500 Internal Server Error``: misconfiguration, such as several PodDisruptionBudgets selecting the pod.
  A pod already gone answers ``404``.
* https://kubernetes.io/docs/concepts/configuration/manage-resources-containers/ : an extended resource
  (``nvidia.com/gpu``) is asked for in a container's ``resources.limits`` (requests, when given, equal limits).
* https://kubernetes.io/docs/tasks/configure-pod-container/static-pod/ : a static pod's mirror (annotation
  ``kubernetes.io/config.mirror``) cannot be evicted through the API server: it is the kubelet's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

GPU_RESOURCE = "nvidia.com/gpu"
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
_DONE_PHASES = {"Succeeded", "Failed"}


def cordon_patch(cordoned: bool) -> dict[str, Any]:
    """The merge patch of the Node that cordons (True) or uncordons (False) it."""
    return {"spec": {"unschedulable": bool(cordoned)}}


def _asks_gpu(container: Mapping[str, Any], resource: str) -> bool:
    resources = container.get("resources") or {}
    for part in ("limits", "requests"):
        value = (resources.get(part) or {}).get(resource)
        if value not in (None, "", "0", 0):
            return True
    return False


def gpu_pods(pods: list[Mapping[str, Any]], node: str, resource: str = GPU_RESOURCE) -> dict[str, list[dict]]:
    """The pods bound to ``node`` that hold a GPU: ``{"evict": [...], "refuse": [...]}``, each
    ``{"namespace", "name", "why"}``. Finished pods hold nothing; a static pod's mirror is refused (only its
    manifest on the host removes it)."""
    evict: list[dict] = []
    refuse: list[dict] = []
    for pod in pods:
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        if spec.get("nodeName") != node or (pod.get("status") or {}).get("phase") in _DONE_PHASES:
            continue
        containers = list(spec.get("containers") or []) + list(spec.get("initContainers") or [])
        if not any(_asks_gpu(c, resource) for c in containers):
            continue
        entry = {"namespace": meta.get("namespace", "default"), "name": meta.get("name")}
        if MIRROR_ANNOTATION in (meta.get("annotations") or {}):
            refuse.append({**entry, "why": "a static pod: remove its manifest from the kubelet's staticPodPath"})
        else:
            evict.append({**entry, "why": f"asks for {resource}"})
    return {"evict": evict, "refuse": refuse}


def eviction_body(namespace: str, name: str) -> dict[str, Any]:
    """The ``policy/v1`` Eviction POSTed to the pod's ``eviction`` subresource."""
    return {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}


def eviction_outcome(status: int) -> str:
    """What the API server's status to an eviction means: ``evicted`` (200, 201), ``gone`` (404), ``retry``
    (429: a PodDisruptionBudget does not allow it yet; retry until the drain's timeout) or ``failed`` (anything
    else, 500 included: several budgets select the pod, which no retry mends)."""
    if status in (200, 201):
        return "evicted"
    if status == 404:
        return "gone"
    if status == 429:
        return "retry"
    return "failed"
