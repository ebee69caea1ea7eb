# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The playbooks' preflight: one host's role variables checked against every role's own argument spec
(``roles/<role>/meta/argument_specs.yml``, the one source; the playbooks' own variables from
``extensions/awx/playbook_variables.yml``) before any play touches a host.

The spec check is the one a role makes when it is entered (Ansible's ``ArgumentSpecValidator`` with
``validate_role_argument_spec``, on the values as the inventory, ``-e`` or a survey gave them), only earlier and for
all roles at once. Only the variables a host sets are checked: a role's defaults pass its spec
(``tests/controller/roles/test_argument_specs.py``). ``RULES`` adds what a spec cannot say and a role otherwise
refuses only when its stage runs: the engine names (the registry's), the driver's module parameter names, a MIG layout
that names one of ``mig_layouts``, the device plugin's render folder."""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml
from ansible.errors import AnsibleUndefinedVariable
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from jinja2 import Undefined

from ansible_collections.gpufleet.nvidia.plugins.module_utils.runtime import registry
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.device_plugin.dra import version_problem
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.role_vars import as_list

COLLECTION = Path(__file__).resolve().parents[2]
ROLES_DIR = COLLECTION / "roles"
# The playbooks' own variables (gpufleet_lock_timeout, ...), in the same format; checked as the "playbook" role's.
PLAYBOOK_VARIABLES = COLLECTION / "extensions" / "awx" / "playbook_variables.yml"
# libyaml's safe loader where PyYAML was built with it (about ten times faster than the pure Python one on the roles'
# argument specs), else the pure Python one: the same documents either way.
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
NVREG = re.compile(r"^NVreg_[A-Za-z0-9_]+$")


def load_yaml(path: Path) -> Any:
    """The YAML document of one of the collection's own files (a role's argument spec or defaults), safely loaded."""
    return yaml.load(path.read_text(encoding="utf-8"), Loader=_SAFE_LOADER)  # noqa: S506 (a safe loader)


@functools.cache
def specs() -> dict[str, dict[str, dict[str, Any]]]:
    """Each role's options (its ``main`` entry point), by role name, and the playbooks' as ``playbook``."""
    found = {}
    for path in sorted(ROLES_DIR.glob("*/meta/argument_specs.yml")):
        entry = load_yaml(path)["argument_specs"]["main"]
        found[path.parents[1].name] = entry.get("options") or {}
    playbook = load_yaml(PLAYBOOK_VARIABLES)["playbook_variables"]
    found["playbook"] = {
        name: {k: v for k, v in option.items() if k != "playbooks"} for name, option in playbook.items()
    }
    return found


def names() -> list[str]:
    """Every role variable, sorted."""
    return sorted(name for options in specs().values() for name in options)


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 120 else f"{text[:117]}..."


def _check_spec(name: str, option: dict[str, Any], value: Any) -> tuple[list[str], Any]:
    """The spec's complaints about one value, and the value as the spec types it (``"a,b"`` a list)."""
    result = ArgumentSpecValidator({name: option}).validate({name: value}, validate_role_argument_spec=True)
    messages = [f"{name}={_show(value)}: {message}" for message in result.error_messages]
    return messages, result.validated_parameters.get(name, value)


def _engines(name: str) -> Callable[[Mapping[str, Any]], list[str]]:
    def rule(values: Mapping[str, Any]) -> list[str]:
        # Blank items are none: the spec makes "" the list [""], the roles' as_list the empty list.
        listed = [engine for engine in as_list(values[name], name) if str(engine).strip()]
        unknown = ", ".join(str(engine) for engine in listed if engine not in registry.ENGINES)
        if not unknown:
            return []
        known = ", ".join(registry.ENGINES)
        return [f"{name}={_show(values[name])}: {unknown} is not an engine; the engines are {known}"]

    return rule


def _module_params(values: Mapping[str, Any]) -> list[str]:
    params = values["driver_module_params"]
    bad = ", ".join(str(key) for key in params if not NVREG.match(str(key))) if isinstance(params, Mapping) else ""
    if not bad:
        return []
    return [
        f"driver_module_params={_show(params)}: every key must be an NVreg_* parameter of the nvidia module; not {bad}"
    ]


def _mig_layout(values: Mapping[str, Any]) -> list[str]:
    layout, layouts = values["mig_layout"], values["mig_layouts"]
    if not layout or not isinstance(layouts, Mapping) or layout in layouts:
        return []
    names = ", ".join(sorted(map(str, layouts))) or "no layouts"
    return [f"mig_layout={_show(layout)}: not a name in mig_layouts (it has: {names})"]


def _render_dir(values: Mapping[str, Any]) -> list[str]:
    folder = values["device_plugin_render_dir"]
    if values["device_plugin_mode"] != "render_only" or (folder and os.path.isabs(str(folder))):
        return []
    return [f"device_plugin_render_dir={_show(folder)}: device_plugin_mode=render_only needs an absolute folder"]


def _dra_cdi(values: Mapping[str, Any]) -> list[str]:
    # The DRA driver hands out GPUs as CDI devices only (its prerequisites page at v0.4.1, read 2026-11-28).
    if values["device_plugin_gpu_allocation"] != "dra" or values["runtime_cdi"] is not False:
        return []
    return ["runtime_cdi=false: device_plugin_gpu_allocation=dra needs CDI in containerd/CRI-O; set runtime_cdi: true"]


def _dra_version(values: Mapping[str, Any]) -> list[str]:
    version = str(values["device_plugin_kubernetes_version"] or "")
    if values["device_plugin_gpu_allocation"] != "dra" or not version:
        return []
    problem = version_problem(version)
    return [f"device_plugin_kubernetes_version={_show(version)}: {problem}"] if problem else []


def _at_least(name: str, least: int) -> Callable[[Mapping[str, Any]], list[str]]:
    def rule(values: Mapping[str, Any]) -> list[str]:
        value = values[name]
        if isinstance(value, int) and value < least:
            return [f"{name}={_show(value)}: must be {least} or more"]
        return []

    return rule


def _sha256(name: str) -> Callable[[Mapping[str, Any]], list[str]]:
    def rule(values: Mapping[str, Any]) -> list[str]:
        value = str(values[name] or "").strip()
        if not value or re.fullmatch(r"[0-9A-Fa-f]{64}", value):
            return []
        return [f"{name}={_show(value)}: a SHA-256 is 64 hexadecimal digits"]

    return rule


# What a spec cannot say: (the variables a rule reads, the rule). A rule runs when the host sets one of them and all
# of them passed their spec; it reads them as the spec types them, the ones the host does not set at their defaults.
RULES: tuple[tuple[tuple[str, ...], Callable[[Mapping[str, Any]], list[str]]], ...] = (
    (("runtime_engines",), _engines("runtime_engines")),
    (("validate_engines",), _engines("validate_engines")),
    (("driver_module_params",), _module_params),
    (("mig_layout", "mig_layouts"), _mig_layout),
    (("device_plugin_mode", "device_plugin_render_dir"), _render_dir),
    (("device_plugin_gpu_allocation", "runtime_cdi"), _dra_cdi),
    (("device_plugin_gpu_allocation", "device_plugin_kubernetes_version"), _dra_version),
    (("drain_poll",), _at_least("drain_poll", 1)),  # the drain waits drain_timeout // drain_poll rounds
    (("drain_timeout",), _at_least("drain_timeout", 0)),
    (("gpu_watch_interval",), _at_least("gpu_watch_interval", 10)),  # a run costs tens of ms of CPU; not in a loop
    (("driver_el_nvidia_key_sha256",), _sha256("driver_el_nvidia_key_sha256")),
)


def problems(values: Mapping[str, Any]) -> list[str]:
    """One line per bad value among ``values`` (variable name -> value as set for one host; names that are no role's
    variable are ignored): ``"<role>: <variable>=<value>: <what is wrong, what is allowed>"``. Empty: all good."""
    found: list[str] = []
    options = {name: (role, option) for role, role_options in specs().items() for name, option in role_options.items()}
    typed: dict[str, Any] = {}
    bad: set[str] = set()
    for name in sorted(values):
        if name not in options:
            continue
        role, option = options[name]
        messages, typed[name] = _check_spec(name, option, values[name])
        if messages:
            bad.add(name)
            found += [f"{role}: {message}" for message in messages]
    for reads, rule in RULES:
        if bad.intersection(reads) or not typed.keys() & set(reads):
            continue
        view = {name: typed[name] if name in typed else options[name][1].get("default") for name in reads}
        found += [f"{options[reads[0]][0]}: {message}" for message in rule(view)]
    return found


def _defined(value: Any) -> bool:
    """False when the value is, or holds, an undefined one."""
    if isinstance(value, Undefined):
        return False
    if isinstance(value, Mapping):
        return all(_defined(item) for item in value.values())
    if isinstance(value, (list, tuple)):
        return all(_defined(item) for item in value)
    return True


def host_values(variables: Mapping[str, Any]) -> dict[str, Any]:
    """The role variables among a host's variables (``hostvars[inventory_hostname]``) that can be templated here: a
    value that names a role default or a fact, which only a later play has, is left out (and left to the role)."""
    values = {}
    for name in names():
        if name in variables:
            try:
                value = variables[name]
            except AnsibleUndefinedVariable:
                continue
            if _defined(value):
                values[name] = value
    return values
