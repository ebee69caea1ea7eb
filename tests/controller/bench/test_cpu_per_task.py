# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The bench's cpu_per_task callback in a real ``ansible-playbook`` run, and the scale section's split of its rows."""

from __future__ import annotations

import importlib.util
import json
import sys

from ansible_collections.gpufleet.nvidia.tests.controller.playbook import REPO, run_playbook

_spec = importlib.util.spec_from_file_location("gpufleet_bench", REPO / "bench" / "bench.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

PLAY = """\
- name: Two hosts, tasks of three kinds
  hosts: all
  gather_facts: false
  tasks:
    - name: Burn CPU on the controller
      ansible.builtin.set_fact:
        burnt: "{{ range(400000) | sum }}"
    - name: Skipped
      ansible.builtin.debug:
        msg: never
      when: false
    - name: Included
      ansible.builtin.include_tasks: included.yml
"""


def test_the_callback_splits_a_real_run_by_task(tmp_path):
    (tmp_path / "play.yml").write_text(PLAY)
    (tmp_path / "included.yml").write_text("- name: Inside\n  ansible.builtin.command: 'true'\n  changed_when: false\n")
    local = "ansible_connection=local ansible_python_interpreter=" + sys.executable
    (tmp_path / "hosts").write_text(f"a {local}\nb {local}\n")
    out_file = tmp_path / "cpu.json"
    result = run_playbook("-i", tmp_path / "hosts", tmp_path / "play.yml", **bench.cpu_env({}, str(out_file)))
    assert result.returncode == 0, result.stdout + result.stderr
    doc = json.loads(out_file.read_text())
    by_name = {}
    for name, action, _path, seconds in doc["rows"]:
        by_name.setdefault(name, []).append((action, seconds))
    assert by_name["Burn CPU on the controller"][0][0] == "ansible.builtin.set_fact"
    assert by_name["included.yml"][0][0] == "include"  # the include's processing, apart from its task
    assert by_name["Inside"][0][0] == "ansible.builtin.command"
    # the templated sum of 400000 numbers, twice, outweighs a skipped debug
    assert by_name["Burn CPU on the controller"][0][1] > by_name["Skipped"][0][1]
    assert doc["rows"][0][1] == "start" and doc["rows"][-1][0] == "Inside"  # the parsing first, the last task last
    assert sum(r[3] for r in doc["rows"]) <= doc["total"] + 0.01  # every second counted once
    ranked = bench.cpu_by_action(doc, 2)
    assert {a for a, _n, _c in ranked} >= {"set_fact", "debug", "include_tasks", "include", "command", "start"}
    assert [c for _a, _n, c in ranked] == sorted((c for _a, _n, c in ranked), reverse=True)


def test_the_callback_is_added_to_the_callbacks_already_enabled():
    env = bench.cpu_env({"ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.profile_tasks", "X": "1"}, "/out.json")
    assert env["ANSIBLE_CALLBACKS_ENABLED"] == "ansible.posix.profile_tasks,cpu_per_task"
    assert env["ANSIBLE_CALLBACK_PLUGINS"] == bench.CPU_CALLBACKS
    assert (env["GPUFLEET_CPU_PER_TASK"], env["X"]) == ("/out.json", "1")


def test_cpu_by_action_sums_per_action_and_divides_by_the_hosts():
    doc = {
        "rows": [
            ["(start)", "start", "", 1.0],
            ["Plan", "ansible.builtin.set_fact", "x.yml:1", 0.5],
            ["Write", "ansible.builtin.copy", "x.yml:4", 2.0],
            ["Plan again", "ansible.builtin.set_fact", "x.yml:8", 0.7],
            ["x.yml", "include", "/x.yml", 0.2],
        ],
        "total": 4.4,
    }
    assert bench.cpu_by_action(doc, 2) == [
        ("copy", 1, 1.0),
        ("set_fact", 2, 0.6),
        ("start", 1, 0.5),
        ("include", 1, 0.1),
    ]
    assert bench.cpu_by_action_note("first", 2, json.dumps(doc), top=2) == (
        "scale first, controller CPU per host by action over 2 hosts (2.20 s; tasks, then seconds per host): "
        "copy 1 1.000, set_fact 2 0.600, ..."
    )
