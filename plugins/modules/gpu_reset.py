#!/usr/bin/python
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_reset
short_description: Reset NVIDIA GPUs (nvidia-smi -r) when no process holds them
version_added: 1.0.0
description:
  - Resets each GPU of O(gpus) with NVIDIA's C(nvidia-smi -r -i <uuid>), which clears the volatile ECC error counts
    and makes a pending row remap or page retirement take effect. C(playbooks/remediate.yml) calls it after the
    drain, for faults whose remediation class is C(RESET_GPU).
  - Refuses, naming each process (PID, command, container) and the device it holds, when a process holds a GPU's
    device file C(/dev/nvidia<N>), any GPU's (nvidia-smi(1) - no application may use the GPUs reset, nor a compute
    application any other GPU); drain the host first (C(gpufleet.nvidia.drain)).
  - NVIDIA's services that hold every GPU while they run (C(nvidia-persistenced), C(nvidia-fabricmanager), C(nvsm),
    C(nvidia-dcgm), C(dcgm)) are stopped before the reset, last first, and started again after it whatever happened
    (O(stop_clients)), as NVIDIA's mig-parted does around a MIG mode change.
  - A failed reset fails the module with the command's output; the GPU then needs a reboot.
author:
  - gpufleet.nvidia contributors (@gpufleet)
extends_documentation_fragment:
  - gpufleet.nvidia.attributes
attributes:
  check_mode:
    support: full
    details: reads the processes holding the GPUs and says which GPUs would be reset; resets nothing.
  diff_mode:
    support: none
  idempotent:
    support: none
    details: every run resets the GPUs it is given.
options:
  gpus:
    description:
      - The GPUs to reset, each with C(uuid) and C(minor) (and C(pci_bus_id), for the messages), as
        C(ansible_facts.nvidia.gpus) lists them.
    type: list
    elements: dict
    required: true
  command:
    description:
      - The reset command, one argument per item; C({uuid}) is replaced by the GPU's UUID.
    type: list
    elements: str
    default: [nvidia-smi, -r, -i, "{uuid}"]
  ignore:
    description: Commands of processes that do not block the reset.
    type: list
    elements: str
    default: []
  stop_clients:
    description:
      - Stop NVIDIA's GPU services that are active before the reset and start them again after it. With V(false) a
        running one refuses the reset unless its command is in O(ignore).
    type: bool
    default: true
  root:
    description: Where the host's file system is mounted (its C(/proc) is read for the processes).
    type: path
    default: /
"""

EXAMPLES = r"""
- name: Reset the faulty GPU
  gpufleet.nvidia.gpu_reset:
    gpus: "{{ ansible_facts.nvidia.gpus | selectattr('pci_bus_id', 'in', ['00000000:17:00.0']) }}"
"""

RETURN = r"""
reset:
  description: The UUIDs of the GPUs reset (in check mode, those that would be).
  returned: always
  type: list
  elements: str
holders:
  description: The processes that hold a GPU and refuse the reset (C(pid), C(command), C(devices), C(container)).
  returned: always
  type: list
  elements: dict
clients_stopped:
  description: The GPU services stopped for the reset and started again (in check mode, those that would be).
  returned: always
  type: list
  elements: str
commands:
  description: The reset commands, one per GPU.
  returned: success
  type: list
  elements: list
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.nvidia.plugins.module_utils.base.runner import ROOT, run_module
from ansible_collections.gpufleet.nvidia.plugins.module_utils.remediate import reset


def argspec() -> dict:
    return {
        "gpus": {"type": "list", "elements": "dict", "required": True},
        "command": {"type": "list", "elements": "str", "default": list(reset.DEFAULT_COMMAND)},
        "ignore": {"type": "list", "elements": "str", "default": []},
        "stop_clients": {"type": "bool", "default": True},
        "root": ROOT,
    }


def main() -> None:
    module = AnsibleModule(argument_spec=argspec(), supports_check_mode=True)
    run_module(module, reset.ResetRequest.from_params, reset.run_reset)


if __name__ == "__main__":
    main()
