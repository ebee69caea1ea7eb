# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""playbooks/tasks/reboot_guard.yml on localhost, fed the facts discovery gives (``next_boot`` and its problems as
discovery/next_boot.py makes them for each state): which states refuse the reboot, what the refusal says, and the
console switch for a pending MOK enrolment."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery import next_boot
from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery.problems import Host
from ansible_collections.gpufleet.nvidia.tests.controller.playbook import run_playbook

GUARD = Path(__file__).resolve().parents[3] / "playbooks" / "tasks" / "reboot_guard.yml"
DRIVER = "580.95.05"
KERNEL = "6.8.0-45-generic"
MODULE = f"/lib/modules/{KERNEL}/updates/dkms/nvidia.ko"
PLAY = """
- name: Reboot guard
  hosts: all
  gather_facts: false
  tasks:
    - name: The facts discovery gave
      ansible.builtin.set_fact:
        nvidia: {facts}
        cacheable: true
    - name: The guard
      ansible.builtin.include_tasks: {guard}
      vars:
        gpufleet_reboot_why: the test
    - name: Past the guard
      ansible.builtin.debug:
        msg: would reboot now
"""


def facts(state: str, **extra: object) -> dict:
    nb = {"kernel": KERNEL, "source": "/boot/grub/grubenv saved_entry", "module": MODULE, "state": state}
    nb.update({"detail": f"{MODULE} ...", "running_kernel": "6.8.0-40-generic", **extra})
    host = {"driver": {"installed_version": DRIVER}, "next_boot": nb}
    return {**host, "problems": next_boot.next_boot_problems(Host(host))}


def run(tmp_path: Path, nvidia: dict, *args: str) -> tuple[int, str]:
    inventory = {
        "all": {"hosts": {"node": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}
    }
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
    (tmp_path / "play.yml").write_text(PLAY.format(facts=json.dumps(nvidia), guard=GUARD))
    res = run_playbook("-i", tmp_path / "inventory.yml", tmp_path / "play.yml", *args)
    return res.returncode, res.stdout + res.stderr


@pytest.mark.parametrize(
    ("state", "extra", "says"),
    [
        (
            "no_module",
            {"detail": f"there is no nvidia.ko* under /lib/modules/{KERNEL}"},
            f"dkms autoinstall -k {KERNEL}",
        ),
        ("version_mismatch", {"version": "570.1"}, "has no nvidia module of the installed driver"),
        ("untrusted", {"detail": f"{MODULE} is signed by 'x' (key 01)"}, "mokutil --import"),
        ("enrolment_pending", {"signer": "site MOK"}, "enrolment pending at next boot (console needed)"),
    ],
)
def test_refused_states_stop_before_the_reboot(tmp_path: Path, state: str, extra: dict, says: str) -> None:
    rc, out = run(tmp_path, facts(state, **extra))
    assert rc != 0 and "not rebooting for the test" in out and says in out and KERNEL in out, out
    assert "would reboot now" not in out


def test_a_pending_enrolment_goes_ahead_with_someone_at_the_console(tmp_path: Path) -> None:
    rc, out = run(tmp_path, facts("enrolment_pending", signer="site MOK"), "-e", "gpufleet_reboot_mok_console=true")
    assert rc == 0 and "would reboot now" in out, out


def test_pairing_and_unknown_kernels_go_ahead(tmp_path: Path) -> None:
    rc, out = run(tmp_path, facts("ok", detail=f"{MODULE} {DRIVER} pairs with kernel {KERNEL}"))
    assert rc == 0 and "would reboot now" in out and f"pairs with kernel {KERNEL}" in out, out
    rc, out = run(tmp_path, facts("unknown", kernel=None, detail="the kernel the host boots next could not be found"))
    assert rc == 0 and "would reboot now" in out and "the reboot is not checked" in out, out
