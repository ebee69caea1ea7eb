# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""validate.converged: converge_check's route for a host, and the validation of a converged host in the same call,
with real stamps, a real flock and holder process (given back when the host is done); discovery is replaced by fixed
facts and the engine's commands by a recorder that answers as the engine would (the containers themselves run in
tests/integration/test_stages_alone.py)."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.base import hostlock
from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery import converge
from ansible_collections.gpufleet.nvidia.plugins.module_utils.validate import converged
from ansible_collections.gpufleet.nvidia.plugins.module_utils.validate.plan import BEGIN, END, NVSMI, NVSMI_RC

DRIVER = "535.247.01"
UUID = "GPU-11111111-2222-3333-4444-555555555555"
LIB = "/usr/lib/x86_64-linux-gnu"


def _facts(**extra):
    facts = {
        "gpu_node": True,
        "gpus": [{"uuid": UUID, "minor": 0, "health": {}}],
        "driver": {"loaded_version": DRIVER},
        "engines": {"docker": {"installed": True, "version": "26.1.5", "runtimes": ["nvidia", "runc"]}},
        "mig_boot": {"layout": None},
        "fabric_manager": {"nvswitch_count": 0},
    }
    facts.update(extra)
    return facts


def passing_output():
    """What the check script prints in a container that got the GPU, its nodes and the driver's libraries."""
    lines = [BEGIN]
    for node in ("/dev/nvidia0", "/dev/nvidiactl"):
        lines += [f"DEV {node}", f"OPEN {node} ok"]
    lines += [f"FILE {LIB}/libcuda.so.1"]
    for lib in ("libcuda.so.1", "libnvidia-ml.so.1"):
        lines.append(f"LIB {lib} {LIB}/{lib} = {LIB}/{lib.rsplit('.so', 1)[0]}.so.{DRIVER}")
    lines += ["DLOPEN none", NVSMI, f"GPU 0: NVIDIA A100-SXM4-40GB (UUID: {UUID})", f"{NVSMI_RC} 0", END]
    return "\n".join(lines) + "\n"


class Engine:
    """The host's commands: the image probe answers ``present``; a container run answers ``runs`` in turn."""

    def __init__(self, present=True, runs=None):
        self.present = present
        self.runs = list(runs or [(0, passing_output(), "")])
        self.argvs = []

    def __call__(self, argv, **_kwargs):
        self.argvs.append(list(argv))
        if "run" in argv:
            return self.runs.pop(0) if len(self.runs) > 1 else self.runs[0]
        if "ls" in argv:  # ctr images ls -q name==<ref>: the ref when present
            return 0, (argv[-1].split("==", 1)[1] + "\n") if self.present else "", ""
        return (0, "[]\n", "") if self.present else (1, "", "Error: No such image")

    def containers(self):
        return [a for a in self.argvs if "run" in a]


class Host:
    diff = False

    def __init__(self, engine, check_mode=False, slurmd=False):
        self.run_command = engine
        self.check_mode = check_mode
        self.slurmd = slurmd

    def get_bin_path(self, name, **_kwargs):
        return "/usr/sbin/slurmd" if name == "slurmd" and self.slurmd else None

    def warn(self, _msg):
        pass


@pytest.fixture
def env(tmp_path, monkeypatch, lock_holders):
    facts = {"now": _facts()}
    monkeypatch.setattr(converge, "discover", lambda **_kwargs: facts["now"])
    return {"tmp": tmp_path, "facts": facts, "holders": lock_holders}


def _request(env, *, validate=None, hold=False, slurm_controller=False, release_done=True):
    options = {name: spec.get("default") for name, spec in converged.VALIDATE_OPTIONS.items()}
    options.update(run=True, image="gpufleet-sim/mini:latest", pull="never")
    options.update(validate or {})
    return converged.Request.from_params(
        {
            "owner": "run-1",
            "lock": True,
            "lock_path": str(env["tmp"] / "run" / "site.lock"),
            "timeout": 0,
            "lease": 60,
            "toolkit_bindir": "/usr/local/bin",
            "plan": {
                "fast_path": True,
                "hold": hold,
                "stages": [],
                "slurm_controller": slurm_controller,
                "release_done": release_done,
                "validate": options,
            },
            "dir": str(env["tmp"] / "stamps"),
        }
    )


def _lock_free(env):
    """Another run takes the host's lock at once."""
    try:
        taken, _holder = hostlock.acquire(str(env["tmp"] / "run" / "site.lock"), "run-2", 0, 60)
    except hostlock.LockBusy:
        return False
    return taken


def test_a_converged_host_is_validated_in_the_call_and_its_lock_given_back(env):
    engine = Engine()
    result = converged.run(_request(env), Host(engine))
    assert result.route == "done" and result.lock_released and not result.lock_held
    assert _lock_free(env)
    fact = result.ansible_facts[converge.PUBLISHED_FACT]["gpufleet_validate"]
    assert fact["passed"] and fact["engines"]["docker"]["passed"], fact
    assert fact["engines"]["docker"]["checks"][0]["seconds"] >= 0
    assert result.ansible_facts[converge.PUBLISHED_FACT]["gpufleet_stage_reached"] == "validate"
    # the role's container: the nvidia runtime, every GPU, --rm, no network, the image as asked
    (run,) = engine.containers()
    assert run[run.index("docker") :][:2] == ["docker", "run"] and "--rm" in run and "--runtime" in run
    assert "gpufleet-sim/mini:latest" in run and "NVIDIA_VISIBLE_DEVICES=all" in run
    assert result.validate_failed is None and result.validate_here is None


