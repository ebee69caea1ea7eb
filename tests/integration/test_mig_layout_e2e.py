# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""gpufleet.nvidia.mig_layout on an A100 stub node of the shared end-to-end fleet (``e2e_fleet``'s ``e2e-bookworm``:
two A100-SXM4-40GB with MIG off; no fleet of its own).

A layout applied to GPU 0 creates its instances (the stub NVML keeps them in ``/etc/gpufleet-sim/mig-state``, as the
driver keeps them until a reset), a second run changes nothing, a changed layout is refused while a container holds
the GPU and applied after it exits, and a container given a MIG device through the CDI spec the ``cdi_spec`` module
then writes (podman, ``--device nvidia.com/gpu=0:0``) gets GPU 0's device node and not GPU 1's.

The ``mig`` stage of ``site.yml`` (``--tags mig``, the role ``gpufleet.nvidia.mig``) on the same node: the host's named
layout applied, a second run changes nothing, and the CDI spec the role writes again (with the options the runtime role
records in ``/etc/gpufleet/cdi-refresh.json``, written here as that role would) lists the MIG devices.

The node is put back in a ``finally``: MIG off on GPU 0 through the module, the state file (and the record) removed,
the CDI spec written again as the fleet had it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
NODE = "e2e-bookworm"
OTHER = "e2e-trixie"  # a GPU node without a layout
IMAGE = "gpufleet-sim/mini:latest"
HOLD = ["python3", "-c", "import os, time; fd = os.open('/dev/nvidia0', os.O_PATH); time.sleep(900)"]
FIRST = [{"devices": [0], "mig-enabled": True, "mig-devices": {"1g.5gb": 2, "3g.20gb": 1}}]
SECOND = [{"devices": [0], "mig-enabled": True, "mig-devices": {"7g.40gb": 1}}]
OFF = [{"devices": [0], "mig-enabled": False}]
SITE = ROOT / "playbooks" / "site.yml"
RECORD = "/etc/gpufleet/cdi-refresh.json"
RECAP = re.compile(r"^(\S+)\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


def module(inventory: Path, name: str, args: dict[str, Any], *extra: str) -> dict[str, Any]:
    """One module run on the node through ``ansible -m`` (json callback): its task result."""
    env = dict(
        os.environ,
        ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".cache" / "collections"),
        ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
        ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json",
    )
    res = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "ansible"), "-i", str(inventory), NODE, "-m", f"gpufleet.nvidia.{name}",
         *(["-a", json.dumps(args)] if args else []), *extra],
        check=False, capture_output=True, text=True, env=env, cwd=ROOT, timeout=300,
    )  # fmt: skip
    return json.loads(res.stdout)["plays"][0]["tasks"][0]["hosts"][NODE]


def mig_profiles(inventory: Path) -> list[list[str]]:
    facts = module(inventory, "gpu_facts", {})["ansible_facts"]["nvidia"]
    return [sorted(m["profile"] for m in g["mig_devices"]) for g in facts["gpus"]]


def test_layout_applied_idempotent_refused_while_held_and_seen_through_cdi(e2e_fleet: Any) -> None:
    node, inventory = e2e_fleet.node(NODE), e2e_fleet.inventory
    holder = None
    try:
        first = module(inventory, "mig_layout", {"layout": FIRST}, "--diff")
        assert first.get("failed") is not True, first
        assert first["changed"] is True and first["gpus"][0]["after"] == "MIG enabled: 1g.5gb x2, 3g.20gb x1"
        assert "GPU 0 (" in first["diff"]["before"] and "MIG disabled" in first["diff"]["before"]
        assert mig_profiles(inventory) == [["1g.5gb", "1g.5gb", "3g.20gb"], []]

        again = module(inventory, "mig_layout", {"layout": FIRST})
        assert again["changed"] is False, again

        check = module(inventory, "mig_layout", {"layout": SECOND}, "--check")
        assert check["changed"] is True and mig_profiles(inventory)[0] == ["1g.5gb", "1g.5gb", "3g.20gb"]

        unknown = [{"devices": [0], "mig-enabled": True, "mig-devices": {"1g.6gb": 1}}]  # an A30 profile
        refused = module(inventory, "mig_layout", {"layout": unknown})
        offered = "it offers 1g.5gb, 1g.5gb+me, 1g.10gb, 2g.10gb, 3g.20gb, 4g.20gb, 7g.40gb"
        assert refused["failed"] is True and offered in refused["msg"], refused

        holder = node.run(
            ["docker", "run", "-d", "--network", "none", "--runtime=nvidia", "-e", "NVIDIA_VISIBLE_DEVICES=0", IMAGE,
             *HOLD],
            check=True,
        ).stdout.strip()  # fmt: skip
        busy = module(inventory, "mig_layout", {"layout": SECOND})
        assert busy["failed"] is True and "in use" in busy["msg"] and "(python3) in docker container" in busy["msg"]
        assert holder[:12] in busy["msg"]
        assert mig_profiles(inventory)[0] == ["1g.5gb", "1g.5gb", "3g.20gb"]  # nothing changed
        node.run(["docker", "rm", "-f", holder], check=True)
        holder = None

        applied = module(inventory, "mig_layout", {"layout": SECOND})
        assert applied["changed"] is True and mig_profiles(inventory) == [["7g.40gb"], []]

        spec = module(inventory, "cdi_spec", {})
        assert spec.get("failed") is not True, spec
        listed = node.run(["podman", "run", "--rm", "--device", "nvidia.com/gpu=0:0", IMAGE, "ls", "/dev"], check=True)
        devs = listed.stdout.split()
        assert "nvidia0" in devs and "nvidia1" not in devs and "nvidiactl" in devs, listed.stdout
    finally:
        if holder:
            node.run(["docker", "rm", "-f", holder])
        off = module(inventory, "mig_layout", {"layout": OFF})
        node.run(["rm", "-f", "/etc/gpufleet-sim/mig-state"])
        module(inventory, "cdi_spec", {})
    assert off.get("failed") is not True, off
    assert mig_profiles(inventory) == [[], []]


