# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""device_plugin_node: whether the device plugin acts on a host (a Kubernetes node with a GPU), the one rule site.yml's
device_plugin stage and the device_plugin role share."""

from __future__ import annotations

DOCUMENTATION = r"""
name: device_plugin_node
short_description: Whether the device plugin acts on a host (a Kubernetes node with a GPU), and why not
version_added: 1.0.0
author: gpufleet.nvidia contributors (@gpufleet)
description:
  - The one rule for the C(device_plugin) stage, used by C(site.yml) to run the stage and by the C(device_plugin)
    role to pick the nodes it renders and to record why a host is skipped.
  - A host is a device plugin node when it is a Kubernetes node (the P(gpufleet.nvidia.kubernetes_node#filter) rule -
    O(enabled) when set, else membership of O(node_group)) and has a GPU (C(gpu_node) of O(nvidia); for facts
    without that field, C(pci_gpu_count > 0)).
options:
  _input:
    description: The host's inventory name (C(inventory_hostname)).
    type: str
    required: true
  groups:
    description: The inventory's groups (the C(groups) magic variable).
    type: dict
    required: true
  node_group:
    description: The inventory group of the Kubernetes nodes (C(device_plugin_node_group)); null means C(kube_nodes).
    type: str
    default: kube_nodes
  enabled:
    description: C(device_plugin_enabled) of the host (see P(gpufleet.nvidia.kubernetes_node#filter)).
    type: raw
    default: null
  nvidia:
    description: The host's discovery facts (C(ansible_facts.nvidia), or C(device_plugin_gpu_facts)).
    type: dict
    default: null
"""

EXAMPLES = r"""
- name: Whether the device plugin acts on this host
  ansible.builtin.debug:
    msg: >-
      {{ (inventory_hostname | gpufleet.nvidia.device_plugin_node(groups, device_plugin_node_group | default(none),
                                                                  device_plugin_enabled | default(none),
                                                                  ansible_facts.nvidia | default({}))).node }}
"""

RETURN = r"""
_value:
  description: The verdict.
  type: dict
  contains:
    node:
      description: Whether the device plugin acts on the host.
      type: bool
    reason:
      description: Why it does not (null on a device plugin node).
      type: str
"""

from typing import Any, Mapping

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils import kubernetes_node
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.kubernetes_node import DEFAULT_NODE_GROUP


def device_plugin_node(
    host: Any,
    groups: Mapping[str, Any] | None,
    node_group: str | None = DEFAULT_NODE_GROUP,
    enabled: Any = None,
    nvidia: Mapping[str, Any] | None = None,
) -> dict:
    """``{node, reason}``: whether the device plugin acts on ``host`` (a Kubernetes node with a GPU) and, when not,
    why (``plugin_utils.kubernetes_node.device_plugin_node``); a bad ``enabled`` as ``AnsibleFilterError``."""
    try:
        return kubernetes_node.device_plugin_node(host, groups, node_group, enabled, nvidia)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule:
    def filters(self) -> dict:
        return {"device_plugin_node": device_plugin_node}
