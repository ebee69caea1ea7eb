# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""site.yml's imex stage runs on the GPU hosts of a group that imex_domain_groups names, and on no other: the stage's
own condition, taken from site.yml, evaluated for real (a list, or a survey's comma string)."""

import json
import sys
from pathlib import Path

import pytest
import yaml

from ansible_collections.gpufleet.nvidia.tests.controller.playbook import run_playbook, site_stage_condition

pytestmark = pytest.mark.controller
REPO = Path(__file__).resolve().parents[3]

# host -> (inventory group, GPU node, whether the imex stage runs)
HOSTS = {
    "tray1": ("nvl0", True, True),
    "tray2": ("nvl0", True, True),
    "nvl0-cpu": ("nvl0", False, False),
    "rack2-tray": ("nvl2", True, True),
    "unlisted": ("nvl1", True, False),
    "plain-gpu": ("gpu", True, False),
}


def stage_when():
    return site_stage_condition("imex")


def test_the_stage_order_runtime_imex_device_plugin():
    plays = yaml.safe_load((REPO / "playbooks" / "site.yml").read_text())
    tags = [p.get("tags", [None])[0] for p in plays]
    assert tags.index("runtime") < tags.index("imex") < tags.index("slurm") < tags.index("device_plugin")


@pytest.mark.parametrize("domain_groups", [["nvl0", "nvl2"], "nvl0, nvl2"])
def test_the_stage_runs_on_gpu_hosts_of_a_domain_only(tmp_path, domain_groups):
    children = {}
    for host, (group, _gpu, _runs) in HOSTS.items():
        children.setdefault(group, {"hosts": {}})["hosts"][host] = {}
    inventory = {
        "all": {
            "vars": {
                "ansible_connection": "local",
                "ansible_python_interpreter": sys.executable,
                "imex_domain_groups": domain_groups,
            },
            "children": children,
        }
    }
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
    gpu = {host: spec[1] for host, spec in HOSTS.items()}
    play = [
        {
            "hosts": "all",
            "gather_facts": False,
            "vars": {"stage_when": stage_when(), "gpu": gpu},
            "tasks": [
                {
                    "name": "What gpu_facts would say",
                    "ansible.builtin.set_fact": {
                        "nvidia": {"gpu_node": "{{ gpu[inventory_hostname] }}"},
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
    assert runs == {host: spec[2] for host, spec in HOSTS.items()}
