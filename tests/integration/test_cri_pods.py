# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Pods through containerd's CRI API after site.yml, as the kubelet and the device plugin start them.

A pod that requests ``nvidia.com/gpu: 1`` and names no ``runtimeClassName`` gets from the device plugin's Allocate
only ``NVIDIA_VISIBLE_DEVICES`` (envvar strategy), or a ``/dev/null`` mount on
``/var/run/nvidia-container-devices/<uuid>`` (volume-mounts), or a CDI annotation (cdi-annotations); the kubelet
then calls containerd's CRI with no runtime handler, so the pod runs on containerd's default runtime. site.yml with
``runtime_set_as_default: true`` makes that the ``nvidia`` runtime (the shim), which sends every container that asks
for no GPU straight to runc.

The fleet (one for the module, ``driver_packages: true``, 2 GPUs each, the default engines of each suite):

* ``cri-bookworm`` containerd 1.6 (config v2), ``cri-trixie`` containerd 1.7, ``cri-sid`` containerd 2.1 (config
  v3): not Kubernetes nodes, so the shim takes a container's own ``NVIDIA_VISIBLE_DEVICES``;
* ``cri-kube`` (trixie, containerd 1.7) in the inventory group ``kube_nodes``: the toolkit role tells the shim to
  ignore an unprivileged container's ``NVIDIA_VISIBLE_DEVICES`` there and to take the device plugin's volume mounts
  (docs/security.md); containerd itself reads the CDI annotations (``enable_cdi``).

