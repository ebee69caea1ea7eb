# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""device_plugin_manifests: the device_plugin role's Kubernetes documents, files and Helm values."""

from __future__ import annotations

DOCUMENTATION = r"""
name: device_plugin_manifests
short_description: Kubernetes documents, GitOps files and Helm values of the device_plugin role
version_added: 1.0.0
author: gpufleet.nvidia contributors (@gpufleet)
description:
  - Given the C(gpufleet.nvidia.device_plugin) role's settings (its variables without the C(device_plugin_) prefix),
    returns every document the role applies, the same documents as YAML files for GitOps, the plugin's config file
    and the values for NVIDIA's C(nvidia-device-plugin) Helm chart.
  - The role's apply path sends the parsed content of exactly these files, so C(render_only) output is what the API
    server would get.
  - Fails with a message naming the variable when an option or a combination cannot work (for example MPS with MIG).
options:
  _input:
    description: The settings, such as C(mig_strategy), C(device_list_strategy), C(time_slicing), C(mps).
    type: dict
    required: true
  nodes:
    description:
      - The GPU nodes, a list of C(name) (the Kubernetes node name), C(labels) (from C(gpu_facts)) and optionally
        C(gpus) (C(gpu_facts)' C(gpus); with C(mig_strategy=mixed) the validation pod asks for the first MIG
        profile found there, and a node without one gets no validation pod).
    type: list
    elements: dict
    default: []
"""

EXAMPLES = r"""
- name: Build the manifests
  ansible.builtin.set_fact:
    rendered: "{{ {'mig_strategy': 'single'} | gpufleet.nvidia.device_plugin_manifests }}"
"""

RETURN = r"""
_value:
  description:
    - C(files), a list of C(group) (C(cluster), C(nodes), C(validation)), C(path) (relative file name under the
      render folder) and C(content) (YAML, one or more documents); C(documents), every document in apply order;
      C(config), the plugin config as a dict; C(config_text); C(helm_values); C(settings) (the checked settings with
      defaults); C(images); C(node_labels), the labels the role writes on each node, by node name;
      C(node_unlabels), one merge patch per node that takes those labels off again (C(device_plugin_state=absent)).
  type: dict
"""

from typing import Any, Callable

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.device_plugin.render import render
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.device_plugin.settings import DevicePluginError

__all__ = ["device_plugin_manifests", "render", "FilterModule"]


def device_plugin_manifests(
    settings: dict[str, Any] | None, nodes: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    try:
        return render(settings, nodes)
    except DevicePluginError as exc:
        raise AnsibleFilterError(f"gpufleet.nvidia.device_plugin role: {exc}") from exc


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"device_plugin_manifests": device_plugin_manifests}
