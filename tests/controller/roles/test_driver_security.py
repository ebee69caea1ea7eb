# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The driver role's security check (roles/driver/tasks/security.yml): a driver version NVIDIA's bulletins name warns
or refuses by driver_security_policy, run on localhost as the role includes it; and the preflight rejects a policy
that is not one of the three."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.role_specs import problems
from ansible_collections.gpufleet.nvidia.tests.controller.playbook import run_playbook

pytestmark = pytest.mark.controller
TASKS = Path(__file__).resolve().parents[3] / "roles" / "driver" / "tasks"
PLAY = """
- hosts: all
  gather_facts: false
  tasks:
    - name: The driver role's security check
      ansible.builtin.include_tasks: "{tasks}/security.yml"
      vars:
        driver_plan: {{version: "{version}"}}
        driver_security_policy: {policy}
"""


def run(tmp_path: Path, version: str, policy: str):
    inventory = {
        "all": {"hosts": {"gpu-1": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}
    }
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
    (tmp_path / "play.yml").write_text(PLAY.format(tasks=TASKS, version=version, policy=policy))
    res = run_playbook("-i", tmp_path / "inventory.yml", tmp_path / "play.yml")
    return res, res.stdout + res.stderr


def test_refuse_stops_the_host_with_the_cves_and_the_fixed_version(tmp_path):
    """535.261.03: CVE-2025-23280 (bulletin 5703) is fixed in 535.274.02 for R535; the fix names the one upgrade that
    clears every bulletin affecting it (535.309.01, bulletin 5821)."""
    res, out = run(tmp_path, "535.261.03", "refuse")
    assert res.returncode != 0, out
    assert "CVE-2025-23280" in out and "535.274.02 fixes this bulletin" in out, out
    assert "driver_version=535.309.01" in out and "driver_security_policy=warn" in out, out


@pytest.mark.parametrize(
    ("version", "policy", "warned"),
    # 535.309.01: R535's fix in bulletin 5821 (cves/2026/24xxx/CVE-2026-24182.json), the newest bulletin naming R535
    [("535.261.03", "warn", True), ("535.261.03", "ignore", False), ("535.309.01", "refuse", False)],
)
def test_warn_goes_on_and_a_fixed_version_passes(tmp_path, version, policy, warned):
    res, out = run(tmp_path, version, policy)
    assert res.returncode == 0, out
    assert ("WARNING driver 535.261.03 is affected by CVE-2025-23280" in out) is warned, out


def test_preflight_rejects_an_unknown_policy():
    assert any("driver_security_policy" in line for line in problems({"driver_security_policy": "maybe"}))
    assert problems({"driver_security_policy": "refuse"}) == []
