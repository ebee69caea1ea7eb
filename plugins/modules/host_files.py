#!/usr/bin/python
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: host_files
short_description: Write a role's own small files and enable or start its systemd units in one call
version_added: 1.0.0
description:
  - Writes each file of O(files) with its content, mode, owner and group, or removes it (O(files[].state=absent)),
    then enables, starts or stops each unit of O(units). What one C(copy), C(template), C(file) and
    C(systemd_service) task each would do, in one module run on the host (each of those tasks is a module run, and
    C(copy) and C(template) several round trips).
  - A file is written only when its bytes, mode, owner or group differ, atomically (a temporary file in its folder
    renamed over it); missing folders are created with mode C(0755). A removed file is removed only when present.
  - C(systemctl daemon-reload) runs when a file under a systemd unit folder (C(/etc/systemd/), C(/run/systemd/),
    C(/usr/lib/systemd/), C(/lib/systemd/), C(/usr/local/lib/systemd/)) was written or removed, before any unit is
    touched.
  - C(udevadm control --reload-rules) runs when a file under a udev rules folder (C(/etc/udev/rules.d/),
    C(/run/udev/rules.d/), C(/usr/lib/udev/rules.d/), C(/lib/udev/rules.d/)) was written or removed and udev runs
    (C(/run/udev/control) is a socket; a container without udev has none), so the next device event reads it.
  - The path of a file must be a regular file or nothing; a folder, a link or a device there fails the module,
    naming it, before anything is written.
  - For the files a role owns outright. A file an admin edits is better edited key by key (the C(container_runtime)
    module), or backed up (O(files[].backup)).
author:
  - gpufleet.nvidia contributors (@gpufleet)
extends_documentation_fragment:
  - gpufleet.nvidia.attributes
attributes:
  check_mode:
    support: full
    details:
      - A unit whose file this run would create is reported as it would be enabled or started; systemd is not asked
        about it.
  diff_mode:
    support: full
  idempotent:
    support: full
options:
  files:
    description: The files, in the order they are written.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: The file (absolute, normalised).
        type: path
        required: true
      state:
        description: C(present) writes it with O(files[].content); C(absent) removes it.
        type: str
        choices: [present, absent]
        default: present
      content:
        description: The file's text (UTF-8). Required with O(files[].state=present).
        type: str
      mode:
        description: The file's permissions, octal.
        type: raw
        default: "0644"
      owner:
        description: The file's owner.
        type: str
        default: root
      group:
        description: The file's group.
        type: str
        default: root
      backup:
        description: Copy the file next to itself (as C(copy)'s C(backup) names the copy) before it is changed.
        type: bool
        default: false
  units:
    description: The systemd units, after the files.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: The unit, with its suffix (C(gpufleet-cdi-refresh.service)).
        type: str
        required: true
      enabled:
        description: Whether it starts at boot; not given, as it is.
        type: bool
      state:
        description: C(started) starts it when not active, C(stopped) stops it when active; not given, as it is.
        type: str
        choices: [started, stopped]
"""

EXAMPLES = r"""
- name: A unit and the options it reads, enabled and started
  gpufleet.nvidia.host_files:
    files:
      - path: /etc/gpufleet/cdi-refresh.json
        content: "{{ {'path': '/etc/cdi/nvidia.yaml'} | to_nice_json }}\n"
      - path: /etc/systemd/system/gpufleet-cdi-refresh.service
        content: "{{ lookup('ansible.builtin.template', 'gpufleet-cdi-refresh.service.j2') }}"
    units:
      - name: gpufleet-cdi-refresh.service
        enabled: true

- name: A modprobe file no longer wanted
  gpufleet.nvidia.host_files:
    files:
      - path: /etc/modprobe.d/gpufleet-nvidia.conf
        state: absent
"""

RETURN = r"""
changed_files:
  description: The files written or removed (in check mode, that would be), in the order of O(files).
  returned: always
  type: list
  elements: str
  sample: [/etc/systemd/system/gpufleet-cdi-refresh.service]
backups:
  description: File to the backup made of it before it was changed.
  returned: always
  type: dict
  sample: {/etc/modprobe.d/blacklist-nouveau.conf: /etc/modprobe.d/blacklist-nouveau.conf.1234.2026-11-28@10:00:00~}
daemon_reloaded:
  description: Whether a unit file changed, so systemd was (in check mode, would be) reloaded.
  returned: always
  type: bool
udev_reloaded:
  description: Whether a udev rule changed while udev runs, so udev was (in check mode, would be) told to read them.
  returned: always
  type: bool
units:
  description: Each unit of O(units), as it is after the call.
  returned: always
  type: dict
  contains:
    enabled:
      description:
        - Whether it starts at boot (C(null) in check mode for a unit systemd does not know yet and that is not
          enabled).
      type: bool
    active:
      description: Whether it runs (or, for a oneshot unit, ran and remains).
      type: bool
    done:
      description: What was (in check mode, would be) done to it, of C(enable), C(disable), C(start), C(stop).
      type: list
      elements: str
  sample: {gpufleet-cdi-refresh.service: {enabled: true, active: false, done: [enable]}}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.nvidia.plugins.module_utils.base.hostfiles import FilesRequest, apply_files
from ansible_collections.gpufleet.nvidia.plugins.module_utils.base.runner import run_module


def argspec() -> dict:
    return {
        "files": {
            "type": "list",
            "elements": "dict",
            "default": [],
            "options": {
                "path": {"type": "path", "required": True},
                "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
                "content": {"type": "str"},
                "mode": {"type": "raw", "default": "0644"},
                "owner": {"type": "str", "default": "root"},
                "group": {"type": "str", "default": "root"},
                "backup": {"type": "bool", "default": False},
            },
        },
        "units": {
            "type": "list",
            "elements": "dict",
            "default": [],
            "options": {
                "name": {"type": "str", "required": True},
                "enabled": {"type": "bool"},
                "state": {"type": "str", "choices": ["started", "stopped"]},
            },
        },
    }


def main() -> None:
    module = AnsibleModule(argument_spec=argspec(), supports_check_mode=True)
    run_module(module, FilesRequest.from_params, apply_files)


if __name__ == "__main__":
    main()
