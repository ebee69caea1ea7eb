# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""device_plugin_dra_version: why a cluster's Kubernetes version cannot run NVIDIA's DRA driver."""

from __future__ import annotations

DOCUMENTATION = r"""
name: device_plugin_dra_version
short_description: Why a cluster's Kubernetes version cannot run NVIDIA's DRA driver v0.4.1
version_added: 1.0.0
author: gpufleet.nvidia contributors (@gpufleet)
description:
  - Given the API server's version (its C(gitVersion), such as C(v1.34.2)), returns an empty string when NVIDIA's DRA
    driver v0.4.1 can run there (Kubernetes v1.34.2 or later, its prerequisites page at v0.4.1), else
    a message naming the version found and the fix.
  - Internal to the C(gpufleet.nvidia.device_plugin) role (C(device_plugin_gpu_allocation=dra)).
options:
  _input:
    description: The cluster's Kubernetes version.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Refuse an older cluster
  ansible.builtin.fail:
    msg: "{{ 'v1.33.5' | gpufleet.nvidia.device_plugin_dra_version }}"
  when: "'v1.33.5' | gpufleet.nvidia.device_plugin_dra_version | length > 0"
"""

RETURN = r"""
_value:
  description: The refusal, or an empty string when the version is v1.34.2 or later.
  type: str
"""

from typing import Any, Callable

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.device_plugin.dra import version_problem

__all__ = ["FilterModule"]


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"device_plugin_dra_version": version_problem}
