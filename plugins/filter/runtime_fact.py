# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""runtime_fact: the runtime role's published fact from what its tasks returned (a pure function)."""

from __future__ import annotations

DOCUMENTATION = r"""
name: runtime_fact
short_description: The C(gpufleet_runtime) fact of the runtime role
version_added: 1.0.0
author: gpufleet.nvidia contributors (@gpufleet)
description:
  - Builds the fact the C(gpufleet.nvidia.runtime) role publishes from the results of its tasks, so that the
    record of each engine lives in one tested place instead of Jinja.
  - Each engine registered with C(gpufleet.nvidia.container_runtime) gets C(registered), C(default), C(cdi),
    C(config_path) (the module's C(config_file); where the module writes by default for an engine skipped in check
    mode), C(version) (the module's C(engine_version), else discovery's), C(changed) and C(message). podman, when
    installed, gets an entry that points at the CDI spec (it has no daemon to register a runtime with).
  - C(cdi) is true where CDI is wanted and the engine's version reads CDI specs (docker 25, containerd 1.7,
    CRI-O 1.23 and later; podman always, once there is a driver).
options:
  _input:
    description: The C(results) of the role's C(container_runtime) loop (each with C(item), the engine's name).
    type: list
    elements: dict
    required: true
  nvidia:
    description: C(ansible_facts.nvidia) from C(gpufleet.nvidia.gpu_facts) (its C(engines) and C(device_nodes)).
    type: dict
    required: true
  installed:
    description: The engines installed on the host that the role handles.
    type: list
    elements: str
    required: true
  settings:
    description:
      - C(set_as_default), C(cdi) (wanted), C(cdi_spec_path), C(tomlkit_package) (named in the check-mode message)
        and C(driver) (the installed driver version, empty when none).
    type: dict
    required: true
  spec:
    description: The registered result of C(gpufleet.nvidia.cdi_spec) (C(driver_version), C(devices)).
    type: dict
  links:
    description: The registered result of C(gpufleet-dev-char-links) (its C(stdout) is JSON with C(links)).
    type: dict
"""

EXAMPLES = r"""
- name: Publish the runtime fact
  ansible.builtin.set_fact:
    gpufleet_runtime: >-
      {{ _runtime_registration.results | gpufleet.nvidia.runtime_fact(
           nvidia=ansible_facts.nvidia, installed=['docker', 'podman'],
           settings={'set_as_default': false, 'cdi': true, 'cdi_spec_path': '/etc/cdi/nvidia.yaml',
                     'tomlkit_package': 'python3-tomlkit', 'driver': '535.261.03'},
           spec=_runtime_spec, links=_runtime_links | default({})) }}
"""

RETURN = r"""
_value:
  description:
    - C(engines) (engine name to C(registered), C(default), C(cdi), C(config_path), C(version), C(changed),
      C(message)), C(cdi_spec) (C(path), C(driver_version), C(devices)) and C(dev_char_links) (how many links).
  type: dict
"""

from typing import Any, Callable, Mapping, Sequence

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.runtime_fact import runtime_fact as _runtime_fact


def runtime_fact(
    results: Sequence[Mapping[str, Any]],
    nvidia: Mapping[str, Any],
    installed: Sequence[str],
    settings: Mapping[str, Any],
    *,
    spec: Mapping[str, Any] | None = None,
    links: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    try:
        return _runtime_fact(results, nvidia, installed, settings, spec=spec, links=links)
    except (KeyError, TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"gpufleet.nvidia.runtime_fact: {type(exc).__name__}: {exc}") from exc


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"runtime_fact": runtime_fact}
