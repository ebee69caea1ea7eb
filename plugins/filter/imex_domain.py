# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""imex_domain, imex_config: a host's NVLink domain from the inventory, and the IMEX settings the imex role writes."""

from __future__ import annotations

DOCUMENTATION = r"""
name: imex_domain
short_description: A host's NVLink (IMEX) domain from the inventory, with its members' addresses
version_added: 1.0.0
author: gpufleet.nvidia contributors (@gpufleet)
description:
  - Each group named in O(domain_groups) (the variable C(imex_domain_groups)) is one NVLink domain; a host in one of
    them is a member. A member's address is its C(imex_address), else its C(ansible_host), else its inventory name.
  - Fails for a host in two domain groups or a member whose address is not one word.
options:
  _input:
    description: The host (C(inventory_hostname)).
    type: str
    required: true
  groups:
    description: C(groups).
    type: dict
    required: true
  hostvars:
    description: C(hostvars).
    type: dict
    required: true
  domain_groups:
    description: C(imex_domain_groups), a list or a comma-separated string.
    type: raw
    required: true
"""

EXAMPLES = r"""
- name: The host's NVLink domain
  ansible.builtin.set_fact:
    domain: "{{ inventory_hostname | gpufleet.nvidia.imex_domain(groups, hostvars, imex_domain_groups) }}"
"""

RETURN = r"""
_value:
  description:
    - C(domain) (the group's name; null outside any), C(members) (its hosts), C(addresses) (their addresses, sorted
      and unique, as C(nodes_config.cfg) lists them) and C(address) (the host's own).
  type: dict
"""

from typing import Any, Callable

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils import imex as _imex


def imex_domain(host: Any, groups: Any, hostvars: Any, domain_groups: Any) -> dict[str, Any]:
    try:
        return _imex.imex_domain(host, groups, hostvars, domain_groups)
    except ValueError as exc:
        raise AnsibleFilterError(f"imex_domain: {host}: {exc}") from exc


def imex_config(nodes_config_path: Any, server_port: Any, wait_for_quorum: Any, extra: Any = None) -> dict[str, str]:
    try:
        return _imex.config_settings(nodes_config_path, server_port, wait_for_quorum, extra)
    except ValueError as exc:
        raise AnsibleFilterError(f"imex_config: {exc}") from exc


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"imex_domain": imex_domain, "imex_config": imex_config}
