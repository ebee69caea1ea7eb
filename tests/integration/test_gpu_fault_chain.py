# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The whole chain from a GPU fault to its remediation, on the shared end-to-end fleet's ``e2e-sid`` (no fleet of its
own), each link the shipped one:

1. the GPU watch (``playbooks/gpu_watch.yml``) is on the node; an Xid 48 (double-bit ECC) on GPU 0 is injected in
   the node's ``/dev/kmsg`` stand-in, as ``test_gpu_watch_e2e.py`` does, and the watch's service runs;
2. the metric: the textfile the node exporter serves has ``gpufleet_gpu_problem{code="gpu_xid_48",
   action="RESET_GPU"}``;
3. the alert: the shipped rules (``extensions/prometheus/gpufleet_gpu.rules.yml``) under ``promtool test rules`` on
   exactly those series, as the node exporter's scrape labels them, fire ``GpufleetGpuFault`` with those labels;
4. that alert is posted, as Alertmanager's webhook body, to the real ``ansible-rulebook`` running the shipped
   ``gpu_faults.yml`` with ``gpufleet_eda_playbook: gpufleet.nvidia.remediate`` on the fleet's inventory;
5. the remediation runs for that host only, as a dry run: it says it would reset the GPU for ``gpu_xid_48``, the
   fleet report it ends with says so ("dry run, nothing changed"), and nothing changed (no remediation record).
   The remediation itself, for real (drain, reset, validation, back to service), is ``test_remediate.py``'s, on
   ``e2e-trixie``.

The node is put back in a ``finally``: the ``/dev/kmsg`` stand-in, the watch (``gpu_watch_state=absent``).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
NODE = "e2e-sid"
KMSG = "/dev/kmsg"
TEXTFILE = "/var/lib/prometheus/node-exporter/gpufleet_gpu.prom"
RECORD = "/var/lib/gpufleet/remediation.json"
RULES = ROOT / "extensions" / "prometheus" / "gpufleet_gpu.rules.yml"
TOKEN = "chain-token"  # noqa: S105 - the test's own webhook token
_spec = importlib.util.spec_from_file_location("gpufleet_eda_rulebook", ROOT / "tests" / "tools" / "eda_rulebook.py")
eda = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(eda)
REMEDIATE = (
    "gpufleet.nvidia.remediate drains the host, resets the GPU or reboots the host, validates it and returns it to "
    "service, or leaves it drained with the reason."
)
SAMPLE = re.compile(r"^(?P<name>\w+)(?:\{(?P<labels>[^}]*)\})? (?P<value>\S+)$")


def _playbook(inventory: Path, playbook: str, *args: str) -> subprocess.CompletedProcess:
    cmd = [str(ROOT / ".venv" / "bin" / "ansible-playbook"), "-i", str(inventory), "--limit", NODE, *args]
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".cache" / "collections"), ANSIBLE_FORCE_COLOR="0")
    return subprocess.run(
        [*cmd, str(ROOT / "playbooks" / playbook)], check=False, capture_output=True, text=True, cwd=ROOT, env=env,
        timeout=600,
    )  # fmt: skip


def _problems(textfile: str) -> list[dict[str, str]]:
    """The labels of every ``gpufleet_gpu_problem`` sample of value 1 in the textfile."""
    found = []
    for line in textfile.splitlines():
        match = SAMPLE.match(line)
        if match and match["name"] == "gpufleet_gpu_problem" and float(match["value"]) == 1:
            found.append(dict(re.findall(r'(\w+)="([^"]*)"', match["labels"] or "")))
    return found


