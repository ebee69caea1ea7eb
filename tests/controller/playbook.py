# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The one way the controller tests run ``ansible-playbook``: this tree's collection, no colour, output captured; and
site.yml's condition for one of its optional stages, taken from site.yml itself."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
COLLECTIONS = str(REPO / ".cache" / "collections")
PLAYBOOK_BIN = Path(sys.executable).parent / "ansible-playbook"


def run_playbook(
    *args: str | os.PathLike, cwd: str | os.PathLike | None = None, collections: str = COLLECTIONS, **env: str
) -> subprocess.CompletedProcess:
    """``ansible-playbook *args`` with ``ANSIBLE_COLLECTIONS_PATH=collections`` and ``env`` added; never raises on
    a failed play (the tests read ``returncode``, ``stdout`` and ``stderr``)."""
    environ = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=collections, ANSIBLE_NOCOLOR="1", **env)
    return subprocess.run(
        [str(PLAYBOOK_BIN), *map(str, args)], capture_output=True, text=True, env=environ, cwd=cwd, check=False
    )


def site_stage_condition(stage: str) -> str:
    """A Jinja expression, true for the hosts site.yml's ``stage`` play enters: the discover play's add_host puts a
    host in the groups of the site_groups filter, and the stage's play names one of them in its hosts."""
    plays = yaml.safe_load((REPO / "playbooks" / "site.yml").read_text())
    discover = next(p for p in plays if "discover" in p.get("tags", []))
    add_host = next(t for t in discover["tasks"] if "ansible.builtin.add_host" in t)
    assign = add_host["ansible.builtin.add_host"]["groups"].strip()
    assert assign.startswith("{{") and assign.endswith("}}")
    play = next(p for p in plays if stage in p.get("tags", []))
    assert play["tasks"][0]["vars"]["gpufleet_stage"] == stage
    group = re.fullmatch(r"\{\{ groups\['(gpufleet_\w+)'\] \| default\(\[\]\) \}\}", play["hosts"]).group(1)
    expression = re.sub(r"\bitem\b", "inventory_hostname", assign[2:-2])
    return "{{ '" + group + "' in (" + expression + ") }}"
