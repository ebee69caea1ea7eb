# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""site.yml's device_plugin stage runs on the hosts the kubernetes_node filter names (the same rule the toolkit role
uses for what the runtime shim trusts): the stage's own condition, taken from site.yml, evaluated for real."""

import json
import sys
from pathlib import Path

import pytest
import yaml

from ansible_collections.gpufleet.nvidia.tests.controller.playbook import run_playbook, site_stage_condition

pytestmark = pytest.mark.controller
REPO = Path(__file__).resolve().parents[3]

# host -> (inventory group, its variables, GPUs, whether the device_plugin stage runs)
HOSTS = {
    "k8s-gpu": ("kube_nodes", {}, 1, True),
    "k8s-cpu": ("kube_nodes", {}, 0, False),
    "k8s-excluded": ("kube_nodes", {"device_plugin_enabled": False}, 1, False),
    "docker-gpu": ("docker", {}, 1, False),
    "docker-enabled": ("docker", {"device_plugin_enabled": True}, 1, True),
    "other-group": ("gpu_workers", {"device_plugin_node_group": "gpu_workers"}, 1, True),
}


def stage_when():
    return site_stage_condition("device_plugin")


def test_the_stage_runs_on_kubernetes_gpu_nodes_only(tmp_path):
    children = {}
    for host, (group, variables, _gpus, _runs) in HOSTS.items():
        children.setdefault(group, {"hosts": {}})["hosts"][host] = variables
    inventory = {
        "all": {
            "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable},
            "children": children,
        }
    }
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
    gpus = {host: spec[2] for host, spec in HOSTS.items()}
    play = [
        {
            "hosts": "all",
            "gather_facts": False,
            "vars": {"stage_when": stage_when(), "gpus": gpus},
            "tasks": [
                {
                    "name": "What gpu_facts would say",
                    "ansible.builtin.set_fact": {
                        "nvidia": {"pci_gpu_count": "{{ gpus[inventory_hostname] }}"},
                        "cacheable": True,
                    },
                },
                {"name": "The stage's condition", "ansible.builtin.set_fact": {"runs": "{{ stage_when | bool }}"}},
                {
                    "name": "Dump",
                    "ansible.builtin.copy": {
                        "content": "{{ dict(ansible_play_hosts | zip(ansible_play_hosts | map('extract', hostvars, "
                        "'runs'))) | to_json }}",
                        "dest": str(tmp_path / "runs.json"),
                        "mode": "0644",
                    },
                    "run_once": True,
                },
            ],
        }
    ]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    proc = run_playbook("-i", tmp_path / "inventory.yml", tmp_path / "play.yml")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    runs = json.loads((tmp_path / "runs.json").read_text())
    assert runs == {host: spec[3] for host, spec in HOSTS.items()}
