# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What NVIDIA's users type first: Debian's real ``nvidia-smi`` on the simulated GPU nodes, on the host and in GPU
containers of every engine, and the validate role's judgement of it.

The fleet is the session's ``e2e_fleet`` (``_fleet_e2e.py``, shared with ``test_cdi_e2e.py``): 2 GPUs per node,
``driver_packages: true`` (Debian's 535 on bookworm, 550 on trixie and sid), the host programs installed, the CDI
spec written and the shim registered with docker as runtime ``nvidia``. ``nvidia-smi`` is the packaged binary; in
a container it is the same file, injected by the shim (utility capability) or the CDI spec: the image
(``gpufleet-sim/mini``) has none of its own. The stub NVML answers it (``tests/sim/nvml/nvml_stub.c``), for the
GPUs whose device nodes the container was given.
"""

import re

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.validate.plan import CHECK_SCRIPT, validate_plan
from ansible_collections.gpufleet.nvidia.plugins.module_utils.validate.result import nvidia_smi_gpus, validate_result
from tests.integration._fleet_e2e import IMAGE, SHIM

pytestmark = [pytest.mark.integration]

QUERY = "--query-gpu=index,name,uuid,driver_version,memory.total,pci.bus_id"


@pytest.fixture(scope="module")
def fleet(e2e_fleet):
    return e2e_fleet


def _node(fleet, suite):
    return fleet.node(f"e2e-{suite}")


def _packaged_version(node):
    """The driver version of the installed Debian package: what the stub must report."""
    out = node.run("dpkg-query -W -f '${Version}' libnvidia-ml1", check=True).stdout.strip()
    return out.split(":", 1)[-1].rsplit("-", 1)[0]


def _uuids(node, indexes=None):
    gpus = node.gpus if indexes is None else [node.gpus[i] for i in indexes]
    return [g["uuid"] for g in gpus]


def _run(node, argv, timeout=180):
    res = node.run(argv, timeout=timeout)
    assert res.rc == 0, f"{node.name}: {' '.join(argv)} (rc {res.rc})\n{res.stdout}\n{res.stderr}"
    return res.stdout


def _assert_table(node, out, gpus):
    """The default ``nvidia-smi`` table: the header with the node's driver, one block per GPU given."""
    version = node.desc["driver_version"]
    header = rf"NVIDIA-SMI {re.escape(version)}\s+Driver Version: {re.escape(version)}\s+CUDA Version: "
    assert re.search(header, out), out
    rows = re.findall(r"^\|\s+(\d+)\s+(.+?)\s+(?:On|Off|N/A)\s+\|\s+(\S+)\s+\S+\s+\|", out, re.M)
    assert [(int(i), name, bus) for i, name, bus in rows] == [
        (i, g["name"], g["pci_bus_id"]) for i, g in enumerate(gpus)
    ], out
    assert re.search(r"^\|\s+N/A\s+N/A\s+N/A\s+N/A /\s+N/A\s+\|\s+0MiB /\s+\d+MiB", out, re.M), out
    assert "No running processes found" in out


@pytest.mark.parametrize("suite", ["bookworm", "trixie", "sid"])
def test_host_nvidia_smi_lists_the_simulated_gpus(fleet, suite):
    node = _node(fleet, suite)
    version = _packaged_version(node)
    assert node.desc["driver_version"] == version  # the fleet took the version from the image's package
    binary = node.run("readlink -f /usr/bin/nvidia-smi", check=True).stdout.strip()
    assert binary == "/usr/lib/nvidia/current/nvidia-smi"
    listed = _run(node, ["nvidia-smi", "-L"])
    assert listed.splitlines() == [f"GPU {i}: {g['name']} (UUID: {g['uuid']})" for i, g in enumerate(node.gpus)]
    assert nvidia_smi_gpus(listed) == _uuids(node)
    for fmt, header in (("csv", True), ("csv,noheader", False)):
        out = _run(node, ["nvidia-smi", QUERY, f"--format={fmt}"]).splitlines()
        if header:
            assert out.pop(0) == "index, name, uuid, driver_version, memory.total [MiB], pci.bus_id"
        assert out == [
            f"{i}, {g['name']}, {g['uuid']}, {version}, {g['memory_mib']} MiB, {g['pci_bus_id']}"
            for i, g in enumerate(node.gpus)
        ]
    _assert_table(node, _run(node, ["nvidia-smi"]), node.gpus)
    query = _run(node, ["nvidia-smi", "-q"])
    assert f"Driver Version                            : {version}" in query
    assert f"Attached GPUs                             : {len(node.gpus)}" in query
    for g in node.gpus:
        assert f"GPU UUID                              : {g['uuid']}" in query
    # Unknown to the simulation: N/A, as on boards without the sensor; never an error.
    assert "Function Not Found" not in query and "ERR!" not in query
    assert re.search(r"^\s+GPU Current Temp\s+: N/A$", query, re.M), query


@pytest.mark.parametrize("suite", ["bookworm", "trixie", "sid"])
def test_docker_runtime_nvidia_runs_the_guides_check(fleet, suite):
    """``docker run --rm --runtime=nvidia -e NVIDIA_VISIBLE_DEVICES=all IMAGE nvidia-smi``, as NVIDIA's guides say."""
    node = _node(fleet, suite)
    run = ["docker", "run", "--rm", "--network", "none", "--runtime=nvidia"]
    assert node.run(["docker", "run", "--rm", "--network", "none", IMAGE, "sh", "-c", "command -v nvidia-smi"]).rc != 0
    _assert_table(node, _run(node, [*run, "-e", "NVIDIA_VISIBLE_DEVICES=all", IMAGE, "nvidia-smi"]), node.gpus)
    # Only GPU 1: the container's nvidia-smi lists it alone (as its GPU 0), by its UUID.
    one = _run(node, [*run, "-e", "NVIDIA_VISIBLE_DEVICES=1", IMAGE, "nvidia-smi", "-L"])
    assert one.splitlines() == [f"GPU 0: {node.gpus[1]['name']} (UUID: {node.gpus[1]['uuid']})"], one
    by_uuid = _run(node, [*run, "-e", f"NVIDIA_VISIBLE_DEVICES={node.gpus[0]['uuid']}", IMAGE, "nvidia-smi", "-L"])
    assert nvidia_smi_gpus(by_uuid) == _uuids(node, [0]), by_uuid
    csv = _run(node, [*run, "-e", "NVIDIA_VISIBLE_DEVICES=all", IMAGE, "nvidia-smi", QUERY, "--format=csv,noheader"])
    assert [line.split(", ")[2] for line in csv.splitlines()] == _uuids(node), csv


@pytest.mark.parametrize(
    ("suite", "engine"), [("bookworm", "podman"), ("trixie", "podman"), ("trixie", "docker"), ("sid", "docker")]
)
def test_cdi_device_all_runs_nvidia_smi(fleet, suite, engine):
    """podman 4.3 (its spec at cdiVersion 0.5.0), podman 5.4 and docker 26/28 with native CDI."""
    node = _node(fleet, suite)
    base = [engine, "run", "--rm", "--network", "none"]
    _assert_table(node, _run(node, [*base, "--device", "nvidia.com/gpu=all", IMAGE, "nvidia-smi"]), node.gpus)
    one = _run(node, [*base, "--device", "nvidia.com/gpu=1", IMAGE, "nvidia-smi", "-L"])
    assert nvidia_smi_gpus(one) == _uuids(node, [1]), one


@pytest.mark.parametrize("suite", ["bookworm", "sid"])
def test_containerd_through_the_shim_runs_nvidia_smi(fleet, suite):
    node = _node(fleet, suite)
    shares = ["--cpu-shares", "0"] if suite == "sid" else []
    ctr = ["ctr", "-n", "default", "run", "--rm", *shares, "--runc-binary", SHIM]
    name = f"smi-{suite}"
    out = _run(node, [*ctr, "--env", "NVIDIA_VISIBLE_DEVICES=all", "docker.io/" + IMAGE, name, "nvidia-smi", "-L"])
    assert nvidia_smi_gpus(out) == _uuids(node), out


def _facts(node):
    """The part of ``ansible_facts.nvidia`` validate's filters read, as gpu_facts reports it on this node."""
    return {
        "gpus": [{"minor": g["minor"], "uuid": g["uuid"]} for g in node.gpus],
        "device_nodes": [{"path": "/dev/nvidia-uvm"}],
        "engines": {"docker": {"installed": True, "version": "20.10", "runtimes": ["nvidia", "runc"]}},
    }


def test_validate_judges_the_real_containers_nvidia_smi(fleet):
    """The validate role's check script through the real engine, judged by its filter: it passes with every GPU,
    and fails, naming the GPU, when the container lacks one it should have (a container given only GPU 1, or the
    filter asked with a GPU the host does not have)."""
    node = _node(fleet, "bookworm")
    plan = validate_plan(_facts(node), image=IMAGE, pull="never", suffix="smi")
    assert [(c["engine"], c["mode"]) for c in plan] == [("docker", "runtime")]
    assert plan[0]["argv"][-1] == CHECK_SCRIPT
    res = node.run(plan[0]["argv"], timeout=180)
    result = {"rc": res.rc, "stdout": res.stdout, "stderr": res.stderr, "delta": "0:00:01.000000"}
    fact = validate_result(plan, [result], device_nodes=["/dev/nvidiactl"], gpu_uuids=_uuids(node))
    assert fact["passed"], fact
    check = fact["engines"]["docker"]["checks"][0]
    assert check["nvidia_smi_gpus"] == _uuids(node) and "nvidia-smi -L lists 2 GPU(s)" in check["message"]
    # The filter asked with a GPU this host does not have: that GPU is named as missing.
    ghost = "GPU-00000000-0000-4000-8000-000000000000"
    wrong = validate_result(plan, [result], device_nodes=["/dev/nvidiactl"], gpu_uuids=[*_uuids(node), ghost])
    assert wrong["failed_engines"] == ["docker"] and f"missing {ghost}" in wrong["engines"]["docker"]["message"]
    # A container that was given GPU 1 only, judged as the role judges one that asked for all: GPU 0 is missing.
    argv = [a if a != "NVIDIA_VISIBLE_DEVICES=all" else "NVIDIA_VISIBLE_DEVICES=1" for a in plan[0]["argv"]]
    assert argv != plan[0]["argv"]
    res = node.run(argv, timeout=180)
    short = {"rc": res.rc, "stdout": res.stdout, "stderr": res.stderr, "delta": "0:00:01.000000"}
    lacking = validate_result(plan, [short], device_nodes=["/dev/nvidiactl"], gpu_uuids=_uuids(node))
    message = lacking["engines"]["docker"]["message"]
    assert not lacking["passed"], lacking
    assert f"nvidia-smi -L lists 1 GPU(s), expected 2: missing {node.gpus[0]['uuid']}" in message, message
