# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The real ansible-rulebook (this venv's, from the dev lock) running one of the shipped rulebooks on a free loopback
port, and Alertmanager's webhook bodies posted to it (tests/controller/eda/test_rulebook.py, and the chain test
tests/integration/test_gpu_fault_chain.py)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
RULEBOOKS = REPO / "extensions" / "eda" / "rulebooks"
BIN = Path(sys.executable).parent
RULEBOOK_BIN = BIN / "ansible-rulebook"


def alert(status, labels, *, annotations=None):
    """One alert of Alertmanager's webhook body (version 4)."""
    return {
        "status": status,
        "labels": labels,
        "annotations": annotations or {},
        "startsAt": "2026-11-28T01:00:00Z",
        "endsAt": "0001-01-01T00:00:00Z" if status == "firing" else "2026-11-28T01:05:00Z",
        "generatorURL": "http://prometheus:9090/graph",
        "fingerprint": hashlib.sha256(json.dumps(labels, sort_keys=True).encode()).hexdigest()[:16],
    }


def notification(*alerts, status="firing"):
    """Alertmanager's webhook body around ``alerts``."""
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


def post(port, body, token):
    """POST ``body`` to the webhook as Alertmanager does; the HTTP status."""
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


class Rulebook:
    """A running ansible-rulebook: ``port``, ``log`` (its output), ``proc``; ``wait_for(predicate, timeout)`` fails
    the test (AssertionError with the log's tail) when it exits or the time runs out first."""

    def __init__(self, port, log, proc):
        self.port, self.log, self.proc = port, log, proc

    def wait_for(self, predicate, timeout):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if predicate():
                return
            if self.proc.poll() is not None:
                raise AssertionError(f"ansible-rulebook exited {self.proc.returncode}:\n{self.tail()}")
            time.sleep(0.3)
        raise AssertionError(f"timed out after {timeout}s; ansible-rulebook's log:\n{self.tail()}")

    def tail(self, size=6000):
        return self.log.read_text(errors="replace")[-size:]

    def up(self):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/", timeout=2) as r:
                return r.read() == b"up"
        except OSError:
            return False


@contextlib.contextmanager
def running(workdir: Path, rulebook: str, inventory: Path, variables: dict, *args: str, env: dict | None = None):
    """ansible-rulebook ``-r rulebook`` (a file of extensions/eda/rulebooks) with ``variables`` (the listen host and
    port are added), started in ``workdir`` and up (its webhook answers) before this yields a ``Rulebook``; stopped
    after."""
    port = free_port()
    vars_file = workdir / "eda-vars.yml"
    vars_file.write_text(
        yaml.safe_dump(dict(variables, gpufleet_eda_listen_host="127.0.0.1", gpufleet_eda_listen_port=port))
    )
    log = workdir / "rulebook.log"
    environ = dict(
        os.environ,
        PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}",  # ansible-rulebook runs this venv's ansible-galaxy, -playbook
        ANSIBLE_COLLECTIONS_PATH=str(REPO / ".cache" / "collections"),
        ANSIBLE_NOCOLOR="1",
        **(env or {}),
    )
    command = [str(RULEBOOK_BIN), "-r", str(RULEBOOKS / rulebook), "-i", str(inventory), "--vars", str(vars_file)]
    with log.open("w") as log_file:
        proc = subprocess.Popen(
            [*command, "-v", *args], stdout=log_file, stderr=subprocess.STDOUT, env=environ, cwd=workdir
        )
    running_rulebook = Rulebook(port, log, proc)
    try:
        running_rulebook.wait_for(running_rulebook.up, 180)  # the JVM and Drools start first
        yield running_rulebook
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
