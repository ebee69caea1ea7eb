#!/usr/bin/python
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: host_lock
short_description: One run at a time on a host (a lock that a killed run cannot leave behind)
version_added: 1.0.0
description:
  - C(site.yml) takes this lock on every host before its stages write system files and restart engines, and
    releases it before the report, so two runs started together on one host (an AWX schedule overlapping a
    manual run) do not both edit and restart the engines. The second run waits up to O(timeout) seconds, then
    fails on that host with a message naming the lock file, the holder's PID, its owner and start time, and
    what to do.
  - The lock is an C(flock) on O(path) (under C(/run), a tmpfs) kept by a small holder process that this module
    leaves on the host. The kernel drops the lock when the holder is gone, so a killed holder or a reboot frees
    it at once; a run killed on the control node (no release) frees it when the holder's O(lease) ends. The
    holder's description (owner, PID, start, lease end) is the lock file's content.
  - Taking or releasing the lock is not a change to the host (C(changed) is always false), and the module does
    the same in check mode (a check run reads what a real run would be changing).
author:
  - gpufleet.nvidia contributors (@gpufleet)
extends_documentation_fragment:
  - gpufleet.nvidia.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  idempotent:
    support: full
options:
  owner:
    description:
      - Who takes the lock, one string per run (C(site.yml) uses one id for every play of a run, so a later play
        of the same run finds the lock its own). Only this owner releases it.
    type: str
    required: true
  state:
    description: C(present) takes the lock (waits for it), C(absent) releases it when O(owner) holds it.
    type: str
    choices: [present, absent]
    default: present
  path:
    description: The lock file.
    type: path
    default: /run/gpufleet-nvidia/site.lock
  timeout:
    description: Seconds to wait for another run's lock before failing (0 fails at once).
    type: int
    default: 600
  lease:
    description:
      - Seconds the holder keeps the lock at most when it is never released (the run was killed on the control
        node). Longer than the longest run.
    type: int
    default: 10800
"""

EXAMPLES = r"""
- name: Take this host's lock for the run
  gpufleet.nvidia.host_lock:
    owner: "{{ gpufleet_run_id }}"
    timeout: 600

- name: Release it
  gpufleet.nvidia.host_lock:
    owner: "{{ gpufleet_run_id }}"
    state: absent
"""

RETURN = r"""
acquired:
  description: Whether this task took the lock (false when O(owner) held it already, or with O(state=absent)).
  returned: always
  type: bool
released:
  description: Whether this task ended O(owner)'s holder.
  returned: always
  type: bool
holder:
  description: The holder's description (C(owner), C(pid), C(started), C(lease_until) in seconds since the epoch).
  returned: always
  type: dict
  sample: {owner: "20261123T101500-1234", pid: 4242, started: 1795428900.0, lease_until: 1795439700.0}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.nvidia.plugins.module_utils.base import hostlock
from ansible_collections.gpufleet.nvidia.plugins.module_utils.base.runner import STATE, run_module


def argspec() -> dict:
    return {
        "owner": {"type": "str", "required": True},
        "state": STATE,
        "path": {"type": "path", "default": hostlock.DEFAULT_PATH},
        "timeout": {"type": "int", "default": 600},
        "lease": {"type": "int", "default": 10800},
    }


def main() -> None:
    module = AnsibleModule(argument_spec=argspec(), supports_check_mode=True)
    run_module(module, hostlock.LockRequest.from_params, hostlock.run_lock)


if __name__ == "__main__":
    main()
