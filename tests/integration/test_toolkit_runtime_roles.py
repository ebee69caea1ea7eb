# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The toolkit and runtime roles on one simulated GPU node (bookworm: docker 20.10, containerd 1.6, podman 4.3,
Debian's real 535 userspace), through ansible-playbook.

In order, on a fresh node: ``--check`` reports changes and writes nothing; the real run installs the native
toolkit, registers the ``nvidia`` runtime with docker and containerd, writes the CDI spec, the boot-time refresh
unit, the /dev/char links and the udev rule; the engines list the runtime; a GPU container runs through docker with
``NVIDIA_VISIBLE_DEVICES=0`` and sees GPU 0 and ``libcuda.so.1``; a second run changes nothing; the refresh program
regenerates a spec whose stamp is not the installed driver's, by hand and at boot (the node restarted).
"""

import json
import os
import re
import subprocess
import time

import pytest

from tests.integration._host_state import assert_unchanged, snapshot
from tests.integration._tomlkit import install_tomlkit

pytestmark = pytest.mark.integration

HERE = os.path.dirname(os.path.abspath(__file__))
PLAYBOOK = os.path.join(HERE, "playbooks", "toolkit_runtime.yml")
FLEET = {
    "nodes": [
        {
            "name": "tk-bookworm",
            "suite": "bookworm",
            "driver_state": "loaded",
            "driver_packages": True,
            "engines": ["docker", "containerd", "podman"],
            "gpus": 2,
        }
    ]
}
IMAGE = "gpufleet-sim/mini:latest"
PROGRAMS = (
    "gpufleet-container-runtime",
    "gpufleet-cdi-hook",
    "nvidia-container-runtime-hook",
    "gpufleet-cdi-refresh",
    "gpufleet-dev-char-links",
    "nvidia-container-cli",
    "nvidia-docker",
    "gpufleet-nvidia-devices",
)
UNIT = "/etc/systemd/system/gpufleet-cdi-refresh.service"
UDEV = "/etc/udev/rules.d/71-gpufleet-nvidia-dev-char.rules"
SHIM_CONFIG = "/etc/gpufleet/runtime.json"


def _recap(proc):
    m = re.search(r"tk-bookworm\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", proc.stdout)
    assert m, proc.stdout[-3000:] + proc.stderr[-2000:]
    return {"ok": int(m.group(1)), "changed": int(m.group(2)), "failed": int(m.group(4))}


def _facts(proc):
    m = re.search(r'"msg": "(\{\\"gpufleet_toolkit.*\})"', proc.stdout)
    assert m, proc.stdout[-3000:]
    return json.loads(json.loads(f'"{m.group(1)}"'))


@pytest.fixture(scope="module")
def node_runs(sim_fleet_factory, ansible_playbook):
    fleet = sim_fleet_factory(FLEET, name="i8tk")
    node = fleet.node("tk-bookworm")
    install_tomlkit(node)
    timings = {}
    runs = {"inventory": fleet.inventory, "before_check": snapshot(node)}
    for label, args in (("check", ("--check", "--diff")), ("apply", ()), ("again", ())):
        start = time.monotonic()
        runs[label] = ansible_playbook(PLAYBOOK, *args, inventory=fleet.inventory)
        timings[label] = round(time.monotonic() - start, 1)
        if label == "check":
            runs["after_check"] = {
                p: node.run(["test", "-e", p]).rc == 0
                for p in ["/usr/local/bin/" + n for n in PROGRAMS] + ["/etc/cdi/nvidia.yaml", UNIT, UDEV, SHIM_CONFIG]
            }
            runs["after_check"]["docker runtimes"] = node.run(
                "docker info --format '{{json .Runtimes}}'", check=True
            ).stdout
            runs["after_check_state"] = snapshot(node)
    print("toolkit/runtime role timings (s):", timings)
    return node, runs


def test_check_mode_on_a_fresh_node_reports_changes_and_writes_nothing(node_runs):
    _node, runs = node_runs
    recap = _recap(runs["check"])
    assert recap["failed"] == 0, runs["check"].stdout[-4000:]
    assert recap["changed"] > 0
    assert not any(v is True for k, v in runs["after_check"].items() if k != "docker runtimes"), runs["after_check"]
    assert "nvidia" not in runs["after_check"]["docker runtimes"]
    # the engines' and CDI's configuration trees and the packages: byte for byte as they were
    assert_unchanged(runs["before_check"], runs["after_check_state"], "--check --diff of the toolkit and runtime roles")


def test_apply_publishes_the_facts_and_installs_everything(node_runs):
    node, runs = node_runs
    recap = _recap(runs["apply"])
    assert recap["failed"] == 0 and recap["changed"] > 0, runs["apply"].stdout[-4000:]
    facts = _facts(runs["apply"])
    toolkit, runtime = facts["gpufleet_toolkit"], facts["gpufleet_runtime"]
    assert toolkit["provider"] == "native"
    assert toolkit["runtime_path"] == "/usr/local/bin/gpufleet-container-runtime"
    assert toolkit["hook_path"] == "/usr/local/bin/gpufleet-cdi-hook"
    assert sorted(toolkit["programs"]) == sorted("/usr/local/bin/" + n for n in PROGRAMS)
    assert re.fullmatch(r"gpufleet-[0-9a-f]{12}", toolkit["version"])
    # not in kube_nodes: NVIDIA's behaviour (an image's own NVIDIA_VISIBLE_DEVICES counts), in the shim's config
    assert toolkit["accept_envvar_unprivileged"] is True and toolkit["accept_volume_mounts"] is False
    assert toolkit["accept_cdi_annotations_unprivileged"] is True  # docker/podman hosts: --annotation as before
    assert json.loads(node.run(["cat", SHIM_CONFIG], check=True).stdout) == {
        "accept_cdi_annotations_unprivileged": True,
        "accept_envvar_unprivileged": True,
        "accept_volume_mounts": False,
    }
    assert node.run(["stat", "-c", "%U:%G %a", SHIM_CONFIG, "/etc/gpufleet"], check=True).stdout.split("\n")[:2] == [
        "root:root 644",
        "root:root 755",
    ]
    for name in PROGRAMS:
        assert node.run(["test", "-x", "/usr/local/bin/" + name]).rc == 0, name
    # what NVIDIA's guides have users type first works after the role
    info = node.run(["nvidia-container-cli", "info"], check=True).stdout
    assert info.startswith("NVRM version:   535.261.03\nCUDA version:   12.2\n\nDevice Index:   0\n"), info
    engines = runtime["engines"]
    assert set(engines) == {"docker", "containerd", "podman"}, engines
    assert engines["docker"]["registered"] and not engines["docker"]["cdi"]  # docker 20.10 has no CDI
    assert engines["containerd"]["registered"] and not engines["containerd"]["cdi"]  # 1.6 neither
    assert engines["podman"] == {**engines["podman"], "registered": False, "cdi": True}
    assert runtime["cdi_spec"]["driver_version"] == "535.261.03"
    assert {"0", "1", "all"} <= set(runtime["cdi_spec"]["devices"])
    # 2 GPUs + nvidiactl + nvidia-modeset + uvm pair
    assert runtime["dev_char_links"] == 6
    for minor in (0, 1, 255):
        assert node.run(["readlink", f"/dev/char/195:{minor}"]).stdout.strip() == (
            f"../nvidia{minor}" if minor != 255 else "../nvidiactl"
        )
    assert 'DEVPATH=="/bus/pci/drivers/nvidia"' in node.run(["cat", UDEV], check=True).stdout
    assert node.run(["systemctl", "is-enabled", "gpufleet-cdi-refresh.service"]).stdout.strip() == "enabled"


def test_engines_list_the_nvidia_runtime(node_runs):
    node, _runs = node_runs
    runtimes = json.loads(node.run("docker info --format '{{json .Runtimes}}'", check=True).stdout)
    assert runtimes["nvidia"]["path"] == "/usr/local/bin/gpufleet-container-runtime"
    dump = node.run("containerd config dump", check=True).stdout
    assert re.search(r"runtimes\.nvidia\]", dump) and 'BinaryName = "/usr/local/bin/gpufleet-container-runtime"' in dump


def test_gpu_container_through_docker(node_runs):
    node, _runs = node_runs
    node.run(f"gpufleet-sim-mini-image {IMAGE}", check=True, timeout=300)
    res = node.run(
        "docker run --rm --network none --runtime nvidia -e NVIDIA_VISIBLE_DEVICES=0 "
        f"{IMAGE} sh -c 'ls /dev; echo ---; ldconfig -p'",
        timeout=180,
    )
    assert res.rc == 0, res.stderr
    devs, cache = res.stdout.split("---\n")
    assert {d for d in devs.split() if re.fullmatch(r"nvidia\d+", d)} == {"nvidia0"}, devs
    assert "nvidiactl" in devs.split()
    assert re.search(r"libcuda\.so\.1 \(libc6,x86-64\) => /usr/lib/x86_64-linux-gnu/libcuda\.so\.1", cache), cache


def test_nvidia_is_the_default_runtime_and_gpus_works_as_typed(node_runs):
    """runtime_set_as_default (on by default): docker's and containerd's CRI default is nvidia, so the command of
    NVIDIA's guides needs no --runtime; a container that asks for no GPU still gets none."""
    node, runs = node_runs
    engines = _facts(runs["apply"])["gpufleet_runtime"]["engines"]
    assert engines["docker"]["default"] and engines["containerd"]["default"] and not engines["podman"]["default"]
    assert node.run("docker info --format '{{.DefaultRuntime}}'", check=True).stdout.strip() == "nvidia"
    dump = node.run("containerd config dump", check=True).stdout
    assert re.search(r'^\s*default_runtime_name = "nvidia"', dump, re.M), dump
    node.run(f"gpufleet-sim-mini-image {IMAGE}", check=True, timeout=300)
    script = "sh -c 'ls /dev; echo ---; ldconfig -p'"
    res = node.run(f"docker run --rm --network none --gpus all {IMAGE} {script}", timeout=180)
    assert res.rc == 0, res.stderr
    devs, cache = res.stdout.split("---\n")
    assert {"nvidia0", "nvidia1", "nvidiactl"} <= set(devs.split()), devs
    assert "libcuda.so.1" in cache and "libnvidia-ml.so.1" in cache, cache
    res = node.run(f"docker run --rm --network none {IMAGE} {script}", timeout=180)
    assert res.rc == 0, res.stderr
    devs, cache = res.stdout.split("---\n")
    assert not [d for d in devs.split() if d.startswith("nvidia")] and "libcuda" not in cache, res.stdout


