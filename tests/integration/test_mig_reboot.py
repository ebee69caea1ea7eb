# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The MIG layout comes back after a reboot, before the engines take GPU containers (the shared end-to-end fleet's
``e2e-bookworm``: two A100-SXM4-40GB; no fleet of its own).

``site.yml --tags mig`` applies the host's layout, records it and enables ``gpufleet-mig-layout.service``. A
stand-in ``nvidia-persistenced.service`` holds GPU 0 as the real daemon does. The node is rebooted (its container
restarted): the simulation forgets the MIG instances there, as a reboot does (``gpufleet-sim-setup``; an A100 keeps
its MIG mode, a Hopper GPU would not), and the boot unit makes them again - after the stand-in daemon started, which
it stops and starts again around the change, and before docker starts. Then GPU 0 has the same instances, the CDI
spec names them, a podman container gets one through CDI, and discovery reports no ``mig_boot_failed``.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.test_mig_layout_e2e import IMAGE, NODE, OFF, RECORD, mig_profiles, module, site_mig

pytestmark = pytest.mark.integration

UNIT = "gpufleet-mig-layout.service"
LAYOUT_RECORD = "/etc/gpufleet/mig-layout.json"
STATUS = "/run/gpufleet/mig-boot.json"
# The stand-in for NVIDIA's persistence daemon: holds /dev/nvidia0 open while it runs; after the simulated driver, as
# the real daemon comes after the driver.
PERSISTENCED = """[Unit]
Description=stand-in nvidia-persistenced (holds /dev/nvidia0)
After=gpufleet-sim.service
[Service]
ExecStart=/usr/bin/python3 -c "import os, time; fd = os.open('/dev/nvidia0', os.O_PATH); time.sleep(10**6)"
[Install]
WantedBy=multi-user.target
"""
THREE_2G = ["2g.10gb", "2g.10gb", "2g.10gb"]


def monotonic(node: Any, unit: str, prop: str) -> int:
    return int(node.run(f"systemctl show -p {prop} --value {unit}", check=True).stdout.strip() or 0)


def test_the_layout_is_applied_again_at_boot_around_the_gpus_clients(e2e_fleet: Any, tmp_path: Path) -> None:
    node, inventory = e2e_fleet.node(NODE), e2e_fleet.inventory
    record = {"path": "/etc/cdi/nvidia.yaml", "hook_path": "/usr/local/bin/gpufleet-cdi-hook", "capabilities": ["all"],
              "cdi_version": "auto"}  # fmt: skip
    try:
        node.run(["sh", "-c", f"mkdir -p /etc/gpufleet && cat > {RECORD}"], input=json.dumps(record), check=True)
        site_mig(inventory, tmp_path)
        assert mig_profiles(inventory) == [THREE_2G, []]
        assert json.loads(node.run(["cat", LAYOUT_RECORD], check=True).stdout)["name"] == "three-2g"
        assert node.run(["systemctl", "is-enabled", UNIT]).stdout.strip() == "enabled"

        node.run(["sh", "-c", "cat > /etc/systemd/system/nvidia-persistenced.service"], input=PERSISTENCED, check=True)
        node.run("systemctl daemon-reload && systemctl enable --now nvidia-persistenced.service", check=True)

        subprocess.run(["docker", "restart", node.container], check=True, capture_output=True, timeout=180)
        node.wait_booted()

        status = json.loads(node.run(["cat", STATUS], check=True).stdout)
        assert status["ok"] and status["changed"], status
        # the reboot lost the instances (the A100 kept its mode); the unit made them again around the daemon
        assert status["gpus"] == [{"index": 0, "before": "MIG enabled: no instances",
                                   "after": "MIG enabled: 2g.10gb x3"}], status  # fmt: skip
        assert status["stopped"] == ["nvidia-persistenced.service"], status
        assert mig_profiles(inventory) == [THREE_2G, []]

        # order: the daemon started, was stopped by the unit and started again after it; docker only after the unit
        journal = node.run(["journalctl", "-b", "-o", "cat", "-u", "nvidia-persistenced.service"], check=True).stdout
        assert journal.count("Started nvidia-persistenced.service") + journal.count("Started stand-in") >= 2, journal
        assert node.run(["systemctl", "is-active", "nvidia-persistenced.service"]).stdout.strip() == "active"
        unit_done = monotonic(node, UNIT, "ExecMainExitTimestampMonotonic")
        unit_start = monotonic(node, UNIT, "ExecMainStartTimestampMonotonic")
        assert 0 < unit_done < monotonic(node, "docker.service", "ExecMainStartTimestampMonotonic")
        assert monotonic(node, "nvidia-persistenced.service", "ExecMainStartTimestampMonotonic") > unit_start

        spec = yaml.safe_load(node.run(["cat", "/etc/cdi/nvidia.yaml"], check=True).stdout)
        names = {d["name"] for d in spec["devices"]}
        assert {"0:0", "0:1", "0:2"} <= names and "0:3" not in names, sorted(names)
        listed = node.run(["podman", "run", "--rm", "--device", "nvidia.com/gpu=0:0", IMAGE, "ls", "/dev"], check=True)
        assert "nvidia0" in listed.stdout.split() and "nvidia1" not in listed.stdout.split(), listed.stdout
        facts = module(inventory, "gpu_facts", {})["ansible_facts"]["nvidia"]
        assert "mig_boot_failed" not in {p["code"] for p in facts["problems"]}, facts["problems"]
        assert facts["mig_boot"]["layout"] == "three-2g" and facts["mig_boot"]["status"]["ok"], facts["mig_boot"]

        # mig_layout emptied: the stage is still entered (the boot unit would apply the old layout at every boot)
        # and takes the unit and its record off; the partitions stay as they are
        emptied, recap = site_mig(inventory, tmp_path, {"mig_layout": ""})
        assert emptied.returncode == 0 and recap[NODE]["changed"] > 0, emptied.stdout[-3000:]
        assert node.run(["systemctl", "is-enabled", UNIT]).stdout.strip() not in ("enabled", "disabled")
        assert node.run(["test", "-e", LAYOUT_RECORD]).rc == 1
        assert node.run(["test", "-e", "/usr/local/bin/gpufleet-mig-boot"]).rc == 1
        assert mig_profiles(inventory) == [THREE_2G, []]
        facts = module(inventory, "gpu_facts", {})["ansible_facts"]["nvidia"]
        assert facts["mig_boot"]["layout"] is None, facts["mig_boot"]
        # and a second run does not enter the stage again
        again, recap = site_mig(inventory, tmp_path, {"mig_layout": ""})
        assert again.returncode == 0 and recap[NODE]["changed"] == 0, again.stdout[-3000:]
    finally:
        node.run(
            "systemctl disable --now nvidia-persistenced.service; rm -f /etc/systemd/system/nvidia-persistenced"
            f".service; systemctl disable {UNIT}; rm -f {LAYOUT_RECORD} {STATUS}; systemctl daemon-reload"
        )
        off = module(inventory, "mig_layout", {"layout": OFF})
        node.run(["rm", "-f", "/etc/gpufleet-sim/mig-state", RECORD])
        module(inventory, "cdi_spec", {})
    assert off.get("failed") is not True, off
    assert mig_profiles(inventory) == [[], []]
