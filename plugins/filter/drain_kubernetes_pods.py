# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""drain_kubernetes_pods: which of a Kubernetes node's pods hold a GPU, to evict or to refuse (the drain role)."""

from __future__ import annotations

DOCUMENTATION = r"""
name: drain_kubernetes_pods
short_description: The pods of a Kubernetes node that hold a GPU - to evict, or to refuse
version_added: 1.0.0
author: gpufleet.nvidia contributors (@gpufleet)
description:
  - Reads the node's pods (C(kubernetes.core.k8s_info) C(resources)) and returns those bound to the node that ask for
    the GPU resource in a container's limits or requests and have not finished - C(evict), and static pods' mirrors,
    which the API server cannot evict - C(refuse), each C({namespace, name, why}).
options:
  _input:
    description: The pods (C(resources) of C(kubernetes.core.k8s_info)).
    type: list
    elements: dict
    required: true
  node:
    description: The node's name.
    type: str
    required: true
  resource:
    description: The extended resource a GPU is asked by.
    type: str
    default: nvidia.com/gpu
"""

EXAMPLES = r"""
- name: The GPU pods of the node
  ansible.builtin.set_fact:
    gpu_pods: "{{ pods.resources | gpufleet.nvidia.drain_kubernetes_pods('gpu-01') }}"
"""

RETURN = r"""
_value:
  description: C(evict) and C(refuse), lists of C({namespace, name, why}).
  type: dict
"""

from typing import Any, Callable

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.drain_kubernetes import GPU_RESOURCE, gpu_pods


def drain_kubernetes_pods(pods: Any, node: str, resource: str = GPU_RESOURCE) -> dict[str, list[dict]]:
    if not isinstance(pods, list):
        raise AnsibleFilterError(f"drain_kubernetes_pods: the pods must be a list (k8s_info's resources), got {pods!r}")
    return gpu_pods(pods, str(node), str(resource))


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"drain_kubernetes_pods": drain_kubernetes_pods}
