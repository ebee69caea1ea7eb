# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Pods through the kubelet stand-in (tests/tools/kubelet_standin) into real containerd on the converged fleet's
Kubernetes node (``cri-kube``, containerd 1.7, ``_fleet_converged.py``): a device plugin that answers as NVIDIA's
k8s-device-plugin v0.20.0 answered with the role's default config (``replay.py``; NVIDIA's binary itself runs in
``make k8s-live``) serves the node's two GPUs; the stand-in admits each pod as the kubelet's device manager does and
turns it into CRI calls as the kubelet does (``pods.py``). Each container lists the ``/dev/nvidia<N>`` it sees."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time

import pytest

pytestmark = pytest.mark.integration

if os.environ.get("CI") != "true":
    pytest.importorskip("grpc", reason="grpcio (requirements/dev.in) is needed for the CRI client: make setup")

from tests.integration._fleet_converged import IMAGE, KUBE, WAIT  # noqa: E402
from tests.sim.cri import Cri, CriError, NodeSocket  # noqa: E402
from tests.tools.kubelet_standin import pods  # noqa: E402
from tests.tools.kubelet_standin.devicemanager import AdmissionError, DeviceManager  # noqa: E402
from tests.tools.kubelet_standin.replay import ReplayPlugin  # noqa: E402

PROBE = (
    "import os, re, json; print(json.dumps(sorted(d for d in os.listdir('/dev') if re.fullmatch(r'nvidia\\d+', d))))"
)


@pytest.fixture(scope="module")
def kube(converged_fleet):
    node = converged_fleet.node(KUBE)
    with NodeSocket(node.container) as target, Cri(target) as cri:
        deadline = time.monotonic() + 120
        while True:
            try:
                cri.version()
                break
            except CriError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(3)
        yield node, cri


@pytest.fixture
def kubelet(kube):
    node, _cri = kube
    root = tempfile.mkdtemp(prefix="dp-", dir="/tmp")
    dm = DeviceManager(root)
    dm.start()
    plugin = ReplayPlugin(root, "nvidia-gpu.sock", [g["uuid"] for g in node.gpus])
    plugin.start_and_register()
    dm.wait_for("nvidia.com/gpu")
    yield dm
    plugin.stop()
    dm.stop()
    shutil.rmtree(root, ignore_errors=True)


def _start(cri, kubelet, pod):
    """Admit the pod (device manager), run its sandbox and container (CRI); -> (sandbox id, container id)."""
    spec = pod["spec"]["containers"][0]
    allocated = kubelet.allocate(pod["metadata"]["uid"], spec["name"], pods.limits(spec))
    config, handler = pods.sandbox(pod)
    sandbox = cri.run_pod_sandbox(config, handler)
    container = cri.create_container(
        sandbox, pods.container_config(spec, [a["response"] for a in allocated.values()]), config
    )
    cri.start_container(container)
    return sandbox, container, allocated


def _sees(cri, container):
    rc, out, err = cri.exec_sync(container, ["python3", "-c", PROBE], timeout=60)
    assert rc == 0, err.decode()
    return json.loads(out)


def test_pods_get_exactly_their_gpu_a_third_stays_pending_and_others_see_none(kube, kubelet):
    node, cri = kube
    minor = {g["uuid"]: int(g["minor"]) for g in node.gpus}
    started = []
    try:
        seen = {}
        for name in ("gpu-a", "gpu-b"):
            sandbox, container, allocated = _start(
                cri, kubelet, pods.probe_pod(name, IMAGE, WAIT, limits={"nvidia.com/gpu": 1})
            )
            started.append(sandbox)
            (gpu,) = allocated["nvidia.com/gpu"]["ids"]
            seen[name] = (gpu, _sees(cri, container))
        assert seen["gpu-a"][0] != seen["gpu-b"][0]
        for gpu, devices in seen.values():
            assert devices == [f"nvidia{minor[gpu]}"], (gpu, devices)
        with pytest.raises(AdmissionError, match="Requested: 1, Available: 0"):
            _start(cri, kubelet, pods.probe_pod("gpu-c", IMAGE, WAIT, limits={"nvidia.com/gpu": 1}))
        # No request, and no request with the variable set by the pod itself (unprivileged): no GPU on this node.
        for pod in (
            pods.probe_pod("none", IMAGE, WAIT),
            pods.probe_pod("envvar-all", IMAGE, WAIT, env={"NVIDIA_VISIBLE_DEVICES": "all"}),
        ):
            sandbox, container, _allocated = _start(cri, kubelet, pod)
            started.append(sandbox)
            assert _sees(cri, container) == [], pod["metadata"]["name"]
    finally:
        for sandbox in started:
            cri.stop_pod_sandbox(sandbox)
            cri.remove_pod_sandbox(sandbox)