def _alerts_promtool_fires(tmp_path: Path, problems: list[dict[str, str]], scrape: dict[str, str]) -> None:
    """``promtool test rules``: the shipped rules fire GpufleetGpuFault for exactly the problems whose action is a
    GPU reset or a reboot, 2 minutes after the series appear (the rule's ``for`` is 1 minute)."""
    series = [
        {"series": "gpufleet_gpu_problem{%s}" % ",".join(f'{k}="{v}"' for k, v in {**p, **scrape}.items()),
         "values": "1x5"}
        for p in problems
    ]  # fmt: skip
    acted = [
        {
            "exp_labels": dict(p, **scrape, severity="critical"),
            "exp_annotations": {
                "summary": f"GPU {p['gpu']} ({p['pci_bus_id']}) on {scrape['instance']}: {p['code']}",
                "description": f"NVIDIA's recommended action for {p['code']} is {p['action']}. {REMEDIATE}",
            },
        }
        for p in problems
        if p["action"] in ("RESET_GPU", "RESTART_BM")
    ]
    unit = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "alert_rule_test": [
                    {
                        "eval_time": "2m",
                        "alertname": "GpufleetGpuFault",
                        "exp_alerts": acted,
                    }
                ],
            }
        ],
    }
    path = tmp_path / "chain_rules_test.yml"
    path.write_text(yaml.safe_dump(unit))
    promtool = shutil.which("promtool")
    assert promtool, "promtool (Debian's prometheus package) is installed by tests/tools/host_setup.sh"
    result = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_fault_metric_alert_rulebook_remediation(e2e_fleet: Any, tmp_path: Path) -> None:
    if not eda.RULEBOOK_BIN.exists():
        pytest.skip(f"no {eda.RULEBOOK_BIN} (make setup installs ansible-rulebook from the dev lock)")
    node = e2e_fleet.node(NODE)
    bus0 = "0000:" + node.config["gpus"][0]["pci_bus_id"].lower().split(":", 1)[1]
    try:
        res = _playbook(e2e_fleet.inventory, "gpu_watch.yml", "-e", "gpu_watch_interval=3600")
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]

        # 1. The fault, and the watch's run (its timer's service, started by hand rather than waiting the interval).
        node.put(
            KMSG,
            "6,700,4000000,-;NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.163.01\n"
            f"4,701,95000000000,-;NVRM: Xid (PCI:{bus0.rsplit('.', 1)[0]}): 48, pid=4242, name=train.py, An "
            "uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 0, "
            "subpartition 0.\n",
        )
        node.run("systemctl start gpufleet-gpu-watch.service", check=True)

        # 2. The metric, as the node exporter's textfile collector reads it.
        problems = _problems(node.run(["cat", TEXTFILE], check=True).stdout)
        xid48 = [p for p in problems if p["code"] == "gpu_xid_48"]
        assert [(p["gpu"], p["pci_bus_id"], p["action"]) for p in xid48] == [("0", bus0, "RESET_GPU")], problems

        # 3. The alert the shipped rules raise on those series.
        scrape = {"instance": f"{NODE}:9100", "job": "node"}
        _alerts_promtool_fires(tmp_path, problems, scrape)

        # 4. Posted to the real ansible-rulebook running the shipped rulebook with the real playbook.
        variables = {
            "gpufleet_eda_token": TOKEN,
            "gpufleet_eda_playbook": "gpufleet.nvidia.remediate",
            "gpufleet_eda_dry_run": True,
        }
        labels = dict(xid48[0], **scrape, alertname="GpufleetGpuFault", severity="critical")
        # The fleet's inventory, with what the simulated nodes need (root without sudo: ansible_become false, as
        # test_remediate.py passes it) and where the fleet report goes: the rulebook passes only its own variables.
        inventory = yaml.safe_load(e2e_fleet.inventory.read_text())
        inventory["all"].setdefault("vars", {}).update(ansible_become=False, report_dir=str(tmp_path / "report"))
        (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
        # -v twice: ansible-rulebook's debug log, which says when the playbook's run ended ("Ansible runner rc").
        with eda.running(tmp_path, "gpu_faults.yml", tmp_path / "inventory.yml", variables, "-v") as rulebook:
            assert eda.post(rulebook.port, eda.notification(eda.alert("firing", labels)), TOKEN) == 202
            rulebook.wait_for(lambda: "Ansible runner rc:" in rulebook.log.read_text(errors="replace"), 900)
        log = rulebook.log.read_text(errors="replace")

        # 5. The remediation ran for that host alone, as a dry run that names the fault and the reset.
        recap = [line.split()[0] for line in log.splitlines() if re.match(r"^\S+\s+: ok=\d+", line)]
        assert recap and set(recap) == {NODE}, log[-6000:]
        assert re.search(rf"^{NODE}\s+: ok=\d+ .*failed=0", log, re.M), log[-6000:]
        said = [line for line in log.splitlines() if "dry run: would" in line]
        assert said and "reset" in said[0] and "gpu_xid_48" in said[0], log[-6000:]
        assert re.search(r"Ansible runner rc: 0, status: successful", log), log[-6000:]
        assert " - ERROR - " not in log, log[-6000:]
        assert node.run(["test", "-e", RECORD]).rc != 0  # nothing recorded: the dry run changed nothing
        report = (tmp_path / "report" / "fleet-report.md").read_text()
        assert f"Remediation: reset for gpu\\_xid\\_48 on {bus0}: dry run, nothing changed" in report, report
    finally:
        node.run(["rm", "-f", KMSG])
        gone = _playbook(e2e_fleet.inventory, "gpu_watch.yml", "-e", "gpu_watch_state=absent")
    assert gone.returncode == 0, gone.stdout[-3000:]
