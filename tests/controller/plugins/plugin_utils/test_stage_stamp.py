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

from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery import stamp
from ansible_collections.gpufleet.nvidia.plugins.module_utils.validate import converged
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils import role_specs, stage_stamp

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
        for raw in re.findall(r"^\s*(?:-\s+)?(?:dest|path):\s*(\S.*)$", tasks.read_text(), re.M):
            path = raw.strip().strip("\"'")
            for name, default in {**defaults, **(role_vars or {})}.items():
                path = path.replace("{{ " + name + " }}", str(default))
            if path.startswith("/") and "{{" not in path:
                found.add(path)
        # a gpufleet.nvidia.host_files list built in Jinja: {'path': '/literal/' ~ variable} or {'path': variable}
        for prefix, name in re.findall(r"'path':\s*(?:'([^']*)'\s*~\s*)?(\w+)", tasks.read_text()):
            value = {**defaults, **(role_vars or {})}.get(name)
            if isinstance(value, str) and "{{" not in value:
                found.add(prefix + value)
    return found


@pytest.mark.parametrize("stage", sorted(stage_stamp.STAGES))
def test_every_file_a_role_writes_is_in_its_stage_paths(stage):
    patterns = stage_stamp.spec(stage, {})["paths"]
    written = _written_paths(stage)
    missed = [p for p in written if not any(fnmatch.fnmatchcase(p, pat) or p == pat for pat in patterns)]
    assert not missed, f"{stage}: files the role writes and the stamp does not watch: {missed}"


def _host_vars(**values):
    """A host's variables as hostvars gives them: only what is set (the plan reads the rest as "")."""
    return {"group_names": ["gpu_nodes"], "inventory_hostname": "gpu1", **values}


def test_the_plan_is_each_stamped_stage_spec_as_its_stage_play_gives_it():
    host_vars = _host_vars(runtime_engines=["docker"], toolkit_bindir="/opt/bin", ansible_facts={"big": "unread"})
    plan = stage_stamp.plan(host_vars)
    assert [s["stage"] for s in plan["stages"]] == list(stage_stamp.STAGES) and plan["fast_path"] and not plan["hold"]
    for one in plan["stages"]:
        names = stage_stamp.role_variables(one["stage"])
        # tasks/stage_stamped.yml: query('ansible.builtin.vars', *names, default='') in the stage's play
        expected = stage_stamp.spec(one["stage"], {name: host_vars.get(name, "") for name in names})
        assert one["inputs"] == expected["inputs"] and one["paths"] == expected["paths"]
        assert one["units"] == expected["units"] and one["packages"] == expected["packages"]
    runtime = plan["stages"][-1]
    # the engines' configuration files come from the module's discovery; the toolkit's published fact from its stamp
    assert runtime["engine_configs"] and runtime["published_inputs"] == ["gpufleet_toolkit"]
    assert not any(s["engine_configs"] or s["published_inputs"] for s in plan["stages"][:-1])
    assert "/opt/bin/nvidia-ctk" in plan["stages"][1]["paths"]


def test_the_run_s_own_group_is_not_an_input():
    """site.yml puts the hosts that enter the stage plays in gpufleet_stale during the run: a stamp written then must
    hold at the next run's check, made before the host is in it."""
    before = stage_stamp.plan(_host_vars())
    during = stage_stamp.plan(_host_vars(group_names=["gpu_nodes", "gpufleet_stale"]))
    assert before["stages"] == during["stages"]
    toolkit = stage_stamp.spec("toolkit", {"group_names": ["gpufleet_stale", "kube_nodes"]})
    assert toolkit["inputs"]["group_names"] == ["kube_nodes"]


@pytest.mark.parametrize(
    ("values", "hold"),
    [
        ({}, False),
        ({"mig_layout": "all-1g.5gb"}, True),
        ({"group_names": ["kube_nodes"]}, True),
        ({"group_names": ["k8s"], "device_plugin_node_group": "k8s"}, True),
        ({"group_names": ["kube_nodes"], "device_plugin_enabled": "false"}, False),
        ({"device_plugin_enabled": True}, True),
        ({"group_names": ["nvl0"], "imex_domain_groups": "nvl0,nvl1"}, True),
        ({"group_names": ["gpu"], "imex_domain_groups": ["nvl0"]}, False),
        ({"group_names": ["nvl0", "nvl1"], "imex_domain_groups": ["nvl0", "nvl1"]}, True),
    ],
)
def test_a_stage_without_a_stamp_holds_the_host(values, hold):
    assert stage_stamp.plan(_host_vars(**values))["hold"] is hold


@pytest.mark.parametrize("off", [False, "false", "no"])
def test_fast_path_off_checks_no_stage(off):
    plan = stage_stamp.plan(_host_vars(), off)
    assert {k: plan[k] for k in ("fast_path", "hold", "stages")} == {"fast_path": False, "hold": False, "stages": []}


