# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""playbooks/tasks/stage.yml on localhost: a stage that fails is recorded as gpufleet_failed, said in the
output, and the later stages skip the host. The failing stage is the toolkit role, whose first task cannot template its
arguments (a variable that is not defined), so nothing on this machine is touched. The role is not validated against its
argument spec again here: site.yml's preflight did that for every host before any stage
(tests/controller/playbooks/test_preflight*.py)."""

import json
from pathlib import Path

import pytest

from ansible_collections.gpufleet.nvidia.tests.controller.playbook import run_playbook

pytestmark = pytest.mark.controller
REPO = Path(__file__).resolve().parents[3]

PLAY = """
- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: A stage that fails
      ansible.builtin.include_tasks: {stage}
      vars:
        gpufleet_stage: toolkit
        gpufleet_stage_when: true
        toolkit_bindir: "{{{{ gpufleet_test_not_defined }}}}"
    - name: A later stage on the same host
      ansible.builtin.include_tasks: {stage}
      vars: {{gpufleet_stage: runtime, gpufleet_stage_when: true}}
    - name: Keep the fact
      ansible.builtin.copy:
        content: "{{{{ gpufleet_failed | to_json }}}}"
        dest: {dump}
        mode: "0644"
"""


def test_a_failed_stage_is_recorded_said_and_skips_the_later_stages(tmp_path):
    dump = tmp_path / "failed.json"
    play = tmp_path / "play.yml"
    play.write_text(PLAY.format(stage=REPO / "playbooks" / "tasks" / "stage.yml", dump=dump))
    proc = run_playbook(play)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    failed = json.loads(dump.read_text())
    assert failed["stage"] == "toolkit"
    assert "gpufleet_test_not_defined" in failed["msg"]
    assert "localhost: stage toolkit failed at" in proc.stdout and "Validating arguments" not in proc.stdout
    assert "the later stages skip this host" in proc.stdout
    assert "gpufleet.nvidia.runtime" not in proc.stdout  # the runtime stage never ran
