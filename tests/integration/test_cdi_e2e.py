# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""End to end on simulated GPU nodes: the real engines, Debian's real NVIDIA userspace, the collection's modules.

The fleet is the session's ``e2e_fleet`` (``conftest.py``, described in ``_fleet_e2e.py``; shared with
``test_security_e2e.py``): ``e2e-bookworm`` (docker 20.10 with runtime ``nvidia`` -> the shim, podman 4.3;
driver 535), ``e2e-trixie`` (docker 26 with native CDI, podman 5.4; driver 550) and ``e2e-sid`` (docker 28,
containerd 2.1; driver 550), 2 GPUs each, the host programs installed from this working tree, the CDI spec
written by ``gpufleet.nvidia.cdi_spec`` and the shim registered by ``gpufleet.nvidia.container_runtime``.

Nested containers are started from ``gpufleet-sim/mini:latest`` (``gpufleet-sim-mini-image --python``).
Inside: the requested GPU's node and ``nvidiactl`` and no other GPU's; ``ldconfig -p`` lists ``libcuda.so.1``;
a probe compiled here dlopens ``libcuda.so.1`` and calls ``cuDriverGetVersion`` (it must give the node's CUDA
version: the real driver library runs) and ``cuInit`` (no kernel module: an error code from libcuda, never a
load failure); the stub NVML, injected like the real one, counts the GPUs the container was given.

