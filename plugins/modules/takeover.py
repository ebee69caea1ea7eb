#!/usr/bin/python
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: takeover
short_description: Record what taking a host over from NVIDIA's toolkit moves aside, and give it back
version_added: 1.0.0
description:
  - O(state=present) records the state of NVIDIA's C(nvidia-cdi-refresh) units (enabled, masked, active) before the
    C(gpufleet.nvidia.runtime) role masks them, in the takeover record O(record_path). The CDI specs
    M(gpufleet.nvidia.cdi_spec) moves aside and the C(daemon.json) values M(gpufleet.nvidia.container_runtime)
    replaces go into the same record. The first state recorded stays (a second run finds the units masked already).
  - O(state=absent) gives back what the record names - each spec moved aside goes back to its name, unless a spec
    that is not this collection's is there again (NVIDIA's refresh wrote one; it is never overwritten, the backup stays
    and RV(kept) says so); each unit is unmasked only when it was not masked before, enabled or disabled as it was, and
    started when it was active - then drops those entries from the record, and the record and its folder when
    nothing is left. The C(daemon.json) values are given back by M(gpufleet.nvidia.container_runtime) O(state=absent).
author:
  - gpufleet.nvidia contributors (@gpufleet)
attributes:
  check_mode:
    support: full
    description: Reports what would be recorded or given back and changes nothing.
  diff_mode:
    support: full
    description: Each spec moved back (its backup and path), each unit's systemctl verbs, the record before and after.
  idempotent:
    support: full
    description: A second run records or gives back nothing.
options:
  state:
    description: C(present) records the units' state; C(absent) gives back what the record names.
    type: str
    choices: [present, absent]
    default: present
  units:
    description: The units to record (O(state=present)); those not found on the host are left out.
    type: list
    elements: str
    default: [nvidia-cdi-refresh.service, nvidia-cdi-refresh.path]
  mask:
    description:
      - With O(state=present), after recording, stop and mask each unit found (what C(ansible.builtin.systemd_service)
        with C(state=stopped) and C(masked=true) does), reporting the verbs in RV(units). One call for what a C(find),
        this module and a C(systemd_service) loop did.
      - Needs O(root=/).
    type: bool
    default: false
  record_path:
    description: The takeover record (in the terms of O(root)).
    type: path
    default: /var/lib/gpufleet-nvidia/takeover.json
  root:
    description: Where the host's file system is mounted; systemctl runs only when it is C(/).
    type: path
    default: /
"""

EXAMPLES = r"""
- name: Record NVIDIA's refresh units before masking them
  gpufleet.nvidia.takeover:
    units: [nvidia-cdi-refresh.service, nvidia-cdi-refresh.path]

- name: Record NVIDIA's refresh units, then stop and mask them, in one call
  gpufleet.nvidia.takeover:
    mask: true

- name: Give back NVIDIA's CDI specs and units (after removing our spec)
  gpufleet.nvidia.takeover:
    state: absent
"""

RETURN = r"""
recorded:
  description: The units recorded now (O(state=present)), each C({enabled, masked, active}).
  returned: when state is present
  type: dict
  sample: {nvidia-cdi-refresh.path: {enabled: true, masked: false, active: true}}
restored:
  description: The specs moved back, each C({path, backup}) - would be, in check mode.
  returned: when state is absent
  type: list
  elements: dict
kept:
  description:
    - The specs not moved back because a spec that is not ours is at their name again, each C({path, backup, why}).
  returned: when state is absent
  type: list
  elements: dict
units:
  description: The systemctl verbs run on each unit, C({unit, verbs}) - would be, in check mode.
  returned: when state is absent, or present with O(mask)
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.nvidia.plugins.module_utils.base.runner import ROOT, STATE, run_module
from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery import takeover


def argspec() -> dict:
    return {
        "state": STATE,
        "units": {
            "type": "list",
            "elements": "str",
            "default": ["nvidia-cdi-refresh.service", "nvidia-cdi-refresh.path"],
        },
        "mask": {"type": "bool", "default": False},
        "record_path": takeover.RECORD_PATH_OPTION,
        "root": ROOT,
    }


def main() -> None:
    module = AnsibleModule(argument_spec=argspec(), supports_check_mode=True)
    run_module(module, takeover.TakeoverRequest.from_params, takeover.run_takeover)


if __name__ == "__main__":
    main()
