# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""driver_gpu_gate: may the driver role change the driver or reboot now, given the processes holding a GPU."""

from __future__ import annotations

DOCUMENTATION = r"""
name: driver_gpu_gate
short_description: Whether the driver role may change the driver or reboot while processes hold a GPU
version_added: 1.0.0
author: gpufleet.nvidia contributors (@gpufleet)
description:
  - Reads C(ansible_facts.nvidia.gpu_users) (C(gpufleet.nvidia.gpu_facts)), the processes holding C(/dev/nvidia*)
    open whatever started them, and says what the C(gpufleet.nvidia.driver) role does before a driver package change
    or a reboot.
  - Without O(drain) any such process refuses the change; the message names each process, its container and the
    variable to set. With O(drain) the docker and podman containers among them are to be stopped (C(docker stop),
    C(podman stop) by id); a Kubernetes pod, another engine's container or a host process still refuses, with the
    reason (drain the Kubernetes node with C(kubectl drain), stop the others yourself).
  - Processes whose command is in O(ignore) (the driver's own daemons) never block.
options:
  _input:
    description: C(ansible_facts.nvidia.gpu_users).
    type: dict
    required: true
  drain:
    description: C(driver_drain) - stop the docker and podman containers holding a GPU instead of refusing.
    type: bool
    default: false
  ignore:
    description: Command names that never block (C(driver_drain_ignore)).
    type: list
    elements: str
    default: [nvidia-persistenced, nv-fabricmanager]
  reason:
    description: What is about to happen, for the message (C(the driver change), C(the reboot)).
    type: str
    default: the driver change
  host:
    description: The host's name, for the message.
    type: str
    default: ""
  stop_timeout:
    description: Seconds the engine gives a container between SIGTERM and SIGKILL (C(-t) of C(docker stop) and
      C(podman stop)); omitted, the engine's own default.
    type: int
  setting:
    description: The variable that asked for the drain, as the refusal names it.
    type: str
    default: driver_drain
"""

EXAMPLES = r"""
- name: Decide about the processes holding a GPU
  ansible.builtin.set_fact:
    gate: >-
      {{ ansible_facts.nvidia.gpu_users | gpufleet.nvidia.driver_gpu_gate(drain=false, reason='the reboot',
                                                                          host=inventory_hostname) }}

- name: Refuse while one runs
  ansible.builtin.fail:
    msg: "{{ gate.message }}"
  when: gate.refuse
"""

RETURN = r"""
_value:
  description:
    - C(busy) (a process blocks), C(refuse) and C(message) (the role stops the host with it), C(stop) (the commands to
      run when draining, C({engine, id, argv}) per container), C(stoppable) (those commands even while something else
      refuses - what a drain in check mode reports), C(users) (the processes that block, each C({pid, command,
      devices, engine, container_id, pod_uid, namespace})), C(ignored) (those left alone by O(ignore)) and C(warnings)
      (the scan stopped at its bounds, unreadable processes).
  type: dict
"""

from typing import Any, Callable

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.gpu_users import DEFAULT_IGNORE, GateError, checked_gate


def driver_gpu_gate(
    gpu_users: Any,
    drain: Any = False,
    ignore: Any = DEFAULT_IGNORE,
    reason: str = "the driver change",
    host: str = "",
    *,
    stop_timeout: Any = None,
    setting: Any = "driver_drain",
) -> dict[str, Any]:
    try:
        return checked_gate(
            gpu_users, drain=drain, ignore=ignore, reason=reason, host=host, stop_timeout=stop_timeout, setting=setting
        )
    except GateError as exc:
        raise AnsibleFilterError(f"driver_gpu_gate: {exc}") from exc


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"driver_gpu_gate": driver_gpu_gate}
