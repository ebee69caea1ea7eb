# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The shipped rulebooks (extensions/eda/rulebooks/) under the real ansible-rulebook (its Drools engine on the Java
runtime), with this collection's Alertmanager source, fed Alertmanager webhook bodies over HTTP on loopback
(tests/tools/eda_rulebook.py):

* gpu_faults.yml runs a recording stand-in for gpufleet.nvidia.remediate (passed by the rulebook's variable), which
  writes one file per run: for which host it ran (ansible-rulebook's limit) and the extra variables;
* gpu_faults_awx.yml launches the job template on a stand-in of the AWX API (the calls ansible-rulebook makes:
  config, unified_job_templates by name, launch, jobs polled by id), which records each launch's body."""

from __future__ import annotations

import importlib.util
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar
from urllib.parse import parse_qs, urlparse

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("gpufleet_eda_rulebook", REPO / "tests" / "tools" / "eda_rulebook.py")
eda = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(eda)

TOKEN = "s3cret-token"  # noqa: S105 - the test's own webhook token

RECORDER = """\
- name: Record what the rulebook ran
  hosts: all
  gather_facts: false
  tasks:
    - name: One file per run and host
      ansible.builtin.copy:
        dest: "{{{{ '{out}' }}}}/{{{{ inventory_hostname }}}}-{{{{ lookup('pipe', 'date +%s%N') }}}}.json"
        content: "{{{{ {{'host': inventory_hostname, 'remediate_hosts': remediate_hosts,
          'remediate_dry_run': remediate_dry_run, 'remediate_reason': remediate_reason}} | to_json }}}}"
        mode: "0644"
      delegate_to: localhost
"""


def gpu_alert(status, *, host=None, instance=None, name="GpufleetGpuFault", code="gpu_xid_79", gpu="0"):
    """An alert labelled as the shipped alert rules label it (the textfile's labels, the scrape's, the rule's)."""
    labels = {"alertname": name, "code": code, "gpu": gpu, "pci_bus_id": "00000000:3B:00.0", "action": "RESET_GPU"}
    labels.update({"host": host} if host else {})
    labels.update({"instance": instance} if instance else {})
    return eda.alert(status, labels, annotations={"summary": "GPU problem"})


def send(rulebook, *alerts, status="firing", token=TOKEN):
    return eda.post(rulebook.port, eda.notification(*alerts, status=status), token)


def records(out):
    """The recorder's runs, oldest first (each file is named host-<nanoseconds>.json)."""
    return [json.loads(p.read_text()) for p in sorted(out.glob("*.json"), key=lambda p: int(p.stem.split("-")[-1]))]


@pytest.fixture
def inventory(tmp_path):
    if not eda.RULEBOOK_BIN.exists():
        pytest.skip(f"no {eda.RULEBOOK_BIN} (make setup installs ansible-rulebook from the dev lock)")
    path = tmp_path / "inventory.yml"
    hosts = {h: {"ansible_connection": "local"} for h in ("node1", "node2", "node3")}
    path.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    return path


def test_firing_runs_once_per_host_resolved_and_others_run_nothing(tmp_path, inventory):
    out = tmp_path / "runs"
    out.mkdir()
    playbook = tmp_path / "project" / "record.yml"
    playbook.parent.mkdir()
    playbook.write_text(RECORDER.format(out=out))
    variables = {"gpufleet_eda_token": TOKEN, "gpufleet_eda_playbook": str(playbook), "gpufleet_eda_dry_run": True}
    with eda.running(tmp_path, "gpu_faults.yml", inventory, variables) as rulebook:

        def hosts_run():
            return [r["host"] for r in records(out)]

        # No token, a wrong token: refused before anything is queued.
        assert send(rulebook, gpu_alert("firing", instance="node3:9100"), token="") == 401
        assert send(rulebook, gpu_alert("firing", instance="node3:9100"), token="wrong") == 401  # noqa: S106

        assert send(rulebook, gpu_alert("firing", instance="node1:9100")) == 202
        rulebook.wait_for(lambda: len(hosts_run()) == 1, 120)

        # Within the throttle window: node1 again (the same alert repeated, and another GPU's), then node2 (its host
        # label wins over instance). Sequential rules run in event order: once node2 has run, node1's repeats are past.
        assert send(rulebook, gpu_alert("firing", instance="node1:9100")) == 202
        assert send(rulebook, gpu_alert("firing", instance="node1:9100", gpu="1", code="gpu_ecc_uncorrectable")) == 202
        assert send(rulebook, gpu_alert("firing", host="node2", instance="10.0.0.2:9100")) == 202
        rulebook.wait_for(lambda: len(hosts_run()) == 2, 120)

        # A resolved alert, another alert name, an alert without a host: nothing. Then node3 fires: it runs.
        assert send(rulebook, gpu_alert("resolved", instance="node3:9100"), status="resolved") == 202
        assert send(rulebook, gpu_alert("firing", instance="node3:9100", name="GpufleetGpuWatchStale")) == 202
        assert send(rulebook, gpu_alert("firing")) == 202
        assert send(rulebook, gpu_alert("firing", instance="node3:9100", code="gpu_row_remap_pending")) == 202
        rulebook.wait_for(lambda: len(hosts_run()) == 3, 120)
        time.sleep(3)  # anything wrongly run after node3 would land by now

    runs = records(out)
    assert [r["host"] for r in runs] == ["node1", "node2", "node3"], runs
    assert [r["remediate_hosts"] for r in runs] == ["node1", "node2", "node3"]
    assert all(r["remediate_dry_run"] is True for r in runs)
    assert runs[0]["remediate_reason"] == "alert GpufleetGpuFault: gpu_xid_79 on GPU 0 00000000:3B:00.0"
    assert "gpu_row_remap_pending" in runs[2]["remediate_reason"]
    text = rulebook.log.read_text()
    assert " - ERROR - " not in text, text[-4000:]  # e.g. an action for the hostless alert that failed to render
    assert TOKEN not in text  # the token never reaches the events ansible-rulebook logs


class _Controller(BaseHTTPRequestHandler):
    """The AWX API calls ansible-rulebook's run_job_template makes; ``server.launches`` collects the launch bodies."""

    TEMPLATE: ClassVar[dict] = {
        "id": 17,
        "type": "job_template",
        "name": "gpufleet remediate",
        "summary_fields": {"organization": {"name": "Default"}},
        "related": {"launch": "/api/v2/job_templates/17/launch/"},
        "ask_limit_on_launch": True,
        "ask_labels_on_launch": False,
        "ask_inventory_on_launch": False,
        "ask_variables_on_launch": True,
    }

    def _send(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        url = urlparse(self.path)
        query = parse_qs(url.query)
        if self.headers.get("Authorization") != "Bearer awx-token":
            return self._send(401, {"detail": "Authentication credentials were not provided."})
        if url.path == "/api/v2/config/":
            return self._send(200, {"version": "24.6.1"})
        if url.path == "/api/v2/unified_job_templates/":
            found = [self.TEMPLATE] if query.get("name") == [self.TEMPLATE["name"]] else []
            return self._send(200, {"count": len(found), "next": None, "results": found})
        if url.path == "/api/v2/jobs/":
            ids = query.get("id__in", [""])[0].split(",")
            jobs = [
                {"id": int(i), "status": "successful", "created": "2026-11-28T01:00:00Z", "artifacts": {}} for i in ids
            ]
            return self._send(200, {"results": jobs})
        return self._send(404, {"detail": "Not found."})

    def do_POST(self):
        if self.path != self.TEMPLATE["related"]["launch"] or self.headers.get("Authorization") != "Bearer awx-token":
            return self._send(404, {"detail": "Not found."})
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.launches.append(body)
        job = 100 + len(self.server.launches)
        return self._send(201, {"id": job, "job": job, "url": f"/api/v2/jobs/{job}/", "status": "pending"})

    def log_message(self, *args):
        pass


def test_awx_rulebook_launches_the_job_template_for_the_alerting_host(tmp_path, inventory):
    controller = ThreadingHTTPServer(("127.0.0.1", 0), _Controller)
    controller.launches = []
    threading.Thread(target=controller.serve_forever, daemon=True).start()
    variables = {
        "gpufleet_eda_token": TOKEN,
        "gpufleet_eda_job_template": "gpufleet remediate",
        "gpufleet_eda_organization": "Default",
        "gpufleet_eda_dry_run": False,
    }
    url = f"http://127.0.0.1:{controller.server_address[1]}"
    try:
        args = ("--controller-url", url, "--controller-token", "awx-token")
        with eda.running(tmp_path, "gpu_faults_awx.yml", inventory, variables, *args) as rulebook:
            assert send(rulebook, gpu_alert("firing", instance="node2:9100", code="gpu_xid_48")) == 202
            rulebook.wait_for(lambda: len(controller.launches) == 1, 120)
            assert send(rulebook, gpu_alert("firing", instance="node2:9100", code="gpu_xid_48")) == 202  # throttled
            assert send(rulebook, gpu_alert("resolved", instance="node1:9100"), status="resolved") == 202
            assert send(rulebook, gpu_alert("firing", host="node3")) == 202
            rulebook.wait_for(lambda: len(controller.launches) == 2, 120)
            time.sleep(3)
            text = rulebook.log.read_text()
    finally:
        controller.shutdown()
    assert [launch["limit"] for launch in controller.launches] == ["node2", "node3"], controller.launches
    first = controller.launches[0]["extra_vars"]
    assert first["remediate_hosts"] == "node2" and first["remediate_dry_run"] is False
    assert first["remediate_reason"] == "alert GpufleetGpuFault: gpu_xid_48 on GPU 0 00000000:3B:00.0"
    assert controller.launches[1]["extra_vars"]["remediate_hosts"] == "node3"
    assert " - ERROR - " not in text, text[-4000:]
