#!/usr/bin/python
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: dcgm_diag
short_description: Run NVIDIA DCGM's diagnostic (dcgmi diag) where DCGM is installed
version_added: 1.0.0
description:
  - Runs C(dcgmi diag -r <level> -j) and reads its JSON result; O(level) 1 takes seconds, 2 about two minutes,
    3 about 15 minutes, 4 longer (NVIDIA's dcgmi diag reference). C(passed) is true when no test result is C(Fail)
    and dcgmi exited 0. C(playbooks/remediate.yml) returns a host to service only when it passed.
  - Where C(dcgmi) is not installed it fails nothing and says so (C(available=false)).
  - The diagnostic loads the GPUs; run it on a drained host.
author:
  - gpufleet.nvidia contributors (@gpufleet)
extends_documentation_fragment:
  - gpufleet.nvidia.attributes
attributes:
  check_mode:
    support: full
    details: says whether DCGM is installed and what would run; runs no diagnostic.
  diff_mode:
    support: none
  idempotent:
    support: full
options:
  level:
    description: The diagnostic level, 1 to 4.
    type: int
    default: 1
  command:
    description: The dcgmi program, a name looked up on the PATH or a path.
    type: str
    default: dcgmi
"""

EXAMPLES = r"""
- name: Gate the return to service on DCGM's level 2 diagnostic
  gpufleet.nvidia.dcgm_diag:
    level: 2
  register: dcgm
"""

RETURN = r"""
available:
  description: Whether dcgmi is installed.
  returned: always
  type: bool
ran:
  description: Whether the diagnostic ran (not in check mode, not without DCGM).
  returned: always
  type: bool
passed:
  description: The diagnostic passed; null when it did not run.
  returned: always
  type: bool
summary:
  description: One line for the report.
  returned: always
  type: str
failed:
  description: The failed results, each C(<test> (GPU <id>)) with its warnings.
  returned: when it ran
  type: list
  elements: str
tests:
  description: Every result, C({category, name, status, entity, warnings}).
  returned: when it ran
  type: list
  elements: dict
rc:
  description: dcgmi's exit status.
  returned: when it ran
  type: int
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.nvidia.plugins.module_utils.base.runner import run_module
from ansible_collections.gpufleet.nvidia.plugins.module_utils.remediate import dcgm


def argspec() -> dict:
    return {
        "level": {"type": "int", "default": 1},
        "command": {"type": "str", "default": "dcgmi"},
    }


def main() -> None:
    module = AnsibleModule(argument_spec=argspec(), supports_check_mode=True)
    run_module(module, dcgm.DiagRequest.from_params, dcgm.run_diag)


if __name__ == "__main__":
    main()
