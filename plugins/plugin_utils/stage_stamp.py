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
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from ansible_collections.gpufleet.nvidia.plugins.module_utils.runtime import registry

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
        "extra_vars": ["device_plugin_node_group", "device_plugin_enabled", "group_names"],
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


def stamped(stage: str) -> bool:
    return stage in STAGES


def role_variables(stage: str) -> list[str]:
    """The variables the stage reads: its role's (from ``meta/argument_specs.yml``), then the table's extras."""
    return list(_role_variables(stage))


@functools.lru_cache(maxsize=None)
def _role_variables(stage: str) -> tuple[str, ...]:
    spec_file = ROLES / stage / "meta" / "argument_specs.yml"
    spec = yaml.safe_load(spec_file.read_text(encoding="utf-8")) or {}
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
    return yaml.safe_load((ROLES / stage / "defaults" / "main.yml").read_text(encoding="utf-8")) or {}


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
    if stage == "runtime":
        for facts in ((nvidia or {}).get("engines") or {}).values():
            config = (facts or {}).get("config_path")
            if config and str(config).startswith("/") and config not in paths:
                paths.append(str(config))
    return {
        "stamped": True,
        "inputs": {k: values.get(k) for k in sorted(values)},
        "paths": paths,
        "units": list(table["units"]),
        "packages": list(table["packages"]),
        "publish": list(table["publish"]),
    }
