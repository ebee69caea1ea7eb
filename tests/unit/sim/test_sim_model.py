# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The pure parts of the simulated fleet (tests/sim): fleet validation, inventory, sysfs fixtures."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.sim import images, pcitree  # noqa: E402
from tests.sim.inventory import render_inventory  # noqa: E402
from tests.sim.model import (  # noqa: E402
    FleetError,
    load_fleet,
    node_config,
    normalize_bus_id,
    sysfs_bus_id,
    validate_fleet,
)


def fleet(*nodes):
    return validate_fleet({"nodes": list(nodes)})


def test_default_fleet_is_valid():
    nodes = load_fleet(ROOT / "tests/sim/fleets/default.yml")
    assert [(n["name"], n["suite"], len(n["gpus"])) for n in nodes] == [
        ("gpu-bookworm", "bookworm", 2),
        ("gpu-trixie", "trixie", 1),
        ("cpu-sid", "sid", 0),
    ]
    assert nodes[0]["driver_state"] == "loaded" and nodes[2]["driver_state"] == "none"
    assert nodes[0]["driver_version"] == "535.261.03"
    assert nodes[1]["engines"] == ["docker", "containerd", "podman"]


def test_gpu_defaults_are_filled_and_stable():
    (node,) = fleet({"name": "n1", "gpus": [{"model": "T4"}, {}]})
    t4, a100 = node["gpus"]
    assert t4["name"] == "Tesla T4" and t4["mig_mode"] is None and t4["minor"] == 0
    assert a100["name"] == "NVIDIA A100-SXM4-40GB" and a100["mig_mode"] == "disabled" and a100["minor"] == 1
    assert t4["pci_bus_id"] == "00000000:17:00.0" and a100["pci_bus_id"] == "00000000:37:00.0"
    assert t4["audio"] and not a100["audio"]
    (again,) = fleet({"name": "n1", "gpus": [{"model": "T4"}, {}]})
    assert again["gpus"][0]["uuid"] == t4["uuid"] != a100["uuid"]
    (counted,) = fleet({"name": "n2", "gpus": 3})
    assert len(counted["gpus"]) == 3


@pytest.mark.parametrize(
    ("node", "message"),
    [
        ({"name": "Bad_Name"}, "nodes[0].name"),
        ({"name": "n", "suite": "buster"}, "node 'n'.suite: 'buster'"),
        ({"name": "n", "driver_state": "on"}, "node 'n'.driver_state: 'on'"),
        ({"name": "n", "gpu": []}, "node 'n': unknown field(s) gpu"),
        ({"name": "n", "gpus": [{"model": "V100"}]}, "node 'n' gpus[0].model: unknown model 'V100'"),
        ({"name": "n", "gpus": [{"colour": 1}]}, "node 'n' gpus[0]: unknown field(s) colour"),
        ({"name": "n", "gpus": [{"model": "T4", "mig_mode": "enabled"}]}, "model T4 has no MIG"),
        ({"name": "n", "gpus": [{"pci_bus_id": "zz"}]}, "gpus[0].pci_bus_id: not a PCI bus id"),
        ({"name": "n", "gpus": [{"minor": 0}, {"minor": 0}]}, "duplicate minor number(s) 0"),
        ({"name": "n", "gpus": [{"minor": 255}]}, "outside 0..253"),
        ({"name": "n", "gpus": [{"uuid": "GPU-x"}]}, "is not GPU-<lowercase uuid>"),
        ({"name": "n", "engines": ["cri-o"]}, "node 'n'.engines"),
        ({"name": "n", "driver_packages": "yes"}, "driver_packages: expected true or false"),
        ({"name": "n", "driver_packages": True, "driver_version": "550.1"}, "fixed by the suite's packages"),
        ({"name": "n", "gpus": {"model": "T4"}}, "node 'n'.gpus: expected a list"),
    ],
)
def test_invalid_nodes_name_node_and_field(node, message):
    with pytest.raises(FleetError) as err:
        fleet(node)
    assert message in str(err.value)


def test_invalid_fleet_documents(tmp_path):
    with pytest.raises(FleetError, match="expected a mapping with a 'nodes' list"):
        validate_fleet(["a"])
    with pytest.raises(FleetError, match="'nodes' must be a non-empty list"):
        validate_fleet({"nodes": []})
    with pytest.raises(FleetError, match="duplicate node name"):
        fleet({"name": "a"}, {"name": "a"})
    with pytest.raises(FleetError, match="unknown top-level field"):
        validate_fleet({"nodes": [{"name": "a"}], "extra": 1})
    bad = tmp_path / "bad.yml"
    bad.write_text("nodes: [\n")
    with pytest.raises(FleetError, match=r"bad\.yml: not valid YAML"):
        load_fleet(bad)


def test_bus_id_forms():
    assert normalize_bus_id("3b:00.0") == "00000000:3B:00.0"
    assert normalize_bus_id("0000:3b:00.1") == "00000000:3B:00.1"
    assert sysfs_bus_id("00000000:3B:00.0") == "0000:3b:00.0"


