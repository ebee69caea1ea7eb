"""End to end on simulated GPU nodes: the real engines, Debian's real NVIDIA userspace, the collection's modules.

One extra fleet (``driver_packages: true``, driver ``loaded``, 2 GPUs each):

* ``e2e-bookworm``: docker 20.10 (runtime ``nvidia`` -> the shim), containerd 1.6, podman 4.3; driver 535;
* ``e2e-trixie``: docker 26 (native CDI), containerd 1.7, podman 5.4; driver 550.

On each node the host programs are installed from this working tree by ``tests/tools/install_host_programs.py``
(the same ``_host_programs.install`` the toolkit role uses), ``gpufleet.nvidia.cdi_spec`` and
``gpufleet.nvidia.container_runtime`` run through ansible-playbook, and nested containers are started from
``gpufleet-sim-mini-image --python``. Inside: the requested GPU's node and ``nvidiactl`` and no other GPU's;
``ldconfig -p`` lists ``libcuda.so.1``; a probe compiled here dlopens ``libcuda.so.1`` and calls
``cuDriverGetVersion`` (it must give the node's CUDA version: the real driver library runs) and ``cuInit``
(no kernel module: an error code from libcuda, never a load failure); the stub NVML, injected like the real
one, counts the GPUs the container was given.

The interleaved ``docker run --rm`` timing (shim with one GPU vs plain runc) is ``make bench``'s
(bench/bench.py, the same preparation on its own fleet).
"""

import json
import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not shutil.which("gcc"), reason="needs gcc to build the libcuda probe"),
]

FLEET = {
    "nodes": [
        {
            "name": "e2e-bookworm",
            "suite": "bookworm",
            "driver_state": "loaded",
            "driver_packages": True,
            "engines": ["docker", "containerd", "podman"],
            "gpus": 2,
        },
        {
            "name": "e2e-trixie",
            "suite": "trixie",
            "driver_state": "loaded",
            "driver_packages": True,
            "gpus": 2,
        },
    ]
}
IMAGE = "gpufleet-sim/mini:latest"
SHIM = "/usr/local/bin/gpufleet-container-runtime"
PROBE = "/usr/local/libexec/gpufleet-e2e/probe"
NVML = "/usr/local/libexec/gpufleet-e2e/nvml.py"
PROBE_C = r"""
#include <dlfcn.h>
#include <stdio.h>
int main(void) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) { printf("dlopen failed: %s\n", dlerror()); return 1; }
    int (*version)(int *) = (int (*)(int *))dlsym(h, "cuDriverGetVersion");
    int (*init)(unsigned int) = (int (*)(unsigned int))dlsym(h, "cuInit");
    int (*name)(int, const char **) = (int (*)(int, const char **))dlsym(h, "cuGetErrorName");
    if (!version || !init || !name) { printf("symbol missing\n"); return 2; }
    int v = 0;
    int vrc = version(&v);
    int rc = init(0);
    const char *n = "?";
    name(rc, &n);
    printf("cuDriverGetVersion=%d version=%d cuInit=%d %s\n", vrc, v, rc, n);
    return 0;
}
"""
NVML_PY = """
import ctypes
nvml = ctypes.CDLL("libnvidia-ml.so.1")
count = ctypes.c_uint(0)
print("nvmlInit=%d" % nvml.nvmlInit_v2())
print("nvmlDeviceGetCount=%d count=%d" % (nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)), count.value))
"""
SCRIPT = f"ls /dev; echo ---; ldconfig -p; echo ---; {PROBE}; python3 {NVML}"
PLAYBOOK = """
- hosts: all
  gather_facts: false
  tasks:
    - name: Write the CDI spec (GPUs from discovery)
      gpufleet.nvidia.cdi_spec: {}
      register: spec
    - name: Again, unchanged
      gpufleet.nvidia.cdi_spec: {}
      register: again
    - name: The second run changed nothing
      ansible.builtin.assert:
        that: [spec is changed, again is not changed]
    - name: Register the shim as docker's runtime nvidia (and CDI from docker 25)
      gpufleet.nvidia.container_runtime:
        engine: docker
        path: /usr/local/bin/gpufleet-container-runtime
        cdi: "{{ gpufleet_sim.suite != 'bookworm' }}"
        restart: true
"""


@pytest.fixture(scope="module")
def fleet(sim_fleet_factory, ansible_playbook, tmp_path_factory):
    work = tmp_path_factory.mktemp("cdi-e2e")
    probe = work / "probe"
    (work / "probe.c").write_text(PROBE_C)
    # Dynamically linked against this machine's glibc (bookworm 2.36, the oldest of the suites).
    subprocess.run(["gcc", "-O2", "-o", str(probe), str(work / "probe.c")], check=True)
    fleet = sim_fleet_factory(FLEET, name="cdi")

    def prepare(node):
        node.run("mkdir -p /tmp/gf/tests/tools /tmp/gf/plugins/module_utils " + os.path.dirname(PROBE), check=True)
        node.put("/tmp/gf/tests/tools/install_host_programs.py", _read("tests/tools/install_host_programs.py"))
        for name in sorted(os.listdir(os.path.join(REPO, "plugins", "module_utils"))):
            if name.endswith(".py"):
                node.put("/tmp/gf/plugins/module_utils/" + name, _read("plugins/module_utils/" + name))
        node.run("python3 /tmp/gf/tests/tools/install_host_programs.py", check=True)
        node.put(PROBE, probe.read_bytes(), 0o755)
        node.put(NVML, NVML_PY)
        node.run(f"gpufleet-sim-mini-image {IMAGE} --python", check=True, timeout=300)

    with ThreadPoolExecutor(len(fleet.nodes)) as pool:
        list(pool.map(prepare, [fleet.node(n) for n in fleet.nodes]))
    playbook = work / "site.yml"
    playbook.write_text(PLAYBOOK)
    proc = ansible_playbook(playbook, inventory=fleet.inventory)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    return fleet


def _read(rel):
    with open(os.path.join(REPO, rel), encoding="utf-8") as f:
        return f.read()


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
    for node in map(fleet.node, fleet.nodes):
        spec = node.run("cat /etc/cdi/nvidia.yaml", check=True).stdout
        assert re.search(r'^cdiVersion: "?0\.6\.0"?$', spec, re.M), spec[:300]
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


@pytest.mark.xfail(
    strict=True,
    reason="podman 4.3 (bookworm) rejects cdiVersion 0.6.0 and top-level annotations ('unresolvable CDI "
    "devices'); the same spec at 0.5.0 without annotations works (checked by hand). Open: cdi_version option.",
)
def test_podman_4_3_cdi_device(fleet):
    node = _node(fleet, "bookworm")
    assert node.run("podman --version", check=True).stdout.split()[-1].startswith("4.3")
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
