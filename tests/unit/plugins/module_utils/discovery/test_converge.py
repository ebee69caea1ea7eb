# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""discovery.converge: one call that discovers, takes the host lock and checks every stamped stage, with real stamps
(written by ``stamp.run_stamp`` as the end of a run writes them), real flocks and holder processes; discovery is
replaced by fixed facts."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.base.runner import Failure
from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery import converge, stamp

GPU_FACTS = {"gpu_node": True, "gpus": [{"uuid": "GPU-1", "health": {}}], "engines": {}, "mig_boot": {"layout": None}}


class _Host:
    check_mode = False
    diff = False

    def run_command(self, argv, **_kwargs):
        return 1, "", "no commands here"

    def get_bin_path(self, _name, **_kwargs):
        return None

    def warn(self, _msg):
        pass


@pytest.fixture
def env(tmp_path, monkeypatch, lock_holders):
    facts = {"now": dict(GPU_FACTS)}
    monkeypatch.setattr(converge, "discover", lambda **_kwargs: facts["now"])
    owned = tmp_path / "etc" / "owned.conf"
    owned.parent.mkdir()
    owned.write_text("a\n")
    return {"tmp": tmp_path, "facts": facts, "owned": owned, "holders": lock_holders}


def _stages(env, **extra):
    first = {"stage": "driver", "inputs": {"driver_branch": "535"}, "paths": [str(env["owned"])]}
    second = {"stage": "toolkit", "inputs": {"toolkit_bindir": "/usr/local/bin"}, "paths": []}
    third = {
        "stage": "runtime",
        "inputs": {"gpufleet_toolkit": ""},
        "paths": [],
        "published_inputs": ["gpufleet_toolkit"],
    }
    third.update(extra)
    out = []
    for spec in (first, second, third):
        full = {"units": [], "packages": [], "engine_configs": False, "published_inputs": [], **spec}
        out.append(full)
    return out


def _request(env, stages, *, owner="run-1", hold=False, fast_path=True, lock=True):
    return converge.ConvergeRequest.from_params(
        {
            "owner": owner,
            "lock": lock,
            "lock_path": str(env["tmp"] / "run" / "site.lock"),
            "timeout": 0,
            "lease": 60,
            "toolkit_bindir": "/usr/local/bin",
            "plan": {"fast_path": fast_path, "hold": hold, "stages": stages},
            "dir": str(env["tmp"] / "stamps"),
        }
    )


def _stamp_all(env, stages, published):
    """What tasks/stamp.yml writes at the end of a run: each stage's stamp from its spec and the facts then."""
    for spec in stages:
        inputs = dict(spec["inputs"])
        for name in spec["published_inputs"]:
            inputs[name] = published.get(name, "")
        paths = (
            stamp.with_engine_configs(spec["paths"], env["facts"]["now"]) if spec["engine_configs"] else spec["paths"]
        )
        stamp.run_stamp(
            stamp.StampRequest(
                stage=spec["stage"],
                state="present",
                inputs=inputs,
                facts=env["facts"]["now"],
                paths=list(paths),
                units=[],
                packages=[],
                published={
                    k: v
                    for k, v in published.items()
                    if k.startswith(spec["stage"][:4]) or k == "gpufleet_" + spec["stage"]
                },
                dir=str(env["tmp"] / "stamps"),
            ),
            _Host(),
        )


def test_no_stamp_the_first_stage_is_stale_and_the_later_ones_left_to_their_plays(env):
    result = converge.run_converge(_request(env, _stages(env)), _Host())
    assert result.ansible_facts == {"nvidia": GPU_FACTS, "gpufleet_published": {}}  # its stages publish their own
    assert result.stale == ["driver", "toolkit", "runtime"] and not result.converged
    assert result.reasons["driver"] == "no stamp from an earlier run"
    assert result.reasons["toolkit"] == "checked in its play, after the stage driver"
    assert result.lock_held and result.holder["owner"] == "run-1"
    assert result.unstamped == ["driver", "toolkit", "runtime"]  # their plays need not check a stamp none has


def test_every_stamp_current_the_host_is_converged_with_the_stamped_facts(env):
    stages = _stages(env)
    published = {"driver_plan": {"branch": "535"}, "gpufleet_toolkit": {"provider": "native"}}
    _stamp_all(env, stages, published)
    result = converge.run_converge(_request(env, stages), _Host())
    assert result.stale == [] and result.converged, result.reasons
    # the runtime stage's input gpufleet_toolkit is the toolkit stamp's published fact, as in the runtime play
    assert result.published == published
    # the plays read them with the discovery, without a set_fact: the report's stage for a GPU node lost later too
    assert result.ansible_facts["gpufleet_published"] == {**published, "gpufleet_stage_reached": "validate"}


