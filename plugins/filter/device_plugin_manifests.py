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

import json
from typing import Any, Callable

import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.device_plugin.config import plugin_config
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.device_plugin.documents import documents, helm_values
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.device_plugin.settings import (
    DevicePluginError,
    image,
    normalize,
)

HEADER = "# Rendered by the gpufleet.nvidia.device_plugin role; edit the role's variables, not this file.\n"


def _plain(value: Any) -> Any:
    """Ansible's tagged strings and lazy containers as plain JSON types (what the API and YAML take)."""
    return json.loads(json.dumps(value))


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the plugin's config.yaml inside the ConfigMap) as readable literal blocks."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def config_yaml(config: dict[str, Any]) -> str:
    return yaml.dump(config, Dumper=_Dumper, sort_keys=False, default_flow_style=False)


def to_yaml(docs: list[dict[str, Any]]) -> str:
    return HEADER + yaml.dump_all(docs, Dumper=_Dumper, sort_keys=False, default_flow_style=False, explicit_start=True)


def render(settings: dict[str, Any] | None, nodes: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    settings, nodes = _plain(settings or {}), _plain(nodes or [])
    normalized = normalize(settings)
    groups = documents(settings, nodes, dump=config_yaml)
    files = [
        {
            "group": group,
            "path": f"{group}/{name}",
            "content": to_yaml(docs),
            # NVIDIA's chart carries these when the role deploys through Helm; the rest is applied either way.
            "helm": group == "cluster"
            and all(d["kind"] != "RuntimeClass" and "dcgm" not in d["metadata"]["name"] for d in docs),
        }
        for group, name, docs in groups
    ]
    config = plugin_config(normalized)
    every_doc = [doc for _group, _name, docs in groups for doc in docs]
    return {
        "files": files,
        "documents": every_doc,
        # What the role puts on each node (never GFD's labels while GFD is on), by node name.
        "node_labels": {d["metadata"]["name"]: d["metadata"]["labels"] for d in every_doc if d["kind"] == "Node"},
        # The merge patches that take those labels off again (a null value deletes a key, RFC 7386).
        "node_unlabels": [
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": d["metadata"]["name"], "labels": dict.fromkeys(d["metadata"]["labels"])},
            }
            for d in every_doc
            if d["kind"] == "Node"
        ],
        "config": config,
        "config_text": config_yaml(config),
        "helm_values": helm_values(settings, dump=config_yaml),
        "settings": normalized,
        "images": {
            "device_plugin": image(normalized),
            "dcgm_exporter": image(normalized, "dcgm_exporter_image"),
            "validate": image(normalized, "validate_image"),
        },
    }


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
