# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""nvidia_toolkit_packages: NVIDIA's toolkit packages to install, at which version, held or not, and what is there."""

from __future__ import annotations

DOCUMENTATION = r"""
name: nvidia_toolkit_packages
short_description: The package requests of the toolkit role's nvidia provider, from the pin and what is installed
version_added: 1.0.0
author: gpufleet.nvidia contributors (@gpufleet)
description:
  - NVIDIA's install guide pins the four packages of the container toolkit together
    (C(nvidia-container-toolkit=V nvidia-container-toolkit-base=V libnvidia-container-tools=V libnvidia-container1=V)
    with C(NVIDIA_CONTAINER_TOOLKIT_VERSION=1.18.0-1) on apt, C(-V) suffixes on dnf;
    U(https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/install-guide.html), read
    2026-11-23). This filter turns O(version) into those requests, says whether the packages are to be held
    (pinned) or released, and whether anything is to change on the host (so the role refreshes the package index
    only then).
options:
  _input:
    description:
      - C(ansible_facts.packages) as C(ansible.builtin.package_facts) sets it (name to a list of
        C({version, release})); an empty dict when unknown.
    type: dict
    required: true
  version:
    description: C(toolkit_nvidia_version); empty installs what the repository has (once; no hold).
    type: str
    default: ""
  os_family:
    description: C(ansible_facts.os_family) (C(Debian) - C(name=version); anything else - C(name-version)).
    type: str
    default: Debian
"""

EXAMPLES = r"""
- name: What to install
  ansible.builtin.set_fact:
    _toolkit_packages: "{{ ansible_facts.packages | gpufleet.nvidia.nvidia_toolkit_packages('1.18.0-1') }}"
"""

RETURN = r"""
_value:
  description: The requests.
  type: dict
  contains:
    names:
      description: The four package names, NVIDIA's order.
      type: list
      elements: str
    install:
      description: The package manager's requests (C(name=version), C(name-version) or C(name)).
      type: list
      elements: str
    selection:
      description: C(hold) when O(version) is set, else C(install) (apt's dpkg selection).
      type: str
    installed:
      description:
        - The installed version of each of C(names) that is installed (apt - C(version); dnf - C(version-release)).
      type: dict
    pending:
      description: Whether a package is missing, or not at O(version).
      type: bool
"""

from typing import Any, Mapping

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.toolkit import PACKAGES, ToolkitError
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.toolkit import packages as package_requests

__all__ = ["PACKAGES", "FilterModule", "nvidia_toolkit_packages"]


def nvidia_toolkit_packages(packages: Mapping[str, Any] | None, version: str = "", os_family: str = "Debian") -> dict:
    """The requests; see DOCUMENTATION (``plugin_utils.toolkit.packages``)."""
    try:
        return package_requests(packages, version, os_family)
    except ToolkitError as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule:
    def filters(self) -> dict:
        return {"nvidia_toolkit_packages": nvidia_toolkit_packages}
