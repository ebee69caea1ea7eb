# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The validate role waits for Fabric Manager on an NVSwitch host before any GPU container runs, on
localhost with a stand-in ``systemctl`` first on PATH that answers ``is-active`` from a list of states and logs
each call. No simulated node presents NVSwitches (tests/sim has no NVSwitch PCI function), so the role's tasks run
here; gpu_facts' NVSwitch count and the ``fabric_manager_down`` problem are tested in the discovery unit tests."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from ansible_collections.gpufleet.nvidia.tests.controller.playbook import run_playbook

pytestmark = pytest.mark.controller

PLAY = """
- hosts: all
  gather_facts: false
  tasks:
    - name: A GPU host as gpu_facts would say (cacheable, so it lands in ansible_facts)
      ansible.builtin.set_fact:
        nvidia: {nvidia}
        cacheable: true

    - name: The validate stage
      ansible.builtin.include_role:
        name: gpufleet.nvidia.validate
      vars:
        validate_refresh_facts: false
        validate_fail_on_error: false
        validate_fabric_manager_timeout: {timeout}
"""

SYSTEMCTL = """#!/bin/sh
# stand-in: 'systemctl is-active UNIT' answers the next state of $FM_STATES (the last one repeats)
echo "$*" >> "$FM_LOG"
n=$(wc -l < "$FM_LOG")
set -- $FM_STATES
[ "$n" -gt "$#" ] && n=$#
eval "state=\\${$n}"
echo "$state"
[ "$state" = active ]
"""


def run(tmp_path: Path, nvswitches: int, states: str, timeout: int = 30):
    nvidia = {
        "gpu_node": True,
        "gpus": [],
        "engines": {},
        "fabric_manager": {"nvswitch_count": nvswitches, "state": states.split(maxsplit=1)[0]},
    }
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "systemctl").write_text(SYSTEMCTL)
    (tmp_path / "bin" / "systemctl").chmod(0o755)
    log = tmp_path / "systemctl.log"
    log.write_text("")
    inventory = {
        "all": {"hosts": {"hgx": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}
    }
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
    (tmp_path / "play.yml").write_text(
        PLAY.format(nvidia=yaml.safe_dump(nvidia, default_flow_style=True).strip(), timeout=timeout)
    )
    res = run_playbook(
        "-i",
        tmp_path / "inventory.yml",
        tmp_path / "play.yml",
        PATH=f"{tmp_path / 'bin'}:/usr/bin:/bin",
        FM_STATES=states,
        FM_LOG=str(log),
    )
    return res, log.read_text().splitlines()


def test_waits_until_fabric_manager_is_active_then_runs_the_checks(tmp_path):
    res, calls = run(tmp_path, 4, "activating active")
    out = res.stdout + res.stderr
    assert calls == ["is-active nvidia-fabricmanager.service"] * 2, out
    assert "Prepare and run the checks" in out, out
    assert "NVSwitch(es) on the PCI bus, but" not in out, out


def test_fails_naming_the_unit_and_the_fix_when_it_failed(tmp_path):
    res, calls = run(tmp_path, 4, "failed")
    out = res.stdout + res.stderr
    assert res.returncode != 0, out
    assert len(calls) == 1, calls  # a failed unit ends the wait at once
    assert "4 NVSwitch(es) on the PCI bus, but nvidia-fabricmanager.service is failed" in out, out
    assert "systemctl enable --now nvidia-fabricmanager.service" in out, out
    assert "Run a GPU container through each engine" not in out, out  # before any GPU container


def test_the_wait_is_bounded(tmp_path):
    res, calls = run(tmp_path, 2, "activating", timeout=5)
    out = res.stdout + res.stderr
    assert res.returncode != 0, out
    assert 1 <= len(calls) <= 3, calls
    assert "nvidia-fabricmanager.service is activating after waiting 5 s" in out, out
    assert "validate_fabric_manager_timeout" in out, out


def test_a_host_without_nvswitches_does_not_ask(tmp_path):
    res, calls = run(tmp_path, 0, "failed")
    out = res.stdout + res.stderr
    assert calls == [], out
    assert "Prepare and run the checks" in out, out
