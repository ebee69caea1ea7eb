# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What NVIDIA's guides tell users to type, on the simulated GPU nodes after the native toolkit is installed.

The fleet is the session's ``e2e_fleet`` (``_fleet_e2e.py``: bookworm with docker 20.10 and containerd 1.6, trixie
with docker 26 and containerd 1.7, sid with docker 28 and containerd 2.1; 2 GPUs each; the host programs installed
from this working tree by the toolkit role's installer, the CDI spec written, runtime ``nvidia`` = the shim).

* ``nvidia-container-cli info`` / ``list`` / ``--version`` / a bad flag, compared with the node's GPUs;
* ``NV_GPU=1 nvidia-docker run ...`` sees exactly GPU 1's device node;
* ``ctr run --gpus 0 ...`` through plain runc fails at once with the one line of ``nvidia-container-cli
  configure``, and the command that line names (``ctr run --runc-binary <shim> --gpus 0 ...``) works and sees GPU 0.
"""

import re
from pathlib import Path

import pytest

from tests.integration._fleet_e2e import IMAGE, SHIM

# galaxy.yml's version: what `nvidia-docker version` and `nvidia-container-cli --version` print
VERSION = re.search(r"(?m)^version: (\S+)$", (Path(__file__).resolve().parents[2] / "galaxy.yml").read_text()).group(1)

pytestmark = [pytest.mark.integration]

CLI = "/usr/local/bin/nvidia-container-cli"
CTR_IMAGE = "docker.io/" + IMAGE
# libnvidia-container src/driver.c: nvmlBrandType_t -> its label (the sim's brands by name)
CLI_BRAND = {"tesla": "Tesla", "quadro": "Quadro", "nvs": "NVS", "geforce": "GeForce", "titan": "TITAN"}


@pytest.fixture(scope="module")
def fleet(e2e_fleet):
    return e2e_fleet


@pytest.fixture(scope="module")
def nodes(fleet):
    return [fleet.node(name) for name in fleet.nodes]


def _bus_location(pci_bus_id):
    domain, bus, rest = pci_bus_id.split(":")
    return f"{int(domain, 16):08x}:{int(bus, 16):02x}:{int(rest.split('.')[0], 16):02x}.0"


def test_info_is_nvidias_format_with_the_nodes_gpus(nodes):
    for node in nodes:
        res = node.run([CLI, "info"], check=True)
        expected = f"NVRM version:   {node.desc['driver_version']}\nCUDA version:   {node.desc['cuda_version']}\n"
        gpus = sorted(node.desc["gpus"], key=lambda g: g["index"])
        for i, gpu in enumerate(gpus):
            expected += (
                f"\nDevice Index:   {i}\nDevice Minor:   {gpu['minor']}\nModel:          {gpu['name']}\n"
                f"Brand:          {CLI_BRAND.get(gpu['brand'], 'Unknown')}\nGPU UUID:       {gpu['uuid']}\n"
                f"Bus Location:   {_bus_location(gpu['pci_bus_id'])}\nArchitecture:   {gpu['compute_capability']}\n"
            )
        assert res.stdout == expected, f"{node.name}:\n{res.stdout}"
        csv = node.run([CLI, "info", "--csv"], check=True).stdout.splitlines()
        assert csv[:2] == ["NVRM version,CUDA version", f"{node.desc['driver_version']},{node.desc['cuda_version']}"]
        assert len(csv) == 4 + len(gpus)


def test_list_names_files_that_exist(nodes):
    for node in nodes:
        version = node.desc["driver_version"]
        lines = node.run([CLI, "list"], check=True).stdout.splitlines()
        assert lines[:1] == ["/dev/nvidiactl"], lines
        assert "/dev/nvidia0" in lines and "/dev/nvidia1" in lines
        assert any(re.search(rf"/libcuda\.so\.{re.escape(version)}$", line) for line in lines), lines
        assert any(re.search(rf"/libnvidia-ml\.so\.{re.escape(version)}$", line) for line in lines), lines
        assert any(line.endswith("/nvidia-smi") for line in lines), lines
        assert len(lines) == len(set(lines))
        missing = node.run(["sh", "-c", 'for p in "$@"; do [ -e "$p" ] || echo "$p"; done', "sh", *lines]).stdout
        assert missing == "", f"{node.name}: listed but missing: {missing}"
        # filters: one device; compute libraries only
        one = node.run([CLI, "list", "--device=1"], check=True).stdout.splitlines()
        assert "/dev/nvidia1" in one and "/dev/nvidia0" not in one and not any(".so" in p for p in one)
        compute = node.run([CLI, "list", "--libraries", "--compute"], check=True).stdout.splitlines()
        assert compute and any("/libcuda.so." in p for p in compute)
        assert not any("libnvidia-ml" in p or p.startswith("/dev/") for p in compute), compute


def test_version_and_bad_flag(nodes):
    node = nodes[0]
    out = node.run([CLI, "--version"], check=True).stdout.splitlines()
    assert out[0].startswith("cli-version: ") and "gpufleet.nvidia" in out[0]
    assert out[1].startswith("lib-version: ") and "not NVIDIA's" in out[1]
    res = node.run([CLI, "list", "--bogus"])
    assert res.rc == 1 and res.stdout == ""
    assert (
        res.stderr
        == "nvidia-container-cli list: unrecognized option '--bogus' (try 'nvidia-container-cli list --help')\n"
    )
    res = node.run([CLI, "frobnicate"])
    assert res.rc == 1 and res.stderr.startswith("nvidia-container-cli: unknown command 'frobnicate'")


def _gpu_nodes_seen(out):
    return sorted(re.findall(r"/dev/nvidia\d+", out))


def test_nvidia_docker_nv_gpu(nodes):
    for node in nodes:
        res = node.run(
            "NV_GPU=1 nvidia-docker run --rm --network none " + IMAGE + " sh -c 'ls /dev/nvidia*'", timeout=180
        )
        assert res.rc == 0, f"{node.name}: {res.stdout}{res.stderr}"
        assert _gpu_nodes_seen(res.stdout) == ["/dev/nvidia1"], f"{node.name}: {res.stdout}"
        assert "/dev/nvidiactl" in res.stdout
        version = node.run("nvidia-docker version --format '{{.Client.Version}}'", check=True).stdout.splitlines()
        assert version[0] == f"NVIDIA Docker: {VERSION} (gpufleet.nvidia)" and re.match(r"\d+\.", version[1]), version


def _ctr_version(node):
    out = node.run("ctr --version", check=True).stdout
    return re.search(r"(\d+)\.(\d+)", out.split(None, 2)[-1]).group(0)


def test_ctr_run_gpus(nodes):
    for node in nodes:
        version = _ctr_version(node)
        # ctr 2.x asks for 1024 CPU shares by default, which the sim node's cgroup cannot give (see roles/validate)
        shares = ["--cpu-shares", "0"] if not version.startswith("1.") else []
        name = f"gpufleet-cli-{node.name}"
        typed = ["ctr", "run", "--rm", *shares, "--gpus", "0", CTR_IMAGE, name, "sh", "-c", "ls /dev/nvidia*"]
        res = node.run(["timeout", "120", *typed], timeout=180)
        node.run(["ctr", "c", "rm", name])  # a failed start can leave the container record
        assert res.rc != 0, f"{node.name} (containerd {version}): ctr --gpus through plain runc passed:\n{res.stdout}"
        lines = [line for line in (res.stdout + res.stderr).splitlines() if "nvidia-container-cli configure" in line]
        assert lines, f"{node.name} (containerd {version}): {res.stdout}{res.stderr}"
        match = re.search(r"ctr run --runc-binary (\S+) --gpus 0 IMAGE ID \[COMMAND\]", lines[0])
        assert match and match.group(1) == SHIM, lines[0]
        # the command the line names, as typed
        named = ["ctr", "run", "--rm", *shares, "--runc-binary", SHIM, "--gpus", "0", CTR_IMAGE, name]
        res = node.run(["timeout", "120", *named, "sh", "-c", "ls /dev/nvidia*"], timeout=180)
        assert res.rc == 0, f"{node.name} (containerd {version}): {res.stdout}{res.stderr}"
        assert _gpu_nodes_seen(res.stdout) == ["/dev/nvidia0"] and "/dev/nvidiactl" in res.stdout, res.stdout


def test_ctr_hook_text_in_the_image_env_is_no_request(nodes):
    """What an image controls in config.json (its env) can carry the hook's text; it must not become a GPU request
    (the shim reads hooks only, which ctr writes). The text also makes the shim's launcher start Python."""
    node = nodes[0]
    fake = "containerd oci-hook -- /usr/local/bin/nvidia-container-cli configure --device=all --compute /"
    name = "gpufleet-cli-crafted"
    argv = ["ctr", "run", "--rm", "--runc-binary", SHIM, "--env", f"X={fake}", CTR_IMAGE, name]
    res = node.run(["timeout", "120", *argv, "sh", "-c", "ls /dev; echo ok"], timeout=180)
    assert res.rc == 0 and res.stdout.rstrip().endswith("ok"), f"{res.stdout}{res.stderr}"
    assert "nvidia" not in res.stdout, res.stdout
