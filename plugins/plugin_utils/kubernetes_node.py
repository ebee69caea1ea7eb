# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Whether a host is a Kubernetes node, and whether the device plugin acts on it (a Kubernetes node with a GPU).

Controller only, pure: the rules behind the ``kubernetes_node`` and ``device_plugin_node`` filters, which site.yml,
the device_plugin role and the toolkit role share. A bad ``device_plugin_enabled`` raises ``ValueError``, which the
filters turn into ``AnsibleFilterError``.
"""

from __future__ import annotations

from typing import Any, Mapping

from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery.discover import is_gpu_node

DEFAULT_NODE_GROUP = "kube_nodes"


def kubernetes_node(
    host: Any, groups: Mapping[str, Any] | None, node_group: str | None = DEFAULT_NODE_GROUP, enabled: Any = None
) -> bool:
    """``enabled`` when it is set (a bool or a boolean string such as ``"false"`` from ``-e``), else whether
    ``host`` is in ``groups[node_group]`` (a missing group holds no host). ``ValueError`` when ``enabled`` is
    neither."""
    if enabled is not None and enabled != "":
        try:
            return boolean(enabled, strict=True)
        except TypeError as exc:
            raise ValueError(f"device_plugin_enabled: {enabled!r} is not true, false or null ({exc})") from exc
    members = (groups or {}).get(node_group or DEFAULT_NODE_GROUP) or []
    return str(host) in [str(member) for member in members]


def has_gpu(nvidia: Mapping[str, Any] | None) -> bool:
    """``gpu_facts``' ``gpu_node``; for facts that lack it (set by hand, ``device_plugin_gpu_facts``, or from a fact
    cache older than the field) the same rule applied to their ``pci_gpu_count``."""
    nvidia = nvidia or {}
    if "gpu_node" in nvidia:
        return bool(boolean(nvidia["gpu_node"], strict=False))
    return is_gpu_node(nvidia.get("pci_gpu_count"))


def device_plugin_node(
    host: Any,
    groups: Mapping[str, Any] | None,
    node_group: str | None = DEFAULT_NODE_GROUP,
    enabled: Any = None,
    nvidia: Mapping[str, Any] | None = None,
) -> dict:
    """``{node, reason}``: whether the device plugin acts on ``host`` (a Kubernetes node with a GPU) and, when not,
    why (the reason the device_plugin role records). ``ValueError`` as ``kubernetes_node``."""
    group = node_group or DEFAULT_NODE_GROUP
    if not kubernetes_node(host, groups, group, enabled):
        reason = f"not in the Kubernetes group {group} (device_plugin_node_group) and device_plugin_enabled is not true"
        return {"node": False, "reason": reason}
    if not has_gpu(nvidia):
        return {"node": False, "reason": "no NVIDIA GPU on the PCI bus (ansible_facts.nvidia.pci_gpu_count is 0)"}
    return {"node": True, "reason": None}
