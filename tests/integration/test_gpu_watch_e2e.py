# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The GPU watch on a node of the shared end-to-end fleet (``e2e_fleet``, no fleet of its own), read through the real
Prometheus node exporter from Debian (``prometheus-node-exporter``, installed in the node by apt for this test):

* ``playbooks/gpu_watch.yml`` installs the role (program, service, timer started); a second run, and one in check
  mode, change nothing;
* faults injected as in ``test_gpu_health_e2e.py``: an Xid 79 on GPU 1 and an Xid 48 on GPU 0 in the node's
  ``/dev/kmsg`` stand-in, a pending row remap on GPU 0 in the stub NVML's ``gpus.json``;
* the timer's service run by hand (``systemctl start``), the exporter's ``/metrics`` then has each problem with its
  remediation class, the counters, and no textfile scrape error;
* the kernel log then loses the XIDs (the ring buffer moved on): the watch keeps counting them, and ``gpu_facts``
  still reports ``gpu_xid_79`` from the watch's state, with the watch's last run as a fact;
* the timer stopped and the last run 4 intervals old: ``gpu_facts`` reports ``gpu_watch_stale``.

The node is put back in a ``finally``: gpus.json, the ``/dev/kmsg`` stand-in, the watch (``gpu_watch_state=absent``)
and the exporter (purged).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
NODE = "e2e-bookworm"
GPUS_JSON = "/etc/gpufleet-sim/gpus.json"
KMSG = "/dev/kmsg"
TEXTFILE_DIR = "/var/lib/prometheus/node-exporter"
PORT = 19100
EXPORTER_UNIT = "gpufleet-test-node-exporter"
PENDING = {"remapped_rows": {"correctable": 0, "uncorrectable": 2, "pending": True, "failure": False}}
# Debian's package, its service kept from starting (policy-rc.d): the test runs the exporter with its own flags.
INSTALL_EXPORTER = r"""
set -eu
export DEBIAN_FRONTEND=noninteractive
printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
apt-get update -qq
apt-get install -y -qq --no-install-recommends prometheus-node-exporter >/dev/null
rm -f /usr/sbin/policy-rc.d
"""
SCRAPE = f"""
import urllib.request, time
for _ in range(50):
    try:
        print(urllib.request.urlopen("http://127.0.0.1:{PORT}/metrics", timeout=5).read().decode()); break
    except OSError:
        time.sleep(0.2)
"""


def _playbook(inventory: Path, playbook: str, *args: str) -> subprocess.CompletedProcess:
    cmd = [str(ROOT / ".venv" / "bin" / "ansible-playbook"), "-i", str(inventory), "--limit", NODE, *args]
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".cache" / "collections"), ANSIBLE_FORCE_COLOR="0")
    return subprocess.run(
        [*cmd, str(ROOT / "playbooks" / playbook)], check=False, capture_output=True, text=True, cwd=ROOT, env=env,
        timeout=600,
    )  # fmt: skip


def _recap(res: subprocess.CompletedProcess) -> str:
    return next(line for line in res.stdout.splitlines() if line.startswith(NODE) and "ok=" in line)


def _kmsg(gpu0: str, gpu1: str, first_seq: int) -> str:
    short0, short1 = gpu0.rsplit(".", 1)[0], gpu1.rsplit(".", 1)[0]
    return (
        f"6,{first_seq},4000000,-;NVRM: loading NVIDIA UNIX x86_64 Kernel Module  535.261.03\n"
        f"4,{first_seq + 1},93112000123,-;NVRM: Xid (PCI:{short1}): 79, pid='<unknown>', name=<unknown>, GPU has "
        "fallen off the bus.\n"
        f"4,{first_seq + 2},95000000000,-;NVRM: Xid (PCI:{short0}): 48, pid=4242, name=train.py, An uncorrectable "
        "double bit error (DBE) has been detected on GPU in the framebuffer at partition 0, subpartition 0.\n"
    )


