#!/usr/bin/python
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: slurm_drain
short_description: Take a Slurm node out of service until its GPU jobs ended, or return it to service
version_added: 1.0.0
description:
  - O(state=drained) drains the node (C(scontrol update NodeName=<node> State=DRAIN Reason=<reason>)); no new job
    starts there, running jobs go on. Then it waits, polling C(squeue) every O(poll) seconds, until no job holding a
    GPU runs on the node. At O(timeout) it fails naming the jobs; the node stays drained.
  - A node already drained keeps its drain. When that drain is the collection's (its reason starts with O(prefix)) it
    gets the O(reason) given (a failed validation's reason replaces the upgrade's, and C(sinfo -R) shows it); an
    admin's drain keeps its own reason, so that O(state=resumed) leaves it in place (RV(msg) says so).
  - O(state=resumed) returns the node to service (C(State=RESUME)) only when its drain reason starts with O(reason) -
    the drain this collection made; an admin's own drain is left in place and named in RV(msg).
  - A host without C(scontrol) is not a Slurm node - nothing is done, RV(slurm=false).
  - "Slurm documentation, cited 2026-11-27 and run against Debian 12's Slurm 22.05:
    U(https://slurm.schedmd.com/scontrol.html), U(https://slurm.schedmd.com/squeue.html),
    U(https://slurm.schedmd.com/sinfo.html)."
author:
  - gpufleet.nvidia contributors (@gpufleet)
attributes:
  check_mode:
    support: full
    description: Says whether the node would be drained or resumed and which GPU jobs run there; changes nothing.
  diff_mode:
    support: none
    description: The state before and after are returned (RV(before), RV(after)).
  idempotent:
    support: full
    description: A drained node with the same reason, or a node in service, is left as it is.
options:
  node:
    description: The node's Slurm name; empty - the name C(slurmd -C) prints, else the short host name.
    type: str
    default: ""
  state:
    description: C(drained) or C(resumed).
    type: str
    choices: [drained, resumed]
    default: drained
  reason:
    description: The drain reason (C(sinfo -R) shows it); for O(state=resumed), the prefix of the drain reason to undo.
    type: str
    required: true
  prefix:
    description:
      - For O(state=drained), how the reason of the collection's own drains starts; a node already drained with a
        reason that does not start with it is an admin's drain, which keeps its reason.
    type: str
    default: "gpufleet:"
  timeout:
    description: Seconds to wait for the GPU jobs to end.
    type: int
    default: 600
  poll:
    description: Seconds between two looks at the node's jobs.
    type: float
    default: 5
"""

EXAMPLES = r"""
- name: Drain the node before the driver upgrade
  gpufleet.nvidia.slurm_drain:
    reason: "gpufleet: driver upgrade"
    timeout: 3600

- name: Back to service after validation
  gpufleet.nvidia.slurm_drain:
    state: resumed
    reason: "gpufleet:"
"""

RETURN = r"""
slurm:
  description: Whether C(scontrol) is installed (a Slurm node).
  type: bool
  returned: always
node:
  description: The node's Slurm name.
  type: str
  returned: when slurm
before:
  description: C(in_service), C(draining) (a job still runs) or C(drained), before the module.
  type: str
  returned: when slurm
after:
  description: The same, after it (what it would be, in check mode).
  type: str
  returned: when slurm
reason:
  description: The node's drain reason as Slurm shows it (with C([user@time])).
  type: str
  returned: when slurm
jobs:
  description: The GPU jobs still on the node (C(id), C(user), C(name), C(state), C(gres)).
  type: list
  elements: dict
  returned: always
waited:
  description: Seconds waited for the GPU jobs.
  type: float
  returned: when the node was drained outside check mode
msg:
  description: That an admin's drain is kept (its reason is not replaced, O(state=resumed) leaves it in place).
  type: str
  returned: when an admin's drain is left in place
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.nvidia.plugins.module_utils.base.runner import run_module
from ansible_collections.gpufleet.nvidia.plugins.module_utils.slurm.drain import DrainRequest, slurm_drain


def argspec() -> dict:
    return {
        "node": {"type": "str", "default": ""},
        "state": {"type": "str", "choices": ["drained", "resumed"], "default": "drained"},
        "reason": {"type": "str", "required": True},
        "timeout": {"type": "int", "default": 600},
        "poll": {"type": "float", "default": 5},
        "prefix": {"type": "str", "default": "gpufleet:"},
    }


def main() -> None:
    module = AnsibleModule(argument_spec=argspec(), supports_check_mode=True)
    run_module(module, DrainRequest.from_params, slurm_drain)


if __name__ == "__main__":
    main()
