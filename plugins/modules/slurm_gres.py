#!/usr/bin/python
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: slurm_gres
short_description: Write a Slurm node's GPU resources (gres.conf, its slurm.conf node line) from discovery
version_added: 1.0.0
description:
  - With O(gpus) (C(ansible_facts.nvidia.gpus)) on a host where C(slurmd) is installed, writes O(gres_conf) whole -
    C(AutoDetect=off), one C(Name=gpu Type=<type> File=/dev/nvidia<minor>) line per GPU and, for a GPU with MIG
    enabled, one C(MultipleFiles=) line per MIG device (its GPU's device file and its GPU and compute instance
    capability files from C(/proc/driver/nvidia-caps/mig-minors)) instead of the whole GPU - and returns the node's
    line for C(slurm.conf) (RV(node_line)), C(slurmd -C)'s hardware line with the node's C(Gres=).
  - With O(constrain_devices=true), sets C(ConstrainDevices=yes) in O(cgroup_conf) and keeps every other line of it.
  - With O(nodes), writes O(nodes_conf) whole with those lines (the node lines of every Slurm GPU node), the
    fragment the admin's C(slurm.conf) includes (C(Include /etc/slurm/gpufleet-nodes.conf)).
  - A host without C(slurmd) gets no C(gres.conf) (RV(slurmd=false)); O(nodes) is written there too (a controller).
  - Files are written atomically; an admin's file the collection did not write is backed up first (O(backup)).
author:
  - gpufleet.nvidia contributors (@gpufleet)
attributes:
  check_mode:
    support: full
    description: Reports what would change and writes nothing.
  diff_mode:
    support: full
    description: Each changed file before and after.
  idempotent:
    support: full
    description: The same GPUs and hardware give the same bytes.
options:
  gpus:
    description: The GPU records of discovery (C(ansible_facts.nvidia.gpus)); omitted, no C(gres.conf) is written.
    type: list
    elements: dict
  node_name:
    description: The node's Slurm name; empty - the name C(slurmd -C) prints (the host's short name).
    type: str
    default: ""
  gres_conf:
    description: Where C(gres.conf) goes.
    type: path
    default: /etc/slurm/gres.conf
  cgroup_conf:
    description: The C(cgroup.conf) that O(constrain_devices) edits.
    type: path
    default: /etc/slurm/cgroup.conf
  constrain_devices:
    description: Set C(ConstrainDevices=yes) in O(cgroup_conf) (a job then opens only the GPUs it was given).
    type: bool
    default: false
  nodes_conf:
    description: The fragment of node lines the admin's C(slurm.conf) includes.
    type: path
    default: /etc/slurm/gpufleet-nodes.conf
  nodes:
    description: The lines of O(nodes_conf) (each a RV(node_line)); omitted, the file is not touched.
    type: list
    elements: str
  backup:
    description: Back up an admin's file before it is changed (C(<file>.<pid>.<time>~)).
    type: bool
    default: true
notes:
  - "Slurm documentation, read 2026-11-27: U(https://slurm.schedmd.com/gres.conf.html),
    U(https://slurm.schedmd.com/slurm.conf.html), U(https://slurm.schedmd.com/cgroup.conf.html)."
  - C(slurm.conf) also needs C(GresTypes=gpu), and C(TaskPlugin=task/cgroup) for O(constrain_devices) to act.
"""

EXAMPLES = r"""
- name: Describe the node's GPUs to Slurm
  gpufleet.nvidia.slurm_gres:
    gpus: "{{ ansible_facts.nvidia.gpus }}"
    constrain_devices: true
  register: gres

- name: The node lines every slurm.conf includes
  gpufleet.nvidia.slurm_gres:
    nodes: "{{ ['gpu-01', 'gpu-02'] | map('extract', hostvars, ['gres', 'node_line']) | list }}"
"""

RETURN = r"""
slurmd:
  description: Whether C(slurmd) is installed on the host.
  type: bool
  returned: always
node_name:
  description: The node's Slurm name.
  type: str
  returned: when O(gpus) is given and slurmd is installed
  sample: gpu-01
node_line:
  description: The node's line for C(slurm.conf).
  type: str
  returned: when O(gpus) is given and slurmd is installed
  sample: NodeName=gpu-01 CPUs=64 SocketsPerBoard=2 CoresPerSocket=32 ThreadsPerCore=1 Gres=gpu:a100-sxm4-40gb:8
gres:
  description: The node's C(Gres=) value (empty without GPUs).
  type: str
  returned: when O(gpus) is given and slurmd is installed
  sample: gpu:a100-sxm4-40gb:8
files:
  description: The files changed (or that would change).
  type: list
  elements: str
  returned: always
backup_files:
  description: The backups made of admin files.
  type: list
  elements: str
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.nvidia.plugins.module_utils.base.runner import run_module
from ansible_collections.gpufleet.nvidia.plugins.module_utils.slurm.files import GresRequest, write_gres


def argspec() -> dict:
    return {
        "gpus": {"type": "list", "elements": "dict"},
        "node_name": {"type": "str", "default": ""},
        "gres_conf": {"type": "path", "default": "/etc/slurm/gres.conf"},
        "cgroup_conf": {"type": "path", "default": "/etc/slurm/cgroup.conf"},
        "constrain_devices": {"type": "bool", "default": False},
        "nodes_conf": {"type": "path", "default": "/etc/slurm/gpufleet-nodes.conf"},
        "nodes": {"type": "list", "elements": "str"},
        "backup": {"type": "bool", "default": True},
    }


def main() -> None:
    module = AnsibleModule(argument_spec=argspec(), supports_check_mode=True)
    run_module(module, GresRequest.from_params, write_gres)


if __name__ == "__main__":
    main()