The interleaved ``docker run --rm`` timing (shim with one GPU vs plain runc) is ``make bench``'s
(bench/bench.py, the same preparation on its own fleet).
"""

import json
import re

import pytest

from tests.integration._fleet_e2e import IMAGE, NVML, PROBE, SHIM

pytestmark = [pytest.mark.integration]

SCRIPT = f"ls /dev; echo ---; ldconfig -p; echo ---; {PROBE}; python3 {NVML}"


@pytest.fixture(scope="module")
def fleet(e2e_fleet):
    return e2e_fleet


def _container(node, engine, *args, check=True):
    mounts = ["-v", f"{PROBE}:{PROBE}:ro", "-v", f"{NVML}:{NVML}:ro"]
    argv = [engine, "run", "--rm", "--network", "none", *mounts, *args]
    res = node.run(argv, timeout=180)
    if check:
        assert res.rc == 0, f"{node.name}: {' '.join(argv)}\n{res.stdout}\n{res.stderr}"
    return res


def _check_gpu_container(node, out, visible):
    """``visible``: the host GPU minors the container must see (empty: none, and no driver)."""
    devs, cache, rest = out.split("---\n")
    devs = set(devs.split())
    gpus = {d for d in devs if re.fullmatch(r"nvidia\d+", d)}
    assert gpus == {f"nvidia{m}" for m in visible}, f"{node.name}: {sorted(devs)}"
    if not visible:
        assert "nvidiactl" not in devs and "libcuda.so.1" not in cache
        assert "dlopen failed" in rest
        return
    assert "nvidiactl" in devs
    assert re.search(r"libcuda\.so\.1 \(libc6,x86-64\) => /usr/lib/x86_64-linux-gnu/libcuda\.so\.1", cache), cache
    cuda = node.desc["cuda_version"]
    major, minor = (int(x) for x in cuda.split(".")[:2])
    m = re.search(r"cuDriverGetVersion=(\d+) version=(\d+) cuInit=(\d+) (\S+)", rest)
    assert m, f"{node.name}: libcuda did not load or run: {rest}"
    assert int(m.group(1)) == 0 and int(m.group(2)) == major * 1000 + minor * 10, rest
    # No kernel module: libcuda's own error path (100 no device / 999 unknown / 304 OS call failed...).
    assert int(m.group(3)) != 0 and m.group(4).startswith("CUDA_ERROR_"), rest
    assert "nvmlInit=0" in rest and f"count={len(visible)}" in rest, rest


def _node(fleet, suite):
    return fleet.node(f"e2e-{suite}")


def test_spec_written_by_the_module(fleet):
    """cdi_version auto: 0.5.0 where Debian 12's podman 4.3 reads the spec (its CDI library knows no newer and
    refuses the annotations; the stamps are comment lines), 0.6.0 with annotations elsewhere."""
    for node in map(fleet.node, fleet.nodes):
        spec = node.run("cat /etc/cdi/nvidia.yaml", check=True).stdout
        old_podman = node.name == "e2e-bookworm"
        want = "0\\.5\\.0" if old_podman else "0\\.6\\.0"
        assert re.search(rf'^cdiVersion: "?{want}"?$', spec, re.M), (node.name, spec[:300])
        assert bool(re.search(r"^annotations:", spec, re.M)) is not old_podman, (node.name, spec[:400])
        assert re.search(r'^#? *"?gpufleet\.nvidia/driver-version"?: "?5\d\d\.', spec, re.M), spec[:400]
        assert 'kind: "nvidia.com/gpu"' in spec or "kind: nvidia.com/gpu" in spec
        assert node.run(["test", "-x", SHIM]).rc == 0
        daemon = json.loads(node.run("cat /etc/docker/daemon.json", check=True).stdout)
        assert daemon["runtimes"]["nvidia"]["path"] == SHIM


def test_docker_20_10_through_the_shim_by_env(fleet):
    node = _node(fleet, "bookworm")
    out = _container(node, "docker", "--runtime=nvidia", "-e", "NVIDIA_VISIBLE_DEVICES=1", IMAGE, "sh", "-c", SCRIPT)
    _check_gpu_container(node, out.stdout, [1])
    out = _container(node, "docker", "--runtime=nvidia", "-e", "NVIDIA_VISIBLE_DEVICES=0", IMAGE, "sh", "-c", SCRIPT)
    _check_gpu_container(node, out.stdout, [0])


def test_docker_20_10_gpus_all_through_the_shim(fleet):
    node = _node(fleet, "bookworm")
    out = _container(node, "docker", "--runtime=nvidia", "--gpus", "all", IMAGE, "sh", "-c", SCRIPT)
    _check_gpu_container(node, out.stdout, [0, 1])


def test_docker_20_10_void_is_no_gpu(fleet):
    node = _node(fleet, "bookworm")
    env = ["-e", "NVIDIA_VISIBLE_DEVICES=void"]
    out = _container(node, "docker", "--runtime=nvidia", *env, IMAGE, "sh", "-c", SCRIPT + "; true")
    _check_gpu_container(node, out.stdout, [])


def test_podman_5_cdi_device(fleet):
    node = _node(fleet, "trixie")
    assert node.run("podman --version", check=True).stdout.split()[-1].startswith("5.")
    out = _container(node, "podman", "--device", "nvidia.com/gpu=0", IMAGE, "sh", "-c", SCRIPT)
    _check_gpu_container(node, out.stdout, [0])


def test_podman_4_3_cdi_device(fleet):
    """Debian 12's own podman 4.3 reads the spec cdi_spec wrote for it (cdiVersion 0.5.0, chosen by auto)."""
    node = _node(fleet, "bookworm")
    assert node.run("podman --version", check=True).stdout.split()[-1].startswith("4.3")
    out = _container(node, "podman", "--device", "nvidia.com/gpu=all", IMAGE, "sh", "-c", SCRIPT)
    _check_gpu_container(node, out.stdout, [0, 1])
    out = _container(node, "podman", "--device", "nvidia.com/gpu=1", IMAGE, "sh", "-c", SCRIPT)
    _check_gpu_container(node, out.stdout, [1])


def test_docker_26_native_cdi(fleet):
    node = _node(fleet, "trixie")
    out = _container(node, "docker", "--device", "nvidia.com/gpu=1", IMAGE, "sh", "-c", SCRIPT)
    _check_gpu_container(node, out.stdout, [1])


def test_docker_26_through_the_shim(fleet):
    node = _node(fleet, "trixie")
    out = _container(node, "docker", "--runtime=nvidia", "-e", "NVIDIA_VISIBLE_DEVICES=0", IMAGE, "sh", "-c", SCRIPT)
    _check_gpu_container(node, out.stdout, [0])


def test_docker_28_native_cdi(fleet):
    node = _node(fleet, "sid")
    out = _container(node, "docker", "--device", "nvidia.com/gpu=0", IMAGE, "sh", "-c", SCRIPT)
    _check_gpu_container(node, out.stdout, [0])


def test_docker_28_through_the_shim(fleet):
    node = _node(fleet, "sid")
    out = _container(node, "docker", "--runtime=nvidia", "--gpus", "device=1", IMAGE, "sh", "-c", SCRIPT)
    _check_gpu_container(node, out.stdout, [1])
