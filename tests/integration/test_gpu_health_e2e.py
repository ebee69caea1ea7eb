# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""GPU health faults injected into nodes of the shared end-to-end fleet (``e2e_fleet``, no fleet of its own):
``gpu_facts`` reports each as a problem with NVIDIA's action, NVIDIA's own ``nvidia-smi`` (Debian's 535 on the node)
reads the same counters from the stub NVML, and the fleet report groups the hosts by problem.

* ``e2e-bookworm``: GPU 0 with 2 uncorrected ECC errors since reset, a row remap pending and its clocks held down for
  heat (the stub NVML's counters, from the node's ``/etc/gpufleet-sim/gpus.json``); GPU 1 with an Xid 79 in the
  kernel log (the node has no ``/dev/kmsg`` of its own: a file of kmsg records stands in for it) and an application's
  Xid 13, which is no host problem;
* ``e2e-trixie``: GPU 1 with a row remap pending.

Both nodes are put back (gpus.json, ``/dev/kmsg`` removed) in a ``finally``; the other tests of the fleet see them
as they were.
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

GPUS_JSON = "/etc/gpufleet-sim/gpus.json"
KMSG = "/dev/kmsg"
HOT_GPU = {
    "ecc_uncorrected_volatile": 2,
    "ecc_uncorrected_aggregate": 7,
    "remapped_rows": {"correctable": 1, "uncorrectable": 3, "pending": True, "failure": False},
    "clocks_event_reasons": 0x40,  # nvmlClocksEventReasonHwThermalSlowdown
    "persistence_mode": 1,
}
PENDING_ONLY = {"remapped_rows": {"correctable": 0, "uncorrectable": 1, "pending": True, "failure": False}}


def _playbooks(inventory: Path, *playbooks: Path, extra: dict[str, str], limit: str) -> subprocess.CompletedProcess:
    """One ansible-playbook run of ``playbooks`` (facts of the first reach the next), ``extra`` as ``-e``."""
    cmd = [str(ROOT / ".venv" / "bin" / "ansible-playbook"), "-i", str(inventory), "--limit", limit]
    for key, value in extra.items():
        cmd += ["-e", f"{key}={value}"]
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".cache" / "collections"), ANSIBLE_FORCE_COLOR="0")
    return subprocess.run(
        [*cmd, *map(str, playbooks)], check=False, capture_output=True, text=True, cwd=ROOT, env=env, timeout=600
    )


def _kmsg(bus_id: str, other_bus_id: str) -> str:
    short, other = bus_id.rsplit(".", 1)[0], other_bus_id.rsplit(".", 1)[0]
    return (
        "6,900,4000000,-;NVRM: loading NVIDIA UNIX x86_64 Kernel Module  535.261.03\n"
        f"4,1201,812000000,-;NVRM: Xid (PCI:{other}): 13, pid=4242, name=train.py, Graphics SM Warp Exception on "
        "(GPC 0, TPC 0, SM 0): Out Of Range Address\n"
        f"4,1388,93112000123,-;NVRM: Xid (PCI:{short}): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the "
        "bus.\n"
        f"4,1389,93112000200,-;NVRM: GPU {short}.0: GPU has fallen off the bus.\n"
    )


def _inject(node: Any, health: dict[int, dict[str, Any]]) -> str:
    original = node.run(["cat", GPUS_JSON], check=True).stdout
    config = json.loads(original)
    for index, values in health.items():
        config["gpus"][index]["health"] = values
    node.put(GPUS_JSON, json.dumps(config, indent=2) + "\n")
    return original


