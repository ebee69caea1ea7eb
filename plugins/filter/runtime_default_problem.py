# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""runtime_default_problem: whether nvidia may become the engines' default runtime on a host."""

from __future__ import annotations

DOCUMENTATION = r"""
name: runtime_default_problem
short_description: Why nvidia must not be the default runtime of a host's engines (empty when it may)
version_added: 1.0.0
author: gpufleet.nvidia contributors (@gpufleet)
description:
  - The runtime role makes C(nvidia) the default runtime of docker, containerd and CRI-O on GPU nodes
    (C(runtime_set_as_default), as NVIDIA's GPU Operator does). On a Kubernetes node every pod then starts through
    the nvidia runtime, so that is allowed only together with the toolkit's rule that the runtime does not take
    C(NVIDIA_VISIBLE_DEVICES) from an unprivileged container as an allocation (C(accept_envvar_unprivileged) false,
    the toolkit role's default on Kubernetes nodes).
  - Returns the failure message (naming the host, both settings and the fixes) when O(set_as_default) and
    O(kubernetes_node) are true and the toolkit's C(accept_envvar_unprivileged) is not false; else an empty string.
options:
  _input:
    description: The toolkit (C(gpufleet_toolkit), or what C(stage_toolkit) found on the host) - C(provider),
      C(accept_envvar_unprivileged).
    type: dict
    required: true
  set_as_default:
    description: C(runtime_set_as_default).
    type: bool
    required: true
  kubernetes_node:
    description: Whether the host is a Kubernetes node (P(gpufleet.nvidia.kubernetes_node#filter)).
    type: bool
    required: true
  host:
    description: The host's name, for the message.
    type: str
    default: this host
"""

EXAMPLES = r"""
- name: Refuse nvidia as the default runtime where every pod could take every GPU
  ansible.builtin.assert:
    that: _problem | length == 0
    fail_msg: "{{ _problem }}"
  vars:
    _problem: "{{ gpufleet_toolkit | gpufleet.nvidia.runtime_default_problem(true, true, inventory_hostname) }}"
"""

RETURN = r"""
_value:
  description: The message, or an empty string.
  type: str
"""

from typing import Any, Callable, Mapping

from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.runtime_fact import default_runtime_problem


def runtime_default_problem(
    toolkit: Mapping[str, Any] | None, set_as_default: Any, kubernetes_node: Any, host: str = "this host"
) -> str:
    return default_runtime_problem(
        toolkit, boolean(set_as_default, strict=False), boolean(kubernetes_node, strict=False), str(host)
    )


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"runtime_default_problem": runtime_default_problem}
