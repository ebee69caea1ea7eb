# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""device_plugin_node: the device plugin stage's rule (a Kubernetes node with a GPU) and why a host is skipped."""

import pytest

pytestmark = pytest.mark.controller

from ansible_collections.gpufleet.nvidia.plugins.filter.device_plugin_node import (  # noqa: E402
    FilterModule,
    device_plugin_node,
)

GROUPS = {"all": ["a", "b", "c"], "kube_nodes": ["a"], "gpu_workers": ["b"], "ungrouped": []}
GPU = {"gpu_node": True, "pci_gpu_count": 1}


@pytest.mark.parametrize(
    ("host", "enabled", "nvidia", "expected", "why"),
    [
        ("a", None, GPU, True, None),  # a GPU node in kube_nodes
        ("a", None, {"gpu_node": False, "pci_gpu_count": 0}, False, "pci_gpu_count is 0"),
        ("a", None, None, False, "pci_gpu_count is 0"),  # no facts: no GPU
        ("a", None, {"pci_gpu_count": "2"}, True, None),  # facts without gpu_node (device_plugin_gpu_facts)
        ("a", None, {"pci_gpu_count": 0}, False, "pci_gpu_count is 0"),
        ("c", None, GPU, False, "not in the Kubernetes group kube_nodes"),
        ("c", True, GPU, True, None),  # device_plugin_enabled makes it a node
        ("a", "false", GPU, False, "device_plugin_enabled is not true"),
    ],
)
def test_device_plugin_node(host, enabled, nvidia, expected, why):
    verdict = device_plugin_node(host, GROUPS, None, enabled, nvidia)
    assert verdict["node"] is expected
    assert (verdict["reason"] is None) if why is None else (why in verdict["reason"])


def test_device_plugin_node_names_the_group_it_read():
    assert "gpu_workers" in device_plugin_node("a", GROUPS, "gpu_workers", None, GPU)["reason"]
    assert device_plugin_node("b", GROUPS, "gpu_workers", None, GPU) == {"node": True, "reason": None}
    assert FilterModule().filters()["device_plugin_node"] is device_plugin_node
