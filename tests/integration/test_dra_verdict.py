# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The DRA readiness verdict in the fleet report of a full ``site.yml`` (the shared ``converged_fleet``,
``_fleet_converged.py``): every GPU node has one, and none of them is ready, for what Debian gives them - drivers 535
and 550, below the 565 NVIDIA's DRA driver v0.4.1 requires - and cri-bookworm's containerd 1.6, which has no CDI. The
containerd 1.7 and 2.1 nodes read CDI (the runtime role turned it on on 1.7) and every node's CDI spec lists its GPUs.
The CPU-only node has no verdict. A ready host is shown on the IMEX fleet (``test_imex.py``: NVIDIA's 580 branch).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

GPU_NODES = ("cri-bookworm", "cri-trixie", "cri-sid", "cri-kube")


@pytest.fixture(scope="module")
def report(converged_fleet):
    folder = Path(converged_fleet.converged["settings"]["report_dir"])
    data = json.loads((folder / "fleet-report.json").read_text(encoding="utf-8"))
    return {h["name"]: h for h in data["hosts"]}, (folder / "fleet-report.md").read_text(encoding="utf-8")


def test_every_gpu_node_is_not_ready_with_its_fixes(report, converged_fleet):
    hosts, markdown = report
    for name in GPU_NODES:
        verdict = hosts[name]["dra"]
        checks = {c["name"]: c for c in verdict["checks"]}
        assert verdict["ready"] is False and verdict["release"] == "v0.4.1", (name, verdict)
        driver = converged_fleet.node(name).config["driver_version"]
        assert checks["driver"]["found"] == f"driver {driver} loaded" and not checks["driver"]["ok"], checks
        assert "driver_branch: '580'" in checks["driver"]["fix"]
        assert checks["cdi_spec"]["ok"], (name, checks["cdi_spec"])
        assert checks["runtime_cdi"]["ok"] is (name != "cri-bookworm"), (name, checks["runtime_cdi"])
        assert f"| {name} | not ready: driver (driver {driver} loaded)" in markdown
    assert "containerd 1.6" in hosts["cri-bookworm"]["dra"]["checks"][2]["found"]
    assert "upgrade containerd to 1.7 or later" in hosts["cri-bookworm"]["dra"]["checks"][2]["fix"]
    assert hosts["cri-cpu"]["dra"] is None
    assert "## Ready for DRA" in markdown and "| cri-cpu |" not in markdown.split("## Ready for DRA")[1].split("##")[0]
