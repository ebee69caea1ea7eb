# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Every role's variables are written once, in meta/argument_specs.yml: defaults/main.yml holds the same names and
values, and the README's variable table is what tests/tools/role_docs.py generates from the specs."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
ROLES = ("driver", "mig", "toolkit", "runtime", "slurm", "device_plugin", "validate", "drain", "gpu_watch", "imex")


def _role_docs():
    spec = importlib.util.spec_from_file_location("role_docs", REPO / "tests" / "tools" / "role_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_role_is_covered() -> None:
    assert sorted(ROLES) == sorted(p.name for p in (REPO / "roles").iterdir() if (p / "meta").is_dir())
    assert tuple(_role_docs().ROLES) == ROLES


@pytest.mark.parametrize("role", ROLES)
def test_defaults_specs_and_readme_agree(role: str) -> None:
    role_docs = _role_docs()
    defaults = yaml.safe_load((REPO / "roles" / role / "defaults" / "main.yml").read_text())
    options = role_docs.options(role, REPO)
    assert list(defaults) == list(options), "defaults/main.yml and argument_specs list the same names, in order"
    for name, spec in options.items():
        assert spec.get("default") == defaults[name], name
        assert spec.get("description"), name
    current, generated = role_docs.render(role, REPO)
    assert current == generated, f"roles/{role}/README.md: run tests/tools/role_docs.py"
