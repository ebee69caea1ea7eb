# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""playbooks/report.yml through ansible-playbook on the controller: a hand-made fleet (its facts published by a
stand-in for gpu_facts, nothing touched; a crafted GPU name among them) and a report_templates_dir that replaces
the Markdown template and the style sheet while the HTML page stays the collection's."""

import json
from pathlib import Path

import pytest

from ansible_collections.gpufleet.nvidia.plugins.filter.fleet_report import (
    fleet_report_model,
    to_report_html,
    to_report_markdown,
)
from ansible_collections.gpufleet.nvidia.tests.controller.playbook import run_playbook

pytestmark = pytest.mark.controller
REPO = Path(__file__).resolve().parents[3]

FAKE_GPU_FACTS = """
from ansible.module_utils.basic import AnsibleModule

module = AnsibleModule(argument_spec={"nvidia": {"type": "raw", "required": True}})
module.exit_json(changed=False, ansible_facts={"nvidia": module.params["nvidia"]})
"""
PLAY = """
- name: Facts as gpu_facts publishes them
  hosts: all
  gather_facts: false
  tasks:
    - name: Stand-in for gpufleet.nvidia.gpu_facts
      fake_gpu_facts:
        nvidia: "{{{{ fake_nvidia }}}}"
      when: fake_nvidia is defined

- name: Fleet report
  ansible.builtin.import_playbook: {report}
"""
HOSTILE = "<script>alert('x')</script> | *T4*"


def _nvidia(*names):
    engines = {"docker": {"installed": True, "runtimes": ["nvidia", "runc"], "version": "26.1"}}
    gpus = [
        {"index": i, "name": n, "uuid": f"GPU-{i}", "pci_bus_id": f"0000:{i:02x}:00.0"} for i, n in enumerate(names)
    ]
    return {"pci_gpu_count": len(gpus), "gpus": gpus, "engines": engines, "driver": {"installed_version": "550"}}


def _validate(passed):
    docker = {"passed": passed, "skipped": False, "seconds": 1.5, "message": "docker: ok" if passed else "rc 125"}
    return {"passed": passed, "skipped": False, "engines": {"docker": docker}, "message": docker["message"]}


HOSTVARS = {
    "good": {"fake_nvidia": _nvidia("A100", "A100"), "gpufleet_validate": _validate(True)},
    "bad": {"fake_nvidia": _nvidia(HOSTILE), "gpufleet_validate": _validate(False)},
    "cpu": {"fake_nvidia": _nvidia()},
    "down": {"ansible_host": "192.0.2.1"},
}
MARKDOWN = "{% for h in hosts %}- {{ h.name }}: {{ h.status | status_text }}\n{% endfor %}"
CSS = "body{background:#000}"


