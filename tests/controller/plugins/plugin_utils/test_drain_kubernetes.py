# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""plugin_utils/drain_kubernetes.py: cordon patches, the pods that hold a GPU on the node, the Eviction body and
what each answer to it means (shaped after the Kubernetes API documentation, read 2026-11-27)."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils import drain_kubernetes as k8s


def _pod(name, *, node="gpu-a", gpu="1", phase="Running", annotations=None, init=False, part="limits"):
    container = {"name": "c", "resources": {part: {"nvidia.com/gpu": gpu}} if gpu else {}}
    spec = {"nodeName": node, ("initContainers" if init else "containers"): [container]}
    if init:
        spec["containers"] = [{"name": "main"}]
    return {
        "metadata": {"name": name, "namespace": "ml", "annotations": annotations or {}},
        "spec": spec,
        "status": {"phase": phase},
    }


def test_cordon_patches():
    assert k8s.cordon_patch(True) == {"spec": {"unschedulable": True}}
    assert k8s.cordon_patch(False) == {"spec": {"unschedulable": False}}


def test_gpu_pods_on_the_node_only():
    pods = [
        _pod("train"),
        _pod("init-gpu", init=True),
        _pod("requests-only", part="requests"),
        _pod("cpu-only", gpu=None),
        _pod("zero", gpu="0"),
        _pod("elsewhere", node="gpu-b"),
        _pod("finished", phase="Succeeded"),
        _pod("static", annotations={"kubernetes.io/config.mirror": "abc"}),
    ]
    found = k8s.gpu_pods(pods, "gpu-a")
    assert [p["name"] for p in found["evict"]] == ["train", "init-gpu", "requests-only"]
    assert [p["name"] for p in found["refuse"]] == ["static"]
    assert "staticPodPath" in found["refuse"][0]["why"]


def test_eviction_body():
    assert k8s.eviction_body("ml", "train") == {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": "train", "namespace": "ml"},
    }


@pytest.mark.parametrize(
    ("status", "outcome"), [(200, "evicted"), (201, "evicted"), (404, "gone"), (429, "retry"), (500, "failed")]
)
def test_eviction_outcome(status, outcome):
    assert k8s.eviction_outcome(status) == outcome
