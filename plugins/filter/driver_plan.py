# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""driver_plan: the driver role's packages, repository and task file for one host (a pure function)."""

from __future__ import annotations

DOCUMENTATION = r"""
name: driver_plan
short_description: Packages, repository and task file of the driver role for one host
version_added: 1.0.0
author: gpufleet.nvidia contributors (@gpufleet)
description:
  - Given Ansible's host facts, the driver role's settings and C(gpu_facts)' C(ansible_facts.nvidia), returns what the
    C(gpufleet.nvidia.driver) role installs there, so the per-distribution choice lives in one tested place.
  - Fails with a message naming the variable to change when the combination cannot work (for example the open kernel
    module on a Pascal GPU, or a Debian release asked for a branch it does not ship).
options:
  _input:
    description: Ansible facts (C(ansible_facts)) with C(distribution), C(distribution_major_version), C(architecture),
      C(kernel).
    type: dict
    required: true
  settings:
    description: C(branch), C(version), C(module_flavor), C(source), C(mirror_url), C(repo_key_url), C(package_set),
      C(ubuntu_precompiled), C(kernel_module) (false where the module cannot be built, in a container),
      C(el_extra_repos) (set up EPEL and CRB/PowerTools for DKMS on EL), C(el_module_source) (C(auto), C(dkms),
      C(redhat), C(precompiled)) and C(secure_boot) (C(gpu_facts)' C(next_boot.secure_boot)), which choose the EL
      kernel module package under Secure Boot.
    type: dict
    required: true
  nvidia:
    description: C(ansible_facts.nvidia) from C(gpufleet.nvidia.gpu_facts).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Plan the driver packages
  ansible.builtin.set_fact:
    plan: >-
      {{ ansible_facts | gpufleet.nvidia.driver_plan({'branch': '535', 'source': 'distro'}, ansible_facts.nvidia) }}
"""

RETURN = r"""
_value:
  description: C(distribution), C(major), C(task_file), C(source), C(flavor), C(package_set), C(branch), C(version),
    C(pinning), C(packages), C(module_packages), C(headers), C(hold), C(remove), C(repository) (C(name), C(kind),
    C(url), C(key_url)), C(dnf_module_stream) (None on RHEL 10), C(el_repos) (C(epel), C(crb), C(crb_tool); None
    when nothing is built), C(apt_components) (package to archive component), C(dkms_signing) (C(conf.d),
    C(shim-mok) or None), C(nvswitch) and C(fabricmanager) (its packages on NVSwitch hosts), C(module_signer)
    (C(redhat), C(nvidia) or None); on EL also C(module_source) (C(dkms), C(redhat), C(precompiled)),
    C(module_source_reason), C(rhsm_repos) (repositories to enable through subscription-manager) and C(mok_import)
    (C(url) and C(name) of the vendor certificate to enrol, or None).
  type: dict
"""

from typing import Any, Callable

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.nvidia.plugins.module_utils.base.apt_prepare import missing_components, parse_policy
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.driver_plan import PlanError, plan


def driver_plan(facts: dict[str, Any], settings: dict[str, Any], nvidia: dict[str, Any] | None) -> dict[str, Any]:
    try:
        return plan(dict(facts), dict(settings), dict(nvidia or {}))
    except PlanError as exc:
        raise AnsibleFilterError(f"gpufleet.nvidia.driver role: {exc}") from exc


def driver_missing_components(policy_stdout: str, needed: dict[str, str] | None) -> list[str]:
    return missing_components(parse_policy(str(policy_stdout or "")), dict(needed or {}))


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"driver_plan": driver_plan, "driver_missing_components": driver_missing_components}
