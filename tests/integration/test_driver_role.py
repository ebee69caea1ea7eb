# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The driver role on simulated Debian bookworm nodes, for real: Debian's non-free 535 userspace goes
in and out with apt, the role sees it is in a container (no kernel module) and says so, repeats and
check mode change nothing, and a node with no GPU is never touched. The Ubuntu and RHEL paths run only
as unit tests (tests/controller/plugins/plugin_utils/test_driver_plan.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

PLAYBOOK = Path(__file__).parent / "playbooks" / "driver.yml"
FLEET = {
    "nodes": [
        {"name": "gpu-bookworm", "suite": "bookworm", "driver_state": "none", "engines": [], "gpus": 1},
        {"name": "cpu-bookworm", "suite": "bookworm", "engines": [], "gpus": []},
    ]
}
USERSPACE = ["libcuda1", "libnvidia-ml1", "nvidia-smi", "libnvidia-ptxjitcompiler1", "libnvidia-cfg1"]
NVML_LIB = "/usr/lib/x86_64-linux-gnu/nvidia/current/libnvidia-ml.so.535.261.03"
# nvmlInit through the name Debian's package installs; the stub answers DRIVER_NOT_LOADED (9) in state none.
NVML_INIT = (
    "import ctypes; n = ctypes.CDLL('/usr/lib/x86_64-linux-gnu/nvidia/current/libnvidia-ml.so.1');"
    " n.nvmlErrorString.restype = ctypes.c_char_p; rc = n.nvmlInit_v2(); print(rc, n.nvmlErrorString(rc).decode())"
)


def recap(output: str) -> dict[str, dict[str, int]]:
    found = {}
    for host, counts in re.findall(r"^(\S+)\s+:\s+(ok=.*)$", output.split("PLAY RECAP", 1)[1], re.M):
        found[host] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", counts)}
    return found


def installed(node, package: str) -> bool:
    res = node.run(["dpkg-query", "-W", "-f=${db:Status-Abbrev}", package])
    return res.rc == 0 and res.stdout[1:2] == "i"  # "ii", or "hi" when held


def test_driver_role_debian_bookworm(sim_fleet_factory, ansible_playbook):
    fleet = sim_fleet_factory(FLEET, name="driver-role")
    gpu, cpu = fleet.node("gpu-bookworm"), fleet.node("cpu-bookworm")
    cpu_before = cpu.run("dpkg-query -W -f='${Package} ${Version}\\n'; ls /etc/modprobe.d", check=True).stdout

    def play(*args: str):
        res = ansible_playbook(PLAYBOOK, *args, inventory=fleet.inventory)
        assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
        return res.stdout, recap(res.stdout)

    out, counts = play()
    assert counts["gpu-bookworm"]["changed"] > 0 and counts["gpu-bookworm"]["failed"] == 0
    assert "the nvidia kernel module can be neither built nor loaded here" in out
    assert re.search(r"installed 535\.261\.03, loaded none, kernel module unavailable_in_container", out), out[-3000:]
    assert "cpu-bookworm: no NVIDIA GPU on the PCI bus" in out
    for package in USERSPACE:
        assert installed(gpu, package), package
        assert gpu.run(["dpkg-query", "-W", "-f=${Version}", package]).stdout == "535.261.03-1"
    assert not installed(gpu, "nvidia-open-kernel-dkms") and not installed(gpu, "nvidia-kernel-dkms")
    holds = gpu.run("apt-mark showhold", check=True).stdout.split()
    assert set(USERSPACE) <= set(holds)
    assert "blacklist nouveau" in gpu.run("cat /etc/modprobe.d/blacklist-nouveau.conf", check=True).stdout
    # Debian's real library went behind the divert; every name still reaches the stub NVML.
    assert gpu.run(["test", "-s", NVML_LIB + ".real"]).rc == 0
    resolved = gpu.run(["readlink", "-f", "/usr/lib/x86_64-linux-gnu/nvidia/current/libnvidia-ml.so.1"]).stdout
    assert resolved.strip() == NVML_LIB
    assert gpu.run(["grep", "-q", "GPUFLEET_SIM_GPUS_JSON", NVML_LIB]).rc == 0  # the stub, not NVIDIA's library
    assert gpu.run(["python3", "-c", NVML_INIT], check=True).stdout.strip() == "9 Driver Not Loaded"

    out, counts = play()
    assert counts["gpu-bookworm"]["changed"] == 0, out[-4000:]
    out, counts = play("--check")
    assert counts["gpu-bookworm"]["changed"] == 0, out[-4000:]

    out, counts = play("-e", "driver_state=absent")
    assert counts["gpu-bookworm"]["changed"] > 0
    for package in [*USERSPACE, "nvidia-persistenced", "nvidia-alternative"]:
        assert not installed(gpu, package), package
    assert gpu.run(["test", "-e", "/etc/modprobe.d/blacklist-nouveau.conf"]).rc == 1
    assert gpu.run(["test", "-e", NVML_LIB + ".real"]).rc == 1  # the package's file went with it
    assert "installed none" in out

    assert counts["cpu-bookworm"]["changed"] == 0
    cpu_after = cpu.run("dpkg-query -W -f='${Package} ${Version}\\n'; ls /etc/modprobe.d", check=True).stdout
    assert cpu_after == cpu_before
