# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""kubernetes_node: whether a host is a Kubernetes node, the one rule site.yml and the roles share."""

from __future__ import annotations

DOCUMENTATION = r"""
name: kubernetes_node
short_description: Whether a host is a Kubernetes node (the device plugin stage's rule)
version_added: 1.0.0
author: gpufleet.nvidia contributors (@gpufleet)
description:
  - The one rule for "this host is a Kubernetes node", used by C(site.yml) to run the C(device_plugin) stage, by the
    C(device_plugin) role to pick the nodes it acts on, and by the C(toolkit) role to choose what the runtime shim
    trusts on the host.
  - O(enabled), when set, decides (C(true) makes the host a node, C(false) takes it out of the group); otherwise
    membership of the inventory group O(node_group) decides.
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
    description: The inventory group of the Kubernetes nodes (C(device_plugin_node_group)).
    type: str
    default: kube_nodes
  enabled:
    description:
      - C(device_plugin_enabled) of the host; null (or undefined, through C(default(none))) or an empty string (an
        unanswered survey) means the group decides. A string is read as Ansible reads booleans (C(yes), C(false)...);
        anything else is an error naming the variable.
    type: raw
    default: null
"""

EXAMPLES = r"""
- name: Whether this host is a Kubernetes node
  ansible.builtin.debug:
    msg: >-
      {{ inventory_hostname | gpufleet.nvidia.kubernetes_node(groups, device_plugin_node_group | default('kube_nodes'),
                                                              device_plugin_enabled | default(none)) }}
"""

RETURN = r"""
_value:
  description: Whether the host is a Kubernetes node.
  type: bool
"""

from typing import Any, Callable, Mapping

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.kubernetes_node import (
    DEFAULT_NODE_GROUP,
    kubernetes_node,
)


def is_kubernetes_node(
    host: Any, groups: Mapping[str, Any] | None, node_group: str | None = DEFAULT_NODE_GROUP, enabled: Any = None
) -> bool:
    """``enabled`` when it is set, else whether ``host`` is in ``groups[node_group]``
    (``plugin_utils.kubernetes_node.kubernetes_node``); a bad ``enabled`` as ``AnsibleFilterError``."""
    try:
        return kubernetes_node(host, groups, node_group, enabled)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"kubernetes_node": is_kubernetes_node}