def test_node_config_is_what_the_stub_reads():
    (node,) = fleet({"name": "n", "suite": "trixie", "gpus": [{"model": "A100-SXM4-40GB", "mig_mode": "enabled"}]})
    cfg = node_config(node)
    assert cfg["driver_version"] == "550.163.01" and cfg["cuda_version"] == 12040
    assert cfg["nvml_version"] == "12.550.163.01"
    (gpu,) = cfg["gpus"]
    assert gpu["pci_device_id"] == 0x20B010DE
    assert gpu["memory_total"] == 40960 * 1024 * 1024
    assert (gpu["cc_major"], gpu["cc_minor"], gpu["architecture"], gpu["mig_mode"]) == (8, 0, 7, 1)


def test_inventory_groups_and_connection_vars():
    nodes = load_fleet(ROOT / "tests/sim/fleets/default.yml")
    inv = render_inventory("t1", nodes)
    groups = inv["all"]["children"]
    assert sorted(groups["gpu_nodes"]["hosts"]) == ["gpu-bookworm", "gpu-trixie"]
    assert sorted(groups["cpu_nodes"]["hosts"]) == ["cpu-sid"]
    host = groups["gpu_nodes"]["hosts"]["gpu-bookworm"]
    assert host["ansible_connection"] == "community.docker.docker"
    assert host["ansible_host"] == "t1-gpu-bookworm"
    assert host["ansible_python_interpreter"] == "/usr/bin/python3"
    sim = host["gpufleet_sim"]
    assert [g["uuid"] for g in sim["gpus"]] == [g["uuid"] for g in nodes[0]["gpus"]]
    assert sim["gpus"][0]["device_id"] == "0x20b0" and sim["driver_state"] == "loaded"
    assert yaml.safe_load(yaml.safe_dump(inv)) == inv
    # the validate role is pointed at the local image, never at a registry the nodes cannot reach
    assert inv["all"]["vars"]["validate_image"] == "gpufleet-sim/mini:latest"
    assert inv["all"]["vars"]["validate_pull"] == "never"


def test_pci_tree_has_gpus_audio_and_host_functions():
    (node,) = fleet({"name": "n", "gpus": [{"model": "L4", "numa_node": 1}, {"model": "T4"}]})
    host = {"0000:00:01.0": {"vendor": "0x1af4\n", "class": "0x010000\n", "driver": pcitree.Link("x/virtio-pci")}}
    tree = pcitree.pci_tree(node["gpus"], "loaded", host)
    assert tree["0000:17:00.0/vendor"] == "0x10de\n"
    assert tree["0000:17:00.0/device"] == "0x27b8\n"
    assert tree["0000:17:00.0/class"] == "0x030200\n"
    assert tree["0000:17:00.0/numa_node"] == "1\n"
    assert tree["0000:37:00.0/numa_node"] == "0\n"  # no numa_node given: NUMA node 0 on a node of at most 4 GPUs
    assert tree["0000:17:00.0/driver"] == "../../../bus/pci/drivers/nvidia"
    assert tree["0000:17:00.1/class"] == "0x040300\n"
    assert "0000:17:00.1/driver" not in tree
    assert tree["0000:37:00.0/device"] == "0x1eb8\n" and "0000:37:00.1" not in tree
    assert tree["0000:00:01.0/vendor"] == "0x1af4\n"
    gpus = [k.split("/")[0] for k, v in tree.items() if k.endswith("/class") and v.startswith("0x0302")]
    assert sorted(gpus) == ["0000:17:00.0", "0000:37:00.0"]
    unloaded = pcitree.pci_tree(node["gpus"], "installed")
    assert "0000:17:00.0/driver" not in unloaded


def test_module_tree_and_writer(tmp_path):
    tree = pcitree.module_tree(["ext4", "nvidia", "overlay"], "loaded", "535.261.03")
    assert tree["nvidia/version"] == "535.261.03\n" and "nvidia_uvm/version" in tree and tree["ext4"] is None
    assert "nvidia" not in pcitree.module_tree(["ext4", "nvidia"], "installed", "535.261.03")
    pcitree.write_tree({**tree, "x/driver": pcitree.Link("../y")}, tmp_path / "m")
    assert (tmp_path / "m/nvidia/version").read_text() == "535.261.03\n"
    assert (tmp_path / "m/ext4").is_dir()
    assert os.readlink(tmp_path / "m/x/driver") == "../y"


def test_image_tags_follow_their_inputs():
    a = images.node_tag("bookworm", ["docker", "containerd"], False)
    assert a == images.node_tag("bookworm", ["docker", "containerd"], False)
    assert a.startswith("gpufleet-sim/node:bookworm-docker-containerd-")
    assert a != images.node_tag("bookworm", ["docker", "containerd"], True)
    assert images.base_tag("trixie") != images.base_tag("sid")
    assert "dpkg-divert --local --add --rename" in images._node_script("bookworm", ["libnvidia-ml1"], True)


def test_gpus_have_a_numa_node_two_sockets_from_five_gpus_on():
    (small,) = fleet({"name": "s", "gpus": [{"model": "L4"}] * 4})
    assert [g["numa_node"] for g in small["gpus"]] == [0, 0, 0, 0]
    (dgx,) = fleet({"name": "d", "gpus": [{"model": "A100-SXM4-40GB"}] * 8})
    assert [g["numa_node"] for g in dgx["gpus"]] == [0, 0, 0, 0, 1, 1, 1, 1]
    (unsaid,) = fleet({"name": "u", "gpus": [{"model": "L4", "numa_node": -1}]})
    tree = pcitree.pci_tree(unsaid["gpus"], "loaded", {})
    assert tree["0000:17:00.0/numa_node"] == "-1\n"
