# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What each stamped stage of ``site.yml`` owns on a host, one home for the table ``gpufleet.nvidia.stage_stamp``
checks (see ``module_utils/discovery/stamp.py`` for what a stamp is).

For each stage: the variables it reads besides its role's own (the role's are read from its
``meta/argument_specs.yml``, so a new role variable is an input without an edit here), the files, units and packages
its role writes or starts, and the facts it publishes. A file the role writes and this table leaves out would let a
rerun skip the stage though that file drifted:
``tests/controller/plugins/plugin_utils/test_stage_stamp.py`` checks every literal
``dest:``/``path:`` of the roles' tasks against it.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery import stamp
from ansible_collections.gpufleet.nvidia.plugins.module_utils.runtime import registry
from ansible_collections.gpufleet.nvidia.plugins.module_utils.validate import converged
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils import (
    imex,
    kubernetes_node,
    role_specs,
    role_vars,
    site_stages,
)

ROLES = Path(__file__).resolve().parents[2] / "roles"

# Kernel and package names whose version or hold a driver run owns (regular expressions, whole names).
_DRIVER_PACKAGES = [
    r".*nvidia.*",
    r"(lib)?cuda.*",
    r"dkms",
    r"linux-(image|headers|modules)-.*",
    r"kernel(-core|-modules|-devel|-headers)?",
]

STAGES: dict[str, dict[str, Any]] = {
    "driver": {
        "extra_vars": ["toolkit_bindir"],
        "paths": [
            "/etc/apt/sources.list.d/*",
            "/etc/apt/preferences.d/*",
            "/etc/apt/keyrings/*",
            "/etc/yum.repos.d/*",
            "/etc/dnf/plugins/versionlock.list",
            "/etc/modprobe.d/*",
            "/etc/dkms/framework.conf.d",
            "/etc/dkms/framework.conf.d/*",
            "{driver_mok_dir}",
            "{driver_mok_dir}/*",
            "/usr/share/keyrings/*",
            "/lib/modules/*",
        ],
        "units": ["nvidia-persistenced.service", "nvidia-fabricmanager.service"],
        "packages": _DRIVER_PACKAGES,
        "publish": ["driver_kernel_module", "driver_plan", "driver_reboot_needed"],
    },
    "toolkit": {
        # device_plugin_gpu_allocation: whether the runtime honours the device plugin's volume mounts (toolkit_plan).
        "extra_vars": [
            "device_plugin_node_group",
            "device_plugin_enabled",
            "device_plugin_gpu_allocation",
            "group_names",
        ],
        "paths": [
            "{toolkit_bindir}/gpufleet-*",
            "{toolkit_bindir}/nvidia-container-*",
            "{toolkit_bindir}/nvidia-ctk",
            "{toolkit_bindir}/nvidia-docker",
            "{toolkit_libdir}/*",
            "{toolkit_libdir}/*/*",
            "/etc/nvidia-container-runtime/*",
            "/etc/apt/sources.list.d/*",
            "/etc/apt/keyrings/*",
            "/usr/share/keyrings/*",
            "/etc/yum.repos.d/*",
        ],
        "units": [],
        "packages": [r".*nvidia-container.*", r"nvidia-docker.*"],
        "publish": ["gpufleet_toolkit"],
    },
    "runtime": {
        "extra_vars": [
            "device_plugin_node_group",
            "device_plugin_enabled",
            "group_names",
            "gpufleet_toolkit",
            "toolkit_bindir",
        ],
        "paths": [
            *(path for name in registry.CONFIGURABLE for path in registry.INFO[name].config_paths),
            "/etc/cdi/*",
            "/var/run/cdi/*",
            "{runtime_cdi_spec_path}",
            "/etc/gpufleet/*",
            "/etc/systemd/system/gpufleet-*",
            "/etc/systemd/system/nvidia-cdi-refresh.*",
            "{runtime_udev_rule_path}",
            "/dev/nvidia*",
        ],
        "units": [
            "gpufleet-nvidia-devices.service",
            "gpufleet-cdi-refresh.service",
            *registry.units(registry.CONFIGURABLE),
        ],
        "packages": [r"python3-tomlkit"],
        "publish": ["gpufleet_runtime"],
    },
}


# The groups site.yml puts hosts in during a run (the hosts that enter the stage plays): not part of a stage's inputs.
RUN_GROUPS = site_stages.RUN_GROUPS


def stamped(stage: str) -> bool:
    return stage in STAGES


def role_variables(stage: str) -> list[str]:
    """The variables the stage reads: its role's (from ``meta/argument_specs.yml``), then the table's extras."""
    return list(_role_variables(stage))