def test_second_run_changes_nothing(node_runs):
    _node, runs = node_runs
    recap = _recap(runs["again"])
    assert recap == {**recap, "changed": 0, "failed": 0}, runs["again"].stdout[-4000:]


def test_default_back_to_false(node_runs, ansible_playbook):
    """runtime_set_as_default: false after true takes our default away again (docker: default-runtime removed,
    containerd's drop-in rewritten without it), keeps the runtime registered, and a second run changes nothing."""
    node, runs = node_runs
    off = ansible_playbook(PLAYBOOK, "-e", "runtime_set_as_default=false", inventory=runs["inventory"])
    recap = _recap(off)
    assert recap["failed"] == 0 and recap["changed"] > 0, off.stdout[-4000:]
    engines = _facts(off)["gpufleet_runtime"]["engines"]
    assert not engines["docker"]["default"] and "default-runtime: 'nvidia' removed" in engines["docker"]["message"]
    daemon = json.loads(node.run(["cat", "/etc/docker/daemon.json"], check=True).stdout)
    assert "default-runtime" not in daemon and daemon["runtimes"]["nvidia"]
    assert node.run("docker info --format '{{.DefaultRuntime}}'", check=True).stdout.strip() == "runc"
    dump = node.run("containerd config dump", check=True).stdout
    assert not re.search(r'^\s*default_runtime_name = "nvidia"', dump, re.M), dump
    res = node.run(f"docker run --rm --network none --runtime nvidia --gpus all {IMAGE} ls /dev", timeout=180)
    assert res.rc == 0 and "nvidia0" in res.stdout.split(), res.stderr
    again = ansible_playbook(PLAYBOOK, "-e", "runtime_set_as_default=false", inventory=runs["inventory"])
    assert _recap(again) == {**_recap(again), "changed": 0, "failed": 0}, again.stdout[-4000:]


