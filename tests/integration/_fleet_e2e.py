# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The end-to-end GPU fleet shared by ``test_cdi_e2e.py`` and ``test_security_e2e.py`` (fixture ``e2e_fleet``).

One fleet for the whole session (CI time is limited): ``driver_packages: true``, driver ``loaded``, 2 GPUs each:

* ``e2e-bookworm``: docker 20.10 (runtime ``nvidia`` -> the shim), containerd 1.6, podman 4.3; driver 535;
* ``e2e-trixie``: docker 26 (runtime ``nvidia`` and native CDI), containerd 1.7, podman 5.4; driver 550;
* ``e2e-sid``: docker 28 (runtime ``nvidia`` and native CDI), containerd 2.1 (``ctr --runc-binary``); driver 550.

On each node the host programs are installed from this working tree by ``tests/tools/install_host_programs.py``
(the same ``hostprog.install.install`` the toolkit role uses), ``gpufleet.nvidia.cdi_spec`` and
``gpufleet.nvidia.container_runtime`` run through ansible-playbook, the libcuda probe and the NVML script
are put under ``/usr/local/libexec/gpufleet-e2e/``, and ``gpufleet-sim-mini-image --python`` loads
``gpufleet-sim/mini:latest`` into every engine of the node.
"""

from __future__ import annotations

import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[2]

E2E_FLEET = {
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
        {
            "name": "e2e-sid",
            "suite": "sid",
            "driver_state": "loaded",
            "driver_packages": True,
            "gpus": 2,
        },
    ]
}
IMAGE = "gpufleet-sim/mini:latest"
SHIM = "/usr/local/bin/gpufleet-container-runtime"
HOOK = "/usr/local/bin/gpufleet-cdi-hook"
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


def prepare(fleet: Any, ansible_playbook: Callable[..., subprocess.CompletedProcess], work: Path) -> dict[str, float]:
    """Install and configure everything on every node of ``fleet`` (nodes in parallel); -> timings (seconds)."""
    timings: dict[str, float] = {}
    start = time.monotonic()
    probe = work / "probe"
    (work / "probe.c").write_text(PROBE_C)
    # Dynamically linked against this machine's glibc (bookworm 2.36, the oldest of the suites).
    subprocess.run(["gcc", "-O2", "-o", str(probe), str(work / "probe.c")], check=True)

    def prepare_node(node: Any) -> None:
        node.install_host_programs()
        node.put(PROBE, probe.read_bytes(), 0o755)
        node.put(NVML, NVML_PY)
        node.run(f"gpufleet-sim-mini-image {IMAGE} --python", check=True, timeout=300)

    with ThreadPoolExecutor(len(fleet.nodes)) as pool:
        list(pool.map(prepare_node, [fleet.node(n) for n in fleet.nodes]))
    timings["nodes"] = time.monotonic() - start
    playbook = work / "site.yml"
    playbook.write_text(PLAYBOOK)
    proc = ansible_playbook(playbook, inventory=fleet.inventory)
    if proc.returncode != 0:
        raise AssertionError("e2e fleet preparation failed:\n" + proc.stdout[-4000:] + proc.stderr[-2000:])
    timings["playbook"] = time.monotonic() - start - timings["nodes"]
    return timings
