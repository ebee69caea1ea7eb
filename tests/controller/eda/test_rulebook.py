# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The shipped rulebook (extensions/eda/rulebooks/gpu_faults.yml) under the real ansible-rulebook (its Drools engine
on the Java runtime), with this collection's Alertmanager source, fed Alertmanager webhook bodies over HTTP on
loopback. The playbook it runs is a recording stand-in for gpufleet.nvidia.remediate (passed by the rulebook's
variable), which writes one file per run: for which host it ran (ansible-rulebook's limit) and the extra variables."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
RULEBOOK = REPO / "extensions" / "eda" / "rulebooks" / "gpu_faults.yml"
BIN = Path(sys.executable).parent
RULEBOOK_BIN = BIN / "ansible-rulebook"
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


def alert(status, *, host=None, instance=None, name="GpufleetGpuFault", code="gpu_xid_79", gpu="0"):
    """One alert of Alertmanager's webhook body (version 4), labelled as the shipped alert rules label it."""
    labels = {"alertname": name, "code": code, "gpu": gpu, "pci_bus_id": "00000000:3B:00.0", "action": "RESET_GPU"}
    if host:
        labels["host"] = host
    if instance:
        labels["instance"] = instance
    return {
        "status": status,
        "labels": labels,
        "annotations": {"summary": "GPU problem"},
        "startsAt": "2026-11-28T01:00:00Z",
        "endsAt": "0001-01-01T00:00:00Z" if status == "firing" else "2026-11-28T01:05:00Z",
        "generatorURL": "http://prometheus:9090/graph",
        "fingerprint": f"{name}{host}{instance}{code}",
    }


def notification(*alerts, status="firing"):
    return {
        "version": "4",
        "groupKey": '{}:{alertname="GpufleetGpuFault"}',
        "truncatedAlerts": 0,
        "status": status,
        "receiver": "gpufleet-eda",
        "groupLabels": {"alertname": "GpufleetGpuFault"},
        "commonLabels": {},
        "commonAnnotations": {},
        "externalURL": "http://alertmanager:9093",
        "alerts": list(alerts),
    }


def post(port, body, token=TOKEN):
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/alerts",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - loopback
            return response.status
    except urllib.error.HTTPError as err:
        return err.code


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def records(out):
    """The recorder's runs, oldest first (each file is named host-<nanoseconds>.json)."""
    return [json.loads(p.read_text()) for p in sorted(out.glob("*.json"), key=lambda p: int(p.stem.split("-")[-1]))]


def wait_for(predicate, timeout, proc, log):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return
        if proc.poll() is not None:
            pytest.fail(f"ansible-rulebook exited {proc.returncode}:\n{log.read_text()[-4000:]}")
        time.sleep(0.3)
    pytest.fail(f"timed out after {timeout}s; ansible-rulebook's log:\n{log.read_text()[-4000:]}")


@pytest.fixture
def rulebook(tmp_path):
    """ansible-rulebook running the shipped rulebook on a free loopback port: ``(port, out dir, log)``."""
    if not RULEBOOK_BIN.exists():
        pytest.skip(f"no {RULEBOOK_BIN} (make setup installs ansible-rulebook from the dev lock)")
    out = tmp_path / "runs"
    out.mkdir()
    playbook = tmp_path / "project" / "record.yml"
    playbook.parent.mkdir()
    playbook.write_text(RECORDER.format(out=out))
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(
        yaml.safe_dump({"all": {"hosts": {h: {"ansible_connection": "local"} for h in ("node1", "node2", "node3")}}})
    )
    port = free_port()
    variables = tmp_path / "vars.yml"
    variables.write_text(
        yaml.safe_dump(
            {
                "gpufleet_eda_listen_host": "127.0.0.1",
                "gpufleet_eda_listen_port": port,
                "gpufleet_eda_token": TOKEN,
                "gpufleet_eda_playbook": str(playbook),
                "gpufleet_eda_dry_run": True,
            }
        )
    )
    log = tmp_path / "rulebook.log"
    env = dict(
        os.environ,
        PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}",  # ansible-rulebook runs this venv's ansible-galaxy, -playbook
        ANSIBLE_COLLECTIONS_PATH=str(REPO / ".cache" / "collections"),
        ANSIBLE_NOCOLOR="1",
    )
    with log.open("w") as log_file:
        proc = subprocess.Popen(
            [str(RULEBOOK_BIN), "-r", str(RULEBOOK), "-i", str(inventory), "--vars", str(variables), "-v"],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=tmp_path,
        )
    try:

        def up():
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as r:
                    return r.read() == b"up"
            except OSError:
                return False

        wait_for(up, 120, proc, log)  # the JVM and Drools start first
        yield port, out, log, proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_firing_runs_once_per_host_resolved_and_others_run_nothing(rulebook):
    port, out, log, proc = rulebook

    def hosts_run():
        return [r["host"] for r in records(out)]

    # No token, a wrong token: refused before anything is queued.
    assert post(port, notification(alert("firing", instance="node3:9100")), token="") == 401
    assert post(port, notification(alert("firing", instance="node3:9100")), token="wrong") == 401  # noqa: S106 - a wrong token on purpose

    assert post(port, notification(alert("firing", instance="node1:9100"))) == 202
    wait_for(lambda: len(hosts_run()) == 1, 120, proc, log)

    # Within the throttle window: node1 again (the same alert repeated, and another GPU's), then node2 (its host
    # label wins over instance). Sequential rules run in event order, so once node2 has run, node1's repeats are past.
    assert post(port, notification(alert("firing", instance="node1:9100"))) == 202
    assert (
        post(port, notification(alert("firing", instance="node1:9100", gpu="1", code="gpu_ecc_uncorrectable"))) == 202
    )
    assert post(port, notification(alert("firing", host="node2", instance="10.0.0.2:9100"))) == 202
    wait_for(lambda: len(hosts_run()) == 2, 120, proc, log)

    # A resolved alert, another alert name, an alert without a host: nothing. Then node3 fires: it runs.
    assert post(port, notification(alert("resolved", instance="node3:9100"), status="resolved")) == 202
    assert post(port, notification(alert("firing", instance="node3:9100", name="GpufleetGpuWatchStale"))) == 202
    assert post(port, notification(alert("firing"))) == 202
    assert post(port, notification(alert("firing", instance="node3:9100", code="gpu_row_remap_pending"))) == 202
    wait_for(lambda: len(hosts_run()) == 3, 120, proc, log)
    time.sleep(3)  # anything wrongly run after node3 would land by now

    runs = records(out)
    assert [r["host"] for r in runs] == ["node1", "node2", "node3"], runs
    assert [r["remediate_hosts"] for r in runs] == ["node1", "node2", "node3"]
    assert all(r["remediate_dry_run"] is True for r in runs)
    assert runs[0]["remediate_reason"] == "alert GpufleetGpuFault: gpu_xid_79 on GPU 0 00000000:3B:00.0"
    assert "gpu_row_remap_pending" in runs[2]["remediate_reason"]
    text = log.read_text()
    assert " - ERROR - " not in text, text[-4000:]  # e.g. an action for the hostless alert that failed to render
    assert TOKEN not in text  # the token never reaches the events ansible-rulebook logs
