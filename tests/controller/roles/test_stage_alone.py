# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The runtime and validate roles on a host an earlier run converged, with no earlier stage in this play (what
``site.yml --tags runtime,validate`` does): the toolkit comes from gpu_facts (its launchers on the host), not from
``gpufleet_toolkit``. Localhost, check mode, gpu_facts on a fixture root (module_defaults)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ansible_collections.gpufleet.nvidia.tests.controller.playbook import run_playbook

pytestmark = pytest.mark.controller
REPO = Path(__file__).resolve().parents[3]

PLAY = """
- hosts: all
  gather_facts: false
  module_defaults:
    gpufleet.nvidia.gpu_facts:
      root: "{root}"
      toolkit_bindir: "{bindir}"
  tasks:
    - name: Discover, as site.yml's discover play does
      gpufleet.nvidia.gpu_facts:

    - name: The runtime stage alone, public (what the role worked with is read below)
      ansible.builtin.include_role:
        name: gpufleet.nvidia.runtime
        public: true

    - name: Dump what the role worked with
      ansible.builtin.copy:
        content: >-
          {{{{ {{'runtime_path': __runtime_path | default(none), 'hook': __runtime_hook | default(none),
                'toolkit': ansible_facts.nvidia.toolkit, 'runtime': gpufleet_runtime | default(none)}} | to_json }}}}
        dest: "{tmp}/facts.json"
        mode: "0644"
      delegate_to: localhost
      check_mode: false
"""


def _run(tmp: Path, root: str, bindir: str) -> tuple[subprocess.CompletedProcess, dict]:
    inventory = {
        "all": {"hosts": {"gpu-node": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}
    }
    (tmp / "inventory.yml").write_text(yaml.safe_dump(inventory))
    (tmp / "play.yml").write_text(PLAY.format(root=root, bindir=bindir, tmp=tmp))
    extra = {
        "runtime_cdi_spec_path": str(tmp / "cdi" / "nvidia.yaml"),
        "runtime_udev_rule_path": str(tmp / "udev" / "71.rules"),
    }
    proc = run_playbook("-i", tmp / "inventory.yml", tmp / "play.yml", "--check", "-e", json.dumps(extra))
    facts = json.loads((tmp / "facts.json").read_text()) if (tmp / "facts.json").exists() else {}
    return proc, facts


def _host(tmp: Path, with_toolkit: bool) -> str:
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.hostprog import install
    from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils.discovery.discovery_tree import gpu_host

    tree = gpu_host(tmp / "host", 2)
    if with_toolkit:
        for name in install.PROGRAMS:
            path = Path(tree.root) / "opt/gpufleet/bin" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(install.launcher(name, "/opt/gpufleet/lib", "/usr/bin/python3", "/usr/bin/runc"))
            path.chmod(0o755)
    return tree.root


def test_the_runtime_stage_alone_takes_the_toolkit_from_the_host(tmp_path: Path) -> None:
    proc, facts = _run(tmp_path, _host(tmp_path, True), "/opt/gpufleet/bin")
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
    assert facts["toolkit"]["source"] == "discovered"
    assert facts["runtime_path"] == "/opt/gpufleet/bin/gpufleet-container-runtime"
    assert facts["hook"] == "/opt/gpufleet/bin/gpufleet-cdi-hook"
    assert facts["runtime"] is not None


def test_without_a_toolkit_on_the_host_it_says_what_to_do(tmp_path: Path) -> None:
    proc, _facts = _run(tmp_path, _host(tmp_path, False), "/opt/gpufleet/bin")
    assert proc.returncode != 0
    assert "gpu_facts found no toolkit on the host" in proc.stdout