def site_mig(
    inventory: Path, tmp: Path, extra_vars: dict[str, Any] | None = None
) -> tuple[subprocess.CompletedProcess, dict[str, dict[str, int]]]:
    """``site.yml --tags mig`` on the node and on ``e2e-trixie``: the layouts in a group variable, the node's own
    ``mig_layout`` a host variable (a second inventory source, as an operator's host_vars), trixie without one. The
    run and the recap per host."""
    layouts = tmp / "mig.yml"
    layouts.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "vars": {
                        "mig_layouts": {
                            "three-2g": [{"devices": [0], "mig-enabled": True, "mig-devices": {"2g.10gb": 3}}]
                        }
                    },
                    "hosts": {NODE: {"mig_layout": "three-2g"}},
                }
            }
        )
    )
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".cache" / "collections"), ANSIBLE_FORCE_COLOR="0")
    proc = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "ansible-playbook"), "-i", str(inventory), "-i", str(layouts), "--limit",
         f"{NODE},{OTHER}", "--tags", "mig", "-e",
         json.dumps({"report_dir": str(tmp / "report"), **(extra_vars or {})}), str(SITE)],
        check=False, capture_output=True, text=True, cwd=ROOT, env=env, timeout=600,
    )  # fmt: skip
    recap = {m.group(1): {"changed": int(m.group(3)), "failed": int(m.group(5))} for m in RECAP.finditer(proc.stdout)}
    assert proc.returncode == 0 and {NODE, OTHER} <= set(recap), (
        f"rc={proc.returncode}\n{proc.stdout[-6000:]}\n{proc.stderr[-2000:]}"
    )
    return proc, recap


def task_output(stdout: str, task: str) -> str:
    """What ansible-playbook printed under the first task whose name (after any ``role : ``) starts with ``task``."""
    return stdout.partition(task)[2].partition("TASK [")[0]


def test_site_mig_stage_applies_the_hosts_layout_and_refreshes_the_cdi_spec(e2e_fleet: Any, tmp_path: Path) -> None:
    node, inventory = e2e_fleet.node(NODE), e2e_fleet.inventory
    record = {"path": "/etc/cdi/nvidia.yaml", "hook_path": "/usr/local/bin/gpufleet-cdi-hook", "capabilities": ["all"],
              "cdi_version": "auto"}  # fmt: skip
    try:
        node.run(["sh", "-c", f"mkdir -p /etc/gpufleet && cat > {RECORD}"], input=json.dumps(record), check=True)
        first, recap = site_mig(inventory, tmp_path)
        assert recap[NODE]["changed"] >= 2 and recap[OTHER] == {"changed": 0, "failed": 0}, first.stdout[-4000:]
        # the role ran on the node only (trixie, no layout, is not a host of the MIG play), and rewrote the spec
        assert f"changed: [{NODE}]" in task_output(first.stdout, "Apply the host's MIG layout"), first.stdout[-4000:]
        assert f"changed: [{NODE}]" in task_output(first.stdout, "Write the CDI spec and index again"), first.stdout
        # the host without a layout is left out of the MIG play (site.yml's gpufleet_mig group): not even the stage's
        # include evaluates for it
        stage = task_output(first.stdout, "TASK [MIG stage]")
        assert f"tasks/stage.yml for {NODE}" in stage and OTHER not in stage, first.stdout
        assert OTHER not in task_output(first.stdout, "Apply the role of the stage mig"), first.stdout
        assert mig_profiles(inventory) == [["2g.10gb", "2g.10gb", "2g.10gb"], []]

        again, recap = site_mig(inventory, tmp_path)
        assert all(r == {"changed": 0, "failed": 0} for r in recap.values()), again.stdout[-4000:]

        spec = yaml.safe_load(node.run(["cat", "/etc/cdi/nvidia.yaml"], check=True).stdout)
        names = {d["name"] for d in spec["devices"]}
        assert {"0:0", "0:1", "0:2"} <= names and "0:3" not in names and "1:0" not in names, sorted(names)
    finally:
        off = module(inventory, "mig_layout", {"layout": OFF})
        # the role's record for its boot unit too (test_mig_reboot.py reboots with it)
        node.run(["rm", "-f", "/etc/gpufleet-sim/mig-state", RECORD, "/etc/gpufleet/mig-layout.json"])
        module(inventory, "cdi_spec", {})
    assert off.get("failed") is not True, off
    assert mig_profiles(inventory) == [[], []]
