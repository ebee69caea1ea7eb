# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Role variables that arrive as strings (an AWX survey, a job template's extra variables, ``-e key=value``).

Extra variables win over anything a role sets, so a role cannot replace ``driver_hold: "false"`` with a typed value
at its start: every use of a bool, int or list variable goes through ``as_bool``, ``as_int`` or ``as_list``
(plugins/plugin_utils/role_vars.py). The first test reads every expression of every role (and the playbooks) and
names each use that does not; the second runs every role in check mode on localhost with every such variable a
string."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from ansible_collections.gpufleet.nvidia.tests.controller.playbook import run_playbook

pytestmark = pytest.mark.controller
REPO = Path(__file__).resolve().parents[3]
ROLES = ("driver", "mig", "toolkit", "runtime", "slurm", "device_plugin", "validate", "drain", "gpu_watch", "imex")
# Keys whose whole value is a Jinja expression.
EXPRESSION_KEYS = {"when", "that", "failed_when", "changed_when", "until"}
JINJA = re.compile(r"\{\{.*?\}\}|\{%.*?%\}", re.S)
FILTER = {"bool": "as_bool", "int": "as_int", "list": "as_list"}


def playbook_variables() -> dict[str, dict[str, Any]]:
    """The variables the playbooks read themselves (extensions/awx/playbook_variables.yml), as argument-spec options."""
    return yaml.safe_load((REPO / "extensions" / "awx" / "playbook_variables.yml").read_text())["playbook_variables"]


def typed_variables(playbooks: bool = False) -> dict[str, str]:
    """Every role (and with ``playbooks``, playbook) variable a survey can send as a string -> its filter (lists of
    dicts and dicts cannot)."""
    options = {}
    for role in ROLES:
        spec = yaml.safe_load((REPO / "roles" / role / "meta" / "argument_specs.yml").read_text())
        options.update(spec["argument_specs"]["main"]["options"])
    if playbooks:
        options.update(playbook_variables())
    found = {}
    for name, option in options.items():
        kind = option.get("type", "str")
        if kind in FILTER and not (kind == "list" and option.get("elements") == "dict"):
            found[name] = FILTER[kind]
    return found


def _expressions(node: Any, key: str = "") -> Iterator[str]:
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _expressions(v, str(k))
    elif isinstance(node, list):
        for item in node:
            yield from _expressions(item, key)
    elif isinstance(node, str):
        if key in EXPRESSION_KEYS:
            yield node
        yield from JINJA.findall(node)


def expressions() -> Iterator[tuple[str, str]]:
    files = [
        p
        for role in ROLES
        for sub in ("tasks", "handlers", "vars")
        for p in (REPO / "roles" / role / sub).glob("*.yml")
    ]
    files += sorted((REPO / "playbooks").rglob("*.yml"))
    for path in files:
        for expression in _expressions(yaml.safe_load(path.read_text())):
            yield str(path.relative_to(REPO)), expression
    for path in sorted((REPO / "roles").glob("*/templates/*.j2")):
        for expression in JINJA.findall(path.read_text()):
            yield str(path.relative_to(REPO)), expression


def test_every_use_of_a_typed_variable_goes_through_its_filter() -> None:
    variables = typed_variables(playbooks=True)
    assert {"driver_hold", "runtime_cdi", "runtime_engines", "validate_timeout"} <= set(variables)
    assert {"gpufleet_lock", "gpufleet_lock_timeout", "report_fail_on_error", "uninstall_driver"} <= set(variables)
    unfiltered = []
    seen = set()
    for where, expression in expressions():
        for name, filter_ in variables.items():
            # a name in quotes is a string (the filter's name= argument), not a use
            for match in re.finditer(rf"(?<![\w.'\"]){name}(?![\w'\"])", expression):
                seen.add(name)
                rest = expression[match.end() :]
                if not re.match(rf"\s*(\|\s*default\([^)]*\)\s*)?\|\s*gpufleet\.nvidia\.{filter_}\b", rest):
                    unfiltered.append(
                        f"{where}: {name} without | gpufleet.nvidia.{filter_}: {expression.strip()[:100]}"
                    )
    assert not unfiltered, "\n".join(unfiltered)
    assert len(seen) > 30  # the scan reads the roles (a broken scan finds nothing)


def test_a_role_converts_each_of_its_typed_variables_once_in_its_vars() -> None:
    """Where a role's inputs enter: its own bool, int and list variables go through their filter in the role's
    vars/main.yml only (as __<role>_<name>); its tasks, handlers and templates read the converted name."""
    variables = typed_variables()
    elsewhere = []
    converted = 0
    for where, expression in expressions():
        if not where.startswith("roles/"):
            continue
        role = where.split("/")[1]
        for name, filter_ in variables.items():
            if not name.startswith(f"{role}_"):
                continue  # another role's variable read here (device_plugin_enabled) is that role's input
            for _match in re.finditer(
                rf"(?<![\w.'\"]){name}(\s*\|\s*default\([^)]*\))?\s*\|\s*gpufleet\.nvidia\.{filter_}\b", expression
            ):
                if where == f"roles/{role}/vars/main.yml":
                    converted += 1
                else:
                    elsewhere.append(f"{where}: {name} | {filter_} (read __{name} from vars/main.yml)")
    assert not elsewhere, "\n".join(elsewhere)
    assert converted > 30


