# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The preflight's check of one host's role variables (plugins/plugin_utils/role_specs.py): every role's argument
spec and the rules a spec cannot say, with each bad value named."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.runtime import registry
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils import role_specs

pytestmark = pytest.mark.controller


def _as_survey_string(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return ",".join(value)
    return value


def test_every_role_and_the_playbooks_are_read():
    assert set(role_specs.specs()) == {
        "device_plugin",
        "drain",
        "driver",
        "gpu_watch",
        "imex",
        "mig",
        "runtime",
        "slurm",
        "toolkit",
        "validate",
        "playbook",
    }
    assert "runtime_engines" in role_specs.names() and "gpufleet_lock_timeout" in role_specs.names()


def test_the_defaults_pass_also_as_survey_strings():
    for options in role_specs.specs().values():
        defaults = {name: option["default"] for name, option in options.items() if "default" in option}
        assert role_specs.problems(defaults) == []
        assert role_specs.problems({name: _as_survey_string(value) for name, value in defaults.items()}) == []


def test_nothing_set_and_other_variables_are_no_problem():
    assert role_specs.problems({}) == []
    assert role_specs.problems({"ansible_host": 1, "runtime_engines_of_mine": "dockr"}) == []


def test_a_bad_choice_names_the_role_variable_value_and_choices():
    (problem,) = role_specs.problems({"runtime_engines": "dockr"})
    assert problem.startswith("runtime: runtime_engines='dockr': ")
    assert "docker, containerd, crio, podman" in problem and "dockr" in problem.split(": ", 2)[2]


def test_a_bad_type_is_named():
    (problem,) = role_specs.problems({"runtime_restart_timeout": "soon", "runtime_restart": "false"})
    assert problem.startswith("runtime: runtime_restart_timeout='soon': ") and "int" in problem


def test_every_bad_value_is_named_in_one_pass():
    found = role_specs.problems({"driver_state": "gone", "validate_pull": "sometimes", "gpufleet_lock": "maybe"})
    assert [line.split(":")[0] for line in found] == ["driver", "playbook", "validate"]


def test_engine_names_come_from_the_registry():
    assert role_specs.problems({"validate_engines": ",".join(registry.ENGINES)}) == []
    (problem,) = role_specs.problems({"validate_engines": "docker, podmn"})
    assert problem.startswith("validate: validate_engines=") and "podmn is not an engine" in problem
    assert ", ".join(registry.ENGINES) in problem


def test_module_parameters_are_nvreg_keys():
    assert role_specs.problems({"driver_module_params": {"NVreg_EnableGpuFirmware": 0}}) == []
    (problem,) = role_specs.problems({"driver_module_params": {"NVreg_X": 1, "modeset": 1}})
    assert problem.startswith("driver: driver_module_params=") and problem.endswith("not modeset")


def test_mig_layout_names_one_of_mig_layouts():
    layouts = {"all-1g.5gb": [{"devices": "all", "mig-enabled": True}]}
    assert role_specs.problems({"mig_layout": "all-1g.5gb", "mig_layouts": layouts}) == []
    assert role_specs.problems({"mig_layout": ""}) == []
    (problem,) = role_specs.problems({"mig_layout": "all-2g", "mig_layouts": layouts})
    assert problem == "mig: mig_layout='all-2g': not a name in mig_layouts (it has: all-1g.5gb)"
    (problem,) = role_specs.problems({"mig_layout": "all-2g"})
    assert problem.endswith("(it has: no layouts)")


def test_render_only_needs_an_absolute_folder():
    assert role_specs.problems({"device_plugin_mode": "render_only", "device_plugin_render_dir": "/srv/gitops"}) == []
    assert role_specs.problems({"device_plugin_render_dir": "relative"}) == []
    (problem,) = role_specs.problems({"device_plugin_mode": "render_only", "device_plugin_render_dir": "gitops"})
    assert problem.startswith("device_plugin: device_plugin_render_dir='gitops': ")


def test_the_drain_poll_is_at_least_a_second():
    assert role_specs.problems({"drain_poll": 0}) == ["drain: drain_poll=0: must be 1 or more"]
    assert role_specs.problems({"drain_poll": "5", "drain_timeout": "0"}) == []
    assert role_specs.problems({"drain_timeout": -1}) == ["drain: drain_timeout=-1: must be 0 or more"]


def test_the_gpu_watch_interval_is_at_least_ten_seconds():
    assert role_specs.problems({"gpu_watch_interval": 5}) == ["gpu_watch: gpu_watch_interval=5: must be 10 or more"]
    assert role_specs.problems({"gpu_watch_interval": "30", "gpu_watch_state": "absent"}) == []
    assert role_specs.problems({"gpu_watch_state": "gone"})[0].startswith("gpu_watch: gpu_watch_state='gone': ")


def test_nvidias_key_checksum_is_a_sha256():
    assert role_specs.problems({"driver_el_nvidia_key_sha256": "ab" * 32}) == []
    assert role_specs.problems({"driver_el_nvidia_key_sha256": "sha256:" + "ab" * 32}) == [
        "driver: driver_el_nvidia_key_sha256='sha256:" + "ab" * 32 + "': a SHA-256 is 64 hexadecimal digits"
    ]


def test_a_rule_waits_for_the_spec():
    """A value its spec refuses is named once, by the spec; the rule does not read it."""
    (problem,) = role_specs.problems({"driver_module_params": "not a dict"})
    assert "dict" in problem and "NVreg" not in problem


def test_host_values_keeps_role_variables_that_template():
    from ansible.errors import AnsibleUndefinedVariable
    from jinja2 import Undefined

    first, second, third, fourth, fifth = role_specs.names()[:5]

    class Hostvars(dict):
        def __getitem__(self, name):
            if name == fifth:
                raise AnsibleUndefinedVariable("a fact of a later play")
            return super().__getitem__(name)

    variables = Hostvars(
        {first: "x", second: {"a": [Undefined()]}, third: ["ok", {"b": 1}], fourth: Undefined(), fifth: 1, "other": 1}
    )
    assert role_specs.host_values(variables) == {first: "x", third: ["ok", {"b": 1}]}
