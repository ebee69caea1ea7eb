# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The kubelet stand-in (tests/tools/kubelet_standin): its device plugin API messages against exchanges recorded from
NVIDIA's k8s-device-plugin v0.20.0 (built from source, run on the NVML stub with the role's rendered config,
2026-11-27), and its device manager against a plugin served here over a real gRPC unix socket."""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.tools.kubelet_standin import api  # noqa: E402
from tests.tools.kubelet_standin.devicemanager import AdmissionError, DeviceManager  # noqa: E402
from tests.tools.kubelet_standin.replay import ReplayPlugin as FakePlugin  # noqa: E402

grpc = pytest.importorskip("grpc")
FIXTURES = Path(__file__).parent / "fixtures" / "kubelet_standin"


def recorded_ids():
    return api.allocate_request_decode(bytes.fromhex(recorded("default")["allocate_request"]))[0]


def recorded(name):
    return json.loads((FIXTURES / f"nvidia-device-plugin-v0.20.0-{name}.json").read_text())


# --- Messages, against what NVIDIA's plugin sent ---------------------------------------------------------------------


def test_nvidias_options_list_and_allocate_decode():
    rec = recorded("default")
    assert api.options_decode(bytes.fromhex(rec["options"])) == {
        "pre_start_required": False,
        "get_preferred_allocation_available": True,
    }
    devices = api.devices_decode(bytes.fromhex(rec["list_and_watch"]))
    assert len(devices) == 2 and {d["health"] for d in devices} == {"Healthy"}
    assert sorted(d["numa"] for d in devices) == [[0], [1]]  # the simulated sysfs' NUMA nodes
    (chosen,) = api.preferred_response_decode(bytes.fromhex(rec["preferred_response"]))
    assert len(chosen) == 1 and chosen[0] in {d["ID"] for d in devices}
    (request,) = api.allocate_request_decode(bytes.fromhex(rec["allocate_request"]))
    (response,) = api.allocate_response_decode(bytes.fromhex(rec["allocate_response"]))
    # volume-mounts, the role's default: /dev/null on /var/run/nvidia-container-devices/<uuid>, and the variable
    # pointing there (k8s-device-plugin internal/plugin/server.go updateResponseForDeviceMounts).
    assert response["envs"] == {"NVIDIA_VISIBLE_DEVICES": "/var/run/nvidia-container-devices"}
    assert response["mounts"] == [
        {
            "container_path": f"/var/run/nvidia-container-devices/{request[0]}",
            "host_path": "/dev/null",
            "read_only": False,
        }
    ]
    assert response["devices"] == [] and response["cdi_devices"] == []


def test_our_encoding_of_the_requests_is_byte_for_byte_what_was_sent():
    rec = recorded("time-slicing-packed")
    devices = api.devices_decode(bytes.fromhex(rec["list_and_watch"]))
    ids = sorted(d["ID"] for d in devices)
    assert len(ids) == 8 and all("::" in i for i in ids)  # 2 GPUs x 4 replicas
    assert api.preferred_request_encode(ids, [], 1).hex() == rec["preferred_request"]
    assert api.allocate_request_encode([ids[:1]]).hex() == rec["allocate_request"]
    request = api.preferred_request_decode(bytes.fromhex(rec["preferred_request"]))
    assert request == [{"available": ids, "must_include": [], "size": 1}]


def test_encoders_and_decoders_round_trip():
    devices = [{"ID": "a", "health": "Healthy", "numa": [0]}, {"ID": "b", "health": "Unhealthy", "numa": []}]
    assert api.devices_decode(api.devices_encode(devices)) == devices
    response = {
        "envs": {"A": "1"},
        "mounts": [{"container_path": "/c", "host_path": "/h", "read_only": True}],
        "devices": [{"container_path": "/dev/x", "host_path": "/dev/x", "permissions": "rw"}],
        "annotations": {"cdi.k8s.io/x": "nvidia.com/gpu=0"},
        "cdi_devices": ["nvidia.com/gpu=0"],
    }
    assert api.allocate_response_decode(api.allocate_response_encode([response])) == [response]
    req = api.register_request_decode(api.register_request_encode("v1beta1", "p.sock", "nvidia.com/gpu", True))
    assert req == {
        "version": "v1beta1",
        "endpoint": "p.sock",
        "resource_name": "nvidia.com/gpu",
        "options": {"pre_start_required": False, "get_preferred_allocation_available": True},
    }


# --- The device manager, with a plugin served here (replay.py: answers as NVIDIA's recorded ones) -----------------


@pytest.fixture
def kubelet():
    # A short folder: unix socket paths are limited to 107 bytes.
    root = tempfile.mkdtemp(prefix="dp-", dir="/tmp")
    dm = DeviceManager(root)
    dm.start()
    yield dm
    dm.stop()
    shutil.rmtree(root, ignore_errors=True)


def test_registration_list_allocate_pending_and_freed(kubelet):
    plugin = FakePlugin(kubelet.root, "gpu.sock", ["GPU-a", "GPU-b"])
    plugin.start_and_register()
    try:
        kubelet.wait_for("nvidia.com/gpu")
        assert kubelet.capacity() == {"nvidia.com/gpu": 2} and kubelet.allocatable() == {"nvidia.com/gpu": 2}
        first = kubelet.allocate("pod-1", "c", {"nvidia.com/gpu": 1, "cpu": 1})
        # Two available for one: the plugin was asked and its choice (the last) taken.
        assert plugin.preferred == [{"available": ["GPU-a", "GPU-b"], "must_include": [], "size": 1}]
        assert first["nvidia.com/gpu"]["ids"] == ["GPU-b"]
        # NVIDIA's recorded answer, for this device.
        (nvidia,) = api.allocate_response_decode(bytes.fromhex(recorded("default")["allocate_response"]))
        expected = json.loads(json.dumps(nvidia).replace(recorded_ids()[0], "GPU-b"))
        assert first["nvidia.com/gpu"]["response"] == expected
        second = kubelet.allocate("pod-2", "c", {"nvidia.com/gpu": 1})
        assert second["nvidia.com/gpu"]["ids"] == ["GPU-a"]
        assert len(plugin.preferred) == 1  # one available for one: no preference asked (manager.go)
        with pytest.raises(AdmissionError, match="Requested: 1, Available: 0"):
            kubelet.allocate("pod-3", "c", {"nvidia.com/gpu": 1})
        assert plugin.allocated == [["GPU-b"], ["GPU-a"]]
        kubelet.pod_ended("pod-1")
        assert kubelet.allocate("pod-3", "c", {"nvidia.com/gpu": 1})["nvidia.com/gpu"]["ids"] == ["GPU-b"]
    finally:
        plugin.stop()


def test_an_unhealthy_device_leaves_allocatable_and_is_not_given(kubelet):
    plugin = FakePlugin(kubelet.root, "gpu.sock", ["GPU-a", "GPU-b"])
    plugin.start_and_register()
    try:
        kubelet.wait_for("nvidia.com/gpu")
        plugin.set_health("GPU-b", "Unhealthy")
        kubelet.wait_for("nvidia.com/gpu", updates=2)
        assert kubelet.capacity() == {"nvidia.com/gpu": 2} and kubelet.allocatable() == {"nvidia.com/gpu": 1}
        assert kubelet.allocate("pod-1", "c", {"nvidia.com/gpu": 1})["nvidia.com/gpu"]["ids"] == ["GPU-a"]
        with pytest.raises(AdmissionError, match="Available: 0"):
            kubelet.allocate("pod-2", "c", {"nvidia.com/gpu": 1})
    finally:
        plugin.stop()


def test_a_restarted_plugin_registers_again_and_an_old_version_is_refused(kubelet):
    first = FakePlugin(kubelet.root, "gpu.sock", ["GPU-a"])
    first.start_and_register()
    kubelet.wait_for("nvidia.com/gpu")
    first.stop()
    second = FakePlugin(kubelet.root, "gpu.sock", ["GPU-a", "GPU-b", "GPU-c"])
    second.start_and_register()
    try:
        done = threading.Event()
        for _attempt in range(100):
            if kubelet.capacity().get("nvidia.com/gpu") == 3:
                done.set()
                break
            done.wait(0.1)
        assert done.is_set(), kubelet.events
        assert "re-registered nvidia.com/gpu" in kubelet.events
        with pytest.raises(grpc.RpcError) as refused:
            FakePlugin(kubelet.root, "other.sock", ["x"], "example.com/x").start_and_register(version="v1alpha")
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    finally:
        second.stop()


# --- make k8s-live's pure parts (the run itself needs NVIDIA's binaries and root: bench/k8s-live/README.md) ---------


def test_live_runs_the_plugin_with_the_roles_rendered_environment():
    from tests.tools.kubelet_standin import live

    rendered = live._render({"health_disabled_xids": [48]})
    env = live._container_env(rendered, "nvidia-device-plugin", "/tmp/x/config.yaml")
    assert env["CONFIG_FILE"] == "/tmp/x/config.yaml"
    assert (env["NVIDIA_DRIVER_ROOT"], env["MPS_ROOT"], env["DP_DISABLE_HEALTHCHECKS"]) == (
        "/",
        "/run/nvidia/mps",
        "48",
    )
    gfd = live._container_env(rendered, "gpu-feature-discovery", "/tmp/x/config.yaml")
    assert gfd["GFD_USE_NODE_FEATURE_API"] == "false"  # the file NFD's local source reads


def test_live_mig_node_has_two_mig_devices_per_gpu_with_their_own_uuids():
    from tests.tools.kubelet_standin import live

    config = live._stub_config(live._node(), mig=True)
    migs = [m for g in config["gpus"] for m in g["mig_devices"]]
    assert [g["numa_node"] for g in config["gpus"]] == [0, 1] and config["all_devices"] == 1
    assert len(migs) == 4 and len({m["uuid"] for m in migs}) == 4 and {m["gi_id"] for m in migs} == {7, 9}


def test_live_result_files_say_pass_fail_and_not_run(tmp_path, monkeypatch):
    from tests.tools.kubelet_standin import live

    monkeypatch.setattr(live, "RESULTS", tmp_path)
    result = {
        "plugin_version": "NVIDIA Device Plugin version v0.20.0",
        "gfd_version": "GPU Feature Discovery version v0.20.0",
        "runtime": "none",
        "not_run": ["containers"],
        "scenarios": [{"scenario": "default", "checks": [{"check": "a", "pass": True}, {"check": "b", "pass": False}]}],
    }
    path = live._write_result(result)
    text = path.with_suffix(".md").read_text()
    assert "| default | a | pass |" in text and "| default | b | FAIL |" in text and "* containers" in text
    assert json.loads(path.read_text())["scenarios"][0]["checks"][1]["pass"] is False


# --- Pod spec -> CRI (tests/tools/kubelet_standin/pods.py) -----------------------------------------------------------


def test_a_pod_asking_for_a_gpu_gets_the_plugins_mount_and_variable_in_its_container_config():
    from tests.tools.kubelet_standin import pods

    (response,) = api.allocate_response_decode(bytes.fromhex(recorded("default")["allocate_response"]))
    pod = {
        "metadata": {"name": "gpu-pod", "uid": "u1"},
        "spec": {
            "runtimeClassName": "nvidia",
            "containers": [
                {
                    "name": "cuda",
                    "image": "img",
                    "command": ["nvidia-smi", "-L"],
                    "resources": {"limits": {"nvidia.com/gpu": 1}},
                    "securityContext": {"runAsUser": 1000},
                }
            ],
        },
    }
    config, handler = pods.sandbox(pod)
    assert (config.name, config.uid, handler) == ("gpu-pod", "u1", "nvidia")
    c = pods.container_config(pod["spec"]["containers"][0], [response])
    assert pods.limits(pod["spec"]["containers"][0]) == {"nvidia.com/gpu": 1}
    assert c.envs == {"NVIDIA_VISIBLE_DEVICES": "/var/run/nvidia-container-devices"}
    assert [(m.container_path.rsplit("/", 1)[0], m.host_path) for m in c.mounts] == [
        ("/var/run/nvidia-container-devices", "/dev/null")
    ]
    assert c.command == ["nvidia-smi", "-L"] and c.run_as_user == 1000
    # The encoded ContainerConfig carries the mount (field 7) and the variable (field 6).
    assert b"/var/run/nvidia-container-devices" in c.encode()


def test_a_pods_own_variable_wins_over_the_plugins_and_answers_merge_first_kept():
    from tests.tools.kubelet_standin import pods

    first = {"envs": {"NVIDIA_VISIBLE_DEVICES": "GPU-a", "X": "1"}, "mounts": [], "annotations": {"a": "1"}}
    second = {"envs": {"X": "2"}, "cdi_devices": ["nvidia.com/gpu=0", "nvidia.com/gpu=0"], "annotations": {"a": "2"}}
    options = pods.run_options([first, second])
    assert options["envs"] == {"NVIDIA_VISIBLE_DEVICES": "GPU-a", "X": "1"}
    assert options["annotations"] == {"a": "1"} and options["cdi_devices"] == ["nvidia.com/gpu=0"]
    container = {"name": "c", "image": "i", "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}
    assert pods.container_config(container, [first]).envs["NVIDIA_VISIBLE_DEVICES"] == "all"
    with pytest.raises(ValueError, match="device specs"):
        pods.run_options([{"devices": [{"container_path": "/dev/nvidia0", "host_path": "/dev/nvidia0"}]}])
    with pytest.raises(ValueError, match="RuntimeClass 'kata'"):
        pods.sandbox({"metadata": {"name": "p"}, "spec": {"runtimeClassName": "kata"}})
