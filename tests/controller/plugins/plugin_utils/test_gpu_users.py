# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The driver role's rule about processes holding a GPU: refuse, naming them and the variable; or, told to drain,
stop docker and podman containers and refuse for pods, other engines' containers and host processes."""

import pytest

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.gpu_users import GateError, describe, gate, processes

ID = "0123456789abcdef" * 4
ID2 = "fedcba9876543210" * 4
UID = "8d4c3f12-0a6b-4c55-9d2e-7f3a1b2c4d5e"


def proc(pid, command="python3", *, engine=None, cid=None, pod_uid=None, namespace=None, devices=("/dev/nvidia0",)):
    container = None if engine is None else {"engine": engine, "id": cid, "pod_uid": pod_uid, "namespace": namespace}
    return {"pid": pid, "command": command, "devices": list(devices), "container": container}


def facts(*procs, truncated=False, unreadable=0):
    return {"processes": list(procs), "scanned": 100, "unreadable": unreadable, "truncated": truncated}


def test_nothing_holds_a_gpu():
    result = gate(facts())
    assert (result["busy"], result["refuse"], result["stop"], result["message"]) == (False, False, [], "")
    assert gate(None)["busy"] is False


def test_driver_daemons_never_block():
    result = gate(facts(proc(10, "nvidia-persistenced"), proc(11, "nv-fabricmanager")), drain=False)
    assert (result["busy"], result["refuse"]) == (False, False)
    assert [p["pid"] for p in result["ignored"]] == [10, 11]
    assert gate(facts(proc(10, "nvidia-persistenced")), ignore=[])["refuse"] is True


def test_driver_daemons_are_known_by_the_name_the_kernel_keeps():
    # /proc/<pid>/stat holds 15 bytes of the name (TASK_COMM_LEN): the real daemons show as these
    result = gate(facts(proc(10, "nvidia-persiste"), proc(11, "nv-fabricmanage")), drain=False)
    assert (result["busy"], [p["pid"] for p in result["ignored"]]) == (False, [10, 11])
    # a shorter name is no cut: it is another program
    assert gate(facts(proc(12, "nvidia-persist")), drain=False)["refuse"] is True


def test_refuses_naming_every_process_its_container_and_the_variable():
    result = gate(
        facts(
            proc(100, engine="docker", cid=ID, devices=("/dev/nvidia0", "/dev/nvidiactl")),
            proc(200, "sleep", engine="containerd", cid=ID2, pod_uid=UID, namespace="k8s.io"),
            proc(300, "train", engine="containerd", cid="gpu1", namespace="default"),
            proc(400, "bench"),
        ),
        reason="the reboot",
        host="gpu-1",
    )
    assert result["refuse"] is True
    message = result["message"]
    assert message.startswith("gpu-1: refusing the reboot: 4 process(es) hold an NVIDIA GPU: ")
    assert "pid 100 (python3) in docker container 0123456789ab holds /dev/nvidia0, /dev/nvidiactl" in message
    assert f"pid 200 (sleep) in containerd container fedcba987654 of pod {UID}" in message
    assert "pid 300 (train) in containerd container gpu1 holds" in message
    assert "pid 400 (bench) on the host holds /dev/nvidia0" in message
    assert "driver_drain=true" in message and "driver_drain_ignore" in message
    assert result["stop"] == []


def test_drain_stops_docker_and_podman_containers_once_each():
    result = gate(
        facts(
            proc(100, engine="docker", cid=ID),
            proc(101, "worker", engine="docker", cid=ID),
            proc(5, engine="podman", cid=ID2),
        ),
        drain=True,
    )
    assert (result["refuse"], result["busy"]) == (False, True)
    assert result["stop"] == [
        {"engine": "docker", "id": ID, "argv": ["docker", "stop", ID]},
        {"engine": "podman", "id": ID2, "argv": ["podman", "stop", ID2]},
    ]
    timed = gate(
        facts(proc(100, engine="docker", cid=ID), proc(5, engine="podman", cid=ID2)), drain=True, stop_timeout=45
    )
    assert [s["argv"] for s in timed["stop"]] == [
        ["docker", "stop", "-t", "45", ID],
        ["podman", "stop", "-t", "45", ID2],
    ]


@pytest.mark.parametrize(
    ("user", "why"),
    [
        (proc(1, engine="containerd", cid=ID, pod_uid=UID), "a Kubernetes pod: drain the Kubernetes node first"),
        (proc(1, engine="kubernetes", cid=ID, pod_uid=UID), "a Kubernetes pod"),
        (proc(1, engine="crio", cid=ID, pod_uid=UID), "a Kubernetes pod"),
        (
            proc(1, engine="containerd", cid="gpu1", namespace="default"),
            "a containerd container the role does not stop",
        ),
        (proc(1, engine="crio", cid=ID), "a crio container the role does not stop"),
        (proc(1), "a host process: stop it yourself"),
        (proc(1, engine="docker", cid=None), "a docker container the role does not stop"),
    ],
)
def test_drain_refuses_what_it_cannot_stop(user, why):
    result = gate(facts(user, proc(2, engine="docker", cid=ID)), drain=True)
    assert result["refuse"] is True
    assert "although driver_drain=true" in result["message"] and why in result["message"]
    assert result["stop"] == []  # nothing is stopped when the change cannot go ahead anyway


def test_what_a_drain_could_stop_is_named_while_something_else_refuses():
    result = gate(facts(proc(1), proc(2, engine="docker", cid=ID)), drain=True, setting="mig_drain", stop_timeout=5)
    assert result["refuse"] is True and result["stop"] == []
    assert result["stoppable"] == [{"engine": "docker", "id": ID, "argv": ["docker", "stop", "-t", "5", ID]}]
    assert "although mig_drain=true" in result["message"]


def test_warnings_for_an_incomplete_scan():
    result = gate(facts(truncated=True, unreadable=3))
    assert result["refuse"] is False
    assert len(result["warnings"]) == 2


def test_describe_and_bad_input():
    [p] = processes(facts(proc(7, "x", engine="podman", cid="abc")))
    assert describe(p) == "pid 7 (x) in podman container abc holds /dev/nvidia0"
    with pytest.raises(GateError, match="gpu_users must be"):
        gate(["not", "facts"])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"drain": "yes"}, "drain must be a bool (driver_drain | gpufleet.nvidia.as_bool), got 'yes'"),
        ({"ignore": "nvidia-persistenced"}, "ignore must be a list of command names, got 'nvidia-persistenced'"),
        ({"ignore": None}, "ignore must be a list of command names, got None"),
        ({"ignore": {"a": 1}}, "ignore must be a list of command names, got {'a': 1}"),
        ({"stop_timeout": "30"}, "stop_timeout must be a number of seconds (as_int), got '30'"),
    ],
)
def test_checked_gate_refuses_bad_arguments(kwargs, message):
    from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.gpu_users import checked_gate

    with pytest.raises(GateError) as exc:
        checked_gate({"processes": []}, **kwargs)
    assert str(exc.value) == message


def test_checked_gate_is_gate_with_string_reason_and_host():
    from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.gpu_users import checked_gate

    assert checked_gate({"processes": []}, reason=1, host=2) == gate({"processes": []}, reason="1", host="2")
