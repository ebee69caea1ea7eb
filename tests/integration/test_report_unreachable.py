# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Hosts the run loses are named in the fleet report, apart from hosts left out by ``--limit``.

A fleet of two GPU nodes without engines (the cheapest), plus two inventory hosts with no node: ``gone`` (its
container does not exist: unreachable from the first task) and ``out`` (left out by ``--limit``). ``site.yml --tags
toolkit`` (discover, the toolkit stage, the report) runs on ``keep,lost,gone``; the node ``lost`` is killed once
discovery is done (when the driver play, empty under these tags, starts), so Ansible loses it in the toolkit stage.
The report lists ``gone`` as unreachable at ``discover``, ``lost`` as unreachable at ``toolkit``, ``out`` as not in
this run, and the run fails. (community.docker's connection reports a stopped or missing container as a failed task,
not as unreachable: ``site.yml``'s rescue probes the host and records it as lost; SSH's unreachable hosts, which no
rescue sees, are covered by ``tests/controller/playbooks/test_report_playbook.py``.)
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SITE = REPO / "playbooks" / "site.yml"
FLEET = {
    "nodes": [
        {"name": "keep", "suite": "bookworm", "driver_state": "loaded", "engines": [], "gpus": 1},
        {"name": "lost", "suite": "bookworm", "driver_state": "loaded", "engines": [], "gpus": 1},
    ]
}
# Printed by ansible-playbook once every host's discovery is done (site.yml's second play).
AFTER_DISCOVERY = "PLAY [Install the NVIDIA driver on GPU hosts]"


def test_hosts_lost_in_the_run_are_named_with_their_stage(sim_fleet_factory, tmp_path):
    fleet = sim_fleet_factory(FLEET, name="i19unreach")
    extra = tmp_path / "extra.yml"
    gone = {"ansible_connection": "community.docker.docker", "ansible_host": f"{fleet.prefix}-gone-never-made"}
    extra.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": {"gone": gone, "out": gone}}}}}))
    report_dir = tmp_path / "report"
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO / ".cache" / "collections"), ANSIBLE_FORCE_COLOR="0")
    cmd = [str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", str(fleet.inventory), "-i", str(extra)]
    cmd += ["--limit", "keep,lost,gone", "--tags", "toolkit", "-e", f"report_dir={report_dir}", str(SITE)]
    lines, killed = [], False
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO, env=env) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if not killed and line.startswith(AFTER_DISCOVERY):
                subprocess.run(["docker", "kill", fleet.node("lost").container], check=True, capture_output=True)
                killed = True
        rc = proc.wait(timeout=600)
    out = "".join(lines)
    assert killed, out[-4000:]
    assert rc != 0, out[-4000:]  # a host of the run was lost: the run fails
    report = json.loads((report_dir / "fleet-report.json").read_text())
    hosts = {h["name"]: (h["status"], h["lost_at"]) for h in report["hosts"]}
    assert hosts == {
        "keep": ("not_validated", None),  # the validate stage was not in these tags
        "lost": ("unreachable", "toolkit"),
        "gone": ("unreachable", "discover"),
        "out": ("not_in_run", None),
    }, out[-4000:]
    assert report["summary"]["unreachable"] == 2 and report["summary"]["not_in_run"] == 1
    assert "2 unreachable: lost (at toolkit), gone (at discover)" in report["summary_line"]
    markdown = (report_dir / "fleet-report.md").read_text()
    assert "## lost - UNREACHABLE" in markdown and "lost during stage toolkit" in markdown
    assert "## out - not in this run" in markdown
