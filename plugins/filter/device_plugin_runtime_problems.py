# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""device_plugin_runtime_problems: why a node's container runtime cannot serve the device plugin."""

from __future__ import annotations

DOCUMENTATION = r"""
name: device_plugin_runtime_problems
short_description: Why a Kubernetes node's container runtime cannot run NVIDIA's device plugin
version_added: 1.0.0
author: gpufleet.nvidia contributors (@gpufleet)
description:
  - Reads the C(gpufleet_runtime) fact the C(runtime) role publishes and says, in sentences naming the fact and what
    to do, why the node's engine (containerd or CRI-O) lacks the C(nvidia) runtime, or CDI when a CDI device list
    strategy is chosen. An empty list means the node is ready.
  - With O(toolkit) (the C(gpufleet_toolkit) fact of the C(toolkit) role), also says when the device requests the
    node's runtime honours do not fit the strategies - C(volume-mounts) while C(accept_volume_mounts) is false, or
    C(envvar) alone while C(accept_envvar_unprivileged) is false (pods would get no GPU).
options:
  _input:
    description: C(gpufleet_runtime) (C(engines.<engine>.registered), C(engines.<engine>.cdi), C(message)); null when
      the runtime stage did not run.
    type: dict
    required: true
  engine:
    description: C(containerd) or C(crio).
    type: str
    default: containerd
  strategies:
    description: The device list strategies (C(envvar), C(volume-mounts), C(cdi-annotations), C(cdi-cri)).
    type: list
    elements: str
    default: [volume-mounts]
  toolkit:
    description: C(gpufleet_toolkit) (C(provider), C(accept_envvar_unprivileged), C(accept_volume_mounts)); null (the
      toolkit stage did not run here) checks nothing of it.
    type: dict
"""

EXAMPLES = r"""
- name: Stop early when containerd lacks the nvidia runtime, or the runtime would not honour the plugin's devices
  ansible.builtin.fail:
    msg: "{{ problems | join('; ') }}"
  vars:
    problems: >-
      {{ gpufleet_runtime | default(None)
         | gpufleet.nvidia.device_plugin_runtime_problems('containerd', ['volume-mounts'],
                                                          toolkit=gpufleet_toolkit | default(None)) }}
  when: problems | length > 0
"""

RETURN = r"""
_value:
  description: The problems, one sentence each; empty when the node is ready.
  type: list
  elements: str
"""

from typing import Any, Callable

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.device_plugin.problems import node_problems
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.device_plugin.settings import DEFAULTS


def device_plugin_runtime_problems(
    runtime: dict[str, Any] | None,
    engine: str = DEFAULTS["container_engine"],
    strategies: str | list[str] | None = None,
    toolkit: dict[str, Any] | None = None,
) -> list[str]:
    return node_problems(runtime, engine, strategies, toolkit)


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"device_plugin_runtime_problems": device_plugin_runtime_problems}
