# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The shim on a container in a user namespace (``linux.uidMappings`` in config.json).

What a Kubernetes pod with ``hostUsers: false`` hands the runtime (containerd 2 / CRI-O write the pod's
``linux.uidMappings``/``gidMappings`` and a ``user`` namespace into the OCI spec), and what docker's ``userns-remap``
and ``ctr run --uidmap`` write. The shim injects the GPUs as for any container (device nodes, mounts; runc and crun
bind-mount device nodes in a user namespace, where mknod is not allowed) but leaves ``gpufleet-cdi-hook`` to run
inside the user namespace, so the cache, links and folders it writes belong to the container's root
(docs/security.md, "User namespaces"; end to end in tests/integration/test_userns.py).
"""

import json
import os
import subprocess
import sys

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.hostprog import install as _host_programs
from ansible_collections.gpufleet.nvidia.plugins.module_utils.hostprog.shim import inline_hook

LIBDIR = "/usr/lib/x86_64-linux-gnu"
# A pod with hostUsers: false on containerd 2 (its first range of 65536 ids at a multiple of 65536).
USERNS = {
    "uidMappings": [{"containerID": 0, "hostID": 1 << 20, "size": 65536}],
    "gidMappings": [{"containerID": 0, "hostID": 1 << 20, "size": 65536}],
    "namespaces": [{"type": "pid"}, {"type": "mount"}, {"type": "user"}],
}
HOOK_ARGS = [
    "gpufleet-cdi-hook",
    "apply",
    "--folder",
    LIBDIR,
    "--library",
    f"x86_64::libcuda.so.1::{LIBDIR}/libcuda.so.1.1",
]


@pytest.fixture
def shim(tmp_path):
    """The installed shim with a fake runc, an index with one GPU, the driver's mount and our hook; -> run(config)
    returning (process, the config.json runc got, the bundle's rootfs)."""
    bindir, libdir = tmp_path / "bin", tmp_path / "lib"
    runtime = tmp_path / "fake-runc"
    runtime.write_text("#!/bin/sh\nexit 0\n")
    runtime.chmod(0o755)
    _host_programs.install(str(bindir), str(libdir), python=sys.executable, runtime=str(runtime))
    dev = tmp_path / "dev"
    dev.mkdir()
    for name, minor in (("nvidia0", 0), ("nvidiactl", 255)):
        os.mknod(str(dev / name), 0o666 | 0o020000, os.makedev(195, minor))
    hook = {"hookName": "createContainer", "path": str(bindir / "gpufleet-cdi-hook"), "args": HOOK_ARGS}
    index = {
        "gpufleetIndex": 1,
        "driverVersion": "550.163.01",
        "cudaVersion": "12.4",
        "capabilities": ["utility", "compute"],
        "devices": {"0": {"deviceNodes": [{"path": "/dev/nvidia0", "hostPath": str(dev / "nvidia0")}]}},
        "aliases": {},
        "containerEdits": {
            "deviceNodes": [{"path": "/dev/nvidiactl", "hostPath": str(dev / "nvidiactl")}],
            "mounts": [{"hostPath": "/etc/os-release", "containerPath": f"{LIBDIR}/libcuda.so.1.1", "options": ["ro"]}],
            "hooks": [hook],
        },
    }
    (tmp_path / "index.json").write_text(json.dumps(index))
    (tmp_path / "runtime.json").write_text(json.dumps({"runtime": str(runtime), "index": str(tmp_path / "index.json")}))
    bundle = tmp_path / "bundle"
    (bundle / "rootfs" / "etc").mkdir(parents=True)

    def run(config):
        (bundle / "config.json").write_text(json.dumps({"root": {"path": "rootfs"}, **config}))
        env = {"PATH": "/usr/bin:/bin", "GPUFLEET_RUNTIME_CONFIG": str(tmp_path / "runtime.json")}
        proc = subprocess.run(
            [str(bindir / "gpufleet-container-runtime"), "create", "--bundle", str(bundle), "c1"],
            env=env,
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        return proc, json.loads((bundle / "config.json").read_text()), bundle / "rootfs"

    return run


def _pod(linux):
    """A pod's container as the CRI writes it: the device plugin's CDI annotation is the allocation."""
    return {
        "process": {"env": ["PATH=/bin"], "args": ["sh"]},
        "annotations": {"cdi.k8s.io/nvidia-device-plugin_0": "nvidia.com/gpu=0"},
        "linux": {**linux, "resources": {"devices": [{"allow": False, "access": "rwm"}]}},
    }


def test_pod_in_a_user_namespace_gets_its_gpu_and_the_hook_runs_inside(shim):
    """hostUsers: false: devices and mounts injected; the hook entry stays for runc to run in the user namespace;
    nothing is written into the root from the host (it would belong to the unmapped host root, ``nobody``)."""
    proc, config, rootfs = shim(_pod(USERNS))
    assert proc.returncode == 0, proc.stderr
    assert [d["path"] for d in config["linux"]["devices"]] == ["/dev/nvidiactl", "/dev/nvidia0"]
    assert [m["destination"] for m in config["mounts"]] == [f"{LIBDIR}/libcuda.so.1.1"]
    hooks = config["hooks"]["createContainer"]
    assert [os.path.basename(h["path"]) for h in hooks] == ["gpufleet-cdi-hook"] and hooks[0]["args"] == HOOK_ARGS
    assert config["linux"]["uidMappings"] == USERNS["uidMappings"]  # the mappings are the engine's, untouched
    assert config["linux"]["gidMappings"] == USERNS["gidMappings"]
    assert sorted(os.listdir(str(rootfs / "etc"))) == []  # no ld.so.cache, no ld.so.conf.d from the host side
    assert config["annotations"]["gpufleet.nvidia/injected"] == "0"


def test_same_pod_without_a_user_namespace_is_prepared_by_the_shim(shim):
    """The control: without uidMappings the shim does the hook's work itself and drops the entry."""
    proc, config, rootfs = shim(_pod({"namespaces": [{"type": "pid"}, {"type": "mount"}]}))
    assert proc.returncode == 0, proc.stderr
    assert [d["path"] for d in config["linux"]["devices"]] == ["/dev/nvidiactl", "/dev/nvidia0"]
    assert "hooks" not in config
    assert sorted(os.listdir(str(rootfs / "etc"))) == ["ld.so.cache", "ld.so.conf.d"]


def test_inline_hook_leaves_a_user_namespace_alone(tmp_path):
    (tmp_path / "rootfs").mkdir()
    hooks = {"createContainer": [{"path": "/usr/local/bin/gpufleet-cdi-hook", "args": HOOK_ARGS}]}
    config = {"root": {"path": "rootfs"}, "linux": dict(USERNS), "hooks": json.loads(json.dumps(hooks))}
    assert inline_hook(config, str(tmp_path)) is False
    assert config["hooks"] == hooks and os.listdir(str(tmp_path / "rootfs")) == []
