# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The device_plugin role's rendering: its documents as YAML files by group, the plugin config, the Helm values and
the labels the role puts on each node (what the ``device_plugin_manifests`` filter returns)."""

from __future__ import annotations

import json
from typing import Any

import yaml

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.device_plugin.config import plugin_config
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.device_plugin.documents import (
    documents,
    helm_unsupported,
    helm_values,
)
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.device_plugin.settings import image, normalize

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


def nfd_file(s: dict[str, Any]) -> dict[str, Any]:
    """node-feature-discovery for the ``apply`` and ``render_only`` modes: NFD's own kustomization at the pinned release
    (``deployment/overlays/default``: its namespace, CRDs, RBAC, nfd-master, the nfd-worker DaemonSet that reads the
    ``features.d`` folder GFD writes to, nfd-gc), as NFD's deployment guide gives it (kubernetes-sigs.github.io/
    node-feature-discovery/v0.19/deployment/kustomize.html, read 2026-11-27: ``kubectl apply -k
    "https://github.com/kubernetes-sigs/node-feature-discovery/deployment/overlays/default?ref=<release>"``). v0.19.0
    is the release of the NFD chart 0.19.0 that NVIDIA's chart 0.20.0 deploys in Helm mode (its Chart.lock), so every
    mode runs the same NFD. The file is a Kustomization, not a Kubernetes object: GitOps tools build it (Argo CD and
    Flux build kustomizations); ``apply`` builds the same reference with the kubernetes.core.kustomize lookup. In Helm
    mode NVIDIA's chart deploys NFD itself (``helm``)."""
    doc = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [str(s["nfd_kustomization"])],
    }
    content = HEADER + yaml.dump(doc, Dumper=_Dumper, sort_keys=False, default_flow_style=False)
    return {"group": "nfd", "path": "nfd/kustomization.yaml", "content": content, "helm": True}


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
    if normalized["gfd_enabled"] and normalized["nfd_enabled"]:
        files.append(nfd_file(normalized))
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
        "helm_unsupported": helm_unsupported(settings),
        "settings": normalized,
        "images": {
            "device_plugin": image(normalized),
            "dcgm_exporter": image(normalized, "dcgm_exporter_image"),
            "validate": image(normalized, "validate_image"),
        },
    }
