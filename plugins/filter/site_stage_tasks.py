# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""site_stage_tasks: the tasks file of a stage's role that site.yml runs."""

from __future__ import annotations

DOCUMENTATION = r"""
name: site_stage_tasks
short_description: The tasks file of a stage's role that site.yml runs
version_added: 1.0.0
author: gpufleet.nvidia contributors (@gpufleet)
description:
  - The C(tasks_from) of the stage's role in C(site.yml). For the C(driver), C(toolkit) and C(runtime) stages, the
    role's C(main.yml) less what only a role run alone needs (its own discovery and OS facts, which
    C(gpufleet.nvidia.converge_check) returned; the skip of a host without a GPU, which these stages do not enter).
  - C(driver) for the driver role; for the toolkit and runtime roles, the role's name when its C(<stage>_state) is
    C(present) (the role's default where unset), C(absent) when it is C(absent); C(main) for every other stage.
options:
  _input:
    description: The stage (the role's name without the collection).
    type: str
    required: true
  host_vars:
    description: The host's variables (C(hostvars[inventory_hostname])).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Apply the role of the stage
  ansible.builtin.include_role:
    name: gpufleet.nvidia.{{ gpufleet_stage }}
    tasks_from: "{{ gpufleet_stage | gpufleet.nvidia.site_stage_tasks(hostvars[inventory_hostname]) }}"
"""

RETURN = r"""
_value:
  description: The tasks file's name, without C(.yml).
  type: str
  sample: toolkit
"""

from typing import Any, Callable, Mapping

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils import site_stages


def site_stage_tasks(stage: str, host_vars: Mapping[str, Any]) -> str:
    """``plugin_utils.site_stages.stage_tasks``; a bad state as ``AnsibleFilterError``."""
    try:
        return site_stages.stage_tasks(str(stage), host_vars)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"site_stage_tasks": site_stage_tasks}
