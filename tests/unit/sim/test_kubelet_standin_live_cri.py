# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""make k8s-live's containerd half (tests/tools/kubelet_standin/live_cri.py) without a node: the stand-in admits a
pod before any CRI call, runs its sandbox with the RuntimeClass handler and its container with the plugin's Allocate
answer (NVIDIA's v0.20.0 volume-mounts answer), reads what nvidia-smi -L lists (a container without the injected
nvidia-smi lists nothing), and runs the role's rendered validation pod with only its image and command swapped."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.sim.cri import CriError  # noqa: E402
from tests.tools.kubelet_standin import live_cri, pods  # noqa: E402

GPU = "GPU-1cdde31b-086b-5d09-9b6c-19ca6174c7e0"
# NVIDIA k8s-device-plugin v0.20.0's Allocate answer with the role's default config (make k8s-live records it).
ANSWER = {
    "envs": {"NVIDIA_VISIBLE_DEVICES": "/var/run/nvidia-container-devices"},
    "mounts": [{"container_path": f"/var/run/nvidia-container-devices/{GPU}", "host_path": "/dev/null"}],
}


class FakeDeviceManager:
    def __init__(self):
        self.calls = []

    def allocate(self, pod, container, limits):
        self.calls.append((pod, container, limits))
        return {r: {"ids": [GPU], "response": ANSWER} for r in limits}


class FakeCri:
    def __init__(self, smi=None):
        self.calls, self.smi = [], smi

    def run_pod_sandbox(self, config, handler):
        self.calls.append(("run", config.name, handler))
        return f"sandbox-{len(self.calls)}"

    def create_container(self, sandbox, container, config):
        self.calls.append(("create", sandbox, container))
        return f"container-{len(self.calls)}"

    def start_container(self, container):
        self.calls.append(("start", container))

    def exec_sync(self, container, cmd, timeout=60):
        if cmd[0] == "nvidia-smi":
            if self.smi is None:
                raise CriError('ExecSync: exec: "nvidia-smi": executable file not found in $PATH')
            return 0, self.smi.encode(), b""
        return 0, b'["nvidia1"]' if self.smi else b"[]", b""

    def stop_pod_sandbox(self, sandbox):
        self.calls.append(("stop", sandbox))

    def remove_pod_sandbox(self, sandbox):
        self.calls.append(("remove", sandbox))


def test_a_pod_is_admitted_then_run_with_its_handler_and_the_plugins_answer():
    dm, cri = FakeDeviceManager(), FakeCri()
    kubelet = live_cri._Kubelet(dm, cri)
    pod = pods.probe_pod("gpu-a", "img", "wait", limits={"nvidia.com/gpu": 1})
    container, allocated = kubelet.start(pod)
    assert dm.calls == [(pod["metadata"]["uid"], "probe", {"nvidia.com/gpu": 1})]
    assert allocated["nvidia.com/gpu"]["ids"] == [GPU]
    (run, create, start) = cri.calls
    assert run[0] == "run" and run[2] == "nvidia"
    config = create[2]
    assert config.envs == ANSWER["envs"] and [m.container_path for m in config.mounts] == [
        ANSWER["mounts"][0]["container_path"]
    ]
    assert start == ("start", container)
    kubelet.clean()
    assert cri.calls[-2:] == [("stop", "sandbox-1"), ("remove", "sandbox-1")]


def test_a_pods_own_variable_reaches_the_container_and_no_request_asks_for_nothing():
    dm, cri = FakeDeviceManager(), FakeCri()
    kubelet = live_cri._Kubelet(dm, cri)
    kubelet.start(pods.probe_pod("envvar-all", "img", "wait", env={"NVIDIA_VISIBLE_DEVICES": "all"}))
    assert dm.calls[0][2] == {}
    assert cri.calls[1][2].envs == {"NVIDIA_VISIBLE_DEVICES": "all"} and cri.calls[1][2].mounts == []


@pytest.mark.parametrize(
    ("smi", "uuids", "dev"),
    [
        (f"GPU 0: NVIDIA A100-SXM4-40GB (UUID: {GPU})\n", [GPU], ["nvidia1"]),
        (None, [], []),  # no GPU given: the runtime injected no nvidia-smi
    ],
)
def test_what_a_container_sees(smi, uuids, dev):
    got = live_cri._Kubelet(FakeDeviceManager(), FakeCri(smi)).sees("c")
    assert got["uuids"] == uuids and got["dev"] == dev
    assert (got["smi"]["rc"] is None) == (smi is None)


# The role's validation pod as plugins/plugin_utils/device_plugin renders it by default (no controller code in this
# process: tests/unit); its image and command are what k8s-live swaps.
RENDERED_POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "gpufleet-validate-n-1b16b1df", "namespace": "nvidia-device-plugin"},
    "spec": {
        "restartPolicy": "Never",
        "runtimeClassName": "nvidia",
        "containers": [
            {
                "name": "gpu-check",
                "image": "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0",
                "resources": {"limits": {"nvidia.com/gpu": 1}, "requests": {"nvidia.com/gpu": 1}},
                "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
            }
        ],
    },
}


def test_the_validation_pod_runs_as_rendered_with_only_image_and_command_swapped():
    rendered = {"documents": [{"kind": "ConfigMap"}, RENDERED_POD]}
    dm, cri = FakeDeviceManager(), FakeCri(f"GPU 0: NVIDIA A100-SXM4-40GB (UUID: {GPU})\n")
    ok, detail = live_cri._validation_pod(live_cri._Kubelet(dm, cri), rendered, "img", "wait")
    assert ok and detail["allocated"] == [GPU]
    assert cri.calls[0][2] == "nvidia"  # the rendered runtimeClassName's handler
    assert dm.calls[0][1:] == ("gpu-check", {"nvidia.com/gpu": 1})
    config = cri.calls[1][2]
    assert config.image == "img" and config.command == ["python3", "-c", "wait"]
    assert RENDERED_POD["spec"]["containers"][0]["image"].startswith("nvcr.io/")  # the render itself is untouched
    # A pod that lists another GPU than its allocation fails the check.
    other = FakeCri("GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-00000000-0000-0000-0000-000000000000)\n")
    assert not live_cri._validation_pod(live_cri._Kubelet(FakeDeviceManager(), other), rendered, "img", "wait")[0]
