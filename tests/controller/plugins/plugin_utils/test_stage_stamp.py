# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The stamped stages' table: inputs from the roles' argument specs, paths filled in, and no file a role writes left
out of its stage's paths (a left-out file could drift and a rerun would skip the stage that repairs it)."""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

import pytest
import yaml

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils import stage_stamp

ROLES = Path(__file__).resolve().parents[4] / "roles"


def test_inputs_are_the_role_variables_and_the_extras():
    names = stage_stamp.role_variables("runtime")
    spec = yaml.safe_load((ROLES / "runtime" / "meta" / "argument_specs.yml").read_text())
    assert set(spec["argument_specs"]["main"]["options"]) <= set(names)
    assert {"gpufleet_toolkit", "group_names", "device_plugin_node_group"} <= set(names)
    assert not stage_stamp.spec("validate", {})["stamped"]


def test_paths_take_the_variables_else_the_role_defaults_and_the_engines_files():
    nvidia = {"engines": {"docker": {"config_path": "/srv/docker/daemon.json"}, "podman": {"config_path": None}}}
    spec = stage_stamp.spec("runtime", {"runtime_cdi_spec_path": None}, nvidia)
    assert "/etc/cdi/nvidia.yaml" in spec["paths"] and "/srv/docker/daemon.json" in spec["paths"]
    moved = stage_stamp.spec("runtime", {"runtime_cdi_spec_path": "/run/cdi/gpu.yaml"}, nvidia)
    assert "/run/cdi/gpu.yaml" in moved["paths"] and moved["inputs"] == {"runtime_cdi_spec_path": "/run/cdi/gpu.yaml"}
    toolkit = stage_stamp.spec("toolkit", {"toolkit_bindir": "/opt/bin", "toolkit_libdir": ""})
    assert "/opt/bin/gpufleet-*" in toolkit["paths"] and "/usr/local/lib/gpufleet/*" in toolkit["paths"]
    assert stage_stamp.spec("driver", {})["publish"] == ["driver_kernel_module", "driver_plan", "driver_reboot_needed"]


def _written_paths(stage):
    """Literal absolute dest:/path: values of the role's tasks, and the role defaults they name."""
    defaults = stage_stamp.role_defaults(stage)
    role_vars = (
        yaml.safe_load((ROLES / stage / "vars" / "main.yml").read_text())
        if (ROLES / stage / "vars" / "main.yml").exists()
        else {}
    )
    found = set()
    for tasks in (ROLES / stage / "tasks").glob("*.yml"):
        if tasks.name.startswith("absent") or tasks.name.endswith("_absent.yml"):
            continue
        for raw in re.findall(r"^\s*(?:dest|path):\s*(\S.*)$", tasks.read_text(), re.M):
            path = raw.strip().strip("\"'")
            for name, default in {**defaults, **(role_vars or {})}.items():
                path = path.replace("{{ " + name + " }}", str(default))
            if path.startswith("/") and "{{" not in path:
                found.add(path)
    return found


@pytest.mark.parametrize("stage", sorted(stage_stamp.STAGES))
def test_every_file_a_role_writes_is_in_its_stage_paths(stage):
    patterns = stage_stamp.spec(stage, {})["paths"]
    written = _written_paths(stage)
    missed = [p for p in written if not any(fnmatch.fnmatchcase(p, pat) or p == pat for pat in patterns)]
    assert not missed, f"{stage}: files the role writes and the stamp does not watch: {missed}"
