# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""``mig_drain``: ``site.yml --tags mig`` on the shared end-to-end fleet's ``e2e-bookworm`` while a docker GPU container
holds GPU 0. The layout changes GPU 0, so the node is drained first (role ``gpufleet.nvidia.drain``: the container
gets docker's own stop), then the layout is applied. The node is put back as ``test_mig_layout_e2e.py`` leaves it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_mig_layout_e2e import IMAGE, NODE, OFF, mig_profiles, module, site_mig, task_output

pytestmark = pytest.mark.integration

HOLD = (
    "import os, signal, sys, time; signal.signal(signal.SIGTERM, lambda *a: sys.exit(0)); "
    "fd = os.open('/dev/nvidia0', os.O_PATH); time.sleep(900)"
)


def test_mig_drain_stops_the_gpu_container_then_applies_the_layout(e2e_fleet: Any, tmp_path: Path) -> None:
    node, inventory = e2e_fleet.node(NODE), e2e_fleet.inventory
    run = ["docker", "run", "-d", "--runtime", "nvidia", "--gpus", "all", IMAGE, "python3", "-c", HOLD]
    cid = node.run(run, check=True).stdout.strip()
    try:
        proc, recap = site_mig(inventory, tmp_path, {"mig_drain": True, "drain_poll": 1, "drain_stop_timeout": 5})
        assert recap[NODE]["failed"] == 0, proc.stdout[-4000:]
        stopped = task_output(proc.stdout, "Stop the containers holding a GPU")
        assert f"changed: [{NODE}]" in stopped and cid[:12] in stopped, proc.stdout[-4000:]
        state = node.run(["docker", "inspect", "-f", "{{.State.Running}} {{.State.ExitCode}}", cid]).stdout.split()
        assert state == ["false", "0"], state  # docker stop's SIGTERM, which the holder answers by exiting 0
        assert mig_profiles(inventory) == [["2g.10gb", "2g.10gb", "2g.10gb"], []]
        # a second run changes no GPU, so nothing is drained
        again, recap = site_mig(inventory, tmp_path, {"mig_drain": True})
        assert recap[NODE]["changed"] == 0, again.stdout[-4000:]
    finally:
        node.run(["docker", "rm", "-f", cid])
        off = module(inventory, "mig_layout", {"layout": OFF})
        node.run(["rm", "-f", "/etc/gpufleet-sim/mig-state", "/etc/gpufleet/mig-layout.json"])
        module(inventory, "cdi_spec", {})
    assert off.get("failed") is not True, off
