# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The drain role's Kubernetes part (``drain_kubernetes``) through kubernetes.core against ``kube_api_replay``, an API
server stand-in this test starts, whose kubeconfig the role is given: the node is cordoned with the reason noted on
it, only the pod asking for ``nvidia.com/gpu`` is evicted - the first eviction refused by a PodDisruptionBudget
(429) and asked again - and the return to service uncordons; a failed validation leaves the node cordoned with the
reason; a static GPU pod refuses the drain and nothing is evicted. Every call the role makes is recorded and checked."""

from __future__ import annotations

import json
import sys

import pytest

from ansible_collections.gpufleet.nvidia.tests.controller.playbook import run_playbook
from ansible_collections.gpufleet.nvidia.tests.controller.roles.kube_api_replay import KubeApi

pytest.importorskip("kubernetes")

NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-a", "resourceVersion": "7"}, "spec": {}}
OWNER = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "train-5d9c", "uid": "u1", "controller": True}]


def pod(name: str, gpu: bool, **meta: object) -> dict:
    limits = {"nvidia.com/gpu": "1"} if gpu else {"cpu": "1"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "uid": name, "ownerReferences": OWNER, **meta},
        "spec": {"nodeName": "gpu-a", "containers": [{"name": "c", "image": "i", "resources": {"limits": limits}}]},
        "status": {"phase": "Running"},
    }


PLAY = """
- hosts: localhost
  gather_facts: false
  module_defaults:
    gpufleet.nvidia.gpu_facts:
      root: "{root}"
  tasks:
    - name: The drain role, one entry point
      ansible.builtin.include_role:
        name: gpufleet.nvidia.drain
        tasks_from: "{{{{ step }}}}"
      vars:
        drain_reason: "{{{{ why }}}}"
        drain_slurm: false
        drain_kubernetes: true
        drain_kubeconfig: "{kubeconfig}"
        drain_kubernetes_node: gpu-a
        drain_poll: 1
        drain_timeout: 20
"""


@pytest.fixture
def drain(tmp_path):
    from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils.discovery.discovery_tree import gpu_host

    tree = gpu_host(tmp_path / "host", 1)
    play = tmp_path / "play.yml"
    kubeconfig = tmp_path / "kubeconfig"
    play.write_text(PLAY.format(root=tree.root, kubeconfig=kubeconfig))

    def run(api: KubeApi, step: str, why: str = "driver upgrade", check: bool = False):
        kubeconfig.write_text(api.kubeconfig())
        args = ["-i", "localhost,", "-c", "local", "-e", f"ansible_python_interpreter={sys.executable}"]
        args += ["-e", json.dumps({"step": step, "why": why}), *(["--check"] if check else []), play]
        return run_playbook(*args, HOME=str(tmp_path))  # discovery's cache in the test's own home

    return run


def test_cordon_evict_gpu_pods_through_a_budget_then_uncordon(drain):
    pods = [pod("train-5d9c-x", True), pod("web-1", False)]
    with KubeApi(NODE, pods, {"ml/train-5d9c-x": [429, 201]}) as api:
        res = drain(api, "main")
        assert res.returncode == 0, res.stdout[-5000:] + res.stderr[-2000:]
        changes = api.changes()
        assert changes[0] == ("PATCH", "/api/v1/nodes/gpu-a", {"spec": {"unschedulable": True}})
        assert api.node["metadata"]["annotations"] == {"gpufleet.nvidia/drain-reason": "gpufleet: driver upgrade"}
        assert ("PATCH", "/api/v1/namespaces/ml/pods/train-5d9c-x") in [c[:2] for c in changes]
        evictions = [c for c in changes if c[1].endswith("/eviction")]
        assert [c[1] for c in evictions] == ["/api/v1/namespaces/ml/pods/train-5d9c-x/eviction"] * 2
        assert evictions[0][2]["metadata"] == {"name": "train-5d9c-x", "namespace": "ml"}
        assert [p["metadata"]["name"] for p in api.pods] == ["web-1"]  # the CPU pod stays
        assert api.node["spec"]["unschedulable"] is True

        res = drain(api, "resume")
        assert res.returncode == 0, res.stdout[-5000:] + res.stderr[-2000:]
        assert api.node["spec"]["unschedulable"] is False
        assert "gpufleet.nvidia/drain-reason" not in api.node["metadata"].get("annotations", {})


def test_an_admins_cordon_stays_after_the_return_to_service(drain):
    meta = {**NODE["metadata"], "annotations": {"ops/why": "bad fan"}}
    admin = {**NODE, "metadata": meta, "spec": {"unschedulable": True}}
    with KubeApi(admin, [pod("train-5d9c-x", True)], {}) as api:
        res = drain(api, "main")
        assert res.returncode == 0, res.stdout[-5000:] + res.stderr[-2000:]
        assert api.node["metadata"]["annotations"] == {"ops/why": "bad fan"}
        assert api.pods == []  # the GPU pod is still evicted before the change
        res = drain(api, "hold", why="validation failed after the driver upgrade")
        assert res.returncode == 0, res.stdout[-5000:] + res.stderr[-2000:]
        assert api.node["metadata"]["annotations"] == {"ops/why": "bad fan"}
        res = drain(api, "resume")
        assert res.returncode == 0, res.stdout[-5000:] + res.stderr[-2000:]
        assert api.node["spec"]["unschedulable"] is True
        assert api.node["metadata"]["annotations"] == {"ops/why": "bad fan"}


def test_failed_validation_keeps_the_node_cordoned_with_the_reason(drain):
    ours = {**NODE["metadata"], "annotations": {"gpufleet.nvidia/drain-reason": "gpufleet: driver upgrade"}}
    with KubeApi({**NODE, "metadata": ours, "spec": {"unschedulable": True}}, [], {}) as api:
        res = drain(api, "hold", why="validation failed after the driver upgrade")
        assert res.returncode == 0, res.stdout[-5000:] + res.stderr[-2000:]
        assert api.node["spec"]["unschedulable"] is True
        reason = api.node["metadata"]["annotations"]["gpufleet.nvidia/drain-reason"]
        assert reason == "gpufleet: validation failed after the driver upgrade"


def test_a_static_gpu_pod_refuses_and_nothing_is_evicted(drain):
    mirror = pod("dcgm-gpu-a", True, annotations={"kubernetes.io/config.mirror": "abc"})
    with KubeApi(NODE, [mirror, pod("train-5d9c-x", True)], {}) as api:
        res = drain(api, "main")
        assert res.returncode != 0
        assert "ml/dcgm-gpu-a, a static pod: remove its manifest" in res.stdout, res.stdout[-3000:]
        assert not [c for c in api.changes() if c[1].endswith("/eviction")]
        assert len(api.pods) == 2


def test_check_mode_changes_nothing(drain):
    with KubeApi(NODE, [pod("train-5d9c-x", True)], {}) as api:
        res = drain(api, "main", check=True)
        assert res.returncode == 0, res.stdout[-5000:] + res.stderr[-2000:]
        assert api.changes() == [] and len(api.pods) == 1 and not api.node["spec"].get("unschedulable")
