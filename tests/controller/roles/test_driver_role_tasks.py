# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The driver role's task order where no simulated node can show it (a reboot): the initramfs handler that the
nouveau blacklist and the NVreg_* options notify runs before the reboot, not at the end of the play. Read
from the task files as Ansible would run them. And the Secure Boot stop where Ubuntu 22.04's
dkms 2.8.7 would ignore the given signing key, run on localhost in check mode with a stand-in mokutil."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.driver_plan import plan
from ansible_collections.gpufleet.nvidia.tests.controller.playbook import run_playbook

pytestmark = pytest.mark.controller
TASKS = Path(__file__).resolve().parents[3] / "roles" / "driver" / "tasks"


def steps(name: str) -> list[str]:
    """Each task of a task file as 'include:<file>' (included or imported), 'meta:<action>' or its module name."""
    found = []
    for task in yaml.safe_load((TASKS / name).read_text()):
        if "ansible.builtin.include_tasks" in task or "ansible.builtin.import_tasks" in task:
            found.append(f"include:{task.get('ansible.builtin.include_tasks') or task['ansible.builtin.import_tasks']}")
        elif "ansible.builtin.meta" in task:
            found.append(f"meta:{task['ansible.builtin.meta']}")
        else:
            found.append(next(k for k in task if k.startswith("ansible.") or k.startswith("gpufleet.")))
    return found


def test_initramfs_handlers_run_before_the_reboot():
    order = steps("driver.yml")
    modprobe, reboot = order.index("include:modprobe.yml"), order.index("include:reboot.yml")
    assert "meta:flush_handlers" in order[modprobe:reboot], order
    # and the handler it flushes is the one the modprobe files notify
    notified = {t.get("notify") for t in yaml.safe_load((TASKS / "modprobe.yml").read_text())} - {None}
    assert notified == {"Rebuild the initramfs"}
    handlers = yaml.safe_load((TASKS.parent / "handlers" / "main.yml").read_text())
    assert "Rebuild the initramfs" in [h["name"] for h in handlers]


SECURE_BOOT_PLAY = """
- hosts: all
  gather_facts: false
  tasks:
    - name: No problems from gpu_facts (cacheable, so it lands in ansible_facts)
      ansible.builtin.set_fact:
        nvidia: {{problems: []}}
        cacheable: true

    - name: The driver role's Secure Boot tasks
      ansible.builtin.include_tasks: "{tasks}/secure_boot.yml"
      vars:
        driver_plan: {plan}
        driver_signing_key: "{key}"
        driver_signing_cert: "{cert}"
"""


def run_secure_boot(tmp_path: Path, plan: dict, key: str, cert: str, sb_state: str):
    """secure_boot.yml on localhost in check mode (it writes nothing), a stand-in mokutil first on PATH."""
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "mokutil").write_text(f"#!/bin/sh\necho '{sb_state}'\n")
    (tmp_path / "bin" / "mokutil").chmod(0o755)
    inventory = {
        "all": {"hosts": {"jammy": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}
    }
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
    play = SECURE_BOOT_PLAY.format(tasks=TASKS, plan=json.dumps(plan), key=key, cert=cert)
    (tmp_path / "play.yml").write_text(play)
    res = run_playbook(
        "-i", tmp_path / "inventory.yml", tmp_path / "play.yml", "--check", PATH=f"{tmp_path / 'bin'}:/usr/bin:/bin"
    )
    return res, res.stdout + res.stderr


def test_ubuntu_2204_dkms_287_stops_before_ignoring_the_given_key(tmp_path):
    """Ubuntu 22.04's dkms 2.8.7 would sign with the shim-signed MOK and not the given key."""
    jammy = plan(
        {
            "distribution": "Ubuntu",
            "distribution_major_version": "22",
            "kernel": "5.15.0-125-generic",
            "architecture": "x86_64",
        },
        {"branch": "580", "ubuntu_precompiled": False},
        {"gpus": [{"architecture": "Ampere"}]},
    )
    assert jammy["dkms_signing"] == "shim-mok"
    res, out = run_secure_boot(tmp_path, jammy, "/root/mok.key", "/root/mok.der", "SecureBoot enabled")
    assert res.returncode != 0, out
    assert "has dkms 2.8.7, which ignores" in out and "MOK.priv" in out, out
    assert "Let DKMS sign the module with the given key" not in out.split("has dkms 2.8.7")[1], out


def test_ubuntu_2404_dkms_takes_the_given_key(tmp_path):
    """The control: 24.04's dkms (3.x) reads framework.conf.d, so the same settings go on to write it."""
    noble = plan(
        {
            "distribution": "Ubuntu",
            "distribution_major_version": "24",
            "kernel": "6.8.0-45-generic",
            "architecture": "x86_64",
        },
        {"branch": "580", "ubuntu_precompiled": False},
        {"gpus": [{"architecture": "Ampere"}]},
    )
    assert noble["dkms_signing"] == "conf.d"
    res, out = run_secure_boot(tmp_path, noble, "/root/mok.key", "/root/mok.der", "SecureBoot enabled")
    assert res.returncode == 0, out
    assert "Let DKMS sign the module with the given key" in out, out
    assert "has dkms 2.8.7" not in out, out
