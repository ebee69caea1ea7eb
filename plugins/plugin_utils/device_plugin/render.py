# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The device_plugin role's rendering: its documents as YAML files by group, the plugin config, the Helm values and
the labels the role puts on each node (what the ``device_plugin_manifests`` filter returns)."""

from __future__ import annotations

import json
from typing import Any

import yaml

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.device_plugin import dra
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


def _key(doc: dict[str, Any]) -> tuple[str, str, str, str]:
    meta = doc["metadata"]
    return (doc["apiVersion"].split("/")[0], doc["kind"], meta.get("namespace", ""), meta["name"])


def render(settings: dict[str, Any] | None, nodes: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The render for ``gpu_allocation`` (the device plugin or the DRA driver) with ``other``: what the other choice
    deploys and this one does not (its cluster documents in delete order, its release, its node labels), which the
    role removes so that a switch leaves nothing of the other behind."""
    settings, nodes = _plain(settings or {}), _plain(nodes or [])
    out = _render(settings, nodes)
    other_choice = "device_plugin" if out["settings"]["gpu_allocation"] == "dra" else "dra"
    # The other choice's documents as its defaults render them (ComputeDomains off: the Helm release carries those).
    other = _render(
        {**settings, "gpu_allocation": other_choice, "dra_compute_domains": False, "validate": False}, nodes
    )
    mine = {_key(d) for d in out["documents"]}
    cluster = [d for f in other["files"] if f["group"] == "cluster" for d in yaml.safe_load_all(f["content"])]
    labels = {
        name: sorted(set(keys) - set(out["node_labels"].get(name, {}))) for name, keys in other["node_labels"].items()
    }
    out["other"] = {
        "gpu_allocation": other_choice,
        "documents": [d for d in reversed(cluster) if _key(d) not in mine],
        "nfd": any(f["group"] == "nfd" for f in other["files"]) and not any(f["group"] == "nfd" for f in out["files"]),
        "node_unlabels": [
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": dict.fromkeys(keys)}}
            for name, keys in labels.items()
            if keys
        ],
    }
    return out


def _render(settings: dict[str, Any], nodes: list[dict[str, Any]]) -> dict[str, Any]:
    normalized = normalize(settings)
    if normalized["gpu_allocation"] == "dra":
        return _render_dra(normalized, nodes)
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
        "render_unsupported": [],
        "namespace": normalized["namespace"],
        "images": {
            "device_plugin": image(normalized),
            "dcgm_exporter": image(normalized, "dcgm_exporter_image"),
            "validate": image(normalized, "validate_image"),
        },
    }


def _render_dra(s: dict[str, Any], nodes: list[dict[str, Any]]) -> dict[str, Any]:
    """The DRA driver's render (``gpu_allocation: dra``): the same keys as the device plugin's, with the DRA chart's
    values; no plugin config, no validation pods (a DRA workload asks through a ResourceClaim)."""
    values = dra.helm_values(s, nodes)
    cd = values["resources"]["computeDomains"]["enabled"]
    # In Helm mode the chart carries ComputeDomains; the documents below are for apply and render_only, which refuse
    # them (dra.documents), so with ComputeDomains only the Helm values are built.
    groups = [] if cd else dra.documents(s, nodes, cd)
    files = [
        {
            "group": group,
            "path": f"{group}/{name}",
            "content": to_yaml(docs),
            "helm": group == "cluster" and name != "00-namespace.yaml",
        }
        for group, name, docs in groups
    ]
    every_doc = [doc for _group, _name, docs in groups for doc in docs]
    node_docs = [d for d in every_doc if d["kind"] == "Node"]
    return {
        "files": files,
        "documents": every_doc,
        "node_labels": {d["metadata"]["name"]: d["metadata"]["labels"] for d in node_docs},
        "node_unlabels": [
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": d["metadata"]["name"], "labels": dict.fromkeys(d["metadata"]["labels"])},
            }
            for d in node_docs
        ],
        "config": {},
        "config_text": "",
        "helm_values": values,
        "helm_unsupported": [],
        "settings": s,
        "compute_domains": cd,
        "render_unsupported": [dra.COMPUTE_DOMAINS_HELM_ONLY] if cd else [],
        "namespace": s["dra_namespace"],
        "images": {"dra_driver": dra.image(s)},
    }