@pytest.mark.parametrize(
    ("run_tags", "skip_tags", "runs"),
    [
        (None, None, True),  # no --tags
        (["all"], [], True),
        (["validate"], [], True),
        (["runtime", "validate"], [], True),
        (["tagged"], [], True),
        (["runtime"], [], False),
        (["driver", "report"], [], False),
        (["all"], ["validate"], False),
        (["all"], ["tagged"], False),
        ("runtime,validate", "", True),  # as a survey may send them
    ],
)
def test_validation_runs_as_ansible_runs_the_validate_play(run_tags, skip_tags, runs):
    assert stage_stamp.validate_in_run(run_tags, skip_tags) is runs
    assert stage_stamp.plan(_host_vars(), True, run_tags, skip_tags)["validate"]["run"] is runs


def test_the_validation_options_are_the_role_s_variables_else_its_defaults():
    """converge_check validates a converged host with what the validate role would use: the host's validate_*
    variables, typed as the role types them (a survey's strings too), the role's argument spec defaults otherwise."""
    specs = role_specs.specs()["validate"]
    default = stage_stamp.plan(_host_vars())["validate"]
    for name, value in default.items():
        if name != "run":
            assert value == specs[f"validate_{name}"]["default"], name
    assert set(default) == set(converged.VALIDATE_OPTIONS)
    one = stage_stamp.plan(
        _host_vars(
            validate_image="gpufleet-sim/mini:latest",
            validate_pull="never",
            validate_engines="docker, podman",
            validate_nvidia_smi="false",
            validate_fail_on_error="no",
            validate_timeout="60",
            validate_image_archive="/srv/ubuntu.tar",
        )
    )["validate"]
    assert one["image"] == "gpufleet-sim/mini:latest" and one["pull"] == "never"
    assert one["engines"] == ["docker", "podman"] and one["timeout"] == 60
    assert one["nvidia_smi"] is False and one["fail_on_error"] is False and one["image_archive"] == "/srv/ubuntu.tar"
    with pytest.raises(ValueError, match="validate_timeout"):
        stage_stamp.plan(_host_vars(validate_timeout="soon"))


@pytest.mark.parametrize(
    ("values", "controller"),
    [
        ({}, False),
        ({"group_names": ["slurm_controllers"]}, True),
        ({"group_names": ["slurm_controllers"], "slurm_controller_group": "ctl"}, False),
        ({"group_names": ["ctl", "gpu"], "slurm_controller_group": "ctl"}, True),
    ],
)
def test_a_slurm_controller_is_named_in_the_plan(values, controller):
    assert stage_stamp.plan(_host_vars(**values))["slurm_controller"] is controller


def test_converge_check_s_validate_defaults_are_the_role_s():
    """A caller of converge_check that gives plan.validate only in part gets the role's defaults for the rest: the
    module's argument spec repeats them (the module cannot read the role on the host), and must not drift."""
    specs = role_specs.specs()["validate"]
    for name, option in converged.VALIDATE_OPTIONS.items():
        if name != "run":
            assert option["default"] == specs[f"validate_{name}"]["default"], name


def test_the_plan_is_what_converge_check_takes():
    """Every key of the plan is an option of converge_check's plan, and each validate option one of plan.validate."""
    spec = converged.argspec()["plan"]["options"]
    plan = stage_stamp.plan(_host_vars())
    assert set(plan) == set(spec)
    assert set(plan["validate"]) == set(spec["validate"]["options"])


def test_the_stamps_written_are_what_the_next_plan_checks():
    """tasks/stamp.yml stamps with stage_stamp_records; the next run's converge_check checks with the plan's stages:
    both read the host's variables the same way, so a stamp written at the end of a run holds at the next check."""
    nvidia = {"engines": {"docker": {"config_path": "/etc/docker/daemon.json"}}}
    host_vars = _host_vars(runtime_engines=["docker"], gpufleet_toolkit={"hook_path": "/h"}, gpufleet_runtime={"r": 1})
    records = stage_stamp.records(["toolkit", "runtime"], host_vars, nvidia)
    plan = {one["stage"]: one for one in stage_stamp.plan(host_vars)["stages"]}
    assert [r["stage"] for r in records] == ["toolkit", "runtime"]
    for record in records:
        checked = plan[record["stage"]]
        assert record["inputs"] == checked["inputs"] and record["units"] == checked["units"]
        assert record["packages"] == checked["packages"]
        # the plan's paths before discovery; converge_check adds the engines' files, which the record has from nvidia
        assert record["paths"] == stamp_paths(checked, nvidia)
    assert records[0]["published"] == {"gpufleet_toolkit": {"hook_path": "/h"}}
    assert records[1]["published"] == {"gpufleet_runtime": {"r": 1}}
    assert stage_stamp.records(["driver"], _host_vars())[0]["published"] == {
        "driver_kernel_module": "",
        "driver_plan": "",
        "driver_reboot_needed": "",
    }
    with pytest.raises(ValueError, match="'validate' is not a stamped stage"):
        stage_stamp.records(["validate"], host_vars)


def stamp_paths(checked, nvidia):
    return stamp.with_engine_configs(checked["paths"], nvidia) if checked["engine_configs"] else checked["paths"]
