# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The native toolkit for real: a throwaway docker 20.10 engine with the shim registered as runtime ``nvidia``.

No GPU and no kernel module here: device nodes are made with ``mknod`` (195:N, 195:255, a uvm major),
the driver files are the real Debian 535 userspace (``debian_driver_tree``), and the image is a small
glibc root file system assembled from this machine's own files (Docker Hub is not reachable), holding a
probe that dlopens ``libcuda.so.1`` and calls ``cuInit`` (it reports an error without a kernel module:
expected; what matters is that the driver library loads and runs).

Run with ``python -m pytest -m integration tests/integration`` as root with dockerd and runc installed.
The shim's start-time overhead is measured by ``make bench`` (bench/bench.py), not here.
"""

import json
import os
import shutil
import subprocess
import tarfile
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _load_unit_conftest():
    """tests/unit/conftest.py under its own name, for its driver tree (the collection: tests/conftest.py)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "gpufleet_unit_conftest", os.path.join(REPO, "tests", "unit", "conftest.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


unit_conftest = _load_unit_conftest()
debian_driver_tree = unit_conftest.debian_driver_tree

from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi.spec import build_spec, gather, render  # noqa: E402
from ansible_collections.gpufleet.nvidia.plugins.module_utils.hostprog import install as _host_programs  # noqa: E402

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not (
            os.geteuid() == 0 and shutil.which("dockerd") and os.path.exists("/usr/sbin/runc") and shutil.which("gcc")
        ),
        reason="needs root, dockerd, runc and gcc",
    ),
]

RUNC = "/usr/sbin/runc"
IMAGE = "gpufleet-e2e:latest"
UVM_MAJOR = 511
PROBE_C = r"""
#include <dlfcn.h>
#include <stdio.h>
int main(void) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) { printf("dlopen failed: %s\n", dlerror()); return 1; }
    int (*cu_init)(unsigned int) = (int (*)(unsigned int))dlsym(h, "cuInit");
    if (!cu_init) { printf("no cuInit\n"); return 2; }
    printf("cuInit=%d\n", cu_init(0));
    return 0;
}
"""
HOST_FILES = (
    "/bin/sh",
    "/bin/ls",
    "/bin/cat",
    "/bin/true",
    "/sbin/ldconfig",
)


def _ldd(path):
    out = subprocess.run(["ldd", path], capture_output=True, text=True, check=False).stdout
    libs = []
    for line in out.splitlines():
        parts = line.split()
        for part in parts:
            if part.startswith("/"):
                libs.append(part)
    return libs


def build_rootfs_tar(work):
    """A minimal glibc root: sh, ls, cat, ldconfig, the probe, and the libraries libcuda needs."""
    rootfs = os.path.join(work, "rootfs")
    probe_src = os.path.join(work, "probe.c")
    with open(probe_src, "w", encoding="utf-8") as f:
        f.write(PROBE_C)
    os.makedirs(os.path.join(rootfs, "usr/local/bin"))
    subprocess.run(["gcc", "-o", os.path.join(rootfs, "usr/local/bin/probe"), probe_src], check=True)
    files = set()
    for path in HOST_FILES:
        real = os.path.realpath(path)
        files.add((path, real))
        for lib in _ldd(real):
            files.add((lib, os.path.realpath(lib)))
    for name in ("libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1", "libc.so.6"):
        path = "/lib/x86_64-linux-gnu/" + name
        files.add((path, os.path.realpath(path)))
    for path, real in sorted(files):
        dest = os.path.join(rootfs, path.lstrip("/"))
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copy2(real, dest)
    for d in ("etc/ld.so.conf.d", "usr/lib/x86_64-linux-gnu", "tmp", "proc", "sys", "dev"):
        os.makedirs(os.path.join(rootfs, d), exist_ok=True)
    with open(os.path.join(rootfs, "etc/ld.so.conf"), "w", encoding="utf-8") as f:
        f.write("include /etc/ld.so.conf.d/*.conf\n")
    subprocess.run(["/sbin/ldconfig", "-r", rootfs], check=True)
    tar = os.path.join(work, "rootfs.tar")
    with tarfile.open(tar, "w") as t:
        t.add(rootfs, arcname=".")
    return tar


class Engine:
    def __init__(self, work, bindir, env):
        self.work = work
        self.sock = os.path.join(work, "d.sock")
        self.env = env
        self.log = open(os.path.join(work, "dockerd.log"), "w")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [
                # Its own network namespace: a second dockerd on the host's namespace removes the
                # host engine's docker0 bridge (seen here), breaking every other test's containers.
                "unshare", "--net", "--",
                "dockerd",
                "--data-root", os.path.join(work, "data"),
                "--exec-root", os.path.join(work, "exec"),
                "-H", "unix://" + self.sock,
                "--pidfile", os.path.join(work, "d.pid"),
                "--bridge", "none",
                "--iptables=false",
                "--ip-masq=false",
                "--add-runtime", "nvidia=" + os.path.join(bindir, "gpufleet-container-runtime"),
                # what the runtime role sets on GPU nodes (runtime_set_as_default): `docker run --gpus` as typed
                "--default-runtime", "nvidia",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=env,
        )  # fmt: skip
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.docker("info", check=False).returncode == 0:
                return
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"dockerd did not start; see {work}/dockerd.log")

    def docker(self, *args, check=True):
        return subprocess.run(
            ["docker", "-H", "unix://" + self.sock, *args], capture_output=True, text=True, check=check, env=self.env
        )

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