def test_injected_faults_are_problems_with_nvidias_action_and_the_report_groups_them(
    e2e_fleet: Any, tmp_path: Path
) -> None:
    bookworm, trixie = e2e_fleet.node("e2e-bookworm"), e2e_fleet.node("e2e-trixie")
    # gpus.json spells the address as NVML does (00000000:17:00.0), the facts as sysfs does (0000:17:00.0).
    gpu0, gpu1 = ("0000:" + g["pci_bus_id"].lower().split(":", 1)[1] for g in bookworm.config["gpus"][:2])
    saved: dict[Any, str] = {}
    try:
        saved[bookworm] = _inject(bookworm, {0: HOT_GPU})
        saved[trixie] = _inject(trixie, {1: PENDING_ONLY})
        bookworm.put(KMSG, _kmsg(gpu1, gpu0))

        # NVIDIA's nvidia-smi reads the same counters through the stub.
        smi = bookworm.run("nvidia-smi -q -i 0 -d ROW_REMAPPER,PERFORMANCE", check=True).stdout
        assert "Pending" in smi and "Yes" in smi.split("Pending", 1)[1].splitlines()[0], smi
        assert "HW Thermal Slowdown" in smi and "Active" in smi.split("HW Thermal Slowdown", 1)[1].splitlines()[0], smi

        facts_dir, report_dir = tmp_path / "facts", tmp_path / "report"
        facts_dir.mkdir()
        res = _playbooks(
            e2e_fleet.inventory,
            ROOT / "playbooks" / "discover.yml",
            ROOT / "playbooks" / "report.yml",
            extra={"gpufleet_facts_dir": str(facts_dir), "report_dir": str(report_dir)},
            limit="e2e-bookworm,e2e-trixie",
        )
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    finally:
        for node, text in saved.items():
            node.put(GPUS_JSON, text)
        bookworm.run(["rm", "-f", KMSG])

    facts = json.loads((facts_dir / "e2e-bookworm.json").read_text())
    by_bus = {g["pci_bus_id"]: g for g in facts["gpus"]}
    hot = by_bus[gpu0]["health"]
    assert hot["remapped_rows"] == HOT_GPU["remapped_rows"]
    assert (hot["ecc_uncorrected_volatile"], hot["ecc_uncorrected_aggregate"]) == (2, 7)
    assert (hot["clocks_event_reasons"], hot["persistence_mode"]) == (["hw_thermal_slowdown"], "enabled")
    assert [e["xid"] for e in hot["xid_events"]] == [13]
    assert [(e["xid"], e["count"], e["bucket"]) for e in by_bus[gpu1]["health"]["xid_events"]] == [
        (79, 1, "RESTART_BM")
    ]
    assert facts["xid_source"] == KMSG
    # The fleet's own problems (e2e-bookworm lacks /dev/char links) are not this test's: the GPU ones are.
    problems = {p["code"]: p for p in facts["problems"] if p["code"].startswith("gpu_")}
    assert sorted(problems) == ["gpu_clocks_throttled", "gpu_ecc_uncorrectable", "gpu_row_remap_pending", "gpu_xid_79"]
    assert "nvidia-smi -r -i 0" in problems["gpu_row_remap_pending"]["fix"]
    assert "reboot" in problems["gpu_xid_79"]["fix"] and gpu1 in problems["gpu_xid_79"]["message"]
    trixie_facts = json.loads((facts_dir / "e2e-trixie.json").read_text())
    assert [p["code"] for p in trixie_facts["problems"] if p["code"].startswith("gpu_")] == ["gpu_row_remap_pending"]
    assert trixie_facts["gpus"][0]["health"] == {"xid_events": []}  # no counters set: nothing to report

    report = json.loads((report_dir / "fleet-report.json").read_text())
    groups = {g["code"]: g["hosts"] for g in report["problem_groups"] if g["code"].startswith("gpu_")}
    assert groups == {
        "gpu_row_remap_pending": ["e2e-bookworm", "e2e-trixie"],
        "gpu_clocks_throttled": ["e2e-bookworm"],
        "gpu_ecc_uncorrectable": ["e2e-bookworm"],
        "gpu_xid_79": ["e2e-bookworm"],
    }
    codes = [g["code"] for g in report["problem_groups"]]
    assert codes.index("gpu_row_remap_pending") < codes.index("gpu_xid_79")  # most hosts first
    markdown = (report_dir / "fleet-report.md").read_text()
    assert (
        "## Problems by kind" in markdown and "| gpu\\_row\\_remap\\_pending | e2e-bookworm, e2e-trixie |" in markdown
    )

    # Put back: the next discovery of the node finds no health problem.
    res = _playbooks(
        e2e_fleet.inventory, ROOT / "playbooks" / "discover.yml", extra={"gpufleet_facts_dir": str(facts_dir)},
        limit="e2e-bookworm",
    )  # fmt: skip
    assert res.returncode == 0, res.stdout[-3000:]
    after = json.loads((facts_dir / "e2e-bookworm.json").read_text())
    assert not [p for p in after["problems"] if p["code"].startswith("gpu_")], after["problems"]