def test_a_drifted_file_makes_its_stage_stale_and_removes_its_stamp(env):
    stages = _stages(env)
    _stamp_all(env, stages, {})
    env["owned"].write_text("edited by an admin\n")
    result = converge.run_converge(_request(env, stages), _Host())
    assert result.stale == ["driver", "toolkit", "runtime"] and not result.converged
    assert result.reasons["driver"] == f"{env['owned']} changed since the stamped run"
    assert not (env["tmp"] / "stamps" / "driver.json").exists()  # the stage that runs leaves no stamp if it fails
    assert (env["tmp"] / "stamps" / "toolkit.json").exists()  # checked again in its own play
    assert result.unstamped == ["driver"]


class _CheckHost(_Host):
    check_mode = True


def test_in_check_mode_a_stale_stamp_stays_and_its_play_checks_it_again(env):
    stages = _stages(env)
    _stamp_all(env, stages, {})
    env["owned"].write_text("edited by an admin\n")
    result = converge.run_converge(_request(env, stages), _CheckHost())
    assert result.stale == ["driver", "toolkit", "runtime"] and result.unstamped == []
    assert (env["tmp"] / "stamps" / "driver.json").exists()


def test_other_discovered_facts_make_the_first_stage_stale(env):
    stages = _stages(env)
    _stamp_all(env, stages, {})
    env["facts"]["now"] = dict(GPU_FACTS, gpus=[{"uuid": "GPU-2"}])
    assert converge.run_converge(_request(env, stages), _Host()).stale[0] == "driver"


def test_a_stage_without_a_stamp_or_a_mig_boot_layout_holds_the_host(env):
    stages = _stages(env)
    _stamp_all(env, stages, {})
    assert not converge.run_converge(_request(env, stages, hold=True), _Host()).converged
    env["facts"]["now"] = dict(GPU_FACTS, mig_boot={"layout": "all-1g.5gb"})
    _stamp_all(env, stages, {})
    result = converge.run_converge(_request(env, stages, lock=False), _Host())
    assert result.stale == [] and not result.converged


def test_fast_path_off_checks_nothing_and_converges_no_gpu_host(env):
    stages = _stages(env)
    _stamp_all(env, stages, {})
    result = converge.run_converge(_request(env, stages, fast_path=False), _Host())
    assert result.reasons == {} and not result.converged
    assert result.ansible_facts["gpufleet_published"] == {}
    env["facts"]["now"] = {"gpu_node": False, "engines": {}}
    result = converge.run_converge(_request(env, stages, fast_path=False, lock=False), _Host())
    assert result.converged  # no stage acts on a host without a GPU
    assert result.ansible_facts["gpufleet_published"] == {}  # no stamp checked, no validate stage to name


def test_a_lock_another_run_holds_is_an_answer_with_the_facts(env):
    stages = _stages(env)
    assert converge.run_converge(_request(env, stages, owner="run-1"), _Host()).lock_held
    result = converge.run_converge(_request(env, stages, owner="run-2"), _Host())
    assert result.lock_busy and result.msg == result.lock_busy and "run-1" in result.lock_busy
    assert result.ansible_facts == {"nvidia": GPU_FACTS, "gpufleet_published": {}}  # a cached earlier one is replaced
    assert result.reasons == {} and not result.lock_held  # no stamp is touched without the lock


def test_no_lock_asked_none_taken(env):
    result = converge.run_converge(_request(env, _stages(env), lock=False), _Host())
    assert not result.lock_held and not (env["tmp"] / "run").exists()


def test_engine_configs_are_the_discovered_engines_files(env):
    conf = env["tmp"] / "etc" / "daemon.json"
    conf.write_text("{}")
    env["facts"]["now"] = dict(
        GPU_FACTS, engines={"docker": {"config_path": str(conf)}, "podman": {"config_path": None}}
    )
    stages = _stages(env, engine_configs=True)
    _stamp_all(env, stages, {})
    assert converge.run_converge(_request(env, stages), _Host()).converged
    conf.write_text('{"runtimes": {}}')
    result = converge.run_converge(_request(env, stages, lock=False), _Host())
    assert result.stale == ["runtime"] and result.reasons["runtime"] == f"{conf} changed since the stamped run"


def test_a_bad_stage_name_fails_naming_it(env):
    with pytest.raises(Failure, match="'Driver' is not a stage name"):
        _request(env, [dict(_stages(env)[0], stage="Driver")])


class _SlurmHost(_Host):
    """A host with slurmd where slurm_gres looks for it (AnsibleModule.get_bin_path)."""

    def get_bin_path(self, name, **_kwargs):
        return "/usr/sbin/slurmd" if name == "slurmd" else None


def test_the_answer_says_whether_slurmd_is_installed(env):
    # site.yml leaves a converged host out of the Slurm play only where slurmd is not (the stage acts on none there)
    assert converge.run_converge(_request(env, []), _Host()).slurmd is False
    assert converge.run_converge(_request(env, [], owner="run-1"), _SlurmHost()).slurmd is True
