# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""``playbooks/remediate.yml`` from fault to service on the shared end-to-end fleet's ``e2e-trixie`` (two GPUs; no
fleet of its own). Faults are injected as ``test_gpu_health_e2e.py`` does: the stub NVML's counters in the node's
``/etc/gpufleet-sim/gpus.json`` and XID records in a file standing in for ``/dev/kmsg``. In order:

* a dry run with Xid 48 (double-bit ECC) and its uncorrected ECC count: says it would reset, changes nothing;
* the same for real: drained, GPU reset, validated (a GPU container on every engine), DCGM's diagnostic passes (a
  stand-in ``dcgmi`` printing NVIDIA's JSON), back in service; the record has the entry, discovery no longer reports
  the Xid (handled) nor the ECC count, the fleet report has the history;
* a pending row remap: reset; no ``dcgmi`` on the node, the report says DCGM is not installed;
* a pending row remap that survives the reset: the host stays drained, the reason says why;
* the budget spent (``remediate_max_per_day`` reached): refused, nothing done;
* Xid 79 (fallen off the bus): the node reboots (its container restarts: the stand-in kernel log is gone with
  ``/dev``), is validated and returned.

The reset: Debian's ``nvidia-smi -r`` (535) goes through NVML's private export table (found with a ``dlsym`` logger
and a table whose slots log their calls: slots 20, 169, 32 with an RM control, 197, 182 to 184), which the stub NVML
does not imitate; ``remediate_reset_command`` runs a stand-in instead that does to gpus.json what a reset does to the
GPU: the volatile ECC count to 0, a pending row remap applied (``pending`` to false), unless the GPU is marked
``reset_persists``. The node is put back (gpus.json, kmsg, the record, the stand-ins) in a ``finally``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
NODE = "e2e-trixie"
GPUS_JSON = "/etc/gpufleet-sim/gpus.json"
KMSG = "/dev/kmsg"
RECORD = "/var/lib/gpufleet/remediation.json"
RESET = "/usr/local/sbin/gpufleet-sim-gpu-reset"
DCGMI = "/usr/local/bin/dcgmi"
RESET_STANDIN = f"""#!/usr/bin/python3
import json, sys
uuid = sys.argv[1]
with open("{GPUS_JSON}") as f:
    cfg = json.load(f)
gpu = next((g for g in cfg["gpus"] if g["uuid"] == uuid), None)
if gpu is None:
    sys.exit(f"No devices were found matching {{uuid}}")
health = gpu.get("health") or {{}}
if not gpu.get("reset_persists"):
    if "ecc_uncorrected_volatile" in health:
        health["ecc_uncorrected_volatile"] = 0
    rows = health.get("remapped_rows")
    if rows and rows.get("pending"):
        rows["pending"] = False
    if health.get("retired_pages_pending"):
        health["retired_pages_pending"] = 0
with open("{GPUS_JSON}", "w") as f:
    json.dump(cfg, f, indent=2)
print("GPU " + gpu["pci_bus_id"] + " was successfully reset.")
"""
# dcgmi diag -r 1 -j as DCGM 4 prints it (the shape parsed by module_utils/remediate/dcgm.py; NVIDIA's dcgmi diag
# reference, read 2026-11-28).
DCGMI_STANDIN = """#!/bin/sh
cat <<'EOF'
{"DCGM Diagnostic": {"test_categories": [
 {"category": "Deployment", "tests": [{"name": "software", "results": [{"status": "Pass"}]}]},
 {"category": "Hardware", "tests": [{"name": "memory", "results": [{"entity_id": 0, "status": "Pass"},
                                                                    {"entity_id": 1, "status": "Pass"}]}]}],
 "version": "4.2.3"}}
EOF
"""


def _xid(bus_id: str, xid: int, usec: int, text: str) -> str:
    return f"4,{usec // 1000},{usec},-;NVRM: Xid (PCI:{bus_id.rsplit('.', 1)[0]}): {xid}, pid='<unknown>', {text}\n"