def test_refresh_regenerates_a_stale_spec(node_runs):
    node, _runs = node_runs
    node.run("sed -i 's/535.261.03/530.30.02/' /etc/cdi/nvidia.yaml", check=True)
    out = json.loads(node.run("gpufleet-cdi-refresh", check=True).stdout)
    assert out["changed"] and out["stamp"] == "530.30.02" and out["installed"] == "535.261.03", out
    assert "530.30.02" not in node.run("cat /etc/cdi/nvidia.yaml", check=True).stdout
    assert not json.loads(node.run("gpufleet-cdi-refresh", check=True).stdout)["changed"]


def test_boot_refreshes_a_stale_spec_and_the_links(node_runs):
    """A reboot (the node container restarted: systemd boots again) with a spec stamped for another driver
    and a /dev/char link gone: gpufleet-cdi-refresh.service puts both right before the engines start."""
    node, _runs = node_runs
    node.run("sed -i 's/535.261.03/530.30.02/' /etc/cdi/nvidia.yaml && rm /dev/char/195:0", check=True)
    subprocess.run(["docker", "restart", node.container], check=True, capture_output=True, timeout=120)
    state = node.wait_booted()  # degraded: nvidia-persistenced fails (no kernel driver)
    res = node.run("systemctl show -p Result -p ExecMainStartTimestampMonotonic gpufleet-cdi-refresh")
    unit = res.stdout
    assert "Result=success" in unit and "ExecMainStartTimestampMonotonic=0" not in unit, (res, state)  # ran, this boot
    assert "530.30.02" not in node.run("cat /etc/cdi/nvidia.yaml", check=True).stdout
    assert node.run(["readlink", "/dev/char/195:0"]).stdout.strip() == "../nvidia0"
