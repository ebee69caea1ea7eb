# Copyright (c) gpufleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""device_plugin_runtime_problems: why a node's container runtime cannot serve the device plugin."""

from __future__ import annotations

DOCUMENTATION = r"""
name: device_plugin_runtime_problems
short_description: Why a Kubernetes node's container runtime cannot run NVIDIA's device plugin
version_added: 0.1.0
author: gpufleet developers (@gpufleet)
description:
  - Reads the C(gpufleet_runtime) fact the C(runtime) role publishes and says, in sentences naming the fact and what
    to do, why the node's engine (containerd or CRI-O) lacks the C(nvidia) runtime, or CDI when a CDI device list
    strategy is chosen. An empty list means the node is ready.
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
    default: [envvar]
"""

EXAMPLES = r"""
- name: Stop early when containerd lacks the nvidia runtime
  ansible.builtin.fail:
    msg: "{{ problems | join('; ') }}"
  vars:
    problems: "{{ gpufleet_runtime | default(None) | gpufleet.nvidia.device_plugin_runtime_problems('containerd') }}"
  when: problems | length > 0
"""

RETURN = r"""
_value:
  description: The problems, one sentence each; empty when the node is ready.
  type: list
  elements: str
"""

import json

from ansible_collections.gpufleet.nvidia.plugins.module_utils._device_plugin import runtime_problems


def device_plugin_runtime_problems(runtime, engine="containerd", strategies=None):
    runtime = json.loads(json.dumps(runtime)) if runtime else None
    if isinstance(strategies, str):
        strategies = [s.strip() for s in strategies.split(",") if s.strip()]
    return runtime_problems(runtime, engine, list(strategies or ["envvar"]))


class FilterModule:
    def filters(self):
        return {"device_plugin_runtime_problems": device_plugin_runtime_problems}
