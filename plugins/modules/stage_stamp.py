#!/usr/bin/python
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: stage_stamp
short_description: Tell whether a site.yml stage's last run on a host is still current, and stamp a finished run
version_added: 1.0.0
description:
  - The fast path of a no-change C(site.yml) rerun. At the end of a run in which a stage's role ran to the end,
    O(state=present) writes the stage's stamp under O(dir) - the digest of what the stage is asked (O(inputs)) and
    of the host as the next run's discovery will find it (O(facts), less what moves on its own - GPU users, Xid
    events, problems), the state of every file O(paths) names (content digest, type, mode, owner, link target, or
    absent), of the O(units) (enabled, active) and of the O(packages) (version, hold), and the facts the stage
    published (O(published)).
  - O(state=check) recomputes all of that and returns RV(current). Any difference - an edit of an engine's
    configuration, a lost device node, an apt upgrade, another value of a variable, another driver in the facts -
    gives RV(current=false) and RV(reason) names it. A stamp that is not current is removed then (outside check
    mode), so a stage that fails after the check leaves no stamp and the next run runs it in full again.
  - O(state=absent) removes the stamp (C(uninstall.yml) before a stage removes what it owns), and O(dir) and the
    folder above it when nothing else is left in them.
  - The stamp is the collection's bookkeeping, not host configuration - the module never reports a change.
author:
  - gpufleet.nvidia contributors (@gpufleet)
attributes:
  check_mode:
    support: full
    description: O(state=check) reads only; O(state=present) and O(state=absent) write nothing in check mode.
  diff_mode:
    support: none
    description: The stamp is bookkeeping; the module never reports a change.
  idempotent:
    support: full
    description: Never reports a change.
options:
  stage:
    description:
      - The stage (C(driver), C(toolkit), C(runtime), ...); its stamp is V(<dir>/<stage>.json).
      - One of O(stage) and O(stages).
    type: str
  stages:
    description:
      - Several stages stamped in one call (O(state=present) only), each with its own O(inputs), O(paths), O(units),
        O(packages) and O(published); O(facts) and O(dir) are shared. One of O(stage) and O(stages).
      - The end of a C(site.yml) run stamps every stamped stage that passed this way, in one module run.
    type: list
    elements: dict
    suboptions:
      stage:
        description: The stage.
        type: str
        required: true
      inputs:
        description: As O(inputs).
        type: raw
        default: {}
      paths:
        description: As O(paths).
        type: list
        elements: str
        default: []
      units:
        description: As O(units).
        type: list
        elements: str
        default: []
      packages:
        description: As O(packages).
        type: list
        elements: str
        default: []
      published:
        description: As O(published).
        type: dict
        default: {}
  state:
    description: C(check) compares, C(present) stamps a finished run, C(absent) removes the stamp.
    type: str
    choices: [check, present, absent]
    default: check
  inputs:
    description: What the stage is asked - its role variables and what else it reads.
    type: raw
    default: {}
  facts:
    description: C(ansible_facts.nvidia) - as this run found it (check), as the next run will (present).
    type: dict
    default: {}
  paths:
    description:
      - The files the stage owns, absolute paths; a path with shell wildcards names what matches and the folder it
        looks in (a new match is a change).
    type: list
    elements: str
    default: []
  units:
    description: The systemd units whose enabled and active state the stage owns.
    type: list
    elements: str
    default: []
  packages:
    description:
      - Regular expressions (matched against whole names) of the packages whose version and hold the stage owns, read
        from dpkg's status file, else from C(rpm -qa).
    type: list
    elements: str
    default: []
  published:
    description: The facts the stage published (O(state=present)); a current check returns them as RV(published).
    type: dict
    default: {}
  dir:
    description: Where the stamps are.
    type: path
    default: /var/lib/gpufleet-nvidia/stamps
"""

EXAMPLES = r"""
- name: Is the runtime stage's last run still current
  gpufleet.nvidia.stage_stamp:
    stage: runtime
    inputs: {runtime_engines: [docker, containerd]}
    facts: "{{ ansible_facts.nvidia }}"
    paths: [/etc/docker/daemon.json, /etc/cdi/nvidia.yaml, "/dev/nvidia*"]
  register: stamp

- name: Stamp the finished run (at the end of the run, with the host rediscovered)
  gpufleet.nvidia.stage_stamp:
    stage: runtime
    state: present
    inputs: {runtime_engines: [docker, containerd]}
    facts: "{{ ansible_facts.nvidia }}"
    paths: [/etc/docker/daemon.json, /etc/cdi/nvidia.yaml, "/dev/nvidia*"]
    published: {gpufleet_runtime: "{{ gpufleet_runtime }}"}
  when: not stamp.current

- name: Stamp several stages in one call
  gpufleet.nvidia.stage_stamp:
    state: present
    facts: "{{ ansible_facts.nvidia }}"
    stages:
      - stage: toolkit
        inputs: {toolkit_provider: native}
        paths: [/usr/local/bin/gpufleet-container-runtime]
        published: {gpufleet_toolkit: "{{ gpufleet_toolkit }}"}
      - stage: runtime
        inputs: {runtime_engines: [docker, containerd]}
        paths: [/etc/docker/daemon.json, /etc/cdi/nvidia.yaml]
        published: {gpufleet_runtime: "{{ gpufleet_runtime }}"}
"""

RETURN = r"""
current:
  description: Whether the stamp holds (O(state=check)); false with O(state=present) and O(state=absent).
  returned: always
  type: bool
reason:
  description: Why the stamp holds or not, in words (the first file, unit or input that differs).
  returned: always
  type: str
  sample: /etc/docker/daemon.json changed since the stamped run
digest:
  description: The digest of O(inputs) and O(facts) (the stamp holds it).
  returned: when state is check or present
  type: str
published:
  description: The facts the stamped run published (empty unless RV(current)).
  returned: always
  type: dict
stamp:
  description: The stamp's path (with O(stages), the folder of the stamps).
  returned: always
  type: str
stamps:
  description: Each stage of O(stages) to its stamp's path.
  returned: when O(stages) is given
  type: dict
  sample: {toolkit: /var/lib/gpufleet-nvidia/stamps/toolkit.json, runtime: /var/lib/gpufleet-nvidia/stamps/runtime.json}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.nvidia.plugins.module_utils.base.runner import run_module
from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery import stamp


def argspec() -> dict:
    return {
        "stage": {"type": "str"},
        "stages": {
            "type": "list",
            "elements": "dict",
            "options": {
                "stage": {"type": "str", "required": True},
                "inputs": {"type": "raw", "default": {}},
                "paths": {"type": "list", "elements": "str", "default": []},
                "units": {"type": "list", "elements": "str", "default": []},
                "packages": {"type": "list", "elements": "str", "default": []},
                "published": {"type": "dict", "default": {}},
            },
        },
        "state": {"type": "str", "choices": ["check", "present", "absent"], "default": "check"},
        "inputs": {"type": "raw", "default": {}},
        "facts": {"type": "dict", "default": {}},
        "paths": {"type": "list", "elements": "str", "default": []},
        "units": {"type": "list", "elements": "str", "default": []},
        "packages": {"type": "list", "elements": "str", "default": []},
        "published": {"type": "dict", "default": {}},
        "dir": {"type": "path", "default": stamp.STAMP_DIR},
    }


def main() -> None:
    module = AnsibleModule(
        argument_spec=argspec(),
        required_one_of=[("stage", "stages")],
        mutually_exclusive=[("stage", "stages")],
        supports_check_mode=True,
    )
    run_module(module, stamp.StampRequest.from_params, stamp.run_stamp)


if __name__ == "__main__":
    main()
