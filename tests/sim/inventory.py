# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The Ansible inventory of a simulated fleet (pure rendering)."""

from __future__ import annotations

from typing import Any

import yaml

from .model import SUITE_ENGINES

SIM_VALIDATE_IMAGE = "gpufleet-sim/mini:latest"


def container_name(prefix: str, node: str) -> str:
    return f"{prefix}-{node}"


def host_vars(prefix: str, node: dict[str, Any]) -> dict[str, Any]:
    """What Ansible needs to reach the node, plus `gpufleet_sim`: what the node simulates, for tests to compare."""
    return {
        "ansible_connection": "community.docker.docker",
        "ansible_host": container_name(prefix, node["name"]),
        "ansible_python_interpreter": "/usr/bin/python3",
        "gpufleet_sim": {
            "suite": node["suite"],
            "driver_state": node["driver_state"],
            "driver_packages": node["driver_packages"],
            "driver_version": node["driver_version"],
            "cuda_version": node["cuda_version"],
            "engines": node["engines"],
            "nvlink_domain": node.get("nvlink_domain"),
            "default_engines": SUITE_ENGINES[node["suite"]],
            "gpus": [
                {
                    "index": g["index"],
                    "name": g["name"],
                    "uuid": g["uuid"],
                    "pci_bus_id": g["pci_bus_id"],
                    "device_id": f"0x{g['device_id']:04x}",
                    "minor": g["minor"],
                    "memory_mib": g["memory_mib"],
                    "compute_capability": g["compute_capability"],
                    "architecture": g["architecture"],
                    "brand": g["brand"],
                    "mig_mode": g["mig_mode"],
                    "numa_node": g["numa_node"],
                }
                for g in node["gpus"]
            ],
        },
    }


def render_inventory(prefix: str, nodes: list[dict[str, Any]]) -> dict[str, Any]:
    """Groups `gpu_nodes` (nodes with GPUs) and `cpu_nodes` (without), under `all`."""
    groups: dict[str, dict[str, Any]] = {"gpu_nodes": {"hosts": {}}, "cpu_nodes": {"hosts": {}}}
    for node in nodes:
        group = "gpu_nodes" if node["gpus"] else "cpu_nodes"
        groups[group]["hosts"][node["name"]] = host_vars(prefix, node)
        if node.get("nvlink_domain"):  # one group per NVLink domain, named by it (the imex role's convention)
            groups.setdefault(node["nvlink_domain"], {"hosts": {}})["hosts"][node["name"]] = {}
    fleet_vars = {
        "gpufleet_sim_fleet": prefix,
        # No registry is reachable from a simulated node: the validate role runs the tiny local image
        # that tests/sim/playbooks/prepare.yml builds in each GPU node (gpufleet-sim-mini-image).
        "validate_image": SIM_VALIDATE_IMAGE,
        "validate_pull": "never",
        # One docker exec per task instead of put + exec + cleanup: a no-change site.yml rerun on the
        # default fleet takes 20 s instead of 31 s (measured; the same setting helps over SSH).
        "ansible_pipelining": True,
    }
    return {"all": {"vars": fleet_vars, "children": groups}}


def inventory_yaml(prefix: str, nodes: list[dict[str, Any]]) -> str:
    header = f"# Simulated fleet {prefix!r}, written by tests/sim/fleet.py; removed by `fleet.py down`.\n"
    return header + yaml.safe_dump(render_inventory(prefix, nodes), sort_keys=False, default_flow_style=False)