@pytest.fixture(scope="module")
def engine(tmp_path_factory, debian_driver_tree):
    work = str(tmp_path_factory.mktemp("e2e", numbered=True))
    bindir, libdir = os.path.join(work, "bin"), os.path.join(work, "lib")
    _host_programs.install(bindir, libdir, runtime=RUNC)
    dev = os.path.join(work, "devroot", "dev")
    os.makedirs(dev)
    for name, major, minor in (
        ("nvidia0", 195, 0),
        ("nvidia1", 195, 1),
        ("nvidiactl", 195, 255),
        ("nvidia-uvm", UVM_MAJOR, 0),
        ("nvidia-uvm-tools", UVM_MAJOR, 1),
    ):
        os.mknod(os.path.join(dev, name), 0o666 | 0o020000, os.makedev(major, minor))
    root, version = debian_driver_tree
    gpus = [
        {"index": 0, "minor": 0, "uuid": "GPU-00000000-0000-0000-0000-000000000000"},
        {"index": 1, "minor": 1, "uuid": "GPU-11111111-1111-1111-1111-111111111111"},
    ]
    _version, inputs = gather(driver_root=root, dev_root=os.path.dirname(dev), gpus=gpus)
    spec, index = build_spec(hook_path=os.path.join(bindir, "gpufleet-cdi-hook"), **inputs)
    with open(os.path.join(work, "nvidia.yaml"), "w", encoding="utf-8") as f:
        f.write(render(spec, "yaml"))
    index_path = os.path.join(work, "cdi-nvidia.json")
    with open(index_path, "w", encoding="utf-8") as f:
        json.dump(index, f)
    config = os.path.join(work, "runtime.json")
    with open(config, "w", encoding="utf-8") as f:
        # the debug log on (toolkit_debug_log): one line per GPU start, checked below
        json.dump({"runtime": RUNC, "index": index_path, "debug_log": os.path.join(work, "log", "runtime.log")}, f)
    os.mkdir(os.path.join(work, "log"), 0o755)
    env = {
        "PATH": bindir + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "GPUFLEET_RUNTIME_CONFIG": config,
        "HOME": "/root",
    }
    eng = Engine(work, bindir, env)
    try:
        tar = build_rootfs_tar(work)
        eng.docker("import", tar, IMAGE)
        eng.version = version
        eng.debug_log = os.path.join(work, "log", "runtime.log")
        eng.index_path = index_path
        yield eng
    finally:
        eng.stop()


def _run(engine, *args, check=True):
    return engine.docker("run", "--rm", "--network", "none", *args, check=check)


SCRIPT = "ls /dev; echo ---; ldconfig -p; echo ---; probe; ls -l /usr/lib/x86_64-linux-gnu/libcuda.so"