def test_without_release_done_the_lock_stays_for_the_caller_to_give_back(env):
    """A play of the caller's own may still act on a done host: the lock is given back only when asked."""
    result = converged.run(_request(env, release_done=False), Host(Engine()))
    assert result.route == "done" and result.lock_held and not result.lock_released
    assert not _lock_free(env)


def test_a_failing_engine_fails_the_host_with_the_role_s_message(env):
    engine = Engine(runs=[(125, "", "docker: Error response from daemon: unknown or invalid runtime name: nvidia")])
    result = converged.run(_request(env), Host(engine))
    assert result.route == "validate_failed" and result.lock_released
    assert result.validate_failed.startswith("GPU container validation failed on docker: docker (runtime): container")
    assert "unknown or invalid runtime name" in result.validate_failed
    assert "validate_fail_on_error=false" in result.validate_failed
    fact = result.ansible_facts[converge.PUBLISHED_FACT]["gpufleet_validate"]
    assert fact["failed_engines"] == ["docker"] and not fact["passed"]


def test_a_failure_is_only_recorded_without_fail_on_error(env):
    engine = Engine(runs=[(125, "", "Error")])
    result = converged.run(_request(env, validate={"fail_on_error": False}), Host(engine))
    assert result.route == "done" and result.validate_failed is None
    assert result.ansible_facts[converge.PUBLISHED_FACT]["gpufleet_validate"]["failed_engines"] == ["docker"]


@pytest.mark.parametrize(
    ("present", "validate", "facts", "why"),
    [
        (False, {}, {}, "the image is missing from docker"),
        (False, {"pull": "missing"}, {}, "the image is missing from docker"),
        (True, {"pull": "always"}, {"engines": {"containerd": {"installed": True, "version": "1.7.24"}}}, "always"),
        (True, {}, {"fabric_manager": {"nvswitch_count": 4}}, "Fabric Manager"),
    ],
)
def test_what_the_role_must_do_first_leaves_the_host_to_it(env, present, validate, facts, why):
    """Loading or pulling the image, or waiting for Fabric Manager: the role does it; the host keeps its lock, no
    container ran."""
    env["facts"]["now"] = _facts(**facts)
    engine = Engine(present=present)
    result = converged.run(_request(env, validate=validate), Host(engine))
    assert result.route == "quiet" and why in result.validate_here, result.validate_here
    assert result.lock_held and not result.lock_released
    assert not engine.containers()
    assert "gpufleet_validate" not in result.ansible_facts[converge.PUBLISHED_FACT]


@pytest.mark.parametrize(
    ("host", "request_", "route"),
    [
        ({"slurmd": True}, {}, "converged"),
        ({}, {"slurm_controller": True}, "converged"),
        ({}, {"hold": True}, "stale"),
    ],
)
def test_a_host_another_play_acts_on_keeps_its_lock_and_is_not_validated_here(env, host, request_, route):
    engine = Engine()
    result = converged.run(_request(env, **request_), Host(engine, **host))
    assert result.route == route and result.lock_held and not engine.argvs


def test_without_validation_in_the_run_a_converged_host_is_done_at_once(env):
    """--tags driver: no validation; nothing else acts on the host, so it is done and its lock given back."""
    engine = Engine()
    result = converged.run(_request(env, validate={"run": False}), Host(engine))
    assert result.route == "done" and result.lock_released and not engine.argvs
    assert "gpufleet_validate" not in result.ansible_facts[converge.PUBLISHED_FACT]


def test_a_host_without_a_gpu_is_done_at_once(env):
    env["facts"]["now"] = {"gpu_node": False, "gpus": [], "engines": {}}
    engine = Engine()
    result = converged.run(_request(env), Host(engine))
    assert result.route == "done" and result.lock_released and not engine.argvs


def test_check_mode_runs_no_container(env):
    engine = Engine()
    result = converged.run(_request(env), Host(engine, check_mode=True))
    assert result.route == "done" and not engine.containers()
    fact = result.ansible_facts[converge.PUBLISHED_FACT]["gpufleet_validate"]
    assert fact["skipped"] and fact["message"] == "check mode: no container was run"


def test_a_ctr_run_that_lost_its_output_runs_once_more(env):
    """ctr's short-lived-task race (exit 0, the script's last line missing): the role runs it again; so does this."""
    env["facts"]["now"] = _facts(engines={"containerd": {"installed": True, "version": "1.7.24"}})
    engine = Engine(runs=[(0, "", ""), (0, passing_output(), "")])
    result = converged.run(_request(env), Host(engine))
    assert result.route == "done", result.ansible_facts[converge.PUBLISHED_FACT]
    assert len(engine.containers()) == 2
    check = result.ansible_facts[converge.PUBLISHED_FACT]["gpufleet_validate"]["engines"]["containerd"]
    assert check["passed"], check


def test_a_ctr_run_that_lost_its_output_twice_fails(env):
    env["facts"]["now"] = _facts(engines={"containerd": {"installed": True, "version": "1.7.24"}})
    engine = Engine(runs=[(0, "", "")])
    result = converged.run(_request(env), Host(engine))
    assert result.route == "validate_failed" and "printed nothing, 2 time(s)" in result.validate_failed
    assert len(engine.containers()) == 2


def test_a_busy_lock_has_no_route(env):
    other = converged.run(_request(env, hold=True), Host(Engine()))
    assert other.lock_held
    second = converged.Request.from_params(
        {
            **{"owner": "run-2", "lock": True, "lock_path": str(env["tmp"] / "run" / "site.lock")},
            **{"timeout": 0, "lease": 60, "toolkit_bindir": "/usr/local/bin", "dir": str(env["tmp"] / "stamps")},
            "plan": {"fast_path": True, "hold": False, "stages": [], "slurm_controller": False, "validate": {}},
        }
    )
    result = converged.run(second, Host(Engine()))
    assert result.lock_busy and result.route is None