def _remediate(node: Any, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    cmd = [str(ROOT / ".venv" / "bin" / "ansible-playbook"), "-i", str(node.fleet.inventory), "--limit", NODE]
    cmd += ["-e", f"report_dir={tmp_path}", "-e", f"remediate_hosts={NODE}", "-e", "ansible_become=false"]
    cmd += ["-e", json.dumps({"remediate_reset_command": [RESET, "{uuid}"]})]
    # one engine's GPU container is the validation here (every engine's is validate's own tests'): CI time
    cmd += ["-e", "validate_image=gpufleet-sim/mini:latest", "-e", "validate_pull=never"]
    cmd += ["-e", json.dumps({"validate_engines": ["docker"]}), *extra]
    cmd.append(str(ROOT / "playbooks" / "remediate.yml"))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".cache" / "collections"), ANSIBLE_FORCE_COLOR="0")
    return subprocess.run(cmd, check=False, capture_output=True, text=True, cwd=ROOT, env=env, timeout=900)


def _changed(out: str) -> int:
    """The host's changed count in the play recap."""
    return int(re.search(rf"^{NODE}\s*:.* changed=(\d+)", out, re.M).group(1))


def _ok(res: subprocess.CompletedProcess) -> str:
    assert res.returncode == 0, res.stdout[-5000:] + res.stderr[-3000:]
    return res.stdout


@pytest.fixture(scope="module")
def node(e2e_fleet: Any) -> Any:
    found = e2e_fleet.node(NODE)
    found.fleet = e2e_fleet
    original = found.run(["cat", GPUS_JSON], check=True).stdout
    found.put(RESET, RESET_STANDIN, 0o755)
    try:
        yield found
    finally:
        found.put(GPUS_JSON, original)
        found.run(["rm", "-f", KMSG, RECORD, RESET, DCGMI])


def _inject(node: Any, gpu: int, health: dict[str, Any], persists: bool = False) -> dict[str, Any]:
    config = json.loads(node.run(["cat", GPUS_JSON], check=True).stdout)
    config["gpus"][gpu]["health"] = health
    config["gpus"][gpu]["reset_persists"] = persists
    node.put(GPUS_JSON, json.dumps(config, indent=2) + "\n")
    return config["gpus"][gpu]


def _report(tmp_path: Path) -> dict[str, Any]:
    """This host's entry of the JSON fleet report."""
    model = json.loads((tmp_path / "fleet-report.json").read_text())
    return next(h for h in model["hosts"] if h["name"] == NODE)


def _record(node: Any) -> dict[str, Any]:
    res = node.run(["cat", RECORD])
    return json.loads(res.stdout) if res.rc == 0 else {}


def _health(node: Any, gpu: int) -> dict[str, Any]:
    return json.loads(node.run(["cat", GPUS_JSON], check=True).stdout)["gpus"][gpu].get("health") or {}


def _power_on_after_reboot(container: str, done: threading.Event) -> None:
    """Start ``container`` again whenever it stopped, until ``done``."""
    while not done.wait(1):
        state = subprocess.run(
            ["docker", "inspect", "-f", "{{.State.Running}}", container], check=False, capture_output=True, text=True
        )
        if state.stdout.strip() == "false":
            subprocess.run(["docker", "start", container], check=False, capture_output=True, timeout=120)


def _sysfs(bus_id: str) -> str:
    return "0000:" + bus_id.lower().split(":", 1)[1]  # discovery spells it as sysfs does


