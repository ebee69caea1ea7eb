# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""A simulated node in an NVLink domain (``nvlink_domain``): validated like the other node fields, its inventory group,
and the stand-in /proc/devices listing the driver's IMEX channel device only on such a node."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
if str(ROOT) not in sys.path:  # appended: sys.path[0] stays the collections root other tests run from
    sys.path.append(str(ROOT))

from tests.sim.inventory import render_inventory  # noqa: E402
from tests.sim.model import IMEX_MAJOR, FleetError, node_config, validate_fleet  # noqa: E402


def fleet(*nodes):
    return validate_fleet({"nodes": list(nodes)})


@pytest.mark.parametrize(
    ("node", "message"),
    [
        ({"name": "n", "gpus": 1, "nvlink_domain": "Rack-1"}, "node 'n'.nvlink_domain: 'Rack-1' must match"),
        ({"name": "n", "gpus": 1, "nvlink_domain": 3}, "node 'n'.nvlink_domain: 3 must match"),
        ({"name": "n", "nvlink_domain": "nvl0"}, "a node without GPUs is in no NVLink domain"),
    ],
)
def test_invalid_domains_name_node_and_field(node, message):
    with pytest.raises(FleetError) as err:
        fleet(node)
    assert message in str(err.value)


def test_domain_members_get_the_imex_major_and_a_group():
    nodes = fleet(
        {"name": "a", "gpus": 1, "nvlink_domain": "nvl0"},
        {"name": "b", "gpus": 1, "nvlink_domain": "nvl0"},
        {"name": "c", "gpus": 1},
    )
    assert [n["nvlink_domain"] for n in nodes] == ["nvl0", "nvl0", None]
    assert [node_config(n)["imex_major"] for n in nodes] == [IMEX_MAJOR, IMEX_MAJOR, None]
    groups = render_inventory("t", nodes)["all"]["children"]
    assert sorted(groups["nvl0"]["hosts"]) == ["a", "b"]
    assert groups["gpu_nodes"]["hosts"]["a"]["gpufleet_sim"]["nvlink_domain"] == "nvl0"


def setup_module_at(proc: Path):
    spec = importlib.util.spec_from_file_location("gpufleet_sim_setup", ROOT / "tests/sim/node/gpufleet_sim_setup.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.FAKE_PROC = str(proc)
    return module


@pytest.mark.parametrize("domain", ["nvl0", None])
def test_stand_in_proc_devices_lists_the_channel_device_only_in_a_domain(tmp_path, domain):
    (node,) = fleet({"name": "a", "gpus": 1, "nvlink_domain": domain})
    setup_module_at(tmp_path).fake_proc(node_config(node))
    devices = (tmp_path / "devices").read_text()
    character = devices.split("Block devices:")[0]
    assert ("237 nvidia-caps-imex-channels\n" in character) is (domain is not None)
    assert "236 nvidia-caps\n" in character
