#!/usr/bin/python
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: dpkg_hold
short_description: Hold (or release) several Debian packages in one call
version_added: 1.0.0
description:
  - Sets dpkg's selection of every package of O(name) to O(selection) - what C(ansible.builtin.dpkg_selections) does
    for one package, for a list, with one C(dpkg --get-selections) and at most one C(dpkg --set-selections) on the
    host (a loop of C(dpkg_selections) is a module run per package).
  - A package dpkg does not know (not installed yet, as in check mode before the install that brings it) is listed in
    RV(missing) and counts as a change; it is not handed to dpkg, which would ignore it with a warning.
author:
  - gpufleet.nvidia contributors (@gpufleet)
extends_documentation_fragment:
  - gpufleet.nvidia.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
  idempotent:
    support: full
options:
  name:
    description: The packages (a multi-arch one may carry its architecture, C(libnvidia-ml1:amd64)).
    type: list
    elements: str
    required: true
  selection:
    description: C(hold) keeps apt from upgrading or removing them; C(install) releases the hold.
    type: str
    choices: [hold, install]
    default: hold
"""

EXAMPLES = r"""
- name: Hold the driver packages
  gpufleet.nvidia.dpkg_hold:
    name: [nvidia-driver, nvidia-kernel-dkms, firmware-nvidia-gsp]

- name: Release them before an upgrade
  gpufleet.nvidia.dpkg_hold:
    name: [nvidia-driver, nvidia-kernel-dkms, firmware-nvidia-gsp]
    selection: install
"""

RETURN = r"""
changed_packages:
  description: The packages whose selection was (in check mode, would be) set.
  returned: always
  type: list
  elements: str
  sample: [nvidia-driver]
missing:
  description: The packages of O(name) dpkg does not know (not installed).
  returned: always
  type: list
  elements: str
before:
  description: Each known package's selection before the call.
  returned: always
  type: dict
  sample: {nvidia-driver: install}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.nvidia.plugins.module_utils.base.dpkg_hold import HoldRequest, set_selections
from ansible_collections.gpufleet.nvidia.plugins.module_utils.base.runner import run_module


def argspec() -> dict:
    return {
        "name": {"type": "list", "elements": "str", "required": True},
        "selection": {"type": "str", "choices": ["hold", "install"], "default": "hold"},
    }


def main() -> None:
    module = AnsibleModule(argument_spec=argspec(), supports_check_mode=True)
    run_module(module, HoldRequest.from_params, set_selections)


if __name__ == "__main__":
    main()