def test_xid_48_dry_run_changes_nothing_then_reset_validate_and_return(node: Any, tmp_path: Path) -> None:
    gpu = _inject(node, 0, {"ecc_uncorrected_volatile": 1, "ecc_uncorrected_aggregate": 4})
    bus = _sysfs(gpu["pci_bus_id"])
    node.put(
        KMSG,
        _xid(
            bus,
            48,
            5_000_000,
            "name=<unknown>, An uncorrectable double bit error (DBE) has been "
            "detected on GPU in the framebuffer at partition 0, subpartition 0.",
        ),
    )
    node.put(DCGMI, DCGMI_STANDIN, 0o755)
    before = node.run(["cat", GPUS_JSON], check=True).stdout

    out = _ok(_remediate(node, tmp_path, "-e", "remediate_dry_run=true"))
    assert f"dry run: would {NODE}: reset for gpu_ecc_uncorrectable, gpu_xid_48 on {bus}" in out, out
    assert node.run(["cat", GPUS_JSON], check=True).stdout == before
    assert _record(node) == {}
    assert _changed(out) == 0, out

    out = _ok(
        _remediate(node, tmp_path, "-e", "remediate_dcgm_level=1", "-e", '{"remediate_reason": "alert GpuXid48"}')
    )
    assert _health(node, 0)["ecc_uncorrected_volatile"] == 0
    history = _record(node)["history"]
    assert [(h["action"], h["result"], h["problems"]) for h in history] == [
        ("reset", "returned", ["gpu_ecc_uncorrectable", "gpu_xid_48"])
    ]
    assert history[0]["reason"] == "alert GpuXid48" and history[0]["gpus"] == [bus]
    assert bus in _record(node)["handled_xids"]
    assert "Validate GPU containers on every engine" in out and "Return the host to service" in out
    remediation = _report(tmp_path)["remediation"]
    assert (remediation["action"], remediation["result"]) == ("reset", "returned")
    assert remediation["dcgm"] == "dcgmi diag -r 1: passed (3 results)"
    assert [(h["action"], h["result"]) for h in remediation["history"]] == [("reset", "returned")]
    report = (tmp_path / "fleet-report.md").read_text()
    assert "Remediation: reset for gpu\\_ecc\\_uncorrectable, gpu\\_xid\\_48 on" in report, report
    assert "Remediation history:" in report

    # the Xid is handled: the next run finds nothing to do (the kernel log still holds the record)
    out = _ok(_remediate(node, tmp_path))
    assert f"{NODE}: no GPU fault that remediation acts on" in out, out
    assert len(_record(node)["history"]) == 1


# A stand-in for NVIDIA's persistence daemon: holds /dev/nvidia0 open while it runs, as the real one holds every GPU,
# under the daemon's name (a link to python3: the kernel names the process after the file run, cut to 15 bytes as
# for the real daemon, "nvidia-persiste").
PERSISTENCED_BIN = "/usr/local/sbin/nvidia-persistenced"
PERSISTENCED = f"""[Unit]
Description=stand-in nvidia-persistenced (holds /dev/nvidia0)
[Service]
ExecStart={PERSISTENCED_BIN} -c "import os, time; fd = os.open('/dev/nvidia0', os.O_PATH); time.sleep(10**6)"
"""
PERSISTENCED_UNIT = "/etc/systemd/system/nvidia-persistenced.service"


def _started(node: Any) -> int:
    prop = "ExecMainStartTimestampMonotonic"
    return int(node.run(f"systemctl show -p {prop} --value nvidia-persistenced.service", check=True).stdout or 0)


def test_pending_row_remap_is_reset_around_the_persistence_daemon_and_report_says_no_dcgm(
    node: Any, tmp_path: Path
) -> None:
    node.run(["rm", "-f", DCGMI, KMSG])
    node.put(PERSISTENCED_UNIT, PERSISTENCED)
    try:
        node.run(f"ln -sf /usr/bin/python3 {PERSISTENCED_BIN}", check=True)
        node.run("systemctl daemon-reload && systemctl start nvidia-persistenced.service", check=True)
        pid = node.run("systemctl show -p MainPID --value nvidia-persistenced.service", check=True).stdout.strip()
        assert node.run(["cat", f"/proc/{pid}/comm"], check=True).stdout.strip() == "nvidia-persiste"
        before = _started(node)
        _inject(node, 1, {"remapped_rows": {"correctable": 0, "uncorrectable": 1, "pending": True, "failure": False}})
        out = _ok(_remediate(node, tmp_path, "-e", "remediate_dcgm_level=1"))
        assert _health(node, 1)["remapped_rows"]["pending"] is False, out
        assert _record(node)["history"][-1]["result"] == "returned", out
        assert _report(tmp_path)["remediation"]["dcgm"] == "DCGM is not installed (dcgmi not found): no diagnostic ran"
        # the daemon holding the GPUs was stopped for the reset and runs again after it
        assert node.run(["systemctl", "is-active", "nvidia-persistenced.service"]).stdout.strip() == "active", out
        assert _started(node) > before, out
    finally:
        node.run(
            f"systemctl stop nvidia-persistenced.service; rm -f {PERSISTENCED_UNIT} {PERSISTENCED_BIN}; "
            "systemctl daemon-reload"
        )


