#!/usr/bin/python
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: apt_prepare
short_description: Get apt ready for a package change and say which packages it would change, in one call
version_added: 1.0.0
description:
  - What a role asks apt before it installs or removes packages, in one module run on the host (the driver role ran a
    C(find), two C(command)s and two C(apt) tasks for it).
  - Finishes an interrupted dpkg run first (its journal left in C(/var/lib/dpkg/updates), where apt refuses every
    install until C(dpkg --configure -a)), as apt asks. Turn off with O(recover=false).
  - With O(state=present), updates the package lists when apt knows no candidate for a package of O(packages) or
    O(candidates) (lists emptied, a repository just added), when O(update_cache) is true, or when they are older than
    O(cache_valid_time) (the age C(ansible.builtin.apt) reads, the mtime of
    C(/var/lib/apt/periodic/update-success-stamp), else of C(/var/lib/apt/lists)). The update is retried twice.
  - Then fails, naming the component to enable and where, when a package of O(components) has no candidate (a Debian
    archive component such as C(contrib), C(non-free) or C(non-free-firmware) missing from the sources).
  - Returns in RV(pending) the packages of O(packages) that C(ansible.builtin.apt) with the same O(state) would change,
    read from dpkg's database. For C(present), a package not installed, or installed at a version its C(=VERSION)
    does not match (an fnmatch pattern, as C(ansible.builtin.apt) takes it; an installed package without a version is
    never upgraded). For C(absent) (a purge), every package installed or with its configuration files left whose name
    matches an entry (an fnmatch pattern).
  - The module installs and removes nothing itself. Updating the lists is not a change (as C(ansible.builtin.apt)
    with C(changed_when=false)); finishing a dpkg run is.
author:
  - gpufleet.nvidia contributors (@gpufleet)
extends_documentation_fragment:
  - gpufleet.nvidia.attributes
attributes:
  check_mode:
    support: full
    details:
      - Neither C(dpkg --configure -a) nor the update runs; RV(recovered) and RV(cache_updated) say they would.
        A component without a candidate is then a warning when the update would have run (the lists may bring it).
  diff_mode:
    support: none
  idempotent:
    support: full
options:
  packages:
    description:
      - The packages of the change, C(NAME), C(NAME:ARCH) or C(NAME=VERSION) (VERSION may be an fnmatch pattern such as
        C(580.95.05-*)); with O(state=absent), name patterns such as C(nvidia-*-580*).
    type: list
    elements: str
    default: []
  state:
    description: Whether the change installs (C(present)) or purges (C(absent)) O(packages).
    type: str
    choices: [present, absent]
    default: present
  candidates:
    description:
      - Further packages that must have a candidate for the lists to count as current (kernel headers, a pinning
        package installed before the others). O(state=present) only.
    type: list
    elements: str
    default: []
  components:
    description:
      - A package for each archive component the change needs, mapped to that component, such as
        C(firmware-nvidia-gsp) to C(non-free-firmware). O(state=present) only.
    type: dict
    default: {}
  cache_valid_time:
    description: Update the lists when they are older than this many seconds; C(0) updates them on every run.
    type: int
    default: 3600
  update_cache:
    description: Update the lists whatever their age (the sources just changed).
    type: bool
    default: false
  recover:
    description: Finish an interrupted dpkg run (C(dpkg --configure -a)) before anything else.
    type: bool
    default: true
notes:
  - For Debian and Ubuntu hosts (C(dpkg), C(apt-get), C(apt-cache)).
seealso:
  - module: ansible.builtin.apt
  - module: gpufleet.nvidia.dpkg_hold
"""

EXAMPLES = r"""
- name: Get apt ready for the driver and ask what would change
  gpufleet.nvidia.apt_prepare:
    packages: [nvidia-driver, firmware-nvidia-gsp]
    candidates: [linux-headers-amd64]
    components: {nvidia-driver: non-free, firmware-nvidia-gsp: non-free-firmware}
  register: apt_ready

- name: Install the driver only when apt would change it
  ansible.builtin.apt:
    name: [nvidia-driver, firmware-nvidia-gsp]
  when: apt_ready.pending | length > 0

- name: What a purge of every driver package would remove
  gpufleet.nvidia.apt_prepare:
    state: absent
    packages: ["nvidia-*", "libnvidia-*"]
"""

RETURN = r"""
recovered:
  description: Whether an interrupted dpkg run was (in check mode, would be) finished.
  returned: always
  type: bool
cache_updated:
  description: Whether the package lists were (in check mode, would be) updated.
  returned: always
  type: bool
update_reasons:
  description: Why the lists were updated (empty when they were not).
  returned: always
  type: list
  elements: str
  sample: ["no candidate for nvidia-open-580"]
pending:
  description: The entries of O(packages) that would be installed (C(present)), or the installed packages that would
    be purged (C(absent)).
  returned: always
  type: list
  elements: str
  sample: [nvidia-driver]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.nvidia.plugins.module_utils.base.apt_prepare import PrepareRequest, prepare
from ansible_collections.gpufleet.nvidia.plugins.module_utils.base.runner import STATE, run_module


def argspec() -> dict:
    return {
        "packages": {"type": "list", "elements": "str", "default": []},
        "state": STATE,
        "candidates": {"type": "list", "elements": "str", "default": []},
        "components": {"type": "dict", "default": {}},
        "cache_valid_time": {"type": "int", "default": 3600},
        "update_cache": {"type": "bool", "default": False},
        "recover": {"type": "bool", "default": True},
    }


def main() -> None:
    module = AnsibleModule(argument_spec=argspec(), supports_check_mode=True)
    run_module(module, PrepareRequest.from_params, prepare)


if __name__ == "__main__":
    main()
