# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What NVIDIA's install guides tell a user to type works, as typed, after one ``site.yml`` with defaults.

The fleet is ``converged_fleet`` (``_fleet_converged.py``, shared with ``test_cri_pods.py``): GPU nodes with
Debian's NVIDIA userspace and two simulated GPUs each, converged by ``tests/sim/playbooks/prepare.yml`` and one full
``playbooks/site.yml`` with its defaults. The commands run on its three nodes that are not Kubernetes nodes:

* ``cri-bookworm``: docker 20.10 and containerd 1.6 (no CDI: the shim);
* ``cri-trixie``: docker 26, containerd 1.7, podman 5.4;
* ``cri-sid``: docker 28, containerd 2.1 (config v3).

The commands, each checked by the GPUs it shows inside (``nvidia-smi -L`` lists UUIDs, compared with the node's
simulated GPUs), with their sources (read 2026-11-23):

* NVIDIA Container Toolkit install guide, "Running a Sample Workload with Docker":
  ``sudo docker run --rm --runtime=nvidia --gpus all ubuntu nvidia-smi``; Docker's own GPU page
  (docs.docker.com/engine/containers/resource_constraints/#gpu): ``docker run -it --rm --gpus all ubuntu nvidia-smi``,
  ``--gpus '"device=1,2"'``; the toolkit's "Specialized Configurations with Docker":
  ``docker run --rm --runtime=nvidia -e NVIDIA_VISIBLE_DEVICES=0 …``.
* nvidia-docker2's README (archived): ``NV_GPU=1 nvidia-docker run …``.
* libnvidia-container's README: ``nvidia-container-cli info``, ``nvidia-container-cli list``.
* The toolkit's "Running a Sample Workload with containerd": ``ctr run --rm -t --runc-binary=<nvidia runtime>
  --env NVIDIA_VISIBLE_DEVICES=all IMAGE ID nvidia-smi``; containerd's ``ctr run --gpus 0`` (contrib/nvidia).
* The toolkit's "Support for Container Device Interface" with podman:
  ``podman run --rm --device nvidia.com/gpu=all --security-opt=label=disable ubuntu nvidia-smi -L``.

The image is the small validation image (no registry is reachable here); ``nvidia-smi`` in it comes from the
host through the driver files the runtime injects, as on a real host.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
IMAGE = "gpufleet-sim/mini:latest"
CTR_IMAGE = "docker.io/" + IMAGE  # the name docker save gives it in containerd's default namespace
NODES = ["cri-bookworm", "cri-trixie", "cri-sid"]  # not cri-kube: a Kubernetes node takes no GPU request from a user
PODMAN_NODES = ["cri-trixie"]  # podman 5.4 (bookworm's 4.3 refuses the CDI spec: test_cdi_e2e.py)
SMI_LINE = re.compile(r"^GPU (\d+): .* \(UUID: (GPU-[0-9a-f-]+)\)$", re.M)


def _why(proc) -> str:
    out = getattr(proc, "stdout", "")
    err = getattr(proc, "stderr", "")
    return f"rc={getattr(proc, 'returncode', getattr(proc, 'rc', '?'))}\n{out[-6000:]}\n{err[-3000:]}"


@pytest.fixture(scope="module")
def fleet(converged_fleet):
    return converged_fleet


def _uuids(node) -> list[str]:
    return [g["uuid"] for g in node.config["gpus"]]


def _run(node, command: str):
    """``command`` in the node. ``ctr run`` without a terminal can lose a short-lived task's output, all or its tail
    (containerd/containerd#770, the same race in nerdctl#3877): exit 0 and no GPU line, where nvidia-smi always prints
    its GPUs or "No devices were found" when it exits 0. Seen once in CI on containerd 2.1 under
    load; such a run is made once more (under another container id), and what it prints then is checked."""
    res = node.run(command, timeout=180)
    if " ctr run " in f" {command}" and res.rc == 0 and "UUID" not in res.stdout and "No devices" not in res.stdout:
        res = node.run(command.replace(" guide-ctr-", " guide-ctr-again-"), timeout=180)
    return res


def _smi_uuids(node, command: str, env: dict[str, str] | None = None) -> list[str]:
    """Run a command that ends in ``nvidia-smi -L`` (or the table) in the node; the GPU UUIDs it listed, in order."""
    prefix = "".join(f"{k}={v} " for k, v in (env or {}).items())
    res = _run(node, prefix + command)
    assert res.rc == 0, f"{node.name}: {command!r}\n{_why(res)}"
    listed = [m.group(2) for m in SMI_LINE.finditer(res.stdout)]
    assert listed or "No devices were found" in res.stdout, f"{node.name}: {command!r} listed no GPU\n{_why(res)}"
    return listed


def _ctr(node) -> str:
    """``ctr run`` as typed, plus what this simulation needs: ctr 2.x asks for 1024 CPU shares by default, which
    the simulated sid node's nested cgroup cannot give (the same flag roles/validate passes there)."""
    return "ctr run --cpu-shares 0" if node.desc["suite"] == "sid" else "ctr run"


@pytest.mark.parametrize("name", NODES)
def test_docker_gpus_all_nvidia_smi(fleet, name):
    """The guides' first check, as typed: no --runtime (nvidia is the default runtime on GPU nodes)."""
    node = fleet.node(name)
    res = node.run(f"docker run --rm --gpus all {IMAGE} nvidia-smi", timeout=180)
    assert res.rc == 0, _why(res)
    assert "NVIDIA-SMI" in res.stdout and "Driver Version" in res.stdout, _why(res)
    for gpu in node.config["gpus"]:
        assert gpu["name"].replace("NVIDIA ", "")[:12] in res.stdout, (gpu["name"], res.stdout)
    # ...and every GPU listed by UUID
    assert _smi_uuids(node, f"docker run --rm --gpus all {IMAGE} nvidia-smi -L") == _uuids(node)


@pytest.mark.parametrize("name", NODES)
def test_docker_gpus_device_1(fleet, name):
    node = fleet.node(name)
    listed = _smi_uuids(node, f"docker run --rm --gpus '\"device=1\"' {IMAGE} nvidia-smi -L")
    assert listed == [_uuids(node)[1]]


@pytest.mark.parametrize("name", NODES)
def test_docker_runtime_nvidia_with_visible_devices(fleet, name):
    node = fleet.node(name)
    listed = _smi_uuids(node, f"docker run --rm --runtime=nvidia -e NVIDIA_VISIBLE_DEVICES=0 {IMAGE} nvidia-smi -L")
    assert listed == [_uuids(node)[0]]
    # the install guide's sample workload, --runtime and --gpus together
    assert _smi_uuids(node, f"docker run --rm --runtime=nvidia --gpus all {IMAGE} nvidia-smi -L") == _uuids(node)


@pytest.mark.parametrize("name", NODES)
def test_nvidia_docker_with_nv_gpu(fleet, name):
    node = fleet.node(name)
    listed = _smi_uuids(node, f"nvidia-docker run --rm {IMAGE} nvidia-smi -L", env={"NV_GPU": "1"})
    assert listed == [_uuids(node)[1]]


@pytest.mark.parametrize("name", NODES)
def test_nvidia_container_cli_info_and_list(fleet, name):
    node = fleet.node(name)
    info = node.run("nvidia-container-cli info", timeout=60)
    assert info.rc == 0, _why(info)
    assert re.search(r"^NVRM version:\s+\d+\.\d+", info.stdout, re.M), info.stdout
    assert re.search(r"^CUDA version:\s+\d+\.\d+", info.stdout, re.M), info.stdout
    for uuid in _uuids(node):
        assert uuid in info.stdout, info.stdout
    listed = node.run("nvidia-container-cli list", timeout=60)
    assert listed.rc == 0, _why(listed)
    paths = listed.stdout.split()
    for path in ("/dev/nvidiactl", "/dev/nvidia0", "/dev/nvidia1"):
        assert path in paths, listed.stdout
    # resolved, as NVIDIA's prints them: Debian's /usr/bin/nvidia-smi is a link to /usr/lib/nvidia/current/nvidia-smi
    assert any(os.path.basename(p) == "nvidia-smi" for p in paths), listed.stdout
    assert any(os.path.basename(p).startswith("libnvidia-ml.so.") for p in paths), listed.stdout
    assert any(os.path.basename(p).startswith("libcuda.so.") for p in paths), listed.stdout
    one = node.run("nvidia-container-cli list --device=1", timeout=60)
    assert one.rc == 0, _why(one)
    assert "/dev/nvidia1" in one.stdout.split() and "/dev/nvidia0" not in one.stdout.split(), one.stdout


@pytest.mark.parametrize("name", NODES)
def test_containerd_ctr_with_the_nvidia_runtime_binary(fleet, name):
    """The toolkit guide's containerd sample: ``ctr run --runc-binary=<runtime> --env NVIDIA_VISIBLE_DEVICES=…``."""
    node = fleet.node(name)
    runtime = node.run("command -v nvidia-container-runtime || command -v gpufleet-container-runtime").stdout.split()
    assert runtime, "no nvidia runtime binary on the node"
    listed = _smi_uuids(
        node,
        f"{_ctr(node)} --rm --runc-binary={runtime[0]} --env NVIDIA_VISIBLE_DEVICES=all {CTR_IMAGE} guide-ctr-all"
        " nvidia-smi -L",
    )
    assert listed == _uuids(node)


@pytest.mark.parametrize("name", NODES)
def test_containerd_ctr_gpus(fleet, name):
    """``ctr run --gpus 0``: works, or fails at once with one line that names the command that works on this host,
    and that command works."""
    node = fleet.node(name)
    res = _run(node, f"{_ctr(node)} --rm --gpus 0 {CTR_IMAGE} guide-ctr-gpus nvidia-smi -L")
    if res.rc == 0:
        assert [m.group(2) for m in SMI_LINE.finditer(res.stdout)] == [_uuids(node)[0]], _why(res)
        return
    node.run("ctr task rm -f guide-ctr-gpus; ctr container rm guide-ctr-gpus", timeout=60)
    text = res.stderr + res.stdout
    # "... through the gpufleet runtime instead: ctr run --runc-binary <shim> --gpus 0 IMAGE ID [COMMAND]", in ctr's
    # own error line
    suggested = re.search(r"(ctr run [^\n]*?) IMAGE ID", text)
    assert suggested, f"the failure does not name a command that works:\n{_why(res)}"
    command = suggested.group(1).replace("ctr run", f"{_ctr(node)} --rm", 1)
    command += f" {CTR_IMAGE} guide-ctr-named nvidia-smi -L"
    listed = _smi_uuids(node, command)
    assert listed == [_uuids(node)[0]], command


@pytest.mark.parametrize("name", PODMAN_NODES)
def test_podman_cdi_device(fleet, name):
    """As typed in NVIDIA's CDI guide: podman's default (bridge) network included."""
    node = fleet.node(name)
    podman = "podman run"
    command = f"{podman} --rm --device nvidia.com/gpu=all --security-opt=label=disable {IMAGE} nvidia-smi -L"
    assert _smi_uuids(node, command) == _uuids(node)
    one = f"{podman} --rm --device nvidia.com/gpu=1 --security-opt=label=disable {IMAGE} nvidia-smi -L"
    assert _smi_uuids(node, one) == [_uuids(node)[1]]


@pytest.mark.parametrize("name", NODES)
def test_a_container_without_a_gpu_request_gets_no_gpu(fleet, name):
    """nvidia as the default runtime changes nothing for a container that asks for no GPU."""
    node = fleet.node(name)
    res = node.run(f"docker run --rm {IMAGE} sh -c 'ls /dev; env'", timeout=120)
    assert res.rc == 0, _why(res)
    assert not re.search(r"^nvidia", res.stdout, re.M), res.stdout
