# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Who holds a GPU, whatever started it, and the driver role's gate on it, on one simulated trixie node.

The node (docker 26, containerd 1.7, podman 5.4, Debian's 550 userspace, 2 GPUs) is prepared like the e2e fleet
(``_fleet_e2e.prepare``: host programs from this tree, the CDI spec, docker's runtime ``nvidia`` -> the shim). On it
run, each holding a GPU device open (an ``O_PATH`` descriptor of ``/dev/nvidia0``: without the kernel module a
plain open fails) the way NVIDIA's users start them:
``docker run --runtime=nvidia --gpus all``, ``docker run --runtime=nvidia -e NVIDIA_VISIBLE_DEVICES=0``,
``podman run --device nvidia.com/gpu=0`` (CDI), ``ctr run --runc-binary <shim> --env NVIDIA_VISIBLE_DEVICES=0``
and a process started on the node itself. ``gpu_facts`` must name each with its engine and container id; the gate
the driver role runs before a reboot and before a driver change must refuse while they run, refuse to drain what it
cannot stop (a ``ctr`` container, a host process), stop the docker and podman containers when told to drain, and
let the driver change through once nothing holds a GPU.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.integration._fleet_e2e import IMAGE, SHIM, prepare

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
GATE = Path(__file__).parent / "playbooks" / "gpu_gate.yml"
DRIVER = Path(__file__).parent / "playbooks" / "driver.yml"
FLEET = {
    "nodes": [
        {"name": "inuse-trixie", "suite": "trixie", "driver_state": "loaded", "driver_packages": True, "gpus": 2},
    ]
}
# O_PATH: without the kernel module an open(2) of a simulated /dev/nvidia* fails (ENXIO); an O_PATH descriptor does
# not reach the driver and shows in /proc/<pid>/fd exactly as an open device does.
HOLD = ["python3", "-c", "import os, time; fd = os.open('/dev/nvidia0', os.O_PATH); time.sleep(900)"]
BARE = (
    "import ctypes, os, time; ctypes.CDLL(None).prctl(15, b'gpu-bare-holder', 0, 0, 0);"
    " fd = os.open('/dev/nvidia1', os.O_PATH); time.sleep(900)"
)
CTR_NAME = "gpu-users-ctr"


def playbook(fleet, path: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [str(ROOT / ".venv" / "bin" / "ansible-playbook"), "-i", str(fleet.inventory), *args, str(path)]
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".cache" / "collections"), ANSIBLE_FORCE_COLOR="0")
    return subprocess.run(cmd, check=False, capture_output=True, text=True, cwd=ROOT, env=env)


@pytest.fixture(scope="module")
def node(sim_fleet_factory, tmp_path_factory):
    fleet = sim_fleet_factory(FLEET, name="gpu-users")
    prepare(fleet, lambda path, *args, **_kw: playbook(fleet, Path(path), *args), tmp_path_factory.mktemp("gpu-users"))
    found = fleet.node("inuse-trixie")
    found.fleet = fleet
    return found


def gpu_users(node, tmp_path: Path) -> dict:
    out = tmp_path / "gpu_users.json"
    res = playbook(node.fleet, GATE, "-e", f"gpu_users_out={out}", "-e", "run_gate=false")
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    return json.loads(out.read_text())


def running(node, engine: str, cid: str) -> bool:
    res = node.run([engine, "inspect", "-f", "{{.State.Running}}", cid])
    return res.stdout.strip() == "true"


@pytest.fixture(scope="module")
def holders(node):
    """Start one GPU holder of each kind; -> {kind: container id or pid}."""
    ids = {}
    ids["docker-gpus"] = node.run(
        ["docker", "run", "-d", "--network", "none", "--runtime=nvidia", "--gpus", "all", IMAGE, *HOLD],
        check=True,
    ).stdout.strip()
    env = ["-e", "NVIDIA_VISIBLE_DEVICES=0"]
    ids["docker-env"] = node.run(
        ["docker", "run", "-d", "--network", "none", "--runtime=nvidia", *env, IMAGE, *HOLD], check=True
    ).stdout.strip()
    ids["podman-cdi"] = node.run(
        ["podman", "run", "-d", "--network", "none", "--device", "nvidia.com/gpu=0", IMAGE, *HOLD],
        check=True,
    ).stdout.strip()
    ctr = ["ctr", "-n", "default", "run", "-d", "--runc-binary", SHIM, "--env", "NVIDIA_VISIBLE_DEVICES=0"]
    node.run([*ctr, "docker.io/" + IMAGE, CTR_NAME, *HOLD], check=True)
    ids["ctr"] = CTR_NAME
    bare = node.run(
        f'setsid -f python3 -c "{BARE}" </dev/null >/dev/null 2>&1; sleep 1; pgrep -x gpu-bare-holder', check=True
    )
    for kind, engine in (("docker-gpus", "docker"), ("docker-env", "docker"), ("podman-cdi", "podman")):
        assert running(node, engine, ids[kind]), f"{kind}: {node.run([engine, 'logs', ids[kind]]).stderr}"
    ids["bare"] = int(bare.stdout.split()[0])
    return ids


def test_each_holder_is_found_with_its_engine_and_container(node, holders, tmp_path):
    found = gpu_users(node, tmp_path)
    assert found["truncated"] is False and found["unreadable"] == 0
    by_container = {}
    for proc in found["processes"]:
        key = (proc["container"]["engine"], proc["container"]["id"]) if proc["container"] else ("host", proc["pid"])
        by_container.setdefault(key, []).append(proc)
    for kind, engine in (("docker-gpus", "docker"), ("docker-env", "docker"), ("podman-cdi", "podman")):
        cid = holders[kind]
        assert re.fullmatch(r"[0-9a-f]{64}", cid), (kind, cid)
        procs = by_container.get((engine, cid))
        assert procs, f"{kind}: {engine} {cid} not found in {found}"
        pid = int(node.run([engine, "inspect", "-f", "{{.State.Pid}}", cid], check=True).stdout)
        assert pid in [p["pid"] for p in procs], (kind, pid, procs)
        assert all("/dev/nvidia0" in p["devices"] for p in procs), procs
    ctr = by_container.get(("containerd", CTR_NAME))
    assert ctr, f"ctr container not found in {found}"
    assert ctr[0]["container"]["namespace"] == "default" and ctr[0]["command"] == "python3"
    bare = by_container.get(("host", holders["bare"]))
    assert bare and bare[0]["command"] == "gpu-bare-holder" and bare[0]["devices"] == ["/dev/nvidia1"], found
    # Nothing else on the node holds a GPU: the node's own processes are not taken for the outer container.
    assert len(by_container) == 5, sorted(by_container)


def test_the_gate_refuses_while_they_run_and_names_them(node, holders):
    res = playbook(node.fleet, GATE)
    assert res.returncode != 0
    out = res.stdout
    assert "refusing the reboot: " in out, out[-3000:]
    for kind in ("docker-gpus", "docker-env", "podman-cdi"):
        assert holders[kind][:12] in out, kind
    assert f"in containerd container {CTR_NAME}" in out
    assert f"pid {holders['bare']} (gpu-bare-holder) on the host holds /dev/nvidia1" in out
    assert "driver_drain=true" in out


def test_drain_refuses_what_it_cannot_stop_and_stops_nothing(node, holders):
    res = playbook(node.fleet, GATE, "-e", "driver_drain=true")
    assert res.returncode != 0
    assert "although driver_drain=true" in res.stdout, res.stdout[-3000:]
    assert "a containerd container the role does not stop" in res.stdout
    assert "a host process: stop it yourself" in res.stdout
    for kind, engine in (("docker-gpus", "docker"), ("docker-env", "docker"), ("podman-cdi", "podman")):
        assert running(node, engine, holders[kind]), kind


def test_the_driver_change_is_refused_while_a_gpu_is_held(node, holders):
    """The pre-change gate of the driver role itself: removing the driver is refused, nothing is removed."""
    res = playbook(node.fleet, DRIVER, "-e", "driver_state=absent")
    assert res.returncode != 0
    assert "refusing the driver change: " in res.stdout, res.stdout[-3000:]
    assert node.run(["dpkg-query", "-W", "-f=${db:Status-Abbrev}", "libcuda1"]).stdout[1:2] == "i"


def test_drain_stops_docker_and_podman_then_the_driver_change_goes_through(node, holders, tmp_path):
    node.run(["ctr", "-n", "default", "task", "kill", "-s", "KILL", CTR_NAME], check=True)
    node.run(f"kill {holders['bare']}", check=True)
    node.run("for i in $(seq 50); do ctr -n default task ls -q | grep -qx " + CTR_NAME + " || break; sleep 0.2; done")
    left = gpu_users(node, tmp_path)
    assert {p["container"]["engine"] for p in left["processes"] if p["container"]} == {"docker", "podman"}, left
    assert not [p for p in left["processes"] if not p["container"]], left

    res = playbook(node.fleet, GATE, "-e", "driver_drain=true", "-e", "driver_drain_delay=1")
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    for kind, engine in (("docker-gpus", "docker"), ("docker-env", "docker"), ("podman-cdi", "podman")):
        assert not running(node, engine, holders[kind]), kind
    assert gpu_users(node, tmp_path)["processes"] == []

    res = playbook(node.fleet, DRIVER, "-e", "driver_state=absent")
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    assert "refusing" not in res.stdout
    assert node.run(["dpkg-query", "-W", "-f=${db:Status-Abbrev}", "libcuda1"]).stdout[1:2] != "i"
