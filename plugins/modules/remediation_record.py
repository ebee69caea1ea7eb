#!/usr/bin/python
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: remediation_record
short_description: Read or append to a host's GPU remediation record (history, budget, handled XIDs)
version_added: 1.0.0
description:
  - The record, C(/var/lib/gpufleet/remediation.json), is what C(playbooks/remediate.yml) did on the host. O(state=read)
    returns how many remediations ran in the last 24 hours (the per-host budget), the latest entry and the recent
    history. O(state=present) appends one entry C({time, action, gpus, problems, result, dry_run, reason}) and marks
    the XIDs logged so far on the GPUs of O(handled) as remediated; discovery (C(gpufleet.nvidia.gpu_facts)) and the
    GPU watch no longer report those XIDs, and a later XID counts again.
  - The file is replaced atomically. A record that cannot be read is not replaced (the message says what to do).
author:
  - gpufleet.nvidia contributors (@gpufleet)
extends_documentation_fragment:
  - gpufleet.nvidia.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
    details: the entry appended.
  idempotent:
    support: none
    details: each O(state=present) run appends an entry (O(state=read) changes nothing).
options:
  state:
    description: C(read) the record, or append an entry (C(present)).
    type: str
    choices: [read, present]
    default: read
  action:
    description: What was done (C(reset), C(reboot), C(hold), C(none)); required with O(state=present).
    type: str
    default: ""
  gpus:
    description: The PCI bus ids of the GPUs remediated.
    type: list
    elements: str
    default: []
  problems:
    description: The problem codes remediated.
    type: list
    elements: str
    default: []
  result:
    description: How it ended (C(returned), C(held), C(refused), C(dry_run)).
    type: str
    default: ""
  dry_run:
    description: The entry is a dry run (it does not count against the budget).
    type: bool
    default: false
  reason:
    description: Why the remediation ran, free text (the alert, the admin).
    type: str
    default: ""
  handled:
    description: PCI bus ids whose XIDs logged so far are remediated.
    type: list
    elements: str
    default: []
  amend:
    description:
      - Write O(action), O(result), O(reason) (those given) into the latest entry instead of appending one; the
        playbook records a remediation's outcome so, without counting it twice against the budget.
    type: bool
    default: false
  path:
    description: The record file.
    type: path
    default: /var/lib/gpufleet/remediation.json
  root:
    description: Where the host's file system is mounted.
    type: path
    default: /
"""

EXAMPLES = r"""
- name: Read the budget
  gpufleet.nvidia.remediation_record:
  register: record

- name: Record a reset that returned the host to service
  gpufleet.nvidia.remediation_record:
    state: present
    action: reset
    gpus: ["00000000:17:00.0"]
    problems: [gpu_xid_48]
    result: returned
    handled: ["00000000:17:00.0"]
"""

RETURN = r"""
record:
  description: C(today) (remediations in the last 24 hours, dry runs not counted), C(last) (the latest entry),
    C(history) (the last 20 entries), C(error) (why the file could not be read, or null).
  returned: always
  type: dict
entry:
  description: The entry appended (O(state=present)).
  returned: when state is present
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.nvidia.plugins.module_utils.base.runner import ROOT, run_module
from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery.remediation_record import RECORD_PATH
from ansible_collections.gpufleet.nvidia.plugins.module_utils.remediate import record


def argspec() -> dict:
    return {
        "state": {"type": "str", "choices": ["read", "present"], "default": "read"},
        "action": {"type": "str", "default": ""},
        "gpus": {"type": "list", "elements": "str", "default": []},
        "problems": {"type": "list", "elements": "str", "default": []},
        "result": {"type": "str", "default": ""},
        "dry_run": {"type": "bool", "default": False},
        "reason": {"type": "str", "default": ""},
        "handled": {"type": "list", "elements": "str", "default": []},
        "amend": {"type": "bool", "default": False},
        "path": {"type": "path", "default": RECORD_PATH},
        "root": ROOT,
    }


def main() -> None:
    module = AnsibleModule(argument_spec=argspec(), supports_check_mode=True)
    run_module(module, record.RecordRequest.from_params, record.run_record)


if __name__ == "__main__":
    main()
