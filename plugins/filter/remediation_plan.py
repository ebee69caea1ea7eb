# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""remediation_plan, remediation_check: what playbooks/remediate.yml does on a host, and whether it worked."""

from __future__ import annotations

DOCUMENTATION = r"""
name: remediation_plan
short_description: The GPU remediation a host needs now (reset, reboot, hold or none), within its budget
version_added: 1.0.0
author: gpufleet.nvidia contributors (@gpufleet)
description:
  - Reads this run's discovery (C(ansible_facts.nvidia)) and the host's remediation record
    (C(gpufleet.nvidia.remediation_record)) and says what C(playbooks/remediate.yml) does - each GPU fault's
    remediation class (NVIDIA's Xid catalog bucket for an XID; reset for uncorrected ECC errors, a pending row remap
    or pending page retirement; support for a remapping failure), the strongest of them for the host, and whether the
    per-host budget allows it.
  - P(gpufleet.nvidia.remediation_check#filter) (same file) reads the discovery after the remediation and says which
    faults persist.
options:
  _input:
    description: C(ansible_facts.nvidia).
    type: dict
    required: true
  record:
    description: The C(record) that C(gpufleet.nvidia.remediation_record) returns (C(today) is read).
    type: dict
    required: true
  max_per_day:
    description: Remediations allowed per host in 24 hours (C(remediate_max_per_day)).
    type: int
    default: 3
  reset:
    description: Whether a GPU reset may be tried (false reboots instead).
    type: bool
    default: true
  host:
    description: The host's name, for the message.
    type: str
    default: ""
"""

EXAMPLES = r"""
- name: Plan the remediation
  ansible.builtin.set_fact:
    plan: "{{ ansible_facts.nvidia | gpufleet.nvidia.remediation_plan(record.record, max_per_day=3) }}"
"""

RETURN = r"""
_value:
  description:
    - C(action) (C(reset), C(reboot), C(hold), C(none)), C(act) (drain and remediate now), C(refused) (the budget is
      spent), C(gpus) (PCI bus ids), C(reset_gpus) (C({uuid, minor, pci_bus_id}) for C(gpufleet.nvidia.gpu_reset)),
      C(problems) (codes), C(faults) (per GPU and code, with its class), C(budget) (C(today), C(max_per_day),
      C(left)) and C(message).
  type: dict
"""

from typing import Any, Callable

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.remediate import PlanError
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.remediate import remediation_check as _check
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.remediate import remediation_plan as _plan


def remediation_plan(facts: Any, record: Any, max_per_day: Any = 3, reset: Any = True, host: str = "") -> dict:
    try:
        return _plan(facts, record, max_per_day=max_per_day, reset=reset, host=host)
    except PlanError as exc:
        raise AnsibleFilterError(f"remediation_plan: {exc}") from exc


def remediation_check(facts: Any, plan: Any) -> dict[str, Any]:
    try:
        return _check(facts, plan)
    except PlanError as exc:
        raise AnsibleFilterError(f"remediation_check: {exc}") from exc


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"remediation_plan": remediation_plan, "remediation_check": remediation_check}