@functools.lru_cache(maxsize=None)
def _role_variables(stage: str) -> tuple[str, ...]:
    spec_file = ROLES / stage / "meta" / "argument_specs.yml"
    spec = role_specs.load_yaml(spec_file) or {}
    names: list[str] = []
    for entry in (spec.get("argument_specs") or {}).values():
        for name in (entry or {}).get("options") or {}:
            if name not in names:
                names.append(name)
    for name in STAGES[stage]["extra_vars"]:
        if name not in names:
            names.append(name)
    return tuple(names)


def role_defaults(stage: str) -> dict[str, Any]:
    """The role's ``defaults/main.yml`` (a copy: the file is read once per controller process)."""
    return dict(_role_defaults(stage))


@functools.lru_cache(maxsize=None)
def _role_defaults(stage: str) -> dict[str, Any]:
    return role_specs.load_yaml(ROLES / stage / "defaults" / "main.yml") or {}


def spec(stage: str, values: Mapping[str, Any], nvidia: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``{stamped, inputs, paths, units, packages, publish}`` of the stage on a host: ``values`` are the stage's
    variables as the play has them (None or "" where unset: the role's default applies to the paths); the
    engines' configuration files ``gpu_facts`` found are added to the runtime stage's paths."""
    if stage not in STAGES:
        return {"stamped": False, "inputs": {}, "paths": [], "units": [], "packages": [], "publish": []}
    table = STAGES[stage]
    known = {**_role_defaults(stage), **{k: v for k, v in values.items() if v is not None and v != ""}}
    paths: list[str] = []
    for pattern in table["paths"]:
        path = pattern.format(**{k: str(v) for k, v in known.items()}) if "{" in pattern else pattern
        if path and path.startswith("/") and path not in paths:
            paths.append(path)
    if stage == "runtime" and nvidia is not None:
        paths = stamp.with_engine_configs(paths, nvidia)
    inputs = {k: values.get(k) for k in sorted(values)}
    if isinstance(inputs.get("group_names"), list):  # the groups site.yml itself puts hosts in are not an input
        inputs["group_names"] = [name for name in inputs["group_names"] if name not in RUN_GROUPS]
    return {
        "stamped": True,
        "inputs": inputs,
        "paths": paths,
        "units": list(table["units"]),
        "packages": list(table["packages"]),
        "publish": list(table["publish"]),
    }


def host_spec(stage: str, host_vars: Mapping[str, Any], nvidia: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``spec`` of the stage on a host from its variables (``hostvars[inventory_hostname]``): its role variables, ""
    where unset, as ``query('ansible.builtin.vars', ..., default='')`` gives them to a play."""
    return spec(stage, {name: host_vars.get(name, "") for name in role_variables(stage)}, nvidia)


def records(stages: Iterable[str], host_vars: Mapping[str, Any], nvidia: Mapping[str, Any] | None = None) -> list[dict]:
    """The ``stages`` argument of ``stage_stamp`` (``state=present``) for the stamped stages a host passed: each
    stage's spec from the host's variables (``hostvars[inventory_hostname]``: its role variables, "" where unset, as
    ``plan`` reads them for the next run's ``converge_check``) and ``nvidia`` (the host as the next run will find it),
    with the facts it published (their values now, "" where unset)."""
    out = []
    for stage in stages:
        if not stamped(stage):
            raise ValueError(f"{stage!r} is not a stamped stage ({', '.join(STAGES)})")
        one = host_spec(stage, host_vars, nvidia)
        out.append(
            {
                "stage": stage,
                "inputs": one["inputs"],
                "paths": one["paths"],
                "units": one["units"],
                "packages": one["packages"],
                "published": {name: host_vars.get(name, "") for name in one["publish"]},
            }
        )
    return out


# Variables the run's plan reads besides the stamped stages' own: whether the mig stage acts on the host (its layout),
# whether it is a Kubernetes node (the device plugin stage's rule, kubernetes_node.py), and whether it is in an NVLink
# domain (the imex stage's, imex.py).
_PLAN_VARS = (
    "mig_layout",
    "device_plugin_node_group",
    "device_plugin_enabled",
    "group_names",
    "imex_domain_groups",
    "slurm_controller_group",
)


def plan_variables() -> list[str]:
    """Every variable ``plan`` reads as a stage input or for ``hold``: the stamped stages' (``role_variables``), then
    the plan's own. The validate role's ``validate_<option>`` variables are read by ``_validate_options`` alone, once,
    at the role's defaults where unset."""
    return list(_plan_variables())


@functools.lru_cache(maxsize=None)
def _plan_variables() -> tuple[str, ...]:
    names: list[str] = []
    for stage in STAGES:
        names += [name for name in role_variables(stage) if name not in names]
    names += [name for name in _PLAN_VARS if name not in names]
    return tuple(names)


def validate_in_run(run_tags: Any = None, skip_tags: Any = None) -> bool:
    """Whether site.yml's validate play (tag ``validate``) runs under these tags (``ansible_run_tags``,
    ``ansible_skip_tags``), as Ansible decides for a task tagged ``validate``: skipped by ``validate`` or ``tagged``,
    run by ``all`` (no --tags), ``tagged`` or ``validate``."""
    run = set(role_vars.as_list(run_tags if run_tags is not None else ["all"], "ansible_run_tags"))
    skip = set(role_vars.as_list(skip_tags, "ansible_skip_tags"))
    return not skip & {"validate", "tagged", "all"} and bool(run & {"all", "tagged", "validate"})


def _validate_options(host_vars: Mapping[str, Any], run: bool) -> dict[str, Any]:
    """``plan.validate``: the validate role's variables the host sets (typed as its tasks type them, from a survey's
    strings too), the role's argument spec defaults for the others."""
    defaults = role_specs.specs()["validate"]
    typed = {"bool": role_vars.as_bool, "int": role_vars.as_int, "list": role_vars.as_list}
    options: dict[str, Any] = {"run": bool(run)}
    for name, option in converged.VALIDATE_OPTIONS.items():
        if name == "run":
            continue
        var = f"validate_{name}"
        value = host_vars.get(var, defaults[var].get("default"))
        convert = typed.get(option["type"])
        value = convert(value, var) if convert else ("" if value is None else str(value))
        options[name] = defaults[var].get("default") if value is None else value
    return options


def plan(
    host_vars: Mapping[str, Any], fast_path: Any = True, run_tags: Any = None, skip_tags: Any = None
) -> dict[str, Any]:
    """The ``converge_check`` arguments of a host, in one call per host: ``{fast_path, hold, stages,
    slurm_controller, validate}``.

    ``host_vars``: the host's variables (``hostvars[inventory_hostname]``: ``plan_variables()`` are read, ""
    where unset, as ``query('ansible.builtin.vars', ..., default='')`` gives them to ``tasks/stage_stamped.yml``; and
    the validate role's variables, for ``validate``).
    ``stages``: each stamped stage's spec as ``spec`` gives it before discovery (the module adds the runtime stage's
    engine configuration files from what it discovers: ``engine_configs``), with the names of its inputs that an
    earlier stage publishes (``published_inputs``: the module takes them from that stage's stamp). ``hold``: a stage
    that is not stamped acts on the host (a MIG layout, a Kubernetes node's device plugin, an NVLink domain's IMEX),
    so the host is not converged even when every stamp holds. ``fast_path`` false (a bool or a survey's string): no
    stage is checked. ``slurm_controller``: the host is in ``slurm_controller_group`` (the Slurm stage acts on it).
    ``release_done``: site.yml leaves a done host out of every later play, its lock's release included.
    ``validate``: the validate role's variables, for the validation of a converged host in the same call, and whether
    this run validates at all (``run``: ``validate_in_run`` of ``run_tags`` and ``skip_tags``)."""
    values = {name: host_vars.get(name, "") for name in plan_variables()}
    fast_path = bool(role_vars.as_bool(fast_path, "gpufleet_fast_path"))
    layout = values.get("mig_layout")
    groups = {str(name): ["host"] for name in (values.get("group_names") or [])}
    hold = (
        bool(layout)
        or kubernetes_node.kubernetes_node(
            "host", groups, values.get("device_plugin_node_group") or None, values.get("device_plugin_enabled")
        )
        or imex.in_domain(values.get("group_names") or [], values.get("imex_domain_groups"))
    )
    stages: list[dict[str, Any]] = []
    published: list[str] = []
    for stage in STAGES if fast_path else ():
        names = role_variables(stage)
        one = host_spec(stage, host_vars)
        stages.append(
            {
                "stage": stage,
                "inputs": one["inputs"],
                "paths": one["paths"],
                "units": one["units"],
                "packages": one["packages"],
                "engine_configs": stage == "runtime",
                "published_inputs": [name for name in names if name in published],
            }
        )
        published += one["publish"]
    controllers = values.get("slurm_controller_group") or "slurm_controllers"
    return {
        "fast_path": bool(fast_path),
        "hold": bool(hold),
        "stages": stages,
        "slurm_controller": controllers in groups,
        "release_done": True,
        "validate": _validate_options(host_vars, validate_in_run(run_tags, skip_tags)),
    }


def _read_once() -> None:
    """Read the roles' argument specs and the stamped roles' defaults now, at import. The collection's filters are
    imported in ansible-playbook's own process (site.yml templates its first play's hosts through one): the workers it
    forks for each task and host then inherit what was read here, where each would otherwise read and parse the files
    again (converge_check's plan, a stage's stamp spec: about 0.3 s of controller CPU per host and call). A file that
    cannot be read is left to the call that needs it, which says so."""
    try:
        role_specs.specs()
        for stage in STAGES:
            _role_variables(stage)
            _role_defaults(stage)
    except (OSError, ValueError, KeyError, TypeError, yaml.YAMLError):
        pass


_read_once()
