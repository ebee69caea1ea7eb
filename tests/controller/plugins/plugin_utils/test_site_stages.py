# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Which of site.yml's plays a host enters after discovery (plugins/plugin_utils/site_stages.py), without Jinja. The
same rules through Ansible: tests/controller/playbooks/test_site_imex_stage.py and test_site_device_plugin_stage.py."""

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.nvidia.plugins.filter.site_groups import site_groups as site_groups_filter
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils import site_stages, stage_stamp

GROUPS = {"gpu": ["g1", "g2"], "nvl0": ["g1"], "nvl1": ["g1"], "slurm_controllers": ["ctl"], "kube_nodes": ["g2"]}


def host(gpu=True, route=None, **variables):
    values = {"ansible_facts": {"nvidia": {"gpu_node": gpu}}, **variables}
    if route is not None:
        values["_gpufleet_converge"] = {"route": route}
    return values


def test_a_plain_gpu_node_enters_only_slurm_where_slurmd_was_not_looked_for():
    assert site_stages.site_groups("g1", host(), {"gpu": ["g1"]}) == ["gpufleet_stale", "gpufleet_slurm"]


def test_converge_check_found_no_slurmd():
    values = host(_gpufleet_converge={"route": "stale", "slurmd": False})
    assert site_stages.site_groups("g1", values, {"gpu": ["g1"]}) == ["gpufleet_stale"]


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (host(mig_layout="all-1g.10gb"), True),
        (host(mig_layout={"0": "all-1g.10gb"}), True),
        (host(mig_layout=""), False),
        (host(mig_layout=None), False),
        (host(gpu=False, mig_layout="all-1g.10gb"), False),
        # an emptied layout whose boot unit still applies the old one: the role takes the unit off
        (
            {"ansible_facts": {"nvidia": {"gpu_node": True, "mig_boot": {"layout": "all-1g.10gb"}}}, "mig_layout": ""},
            True,
        ),
        ({"ansible_facts": {"nvidia": {"gpu_node": True, "mig_boot": {"layout": None}}}}, False),
    ],
)
def test_mig(values, expected):
    assert site_stages.acts("mig", "g2", values, GROUPS) is expected


@pytest.mark.parametrize(
    ("name", "domains", "gpu", "expected"),
    [
        ("g2", ["nvl0"], True, False),
        ("g1", "nvl0, nvl2", True, True),
        ("g1", ["nvl0"], False, False),
        ("g1", "", True, False),
        # in two domain groups: the stage runs, and fails saying why
        ("g1", ["nvl0", "nvl1"], True, True),
    ],
)
def test_imex(name, domains, gpu, expected):
    assert site_stages.acts("imex", name, host(gpu=gpu, imex_domain_groups=domains), GROUPS) is expected


@pytest.mark.parametrize(
    ("name", "values", "expected"),
    [
        ("ctl", host(gpu=False), True),
        ("ctl", host(gpu=False, slurm_controller_group="other"), False),
        ("g1", host(gpu=False), False),
        ("g1", {"ansible_facts": {}}, False),
        ("g1", host(_gpufleet_converge={"slurmd": True}), True),
    ],
)
def test_slurm(name, values, expected):
    assert site_stages.acts("slurm", name, values, GROUPS) is expected


@pytest.mark.parametrize(
    ("name", "values", "expected"),
    [
        ("g2", host(), True),
        ("g2", host(gpu=False), False),
        ("g2", host(device_plugin_enabled="false"), False),
        ("g1", host(device_plugin_enabled="yes"), True),
        ("g1", host(device_plugin_node_group="gpu"), True),
        ("g1", host(), False),
    ],
)
def test_device_plugin(name, values, expected):
    assert site_stages.acts("device_plugin", name, values, GROUPS) is expected


def test_the_routes_that_optional_stages_take():
    every = host(mig_layout="all-1g.10gb", imex_domain_groups="nvl0", device_plugin_enabled=True)
    assert site_stages.site_groups("g1", every, GROUPS) == [
        "gpufleet_stale",
        "gpufleet_mig",
        "gpufleet_imex",
        "gpufleet_slurm",
        "gpufleet_device_plugin",
    ]
    assert site_stages.site_groups("g1", {**every, "_gpufleet_converge": {"route": "converged"}}, GROUPS) == [
        "gpufleet_converged",
        "gpufleet_slurm",
    ]
    for route in ("quiet", "done", "validate_failed"):
        assert site_stages.site_groups("g1", {**every, "_gpufleet_converge": {"route": route}}, GROUPS) == [
            "gpufleet_" + route
        ]


def test_the_groups_of_a_run_are_no_stage_input():
    spec = stage_stamp.spec("toolkit", {"group_names": ["gpu", "gpufleet_stale", "gpufleet_slurm", "gpufleet_mig"]})
    assert spec["inputs"]["group_names"] == ["gpu"]


def test_bad_input():
    with pytest.raises(ValueError, match=r"'driver' is not an optional stage of site.yml"):
        site_stages.acts("driver", "g1", host(), GROUPS)
    with pytest.raises(AnsibleFilterError, match=r"^g2: device_plugin_enabled: 'maybe' is not a boolean"):
        site_groups_filter(host(device_plugin_enabled="maybe"), "g2", GROUPS)


@pytest.mark.parametrize(
    ("stage", "values", "expected"),
    [
        ("driver", {}, "driver"),
        ("driver", {"driver_state": "absent"}, "driver"),  # driver.yml takes both states
        ("toolkit", {}, "toolkit"),  # the role's default state: present
        ("toolkit", {"toolkit_state": ""}, "toolkit"),  # a survey's empty answer
        ("toolkit", {"toolkit_state": "absent"}, "absent"),
        ("runtime", {"runtime_state": "present"}, "runtime"),
        ("runtime", {"runtime_state": "absent"}, "absent"),
        ("validate", {}, "main"),
        ("mig", {}, "main"),
        ("device_plugin", {}, "main"),
    ],
)
def test_the_tasks_file_of_each_stage(stage, values, expected):
    assert site_stages.stage_tasks(stage, values) == expected


def test_the_tasks_files_exist_and_main_only_adds_what_a_role_run_alone_needs():
    """Each file site.yml starts a role at is imported or included by the role's main.yml, which adds only its own
    discovery, the OS facts and the skip of a host without a GPU before it."""
    from pathlib import Path

    import yaml

    roles = Path(site_stages.__file__).resolve().parents[2] / "roles"
    for stage, files in (
        ("driver", ["driver"]),
        ("toolkit", ["toolkit", "absent"]),
        ("runtime", ["runtime", "absent"]),
    ):
        main = yaml.safe_load((roles / stage / "tasks" / "main.yml").read_text())
        reached = set()
        for task in main:
            target = task.get("ansible.builtin.import_tasks") or task.get("ansible.builtin.include_tasks") or ""
            if target.endswith(".yml") and "/" not in target:
                reached.add(target[:-4])
                continue
            assert "discover.yml" in target or "ansible.builtin.setup" in task or "ansible.builtin.debug" in task, task
        assert reached == set(files), stage
        for name in files:
            assert (roles / stage / "tasks" / f"{name}.yml").is_file()


def test_a_bad_state():
    with pytest.raises(ValueError, match=r"^toolkit_state: 'gone' is not present or absent$"):
        site_stages.stage_tasks("toolkit", {"toolkit_state": "gone"})
