# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The preflight of site.yml (playbooks/tasks/preflight.yml): a bad role variable ends the run in the first play,
naming the host, variable, value and what is allowed, before discovery or any stage; good values, survey strings
included, pass it. No host is contacted (every host of the inventory is local, and nothing reaches it)."""

import sys
from pathlib import Path

import pytest

from ansible_collections.gpufleet.nvidia.tests.controller.playbook import run_playbook

pytestmark = pytest.mark.controller
REPO = Path(__file__).resolve().parents[3]


def _inventory(tmp_path):
    inventory = tmp_path / "inventory.ini"
    python = f"ansible_connection=local ansible_python_interpreter={sys.executable}"
    inventory.write_text(f"gpu-a {python} validate_engines=docker,podmn\ngpu-b {python}\n")
    return inventory


def test_site_refuses_a_bad_engine_name_before_any_stage(tmp_path):
    proc = run_playbook(
        "-i", _inventory(tmp_path), REPO / "playbooks" / "site.yml", "-e", "runtime_engines=dockr",
        "-e", f"report_dir={tmp_path / 'reports'}",
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    for host in ("gpu-a", "gpu-b"):
        assert f"{host}: the run stops before any stage" in out
    assert "runtime_engines='dockr': value of runtime_engines must be one or more of: docker, containerd" in out
    assert "validate_engines=['docker', 'podmn']:" in out and "podmn is not an engine" in out  # gpu-a's own, same pass
    assert "PLAY [Discover" not in out and "gpu_facts" not in out  # no stage, no discovery
    assert not (tmp_path / "reports").exists()


def test_good_values_and_survey_strings_pass_the_preflight(tmp_path):
    play = tmp_path / "play.yml"
    play.write_text(
        f"- hosts: all\n  gather_facts: false\n  tasks:\n"
        f"    - ansible.builtin.import_tasks: {REPO / 'playbooks' / 'tasks' / 'preflight.yml'}\n"
    )
    proc = run_playbook(
        "-i", _inventory(tmp_path), play, "-e", "runtime_engines=docker,podman", "-e", "runtime_restart=false",
        "-e", "validate_engines=", "-e", "gpufleet_lock_timeout=900", "-e", "driver_reboot=never",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "skipping: [gpu-a] => (item=gpu-a)" in proc.stdout and "skipping: [gpu-a] => (item=gpu-b)" in proc.stdout


def test_values_only_a_later_play_can_template_are_left_to_the_role(tmp_path):
    """A role variable naming a role default or a fact, and any other host variable doing so, stop nothing here."""
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(
        "all:\n  hosts:\n    gpu-a:\n      ansible_connection: local\n"
        "      runtime_path: '{{ toolkit_bindir }}/gpufleet-container-runtime'\n"
        "      device_plugin_node_selector: {zone: '{{ ansible_default_ipv4.address }}'}\n"
        "      my_address: '{{ ansible_default_ipv4.address }}'\n"
    )
    play = tmp_path / "play.yml"
    play.write_text(
        f"- hosts: all\n  gather_facts: false\n  tasks:\n"
        f"    - ansible.builtin.import_tasks: {REPO / 'playbooks' / 'tasks' / 'preflight.yml'}\n"
    )
    proc = run_playbook("-i", inventory, play)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