Before site.yml each node gets what a site would have and the collection does not make: the sandbox ("pause") image
that containerd names in its configuration, under that name, in the ``k8s.io`` namespace (no registry is reachable;
it is the node's mini image with a process that waits for SIGTERM), and ``restrict_oom_score_adj = true`` in the CRI
table of ``/etc/containerd/config.toml`` (the nodes run without CAP_SYS_RESOURCE, tests/sim/README.md, and the
sandbox asks for oom_score_adj -998; the runtime role's drop-in carries that setting over, which this also shows).
Pods use the node's network (no CNI in the nodes).

The CRI calls go through ``tests/sim/cri.py`` (grpcio, through ``docker exec`` into the node). Inside each container
a small Python probe lists the ``/dev/nvidia*`` character devices, tries to open the GPU nodes (ENXIO: the device
cgroup let it through and no kernel driver answers; EPERM would be the cgroup), and lists the mounts of
``libcuda``. The bundle's ``config.json`` (what containerd handed the runtime) shows whether the shim injected
(its ``gpufleet.nvidia/injected`` annotation).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import uuid

import pytest

pytestmark = pytest.mark.integration

if os.environ.get("CI") != "true":
    pytest.importorskip("grpc", reason="grpcio (requirements/dev.in) is needed for the CRI client: make setup")

from tests.integration._fleet_converged import IMAGE, KUBE, WAIT  # noqa: E402
from tests.sim.cri import Container, Cri, CriError, Mount, NodeSocket, Pod  # noqa: E402

CONTAINERD = {"cri-bookworm": "1.6.", "cri-trixie": "1.7.", "cri-sid": "2.1.", "cri-kube": "1.7."}
ENVVAR_NODES = ("cri-bookworm", "cri-trixie", "cri-sid")
INJECTED = "gpufleet.nvidia/injected"
DEVICE_MOUNTS = "/var/run/nvidia-container-devices"
PROBE = r"""
import errno, json, os, stat
devices, opened = {}, {}
for name in sorted(os.listdir("/dev")):
    if name.startswith("nvidia") and stat.S_ISCHR(os.stat("/dev/" + name).st_mode):
        rdev = os.stat("/dev/" + name).st_rdev
        devices[name] = [os.major(rdev), os.minor(rdev)]
        if name[6:].isdigit():
            try:
                os.close(os.open("/dev/" + name, os.O_RDWR))
                opened[name] = "opened"
            except OSError as exc:
                opened[name] = errno.errorcode.get(exc.errno, str(exc.errno))
mounts = [line.split()[4] for line in open("/proc/self/mountinfo")]
print(json.dumps({"devices": devices, "open": opened, "libcuda": [m for m in mounts if "/libcuda.so" in m]}))
"""


def _why(proc: subprocess.CompletedProcess) -> str:
    return f"rc={proc.returncode}\n{proc.stdout[-6000:]}\n{proc.stderr[-2000:]}"


@pytest.fixture(scope="module")
def fleet(converged_fleet):
    """The shared fleet (``_fleet_converged.py``) after the node preparation, prepare.yml and one site.yml with the
    defaults (``nvidia`` is then the default runtime of every engine)."""
    return converged_fleet


@pytest.fixture(scope="module")
def cri(fleet):
    """node name -> an open ``Cri`` to that node's containerd."""
    opened = {}
    try:
        for name in fleet.nodes:
            relay = NodeSocket(fleet.node(name).container)
            target = relay.__enter__()
            opened[name] = (relay, Cri(target))
        clients = {name: client for name, (_relay, client) in opened.items()}
        for name, client in clients.items():
            _wait_for_cri(fleet.node(name), client)
        yield clients
    finally:
        for relay, client in opened.values():
            client.close()
            relay.__exit__(None, None, None)


def _wait_for_cri(node, client: Cri, timeout: float = 120.0) -> None:
    """Wait until containerd serves ``runtime.v1`` (it may still be loading its CRI plugin after site.yml's
    restarts); fail with containerd's own errors about it when it never does."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            client.version()
            return
        except CriError as exc:
            if time.monotonic() > deadline:
                log = node.run(
                    "journalctl -u containerd --no-pager -o cat | grep -iE 'cri|level=(error|fatal)' | tail -n 30"
                ).stdout
                pytest.fail(f"{node.name}: containerd does not serve the CRI API: {exc}\n{log}")
        time.sleep(3)


def _run(fleet, cri, name: str, container: Container, pod_annotations: dict[str, str] | None = None) -> dict:
    """Run ``container`` in a new pod sandbox (no runtime handler) on node ``name``; -> the probe's output plus
    ``config``: the bundle's config.json as containerd handed it to the runtime. The pod is removed again."""
    client, node = cri[name], fleet.node(name)
    pod = Pod(name=f"cri-{uuid.uuid4().hex[:8]}", uid=uuid.uuid4().hex, annotations=pod_annotations or {})
    sandbox = client.run_pod_sandbox(pod)
    try:
        container_id = client.create_container(sandbox, container, pod)
        client.start_container(container_id)
        status = client.container_status(container_id)
        assert status["state"] == "CONTAINER_RUNNING", f"{name}: {status}"
        rc, out, err = client.exec_sync(container_id, ["python3", "-c", PROBE], timeout=60)
        assert rc == 0, f"{name}: probe rc={rc}\n{out.decode()}\n{err.decode()}"
        bundle = f"/run/containerd/io.containerd.runtime.v2.task/k8s.io/{container_id}/config.json"
        seen = json.loads(out)
        seen["config"] = json.loads(node.run(["cat", bundle], check=True).stdout)
        return seen
    finally:
        client.stop_pod_sandbox(sandbox)
        client.remove_pod_sandbox(sandbox)


def _gpu(fleet, name: str, index: int = 1) -> tuple[str, int]:
    gpu = fleet.node(name).gpus[index]
    return gpu["uuid"], int(gpu["minor"])


def _container(**kw) -> Container:
    return Container(name="probe", image=IMAGE, command=["python3", "-c", WAIT], **kw)


def _assert_sees_only(name: str, seen: dict, minor: int, driver_version: str) -> None:
    devices = seen["devices"]
    gpus = {d for d in devices if re.fullmatch(r"nvidia\d+", d)}
    assert gpus == {f"nvidia{minor}"}, f"{name}: {sorted(devices)}"
    assert devices[f"nvidia{minor}"] == [195, minor], devices
    assert devices.get("nvidiactl") == [195, 255], devices
    assert "nvidia-uvm" in devices, devices
    # The device cgroup lets the container open its GPU; the simulated node has no kernel driver behind it.
    assert seen["open"] == {f"nvidia{minor}": "ENXIO"}, seen["open"]
    assert seen["libcuda"] == [f"/usr/lib/x86_64-linux-gnu/libcuda.so.{driver_version}"], seen["libcuda"]
    assert INJECTED in (seen["config"].get("annotations") or {}), f"{name}: the shim did not mark the bundle"


def _assert_no_gpu(name: str, seen: dict) -> None:
    assert seen["devices"] == {} and seen["libcuda"] == [], f"{name}: {seen['devices']} {seen['libcuda']}"
    config = seen["config"]
    assert INJECTED not in (config.get("annotations") or {}), f"{name}: the shim injected"
    assert "hooks" not in config or not any(config["hooks"].values()), f"{name}: hooks {config['hooks']}"


def _driver_version(fleet, name: str) -> str:
    return fleet.node(name).config["driver_version"]


@pytest.mark.parametrize("name", list(CONTAINERD))
def test_containerd_versions_and_default_runtime(fleet, cri, name):
    """The matrix the issue asks for, through CRI's Version; site.yml made ``nvidia`` containerd's default runtime."""
    version = cri[name].version()
    assert version["runtime_name"] == "containerd" and version["runtime_api_version"] == "v1", version
    assert version["runtime_version"].startswith(CONTAINERD[name]), version
    dump = fleet.node(name).run("containerd config dump", check=True).stdout
    assert re.search(r"""default_runtime_name = ["']nvidia["']""", dump), f"{name}: no nvidia default runtime"


@pytest.mark.parametrize("name", ENVVAR_NODES)
def test_envvar_only_container_sees_its_gpu(fleet, cri, name):
    """The device plugin's envvar strategy: only ``NVIDIA_VISIBLE_DEVICES=<uuid of GPU 1>``, no runtime handler."""
    gpu_uuid, minor = _gpu(fleet, name)
    seen = _run(fleet, cri, name, _container(envs={"NVIDIA_VISIBLE_DEVICES": gpu_uuid}))
    _assert_sees_only(name, seen, minor, _driver_version(fleet, name))


@pytest.mark.parametrize("name", list(CONTAINERD))
def test_container_without_gpu_request_runs_on_runc_untouched(fleet, cri, name):
    seen = _run(fleet, cri, name, _container())
    _assert_no_gpu(name, seen)


def test_kubernetes_node_does_not_take_an_unprivileged_containers_envvar_as_an_allocation(fleet, cri):
    """Security rule on a node of ``kube_nodes``: the variable alone is no allocation; the container runs, GPU-less."""
    gpu_uuid, _minor = _gpu(fleet, KUBE)
    seen = _run(fleet, cri, KUBE, _container(envs={"NVIDIA_VISIBLE_DEVICES": gpu_uuid}))
    _assert_no_gpu(KUBE, seen)


def test_kubernetes_node_volume_mount_allocation_gets_exactly_its_gpu(fleet, cri):
    """The device plugin's volume-mounts strategy: ``/dev/null`` on ``/var/run/nvidia-container-devices/<uuid>``
    and ``NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices`` (NVIDIA k8s-device-plugin's Allocate)."""
    gpu_uuid, minor = _gpu(fleet, KUBE)
    container = _container(
        envs={"NVIDIA_VISIBLE_DEVICES": DEVICE_MOUNTS},
        mounts=[Mount(f"{DEVICE_MOUNTS}/{gpu_uuid}", "/dev/null", readonly=True)],
    )
    _assert_sees_only(KUBE, _run(fleet, cri, KUBE, container), minor, _driver_version(fleet, KUBE))


def test_kubernetes_node_cdi_annotation_allocation_gets_exactly_its_gpu(fleet, cri):
    """The device plugin's cdi-annotations strategy: containerd 1.7 (``enable_cdi``) injects from the CDI spec."""
    gpu_uuid, minor = _gpu(fleet, KUBE)
    annotations = {f"cdi.k8s.io/nvidia-device-plugin_{gpu_uuid}": f"nvidia.com/gpu={gpu_uuid}"}
    seen = _run(fleet, cri, KUBE, _container(annotations=annotations))
    devices = seen["devices"]
    assert {d for d in devices if re.fullmatch(r"nvidia\d+", d)} == {f"nvidia{minor}"}, devices
    assert "nvidiactl" in devices and "nvidia-uvm" in devices, devices
    assert seen["open"] == {f"nvidia{minor}": "ENXIO"}, seen["open"]
    assert seen["libcuda"] == [f"/usr/lib/x86_64-linux-gnu/libcuda.so.{_driver_version(fleet, KUBE)}"], seen


def test_kubernetes_node_cri_cdi_devices_allocation_gets_exactly_its_gpu(fleet, cri):
    """The device plugin's cdi-cri strategy: the kubelet passes the plugin's CDI devices in ``CDI_devices``, which
    containerd reads from 1.7.2 on (``pkg/cri/opts/spec_linux.go`` ``WithCDI`` at v1.7.24)."""
    gpu_uuid, minor = _gpu(fleet, KUBE)
    seen = _run(fleet, cri, KUBE, _container(cdi_devices=[f"nvidia.com/gpu={gpu_uuid}"]))
    devices = seen["devices"]
    assert {d for d in devices if re.fullmatch(r"nvidia\d+", d)} == {f"nvidia{minor}"}, devices
    assert "nvidiactl" in devices and "nvidia-uvm" in devices, devices
    assert seen["libcuda"] == [f"/usr/lib/x86_64-linux-gnu/libcuda.so.{_driver_version(fleet, KUBE)}"], seen


def test_cri_errors_name_the_call(fleet, cri):
    """A failing call is one line naming the method and containerd's reason (what a test failure shows)."""
    with pytest.raises(CriError, match=r"StartContainer: NOT_FOUND"):
        cri["cri-bookworm"].start_container("0" * 64)
