# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""toolkit_plan: the toolkit role's choices (provider, what the runtime trusts, NVIDIA's repository and key)."""

from __future__ import annotations

DOCUMENTATION = r"""
name: toolkit_plan
short_description: The toolkit role's choices for a host (provider, trusted device requests, NVIDIA's repository)
version_added: 1.0.0
author: gpufleet.nvidia contributors (@gpufleet)
description:
  - Given the C(gpufleet.nvidia.toolkit) role's variables (without their C(toolkit_) prefix), decides what the role
    installs and how the runtime trusts device requests on the host.
  - C(provider) - O(_input.provider) unless it is C(auto); then C(nvidia) when a mirror is set
    (O(_input.nvidia_mirror_url)), the host already has NVIDIA's container toolkit repository (O(repo_files) > 0)
    or NVIDIA's toolkit is installed (O(nvidia_installed), C(gpu_facts)' C(nvidia_toolkit.installed) - a host
    that runs NVIDIA's stack keeps it), else C(native) (the collection's own runtime shim and CDI hook).
  - C(adopt) - C(auto) chose C(nvidia) only because NVIDIA's toolkit is installed (no mirror, no repository file,
    no O(_input.nvidia_version) pin) - the role then keeps NVIDIA's packages as they are and configures no
    repository. With O(_input.nvidia_state=absent) (NVIDIA's
    packages and repository to be removed) C(auto) is C(native), and C(nvidia) is an error.
  - C(accept_envvar_unprivileged) / C(accept_volume_mounts) - the role variables when set; otherwise derived from
    O(kubernetes_node) (on a Kubernetes node the device plugin hands out GPUs, so an unprivileged container's
    C(NVIDIA_VISIBLE_DEVICES) is ignored and the plugin's volume mounts are honoured; elsewhere NVIDIA's behaviour).
    With O(gpu_allocation=dra) the DRA driver hands out GPUs as CDI devices, so no volume mount is honoured either.
  - C(accept_cdi_annotations_unprivileged) - the role variable when set; otherwise false on a Kubernetes node (CRI-O
    copies every pod annotation into the container's OCI spec, containerd those C(pod_annotations) matches, so a
    pod's own C(cdi.k8s.io/) annotation must not be an allocation; the device plugin's CDI strategies need CDI in
    the engine, which applies their annotations itself), true elsewhere.
  - C(repo) / C(key) - NVIDIA's repository (the mirror, else O(_input.nvidia_repo_url), without trailing slashes) and
    its key (O(_input.nvidia_key_url), else C(gpgkey) next to the repository's parent).
options:
  _input:
    description: The role's settings.
    type: dict
    required: true
    suboptions:
      provider:
        description: C(toolkit_provider) (C(auto), C(native) or C(nvidia)).
        type: str
        default: auto
      nvidia_state:
        description: C(toolkit_nvidia_state) (C(present) or C(absent)).
        type: str
        default: present
      nvidia_version:
        description: C(toolkit_nvidia_version) (a pin makes the role install from a repository, never adopt).
        type: str
        default: ""
      nvidia_mirror_url:
        description: C(toolkit_nvidia_mirror_url).
        type: str
        default: ""
      nvidia_repo_url:
        description: C(toolkit_nvidia_repo_url).
        type: str
        default: https://nvidia.github.io/libnvidia-container/stable
      nvidia_key_url:
        description: C(toolkit_nvidia_key_url).
        type: str
        default: ""
      accept_envvar_unprivileged:
        description: C(toolkit_accept_envvar_unprivileged); null derives it.
        type: raw
      accept_volume_mounts:
        description: C(toolkit_accept_volume_mounts); null derives it.
        type: raw
      accept_cdi_annotations_unprivileged:
        description: C(toolkit_accept_cdi_annotations_unprivileged); null derives it.
        type: raw
      nvidia_docker:
        description: C(toolkit_nvidia_docker) (install the C(nvidia-docker) wrapper with the native programs).
        type: raw
        default: true
  kubernetes_node:
    description: Whether the host is a Kubernetes node (the P(gpufleet.nvidia.kubernetes_node#filter) rule).
    type: bool
    default: false
  repo_files:
    description: How many of the host's package source files name NVIDIA's container toolkit repository.
    type: int
    default: 0
  nvidia_installed:
    description:
      - Whether NVIDIA's container toolkit is installed on the host (C(ansible_facts.nvidia.nvidia_toolkit.installed)).
    type: bool
    default: false
  gpu_allocation:
    description: Who serves a Kubernetes node's GPUs (C(device_plugin_gpu_allocation)) - C(device_plugin) or C(dra).
    type: str
    default: device_plugin
"""

EXAMPLES = r"""
- name: Plan the toolkit
  ansible.builtin.set_fact:
    _toolkit_plan: >-
      {{ {'provider': toolkit_provider, 'nvidia_mirror_url': toolkit_nvidia_mirror_url,
          'accept_envvar_unprivileged': toolkit_accept_envvar_unprivileged}
         | gpufleet.nvidia.toolkit_plan(kubernetes_node=true, repo_files=0) }}
"""

RETURN = r"""
_value:
  description: The plan.
  type: dict
  contains:
    provider:
      description: C(native) or C(nvidia).
      type: str
    nvidia_state:
      description: C(present) or C(absent) (remove NVIDIA's packages and repository first).
      type: str
    adopt:
      description: Keep NVIDIA's installed toolkit as it is (no repository, no package change); see C(adopt) above.
      type: bool
    kubernetes_node:
      description: O(kubernetes_node), as a bool.
      type: bool
    accept_envvar_unprivileged:
      description: Whether the runtime honours C(NVIDIA_VISIBLE_DEVICES) from an unprivileged container.
      type: bool
    accept_volume_mounts:
      description: Whether the runtime honours the device plugin's volume-mount requests.
      type: bool
    accept_cdi_annotations_unprivileged:
      description: Whether the runtime shim honours C(cdi.k8s.io/) annotations from an unprivileged container.
      type: bool
    repo:
      description: NVIDIA's repository URL.
      type: str
    key:
      description: NVIDIA's repository key URL.
      type: str
    programs:
      description:
        - The host programs the native provider installs (O(gpufleet.nvidia.host_programs#module:programs)) -
          all of them, C(nvidia-docker) only when O(_input.nvidia_docker) is true.
      type: list
      elements: str
"""

from typing import Any, Mapping

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.toolkit import ToolkitError, plan


def toolkit_plan(
    settings: Mapping[str, Any],
    kubernetes_node: Any = False,
    repo_files: Any = 0,
    nvidia_installed: Any = False,
    gpu_allocation: Any = "device_plugin",
) -> dict:
    """The role's choices; see DOCUMENTATION (``plugin_utils.toolkit.plan``)."""
    try:
        return plan(settings, kubernetes_node, repo_files, nvidia_installed, gpu_allocation)
    except ToolkitError as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule:
    def filters(self) -> dict:
        return {"toolkit_plan": toolkit_plan}