PLAY = """
- hosts: all
  gather_facts: false
  module_defaults:
    gpufleet.nvidia.gpu_facts:
      root: "{root}"
  tasks:
    - name: Every role, in site.yml's order, with the variables from -e as strings
      ansible.builtin.include_role:
        name: gpufleet.nvidia.{{{{ gpufleet_role }}}}
      loop: [driver, mig, toolkit, runtime, validate, device_plugin]
      loop_control:
        loop_var: gpufleet_role

    - name: Dump the published facts
      ansible.builtin.copy:
        content: >-
          {{{{ {{'toolkit': gpufleet_toolkit | default(none), 'runtime': gpufleet_runtime | default(none),
                'validate': gpufleet_validate | default(none), 'device_plugin': gpufleet_device_plugin | default(none),
                'driver_plan': driver_plan | default(none)}} | to_json }}}}
        dest: "{tmp}/facts.json"
        mode: "0644"
      delegate_to: localhost
      check_mode: false
"""


def string_values() -> dict[str, str]:
    """Every bool, int and list variable with a default, as a survey would send its default: a string."""
    values = {}
    for role in ROLES:
        spec = yaml.safe_load((REPO / "roles" / role / "meta" / "argument_specs.yml").read_text())
        for name, option in spec["argument_specs"]["main"]["options"].items():
            default = option.get("default")
            if name not in typed_variables() or default is None:
                continue
            if isinstance(default, bool):
                values[name] = "true" if default else "false"
            elif isinstance(default, list):
                values[name] = ",".join(str(item) for item in default)
            else:
                values[name] = str(default)
    return values


@pytest.fixture(scope="module")
def string_run(tmp_path_factory):
    from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils.discovery.discovery_tree import gpu_host

    tmp = tmp_path_factory.mktemp("strings")
    tree = gpu_host(tmp / "host", 2)
    extra = {
        **string_values(),
        # what a survey sends for the others, as strings too
        "driver_hold": "no",
        "driver_persistenced": "False",
        "driver_reboot_timeout": "600",
        "device_plugin_enabled": "yes",
        "device_plugin_dcgm_exporter_enabled": "true",
        "toolkit_accept_envvar_unprivileged": "false",
        "runtime_engines": "docker,containerd",
        "validate_engines": "docker,podman",
        # keep the run on this machine: nothing outside tmp, no package manager, no cluster
        "driver_state": "absent",
        "toolkit_provider": "native",
        "toolkit_bindir": str(tmp / "bin"),
        "toolkit_libdir": str(tmp / "lib"),
        "toolkit_oci_runtime": "/usr/bin/runc",
        "runtime_cdi_spec_path": str(tmp / "cdi" / "nvidia.yaml"),
        "runtime_udev_rule_path": str(tmp / "udev" / "71.rules"),
        "device_plugin_mode": "render_only",
        "device_plugin_render_dir": str(tmp / "gitops"),
        "device_plugin_validate": "false",
        "device_plugin_check_runtime": "false",  # the fixture host has no containerd
    }
    assert all(isinstance(v, str) for v in extra.values())
    (tmp / "extra.json").write_text(json.dumps(extra))
    inventory = {
        "all": {
            "children": {"kube_nodes": {"hosts": {"gpu-node": {}}}},
            "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable},
        }
    }
    (tmp / "inventory.yml").write_text(yaml.safe_dump(inventory))
    (tmp / "play.yml").write_text(PLAY.format(root=tree.root, tmp=tmp))
    proc = run_playbook(
        "-i",
        tmp / "inventory.yml",
        tmp / "play.yml",
        "--check",
        "-e",
        f"@{tmp / 'extra.json'}",
        ANSIBLE_STDOUT_CALLBACK="default",
    )
    facts = json.loads((tmp / "facts.json").read_text()) if (tmp / "facts.json").exists() else {}
    return proc, facts, extra


def test_every_role_runs_with_string_variables(string_run) -> None:
    proc, facts, extra = string_run
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert len([k for k in extra if k in typed_variables()]) >= 40
    assert facts["toolkit"]["provider"] == "native"
    assert facts["toolkit"]["accept_envvar_unprivileged"] is False
    assert facts["runtime"] is not None and facts["validate"] is not None
    assert facts["device_plugin"]["mode"] == "render_only"