def _series(text: str) -> dict[str, float]:
    """``{'name{labels}': value}`` of the exposition text (the exporter's own ordering of labels)."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            out[key] = float(value)
    return out


def _scrape(node: Any) -> dict[str, float]:
    return _series(node.run(["python3", "-c", SCRAPE], check=True).stdout)


def test_the_watch_feeds_the_node_exporter_and_discovery(e2e_fleet: Any, tmp_path: Path) -> None:
    node = e2e_fleet.node(NODE)
    gpu0, gpu1 = ("0000:" + g["pci_bus_id"].lower().split(":", 1)[1] for g in node.config["gpus"][:2])
    uuid0, uuid1 = (g["uuid"] for g in node.config["gpus"][:2])
    original = node.run(["cat", GPUS_JSON], check=True).stdout
    try:
        node.run(INSTALL_EXPORTER, check=True, timeout=600)
        node.run(
            [
                "systemd-run", "--unit", EXPORTER_UNIT, "/usr/bin/prometheus-node-exporter",
                f"--web.listen-address=127.0.0.1:{PORT}", "--collector.disable-defaults", "--collector.textfile",
                f"--collector.textfile.directory={TEXTFILE_DIR}",
            ],
            check=True,
        )  # fmt: skip
        res = _playbook(e2e_fleet.inventory, "gpu_watch.yml", "-e", "gpu_watch_interval=3600")
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
        again = _playbook(e2e_fleet.inventory, "gpu_watch.yml", "-e", "gpu_watch_interval=3600")
        assert again.returncode == 0 and "changed=0" in _recap(again), again.stdout[-3000:]
        check = _playbook(e2e_fleet.inventory, "gpu_watch.yml", "-e", "gpu_watch_interval=3600", "--check", "--diff")
        assert check.returncode == 0 and "changed=0" in _recap(check), check.stdout[-3000:]
        assert node.run("systemctl is-active gpufleet-gpu-watch.timer").stdout.strip() == "active"

        config = json.loads(original)
        config["gpus"][0]["health"] = PENDING
        node.put(GPUS_JSON, json.dumps(config, indent=2) + "\n")
        node.put(KMSG, _kmsg(gpu0, gpu1, 900))
        node.run("systemctl start gpufleet-gpu-watch.service", check=True)

        metrics = _scrape(node)
        id0 = f'gpu="0",pci_bus_id="{gpu0}",uuid="{uuid0}"'
        id1 = f'gpu="1",pci_bus_id="{gpu1}",uuid="{uuid1}"'
        expected = {
            f'gpufleet_gpu_problem{{action="RESTART_BM",code="gpu_xid_79",{id1}}}': 1,
            f'gpufleet_gpu_problem{{action="RESET_GPU",code="gpu_xid_48",{id0}}}': 1,
            f'gpufleet_gpu_problem{{action="RESET_GPU",code="gpu_row_remap_pending",{id0}}}': 1,
            f"gpufleet_gpu_row_remap_pending{{{id0}}}": 1,
            f"gpufleet_gpu_row_remap_failure{{{id0}}}": 0,
            f'gpufleet_gpu_remapped_rows{{gpu="0",kind="uncorrectable",pci_bus_id="{gpu0}",uuid="{uuid0}"}}': 2,
            f'gpufleet_gpu_xid_events_total{{{id1},xid="79"}}': 1,
            f'gpufleet_gpu_xid_events_total{{{id0},xid="48"}}': 1,
            f'gpufleet_gpu_last_xid{{action="RESTART_BM",{id1}}}': 79,
            f'gpufleet_gpu_last_xid{{action="RESET_GPU",{id0}}}': 48,
            "gpufleet_gpu_watch_nvml_up": 1,
            "node_textfile_scrape_error": 0,
        }
        assert {k: metrics.get(k) for k in expected} == expected, json.dumps(metrics, indent=1)[:4000]
        assert metrics["gpufleet_gpu_watch_last_run_timestamp_seconds"] > 1.7e9
        assert not [k for k in metrics if k.startswith("gpufleet_gpu_problem") and id1 in k and "xid_79" not in k]

        # The ring buffer moves on: the XIDs are gone from it, and the watch read up to record 902 already.
        node.put(KMSG, "6,950,99000000000,-;eth0: link up\n")
        node.run("systemctl start gpufleet-gpu-watch.service", check=True)
        metrics = _scrape(node)
        assert metrics.get(f'gpufleet_gpu_xid_events_total{{{id1},xid="79"}}') == 1
        state = json.loads(node.run(["cat", "/var/lib/gpufleet/gpu-watch.json"], check=True).stdout)
        assert state["kmsg"] == {"lost": 47, "seq": 950, "source": KMSG} and state["error"] is None

        facts_dir = tmp_path / "facts"
        facts_dir.mkdir()
        res = _playbook(e2e_fleet.inventory, "discover.yml", "-e", f"gpufleet_facts_dir={facts_dir}")
        assert res.returncode == 0, res.stdout[-3000:]
        facts = json.loads((facts_dir / f"{NODE}.json").read_text())
        assert facts["gpu_watch"]["installed"] is True and facts["gpu_watch"]["stale"] is False, facts["gpu_watch"]
        assert [(e["xid"], e.get("source")) for e in facts["xid_events"]] == [(79, "gpu_watch"), (48, "gpu_watch")]
        codes = [p["code"] for p in facts["problems"] if p["code"].startswith("gpu_")]
        assert codes == ["gpu_xid_79", "gpu_xid_48", "gpu_row_remap_pending"], facts["problems"]

        # The timer stopped and the last run 4 intervals old: discovery calls the watch stale, with the fix.
        node.run("systemctl stop gpufleet-gpu-watch.timer", check=True)
        state["last_run"] -= 4 * state["interval_s"]
        node.put("/var/lib/gpufleet/gpu-watch.json", json.dumps(state))
        res = _playbook(e2e_fleet.inventory, "discover.yml", "-e", f"gpufleet_facts_dir={facts_dir}")
        assert res.returncode == 0, res.stdout[-3000:]
        facts = json.loads((facts_dir / f"{NODE}.json").read_text())
        stale = [p for p in facts["problems"] if p["code"] == "gpu_watch_stale"]
        assert facts["gpu_watch"]["stale"] is True and len(stale) == 1, facts["gpu_watch"]
        assert "systemctl enable --now gpufleet-gpu-watch.timer" in stale[0]["fix"]
    finally:
        node.put(GPUS_JSON, original)
        node.run(["rm", "-f", KMSG])
        gone = _playbook(e2e_fleet.inventory, "gpu_watch.yml", "-e", "gpu_watch_state=absent")
        node.run(["systemctl", "stop", EXPORTER_UNIT])
        node.run("DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq --autoremove prometheus-node-exporter >/dev/null")
    assert gone.returncode == 0, gone.stdout[-3000:]
    assert node.run("ls /etc/systemd/system/gpufleet-gpu-watch.timer /var/lib/gpufleet/gpu-watch.json").rc != 0
    assert node.run(f"ls {TEXTFILE_DIR}/gpufleet_gpu.prom").rc != 0