def test_report_templates_dir_through_the_playbook(tmp_path):
    inventory = {
        "all": {
            "hosts": HOSTVARS,
            "vars": {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"},
        }
    }
    (tmp_path / "inventory.json").write_text(json.dumps(inventory))
    (tmp_path / "library").mkdir()
    (tmp_path / "library" / "fake_gpu_facts.py").write_text(FAKE_GPU_FACTS)
    (tmp_path / "play.yml").write_text(PLAY.format(report=REPO / "playbooks" / "report.yml"))
    templates = tmp_path / "my-templates"
    templates.mkdir()
    (templates / "report.md.j2").write_text(MARKDOWN)
    (templates / "report.css.j2").write_text(CSS)
    out = tmp_path / "out"
    # report_templates_dir relative: to the directory ansible-playbook runs in.
    proc = run_playbook(
        "-i",
        "inventory.json",
        "play.yml",
        "-e",
        f"report_dir={out}",
        "-e",
        "report_templates_dir=my-templates",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    report = json.loads((out / "fleet-report.json").read_text())
    facts = {h: {"ansible_facts": {"nvidia": hv.get("fake_nvidia")}, **hv} for h, hv in HOSTVARS.items()}
    assert report == fleet_report_model(facts, list(HOSTVARS), generated=report["generated"])
    assert report["summary_line"].startswith("4 hosts: 2 GPU nodes (3 GPUs), 1 CPU-only, 1 unreachable/no facts")
    # The user's Markdown template, the shipped HTML page with the user's style sheet.
    assert (out / "fleet-report.md").read_text() == (
        "- good: passed\n- bad: FAILED\n- cpu: CPU-only\n- down: unreachable / no facts\n"
    )
    page = (out / "fleet-report.html").read_text()
    assert page == to_report_html(report, templates_dir=templates)
    assert f"<style>{CSS}</style>" in page and page.count("<script>") == 1 and "&lt;script&gt;" in page
    assert page.replace(CSS, "") != to_report_html(report).replace(CSS, "")  # the shipped style is gone
    assert to_report_markdown(report).startswith("# GPU fleet report\n")
    assert "<p>No previous report to compare with.</p>" in page
    # The next run compares with this one's JSON report, which it reads before writing its own.
    proc = run_playbook("-i", "inventory.json", "play.yml", "-e", f"report_dir={out}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert f"<p>Nothing changed since {report['generated']}.</p>" in (out / "fleet-report.html").read_text()


def test_a_limited_run_reports_every_host_and_the_others_as_not_in_this_run(tmp_path):
    """With --limit the report is still written (a play on localhost would be skipped), lists every host of the
    inventory, and the hosts outside the limit are "not in this run", not unreachable: the run passes."""
    inventory = {
        "all": {
            "hosts": HOSTVARS,
            "vars": {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"},
        }
    }
    (tmp_path / "inventory.json").write_text(json.dumps(inventory))
    (tmp_path / "library").mkdir()
    (tmp_path / "library" / "fake_gpu_facts.py").write_text(FAKE_GPU_FACTS)
    (tmp_path / "play.yml").write_text(PLAY.format(report=REPO / "playbooks" / "report.yml"))
    out = tmp_path / "out"
    args = ["-i", "inventory.json", "play.yml", "--limit", "good,cpu", "-e", f"report_dir={out}"]
    proc = run_playbook(*args, "-e", "report_fail_on_error=true", cwd=tmp_path, ANSIBLE_SHOW_CUSTOM_STATS="1")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    report = json.loads((out / "fleet-report.json").read_text())
    status = {h["name"]: h["status"] for h in report["hosts"]}
    assert status == {"good": "passed", "bad": "not_in_run", "cpu": "cpu_only", "down": "not_in_run"}
    # set_stats: what AWX keeps as the job's artifacts (ansible-runner: artifacts/<id>/...), printed as CUSTOM STATS
    stats = proc.stdout[proc.stdout.index("CUSTOM STATS") :]
    assert report["summary_line"] in stats
    assert f"{out.resolve()}/fleet-report.html" in stats
    assert report["summary"]["ok"] is True and report["summary"]["not_in_run"] == 2
    assert report["summary_line"].endswith("; 2 not in this run")
    assert "not in this run" in (out / "fleet-report.md").read_text()


LOST_PLAY = """
- name: Discover, as site.yml's first play does
  hosts: all
  gather_facts: false
  tasks:
    - name: Record that the host entered the stage discover
      ansible.builtin.set_fact:
        gpufleet_stage_reached: discover
    - name: Stand-in for gpufleet.nvidia.gpu_facts (a real connection to each host)
      fake_gpu_facts:
        nvidia: "{{{{ fake_nvidia }}}}"

- name: A stage through site.yml's own stage.yml, during which the host lost goes away
  hosts: all
  gather_facts: false
  tasks:
    - name: The stage (its role skipped here) records that the host entered it
      ansible.builtin.include_tasks: {stage}
      vars:
        gpufleet_stage: runtime
        gpufleet_stage_when: false
    - name: The host lost stops answering (its address becomes a closed port)
      ansible.builtin.set_fact:
        ansible_connection: ssh
        ansible_host: 127.0.0.1
        ansible_port: 9
      when: inventory_hostname == 'lost'
    - name: A task that reaches each host
      ansible.builtin.ping:

- name: A later stage
  hosts: all
  gather_facts: false
  tasks:
    - name: The stage records that the host entered it
      ansible.builtin.include_tasks: {stage}
      vars:
        gpufleet_stage: validate
        gpufleet_stage_when: false

- name: Fleet report
  ansible.builtin.import_playbook: {report}
"""


def test_unreachable_hosts_are_named_with_their_stage_apart_from_hosts_left_out(tmp_path):
    """A host unreachable from the first task (a closed port) and one lost in the middle of the runtime stage are
    reported as unreachable, each with the stage it was lost in, and fail the run's report; a host left out by
    --limit is "not in this run", as before."""
    hosts = {
        "good": {"fake_nvidia": _nvidia("A100"), "gpufleet_validate": _validate(True)},
        "gone": {
            "fake_nvidia": _nvidia("A100"),
            "ansible_connection": "ssh",
            "ansible_host": "127.0.0.1",
            "ansible_port": 9,
        },
        "lost": {"fake_nvidia": _nvidia("T4")},
        "out": {"fake_nvidia": _nvidia("T4")},
    }
    inventory = {
        "all": {
            "hosts": hosts,
            "vars": {
                "ansible_connection": "local",
                "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                "ansible_ssh_common_args": "-o ConnectTimeout=5 -o StrictHostKeyChecking=no",
            },
        }
    }
    (tmp_path / "inventory.json").write_text(json.dumps(inventory))
    (tmp_path / "library").mkdir()
    (tmp_path / "library" / "fake_gpu_facts.py").write_text(FAKE_GPU_FACTS)
    play = LOST_PLAY.format(report=REPO / "playbooks" / "report.yml", stage=REPO / "playbooks" / "tasks" / "stage.yml")
    (tmp_path / "play.yml").write_text(play)
    out = tmp_path / "out"
    args = ["-i", "inventory.json", "play.yml", "--limit", "good,gone,lost", "-e", f"report_dir={out}"]
    proc = run_playbook(*args, "-e", "report_fail_on_error=true", cwd=tmp_path)
    assert proc.returncode != 0, proc.stdout[-3000:]
    assert "UNREACHABLE" in proc.stdout  # Ansible's own word, for the two hosts
    report = json.loads((out / "fleet-report.json").read_text())
    hosts_out = {h["name"]: (h["status"], h["lost_at"]) for h in report["hosts"]}
    assert hosts_out == {
        "good": ("passed", None),
        "gone": ("unreachable", "discover"),
        "lost": ("unreachable", "runtime"),
        "out": ("not_in_run", None),
    }
    summary = report["summary"]
    assert (summary["unreachable"], summary["not_in_run"], summary["ok"]) == (2, 1, False)
    assert report["summary_line"].endswith("; 2 unreachable: gone (at discover), lost (at runtime); 1 not in this run")
    markdown = (out / "fleet-report.md").read_text()
    assert "## lost - UNREACHABLE" in markdown and "lost during stage runtime" in markdown
    assert "## out - not in this run" in markdown and "lost during stage discover" in markdown
    assert 'class="unreachable"' in (out / "fleet-report.html").read_text()


def test_two_slices_merged_by_report_merge(tmp_path):
    """AWX job slicing as two --limit runs of the report, each with its own report_name, then playbooks/report_merge.yml
    (the workflow's last node) on their JSON files: one report of every host, as an unsliced run writes it, and a
    missing slice file makes the merged summary not ok (report_fail_on_error then fails the job)."""
    inventory = {
        "all": {
            "hosts": HOSTVARS,
            "vars": {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"},
        }
    }
    (tmp_path / "inventory.json").write_text(json.dumps(inventory))
    (tmp_path / "library").mkdir()
    (tmp_path / "library" / "fake_gpu_facts.py").write_text(FAKE_GPU_FACTS)
    (tmp_path / "play.yml").write_text(PLAY.format(report=REPO / "playbooks" / "report.yml"))
    out = tmp_path / "out"
    for name, limit in (("slice1", "good,cpu"), ("slice2", "bad,down")):
        args = ["-i", "inventory.json", "play.yml", "--limit", limit, "-e", f"report_dir={out}"]
        proc = run_playbook(*args, "-e", f"report_name={name}", cwd=tmp_path)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    merge = REPO / "playbooks" / "report_merge.yml"
    files = f"{out}/slice1.json, {out}/slice2.json"
    args = ["-e", f"report_dir={out}", "-e", f"report_merge_files='{files}'"]
    proc = run_playbook(merge, *args, cwd=tmp_path, ANSIBLE_SHOW_CUSTOM_STATS="1")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    merged = json.loads((out / "fleet-report.json").read_text())
    status = {h["name"]: h["status"] for h in merged["hosts"]}
    assert status == {"good": "passed", "bad": "failed", "cpu": "cpu_only", "down": "no_facts"}
    facts = {h: {"ansible_facts": {"nvidia": hv.get("fake_nvidia")}, **hv} for h, hv in HOSTVARS.items()}
    whole = fleet_report_model(facts, list(HOSTVARS), generated=merged["generated"])
    assert merged["summary_line"] == whole["summary_line"]
    assert [s["hosts_run"] for s in merged["merge"]["slices"]] == [2, 2]
    assert merged["summary_line"] in proc.stdout[proc.stdout.index("CUSTOM STATS") :]
    assert (out / "fleet-report.html").read_text() == to_report_html(merged)
    # slice 2 left no report
    proc = run_playbook(
        merge,
        "-e",
        f"report_dir={out}",
        "-e",
        "report_fail_on_error=true",
        "-e",
        json.dumps({"report_merge_files": [f"{out}/slice1.json", f"{out}/missing.json"]}),
        cwd=tmp_path,
    )
    assert proc.returncode != 0
    assert "1 of 2 slices left no report" in proc.stdout
