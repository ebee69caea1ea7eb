# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""GPU containers in user namespaces, end to end on a simulated GPU node of its own.

One trixie node (docker 26, podman 5.4, Debian's NVIDIA userspace, one GPU), prepared as ``_fleet_e2e.py`` prepares
its nodes: the host programs installed from this working tree, ``gpufleet.nvidia.cdi_spec`` and
``gpufleet.nvidia.container_runtime`` (docker, the shim as runtime ``nvidia`` and the default, CDI on) through
ansible-playbook, ``gpufleet-sim/mini:latest`` loaded by ``gpufleet-sim-mini-image``. Before the playbook an admin's
``"userns-remap": "default"`` is in ``/etc/docker/daemon.json`` (docker makes the user ``dockremap`` and its
subordinate ids); the module keeps it.

The cases (docs/security.md, "User namespaces"), each checked inside the container: ``nvidia-smi -L`` lists the
node's GPU, ``ldconfig -p`` finds ``libcuda.so.1``, ``/proc/self/uid_map`` is the remapped range, and the
``ld.so.cache`` and ``ld.so.conf.d`` file our hook wrote belong to the container's root (uid 0 inside):

* docker ``userns-remap`` through the shim (``--gpus all``): the shim injects, and leaves ``gpufleet-cdi-hook`` to
  runc, which runs it inside the user namespace. Done by the shim from the host (the code before this file), the
  cache belonged to ``nobody`` (65534) in the container;
* docker ``userns-remap`` with docker's own CDI (``--device nvidia.com/gpu=all``);
* rootless podman 5.4 with CDI: a user with subordinate ids (``useradd``), the image in that user's storage.

What the simulation adds for them (a real host has it; none of it is the collection's): a fully visible ``proc`` and
``sysfs`` mounted under ``/run/gpufleet-userns`` in the node (the node's own ``/proc`` and ``/sys`` carry docker's
masks and the simulation's bind mounts, and the kernel lets a user namespace mount proc or sysfs only where an
unobstructed one is visible: runc fails every userns container, GPU or not, with "mount proc: operation not
permitted" otherwise); ``/dev/net/tun`` for pasta, podman's rootless network; the user's home on the node's ext4
volume (``/var/lib/containers``) instead of the node's overlay root, where podman's overlay storage cannot live.
Kubernetes' ``hostUsers: false`` (no kubelet here) is a config.json with uidMappings: ``test_shim_userns.py``.
"""

from __future__ import annotations

import os
import re
import subprocess
import time

import pytest

from tests.integration._fleet_e2e import IMAGE, REPO, SHIM

pytestmark = pytest.mark.integration

NODE = "userns-trixie"
FLEET = {"nodes": [{"name": NODE, "suite": "trixie", "driver_state": "loaded", "driver_packages": True, "gpus": 1}]}
USER = "gpuuser"
HOME = f"/var/lib/containers/home/{USER}"
PODMAN_ENV = "PODMAN_IGNORE_CGROUPSV1_WARNING=1"  # the simulated nodes run on this host's cgroup v1
SIM_PREREQUISITES = f"""
set -eu
mkdir -p /run/gpufleet-userns/proc /run/gpufleet-userns/sys
mount -t proc -o nosuid,nodev,noexec proc /run/gpufleet-userns/proc
mount -t sysfs -o ro,nosuid,nodev,noexec sysfs /run/gpufleet-userns/sys
mkdir -p /dev/net && mknod -m 666 /dev/net/tun c 10 200
mkdir -p /var/lib/containers/home && useradd -m -d {HOME} -s /bin/sh {USER}
python3 - <<'EOF'
import json, os
path = "/etc/docker/daemon.json"
config = json.load(open(path)) if os.path.exists(path) else {{}}
config["userns-remap"] = "default"
with open(path, "w") as f:
    json.dump(config, f, indent=2)
EOF
"""
PLAYBOOK = f"""
- hosts: all
  gather_facts: false
  tasks:
    - name: Write the CDI spec (GPUs from discovery)
      gpufleet.nvidia.cdi_spec: {{}}
    - name: Register the shim as docker's runtime nvidia, the default (as site.yml does on GPU nodes), and CDI
      gpufleet.nvidia.container_runtime:
        engine: docker
        path: {SHIM}
        set_as_default: true
        cdi: true
        restart: true
"""
SCRIPT = (
    "nvidia-smi -L; echo ---; ldconfig -p; echo ---; cat /proc/self/uid_map; echo ---;"
    " ls -ln /etc/ld.so.cache /etc/ld.so.conf.d/00-gpufleet-nvidia.conf"
)
SMI_LINE = re.compile(r"^GPU (\d+): .* \(UUID: (GPU-[0-9a-f-]+)\)$", re.M)
LIBCUDA = re.compile(r"^\s+libcuda\.so\.1 \(libc6,x86-64\) => /usr/lib/x86_64-linux-gnu/libcuda\.so\.1$", re.M)


@pytest.fixture(scope="module")
def node(sim_fleet_factory, tmp_path_factory):
    start = time.monotonic()
    fleet = sim_fleet_factory(FLEET, name="userns")
    node = fleet.node(NODE)
    node.install_host_programs()
    node.run(SIM_PREREQUISITES, check=True)
    playbook = tmp_path_factory.mktemp("userns") / "prepare.yml"
    playbook.write_text(PLAYBOOK)
    proc = _playbook(fleet.inventory, playbook)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    # docker (into dockremap's storage), root's podman and containerd; then root's podman image into the user's.
    node.run(f"gpufleet-sim-mini-image {IMAGE}", check=True, timeout=300)
    node.run(f"podman save -o /tmp/mini.tar {IMAGE} && chmod 644 /tmp/mini.tar", check=True, timeout=120)
    _as_user(node, "podman load -q -i /tmp/mini.tar", check=True)
    print(f"[userns] node ready in {time.monotonic() - start:.0f}s")
    return node


def _playbook(inventory, playbook) -> subprocess.CompletedProcess:
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO / ".cache" / "collections"), ANSIBLE_FORCE_COLOR="0")
    cmd = [str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", str(inventory), str(playbook)]
    return subprocess.run(cmd, check=False, capture_output=True, text=True, cwd=REPO, env=env)


def _as_user(node, command: str, check: bool = False):
    """``command`` in a login shell of the unprivileged user (its HOME, no root environment)."""
    return node.run(["runuser", "-l", USER, "-c", f"{PODMAN_ENV} {command}"], check=check, timeout=180)


def _subordinate(node, user: str) -> tuple[int, int]:
    """(first id, count) of ``user`` in /etc/subuid."""
    for line in node.run("cat /etc/subuid", check=True).stdout.splitlines():
        name, first, count = line.split(":")
        if name == user:
            return int(first), int(count)
    raise AssertionError(f"{user} has no subordinate uids")


def _check(node, res, uid_map: list[tuple[int, int, int]]) -> None:
    assert res.rc == 0, f"rc={res.rc}\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    smi, cache, mapping, owners = res.stdout.split("---\n")
    assert [m.group(2) for m in SMI_LINE.finditer(smi)] == [g["uuid"] for g in node.config["gpus"]], smi
    assert LIBCUDA.search(cache), cache
    assert [tuple(int(x) for x in line.split()) for line in mapping.splitlines()] == uid_map, mapping
    # What gpufleet-cdi-hook wrote belongs to the container's root: it ran inside the user namespace.
    files = {line.split()[-1]: line.split()[2:4] for line in owners.splitlines()}
    assert files == {
        "/etc/ld.so.cache": ["0", "0"],
        "/etc/ld.so.conf.d/00-gpufleet-nvidia.conf": ["0", "0"],
    }, owners


def test_docker_runs_remapped_with_the_runtime_registered(node):
    daemon = node.run("cat /etc/docker/daemon.json", check=True).stdout
    assert re.search(r'"userns-remap": "default"', daemon) and SHIM in daemon, daemon
    info = node.run("docker info --format '{{json .SecurityOptions}} {{.DockerRootDir}}'", check=True).stdout
    first, _count = _subordinate(node, "dockremap")
    assert "name=userns" in info and f"/var/lib/docker/{first}.{first}" in info, info


def test_docker_userns_remap_gpus_all_through_the_shim(node):
    first, count = _subordinate(node, "dockremap")
    res = node.run(["docker", "run", "--rm", "--gpus", "all", IMAGE, "sh", "-c", SCRIPT], timeout=180)
    _check(node, res, [(0, first, count)])


def test_docker_userns_remap_native_cdi(node):
    first, count = _subordinate(node, "dockremap")
    res = node.run(["docker", "run", "--rm", "--device", "nvidia.com/gpu=all", IMAGE, "sh", "-c", SCRIPT], timeout=180)
    _check(node, res, [(0, first, count)])


def test_rootless_podman_cdi(node):
    uid = int(node.run(["id", "-u", USER], check=True).stdout)
    first, count = _subordinate(node, USER)
    res = _as_user(node, f"podman run --rm --device nvidia.com/gpu=all {IMAGE} sh -c '{SCRIPT}'")
    _check(node, res, [(0, uid, 1), (1, first, count)])
