# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""site_groups: the groups site.yml puts a host in after discovery (its route, the optional stages that act on it)."""

from __future__ import annotations

DOCUMENTATION = r"""
name: site_groups
short_description: The groups of site.yml's plays a host enters after discovery
version_added: 1.0.0
author: gpufleet.nvidia contributors (@gpufleet)
description:
  - C(gpufleet_<route>), the route C(gpufleet.nvidia.converge_check) gave the host (C(stale) where it gave none), then
    C(gpufleet_<stage>) for each optional stage that acts on the host, in the order C(mig), C(imex), C(slurm),
    C(device_plugin). site.yml's stage plays name these groups in their C(hosts), so a stage that does not act on a
    host costs the control node nothing for it.
  - C(mig) acts on a GPU node with a C(mig_layout), or whose MIG boot unit still applies a layout.
  - C(imex) acts on a GPU node in a group that C(imex_domain_groups) names.
  - C(slurm) acts on a GPU node where converge_check found slurmd (or did not look), and on the hosts of
    C(slurm_controller_group) (default C(slurm_controllers)); also from the route C(converged).
  - C(device_plugin) acts on a Kubernetes node with a GPU (P(gpufleet.nvidia.device_plugin_node#filter)).
  - C(mig), C(imex) and C(device_plugin) act only from the route C(stale).
options:
  _input:
    description: The host's variables (C(hostvars[host])), its C(ansible_facts.nvidia) and C(_gpufleet_converge) too.
    type: dict
    required: true
  host:
    description: The host's inventory name.
    type: str
    required: true
  groups:
    description: The inventory's groups (the C(groups) magic variable).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Send each host to the plays that act on it
  ansible.builtin.add_host:
    name: "{{ item }}"
    groups: "{{ hostvars[item] | gpufleet.nvidia.site_groups(item, groups) }}"
  loop: "{{ ansible_play_hosts }}"
  run_once: true
"""

RETURN = r"""
_value:
  description: The group names, the route's first.
  type: list
  elements: str
  sample: [gpufleet_stale, gpufleet_slurm]
"""

from typing import Any, Callable, Mapping

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils import site_stages


def site_groups(host_vars: Mapping[str, Any], host: Any, groups: Mapping[str, Any] | None) -> list[str]:
    """``plugin_utils.site_stages.site_groups``; a bad variable as ``AnsibleFilterError``."""
    try:
        return site_stages.site_groups(host, host_vars, groups)
    except ValueError as exc:
        raise AnsibleFilterError(f"{host}: {exc}") from exc


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"site_groups": site_groups}
