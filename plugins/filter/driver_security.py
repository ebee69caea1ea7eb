# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""driver_security: whether the driver version about to be installed is one NVIDIA's security bulletins name."""

from __future__ import annotations

DOCUMENTATION = r"""
name: driver_security
short_description: Whether a driver version is affected by one of NVIDIA's security bulletins
version_added: 1.0.0
author: gpufleet.nvidia contributors (@gpufleet)
description:
  - Looks the driver version up in the collection's security data (C(plugins/plugin_utils/data/nvidia_security.json),
    built from the CVE List's records of NVIDIA's bulletins; it stays on the controller) and says what the
    C(gpufleet.nvidia.driver) role does before installing it, by O(policy) (C(driver_security_policy)).
  - A version in a branch a bulletin lists, below that branch's fixed version, is affected; the message names the
    CVEs, the bulletin and the fixed version.
  - An empty version (the newest of the branch from the repository) is not checked.
options:
  _input:
    description: The driver version the role installs (C(535.261.03)).
    type: str
    required: true
  policy:
    description: C(warn) (say so and go on), C(refuse) (stop the host) or C(ignore).
    type: str
    default: warn
    choices: [warn, refuse, ignore]
"""

EXAMPLES = r"""
- name: Check the version against NVIDIA's bulletins
  ansible.builtin.set_fact:
    check: "{{ '535.261.03' | gpufleet.nvidia.driver_security(policy='refuse') }}"

- name: Refuse an affected version
  ansible.builtin.fail:
    msg: "{{ check.message }}"
  when: check.refuse
"""

RETURN = r"""
_value:
  description:
    - C(affected) (a bulletin names the version), C(refuse) and C(warn) (what O(policy) makes of it), C(message) (the
      CVEs, bulletin, fixed version and the command that installs it) and C(findings) (one per bulletin C({bulletin,
      address, date, product, cves, fixed, severity, cvss})).
  type: dict
"""

from typing import Any, Callable

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.exposure import ExposureError, install_check


def driver_security(version: Any, policy: Any = "warn") -> dict[str, Any]:
    try:
        return install_check(version, policy)
    except ExposureError as exc:
        raise AnsibleFilterError(f"driver_security: {exc}") from exc


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"driver_security": driver_security}