def test_one_gpu_by_env(engine):
    out = _run(engine, "--runtime=nvidia", "-e", "NVIDIA_VISIBLE_DEVICES=0", IMAGE, "sh", "-c", SCRIPT).stdout
    devs, cache, rest = out.split("---\n")
    assert {"nvidia0", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"} <= set(devs.split())
    assert "nvidia1" not in devs.split()
    assert "libcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1" in cache
    assert "libnvidia-ml.so.1" in cache
    assert "cuInit=" in rest and "dlopen failed" not in rest  # loads; no kernel module, so an error code
    assert "libcuda.so -> libcuda.so.1" in rest


def test_docker_gpus_all_through_the_shim(engine):
    out = _run(engine, "--runtime=nvidia", "--gpus", "all", IMAGE, "sh", "-c", SCRIPT).stdout
    devs = out.split("---\n")[0].split()
    assert {"nvidia0", "nvidia1", "nvidiactl"} <= set(devs)


def test_docker_gpus_one_device_through_the_shim(engine):
    out = _run(engine, "--runtime=nvidia", "--gpus", "device=1", IMAGE, "ls", "/dev").stdout.split()
    assert "nvidia1" in out and "nvidia0" not in out


def test_docker_gpus_all_as_nvidias_guides_type_it(engine):
    """`docker run --rm --gpus all <image> ...` with no --runtime: nvidia is the default runtime (as the runtime
    role sets it), so docker's own --gpus request reaches the shim and the container sees every GPU."""
    out = engine.docker("run", "--rm", "--network", "none", "--gpus", "all", IMAGE, "sh", "-c", SCRIPT).stdout
    devs, cache, _rest = out.split("---\n")
    assert {"nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"} <= set(devs.split())
    assert "libnvidia-ml.so.1" in cache and "libcuda.so.1" in cache


def test_no_gpu_container_under_the_default_runtime_gets_nothing(engine):
    """The default runtime is nvidia, but a container that asks for no GPU gets none: no device node, no driver."""
    out = _run(engine, IMAGE, "sh", "-c", "ls /dev; echo ---; ldconfig -p").stdout
    devs, cache = out.split("---\n")
    assert not [d for d in devs.split() if d.startswith("nvidia")]
    assert "libcuda" not in cache and "libnvidia" not in cache


def test_void_is_not_a_gpu_container(engine):
    out = _run(
        engine, "--runtime=nvidia", "-e", "NVIDIA_VISIBLE_DEVICES=void", IMAGE, "sh", "-c", SCRIPT + "; true"
    ).stdout
    assert "nvidia0" not in out and "nvidiactl" not in out and "libcuda" not in out.split("---\n")[1]


def test_capabilities_utility_only(engine):
    cmd = "ldconfig -p"
    env = ["-e", "NVIDIA_VISIBLE_DEVICES=0", "-e", "NVIDIA_DRIVER_CAPABILITIES=utility"]
    out = _run(engine, "--runtime=nvidia", *env, IMAGE, "sh", "-c", cmd).stdout
    assert "libnvidia-ml.so.1" in out and "libcuda.so" not in out


def test_unsatisfiable_requests_fail_the_start(engine):
    proc = _run(engine, "--runtime=nvidia", "-e", "NVIDIA_VISIBLE_DEVICES=5", IMAGE, "true", check=False)
    assert proc.returncode != 0 and "unknown GPU '5' requested" in proc.stderr
    env = ["-e", "NVIDIA_VISIBLE_DEVICES=0", "-e", "NVIDIA_REQUIRE_CUDA=cuda>=12.5"]
    proc = _run(engine, "--runtime=nvidia", *env, IMAGE, "true", check=False)
    assert proc.returncode != 0 and "unsatisfied requirement NVIDIA_REQUIRE_CUDA" in proc.stderr


def test_require_cuda_against_an_unknown_cuda_version(engine):
    """An index whose CUDA version is unknown (nvidia-smi's ``Not Found``, as an earlier discovery read it
    into the spec) fails every CUDA constraint, ``cuda<12`` included (it held against "version 0"); the
    driver branch's version (535: 12.2) is what the index carries by default."""
    env = ["-e", "NVIDIA_VISIBLE_DEVICES=0", "-e", "NVIDIA_REQUIRE_CUDA=cuda<12.3"]
    with open(engine.index_path, encoding="utf-8") as f:
        original = f.read()
    assert json.loads(original)["cudaVersion"] == "12.2"
    _run(engine, "--runtime=nvidia", *env, IMAGE, "true")
    try:
        for stale in ("Not Found", None):
            index = json.loads(original)
            index["cudaVersion"] = stale
            with open(engine.index_path, "w", encoding="utf-8") as f:
                json.dump(index, f)
            for require in ("cuda<12", "cuda<12.3", "cuda>=11"):
                env[-1] = f"NVIDIA_REQUIRE_CUDA={require}"
                proc = _run(engine, "--runtime=nvidia", *env, IMAGE, "true", check=False)
                assert proc.returncode != 0, (stale, require)
                assert "unsatisfied requirement NVIDIA_REQUIRE_CUDA" in proc.stderr and "CUDA unknown" in proc.stderr
            _run(engine, "--runtime=nvidia", *env, "-e", "NVIDIA_DISABLE_REQUIRE=1", IMAGE, "true")
    finally:
        with open(engine.index_path, "w", encoding="utf-8") as f:
            f.write(original)


def test_loader_finds_the_driver_through_the_written_cache(engine):
    """No ldconfig runs any more: the shim writes the container's ld.so.cache. The container's own loader
    must find libcuda.so.1 there (glibc prints the cache lookup), not by searching default folders."""
    cmd = "LD_DEBUG=libs probe 2>&1"
    out = _run(engine, "--runtime=nvidia", "-e", "NVIDIA_VISIBLE_DEVICES=0", IMAGE, "sh", "-c", cmd).stdout
    lookup = out[out.index("find library=libcuda.so.1") :]
    lookup = lookup[: lookup.index("calling init")] if "calling init" in lookup else lookup
    assert "search cache=/etc/ld.so.cache" in lookup, out
    assert "trying file=/usr/lib/x86_64-linux-gnu/libcuda.so.1" in lookup and "search path=" not in lookup, out
    assert "cuInit=" in out


def test_debug_log_has_one_line_per_gpu_start(engine):
    """debug_log in runtime.json: a GPU start through the real engine adds one line (request, devices, mounts, ms);
    a container that asks for no GPU adds none."""

    def lines():
        if not os.path.exists(engine.debug_log):
            return []
        with open(engine.debug_log, encoding="utf-8") as f:
            return [json.loads(line) for line in f]

    before = len(lines())
    _run(engine, "--gpus", "device=1", IMAGE, "true")
    _run(engine, IMAGE, "true")
    new = lines()[before:]
    assert len(new) == 1, new
    line = new[0]
    assert line["program"] == "gpufleet-container-runtime" and line["devices"] == ["1"]
    assert line["request"] == "NVIDIA_VISIBLE_DEVICES" and line["mounts"] > 0 and line["ms"] > 0
    assert "error" not in line
