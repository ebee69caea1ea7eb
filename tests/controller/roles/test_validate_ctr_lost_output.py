# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The validate role runs a containerd check once more when ``ctr run`` lost all of its output (exit 0, nothing on
either stream: containerd's short-lived-task race), and only then. On localhost with a stand-in ``ctr`` first on PATH
that logs each ``run`` and answers as ``$CTR_MODE`` says: ``lost-once`` (nothing the first time, a line after),
``lost`` (nothing every time), ``fails`` (exit 1 with an error). The race itself cannot be made on demand with a real
containerd; the simulated fleet's validation runs the real one (tests/integration/test_validate_report.py)."""

from __future__ import annotations

import json
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
    - name: A GPU host with containerd as gpu_facts would say (cacheable, so it lands in ansible_facts)
      ansible.builtin.set_fact:
        nvidia: {nvidia}
        cacheable: true

    - name: The validate stage
      ansible.builtin.include_role:
        name: gpufleet.nvidia.validate
      vars:
        validate_refresh_facts: false
        validate_fail_on_error: false
        validate_pull: never

    - name: The result
      ansible.builtin.debug:
        msg: "RESULT {{{{ gpufleet_validate | to_json }}}}"
"""

CTR = """#!/bin/sh
# stand-in ctr: 'images ls' says the image is there; 'run' is logged and answers as $CTR_MODE says
case " $* " in
  *" images ls "*) echo "$CTR_REF"; exit 0;;
  *" run "*) echo run >> "$CTR_LOG"; n=$(wc -l < "$CTR_LOG");;
  *) exit 0;;
esac
case "$CTR_MODE" in
  lost) exit 0;;
  lost-once) [ "$n" -eq 1 ] && exit 0; echo "a line the check cannot read"; exit 0;;
  cut-once) [ "$n" -eq 1 ] && { echo GPUFLEET-VALIDATE-BEGIN; exit 0; }; echo "a line the check cannot read"; exit 0;;
  fails) echo "ctr: failed to create shim task: the runtime refused" >&2; exit 1;;
esac
"""


def run(tmp_path: Path, mode: str):
    nvidia = {
        "gpu_node": True,
        "gpus": [{"minor": 0, "uuid": "GPU-6fbb13f4-2023-5f31-9d6f-12c3ec57dd4e"}],
        "device_nodes": [{"path": "/dev/nvidiactl"}],
        "engines": {
            "docker": {"installed": False},
            "podman": {"installed": False},
            "crio": {"installed": False},
            "containerd": {"installed": True, "version": "2.1.9", "runtimes": ["runc"], "cdi_enabled": False},
        },
        "fabric_manager": {"nvswitch_count": 0},
    }
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "ctr").write_text(CTR)
    (tmp_path / "bin" / "ctr").chmod(0o755)
    log = tmp_path / "ctr.log"
    log.write_text("")
    inventory = {
        "all": {"hosts": {"gpu": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}
    }
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
    (tmp_path / "play.yml").write_text(PLAY.format(nvidia=json.dumps(nvidia)))
    res = run_playbook(
        "-i",
        tmp_path / "inventory.yml",
        tmp_path / "play.yml",
        PATH=f"{tmp_path / 'bin'}:/usr/bin:/bin",
        CTR_MODE=mode,
        CTR_LOG=str(log),
        CTR_REF="docker.io/gpufleet-sim/mini:latest",
    )
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    line = next(x for x in out.splitlines() if '"RESULT ' in x)
    result = json.loads(line.split('"RESULT ', 1)[1].rsplit('"', 1)[0].encode().decode("unicode_escape"))
    return result, len(log.read_text().splitlines()), out


def test_a_run_that_lost_its_output_is_made_once_more(tmp_path):
    result, runs, out = run(tmp_path, "lost-once")
    assert runs == 2, out
    message = result["engines"]["containerd"]["message"]
    assert "printed nothing" not in message, message  # the second answer is the one judged


def test_a_run_whose_output_lost_its_tail_is_made_once_more(tmp_path):
    _result, runs, out = run(tmp_path, "cut-once")
    assert runs == 2, out


def test_a_second_empty_answer_is_recorded_as_no_output(tmp_path):
    result, runs, out = run(tmp_path, "lost")
    assert runs == 2, out
    assert result["failed_engines"] == ["containerd"], result
    assert "exited 0 and printed nothing, 2 time(s)" in result["engines"]["containerd"]["message"], result


def test_a_failing_run_is_not_repeated(tmp_path):
    result, runs, out = run(tmp_path, "fails")
    assert runs == 1, out
    assert result["failed_engines"] == ["containerd"], result
    assert "the runtime refused" in result["engines"]["containerd"]["message"], result
