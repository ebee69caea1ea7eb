# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The Kubernetes node and device plugin node rules (plugins/plugin_utils/kubernetes_node.py) without Jinja."""

import pytest

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.kubernetes_node import (
    device_plugin_node,
    has_gpu,
    kubernetes_node,
)

GROUPS = {"kube_nodes": ["a"], "workers": ["b"]}


@pytest.mark.parametrize(
    ("host", "group", "enabled", "expected"),
    [("a", None, None, True), ("b", None, "", False), ("b", "workers", None, True), ("a", None, "no", False)],
)
def test_kubernetes_node(host, group, enabled, expected):
    assert kubernetes_node(host, GROUPS, group, enabled) is expected


def test_bad_enabled_is_a_value_error():
    with pytest.raises(ValueError, match=r"^device_plugin_enabled: 'maybe' is not true, false or null"):
        kubernetes_node("a", GROUPS, None, "maybe")


def test_has_gpu_reads_gpu_node_then_pci_count():
    assert has_gpu({"gpu_node": "false", "pci_gpu_count": 2}) is False
    assert has_gpu({"pci_gpu_count": 1}) is True
    assert has_gpu(None) is False


def test_device_plugin_node_reasons():
    assert device_plugin_node("a", GROUPS, nvidia={"gpu_node": True}) == {"node": True, "reason": None}
    assert "no NVIDIA GPU" in device_plugin_node("a", GROUPS, nvidia={})["reason"]
    assert "Kubernetes group workers" in device_plugin_node("a", GROUPS, "workers")["reason"]
    with pytest.raises(ValueError):
        device_plugin_node("a", GROUPS, enabled=3)