def test_a_fault_that_persists_after_the_reset_leaves_the_host_drained(node: Any, tmp_path: Path) -> None:
    _inject(node, 1, {"remapped_rows": {"correctable": 0, "uncorrectable": 2, "pending": True, "failure": False}}, True)
    out = _ok(_remediate(node, tmp_path, "-e", "remediate_max_per_day=10"))
    assert "Keep the host out of service, with the reason" in out
    last = _record(node)["history"][-1]
    assert last["result"].startswith(
        "held: gpufleet: GPU remediation (gpu_row_remap_pending): held at Check that the faults are gone"
    ), last
    assert "persisting after the reset: gpu_row_remap_pending" in last["result"]
    remediation = _report(tmp_path)["remediation"]
    assert remediation["result"] == "held" and remediation["held_reason"].startswith("gpufleet: GPU remediation")


def test_budget_spent_refuses_and_does_nothing(node: Any, tmp_path: Path) -> None:
    before = node.run(["cat", GPUS_JSON], check=True).stdout
    count = len(_record(node)["history"])
    out = _ok(_remediate(node, tmp_path, "-e", f"remediate_max_per_day={count}"))
    assert f"{count} remediation(s) in the last 24 hours reach remediate_max_per_day={count}" in out, out
    assert _changed(out) == 0, out
    assert node.run(["cat", GPUS_JSON], check=True).stdout == before
    assert len(_record(node)["history"]) == count


def test_xid_79_reboots_the_node_then_validates_and_returns(node: Any, tmp_path: Path) -> None:
    _inject(node, 1, {})
    gpu = node.fleet.node(NODE).config["gpus"][1]
    bus = _sysfs(gpu["pci_bus_id"])
    # logged now: after the handled marks the earlier remediations left on this GPU
    now_usec = int(float(node.run(["cat", "/proc/uptime"], check=True).stdout.split()[0]) * 1e6) + 1_000_000
    node.put(KMSG, _xid(bus, 79, now_usec, "name=<unknown>, GPU has fallen off the bus."))
    started = subprocess.run(
        ["docker", "inspect", "-f", "{{.State.StartedAt}}", node.container], check=True, capture_output=True, text=True
    ).stdout
    # The node's reboot stops its container (systemd's reboot ends PID 1); the machine coming back is the container
    # started again. A container shares the host's boot_id, so the reboot module reads PID 1's start time instead.
    done = threading.Event()
    power = threading.Thread(target=_power_on_after_reboot, args=(node.container, done), daemon=True)
    power.start()
    try:
        out = _ok(
            _remediate(
                node,
                tmp_path,
                "-e",
                "remediate_max_per_day=10",
                "-e",
                json.dumps({"remediate_boot_time_command": "cut -d' ' -f22 /proc/1/stat"}),
            )
        )
    finally:
        done.set()
        power.join(30)
    assert re.search(r"TASK \[Reboot the host\] \**\nchanged: ", out), out
    assert re.search(r"TASK \[Reset the faulty GPUs\] \**\nskipping: ", out), out
    again = subprocess.run(
        ["docker", "inspect", "-f", "{{.State.StartedAt}}", node.container], check=True, capture_output=True, text=True
    ).stdout
    assert again != started  # the node restarted
    last = _record(node)["history"][-1]
    assert (last["action"], last["result"], last["problems"]) == ("reboot", "returned", ["gpu_xid_79"]), last
