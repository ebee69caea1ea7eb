# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The ``converge_check`` module's work: ``discovery.converge`` (discover, lock, check the stamps), then, for a host on
which nothing else of the run acts, its validation and the lock's release in the same module process.

A host's *route* through ``site.yml`` is decided here, once:

* ``stale``: a stamped stage is stale, or something else acts on it (``hold``, a MIG boot layout): every stage play;
* ``converged``: converged, and the Slurm stage acts on it (``slurmd`` installed, or one of the Slurm controllers):
  the Slurm play, validation (the role) and the lock's release;
* ``quiet``: converged, and its validation needs the role (Fabric Manager to wait for on an NVSwitch host, an image to
  load or pull, ``validate_pull=always``): validation and the lock's release;
* ``done``: converged and validated here (or nothing to validate: no GPU, or no ``validate`` in this run's tags), the
  lock given back (``release_done``): no play contacts the host again;
* ``validate_failed``: as ``done``, but an engine failed validation and ``validate_fail_on_error`` holds: a play
  records the failure (``gpufleet_failed``), as the role's would.

Validation here is the role's (``roles/validate``), with the same functions: the checks of ``plan.validate_plan`` on
the facts just discovered and the stamped runs' published facts (``stage_facts``), one presence probe per engine, each
check's container run (a containerd run that exited 0 without the script's last line once more, as the role does),
and ``result.validate_result``. In check mode no container runs, as in the role. Nothing is loaded or pulled here: a
host on which an engine lacks the image is routed to the role, which loads or pulls it (or fails on it under
``validate_pull=never``), so this module never changes the host.
Standard library only (target Pythons 3.8+).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from ..base import hostlock
from ..base.runner import Host
from ..discovery import converge
from .plan import (
    fabric_manager_wait,
    gpu_uuids,
    host_driver_version,
    required_device_nodes,
    validate_images,
    validate_plan,
)
from .result import failure_message, validate_result
from .stage_facts import stage_runtime, stage_toolkit

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable

# The validate role's variables a host's validation here needs (plugin_utils/stage_stamp.py's plan builds them from
# the host's variables, at the role's defaults where unset); ``run``: the validate play is in this run (its tag).
VALIDATE_OPTIONS: dict[str, Any] = {
    "run": {"type": "bool", "default": False},
    "image": {"type": "str", "default": "docker.io/library/ubuntu:24.04"},
    "image_archive": {"type": "str", "default": ""},
    "pull": {"type": "str", "choices": ["missing", "never", "always"], "default": "missing"},
    "engines": {"type": "list", "elements": "str", "default": []},
    "device_nodes": {"type": "list", "elements": "str", "default": []},
    "nvidia_smi": {"type": "bool", "default": True},
    "fail_on_error": {"type": "bool", "default": True},
    "timeout": {"type": "int", "default": 120},
    "runtime_path": {"type": "path", "default": "/usr/local/bin/gpufleet-container-runtime"},
    "containerd_namespace": {"type": "str", "default": "default"},
}

ROUTES = ("stale", "converged", "quiet", "done", "validate_failed")


def argspec() -> dict[str, Any]:
    """``discovery.converge``'s options, with three more in ``plan``: ``slurm_controller`` (the host is one of the Slurm
    controllers: the Slurm stage acts on it), ``release_done`` (give the lock back when the host is done: site.yml,
    whose later plays leave such a host out) and ``validate``."""
    spec = dict(converge.argspec())
    plan = dict(spec["plan"])
    plan["options"] = dict(
        plan["options"],
        slurm_controller={"type": "bool", "default": False},
        release_done={"type": "bool", "default": False},
        validate={"type": "dict", "default": {}, "options": VALIDATE_OPTIONS},
    )
    spec["plan"] = plan
    return spec


@dataclass(frozen=True)
class Request:
    converge: converge.ConvergeRequest
    slurm_controller: bool
    release_done: bool
    validate: dict[str, Any]

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> Request:
        plan = params["plan"]
        return cls(
            converge=converge.ConvergeRequest.from_params(params),
            slurm_controller=bool(plan.get("slurm_controller")),
            release_done=bool(plan.get("release_done")),
            validate=dict(plan.get("validate") or {}),
        )


def _run(run_command: Callable[[list[str]], tuple[int, str, str]], argv: list[str]) -> dict[str, Any]:
    """One command, as the command module returns it (what ``validate_images`` and ``validate_result`` read)."""
    start = time.monotonic()
    rc, out, err = run_command(argv)
    delta = str(timedelta(seconds=time.monotonic() - start))  # the command module's delta: 0:00:01.234567
    return {"rc": rc, "stdout": out.rstrip("\r\n"), "stderr": err.rstrip("\r\n"), "delta": delta}


def validate_here(
    facts: dict[str, Any],
    published: dict[str, Any],
    options: dict[str, Any],
    run_command: Callable[[list[str]], tuple[int, str, str]],
    *,
    check_mode: bool = False,
    suffix: str = "",
) -> tuple[dict[str, Any] | None, str]:
    """``(gpufleet_validate, "")`` for a GPU node validated here, or ``(None, why the role must)``."""
    if fabric_manager_wait(facts)["needed"]:
        return None, "an NVSwitch host: the role waits for Fabric Manager first"
    checks = validate_plan(
        facts,
        runtime=stage_runtime(published.get("gpufleet_runtime"), facts),
        toolkit=stage_toolkit(published.get("gpufleet_toolkit"), facts),
        image=options["image"],
        pull=options["pull"],
        engines=options["engines"],
        runtime_path=options["runtime_path"],
        containerd_namespace=options["containerd_namespace"],
        suffix=suffix,
        timeout=options["timeout"],
    )
    probes = {}
    for check in checks:
        if check.get("present_argv") and check["engine"] not in probes:
            probes[check["engine"]] = dict(_run(run_command, check["present_argv"]), item=check)
    images = validate_images(checks, list(probes.values()), pull=options["pull"], archive=options["image_archive"])
    if images["missing"] or images["pull"]:
        # to load, to pull, or (validate_pull=never) to fail on: the role does each, and says so as it always has
        return None, "the image is missing from " + (", ".join(images["missing"]) or "no engine") + (
            ", or validate_pull=always" if options["pull"] == "always" else ""
        )
    runs: list[dict[str, Any]] = []
    for check in checks:
        if check.get("skipped") or check_mode:
            runs.append({"skipped": True, "item": check})
            continue
        res = _run(run_command, check["argv"])
        res["attempts"] = 1
        marker = check.get("rerun_incomplete")
        if marker and res["rc"] == 0 and marker not in res["stdout"]:
            time.sleep(1)
            res = dict(_run(run_command, check["argv"]), attempts=2)
        runs.append(dict(res, item=check))
    answer = validate_result(
        checks,
        runs,
        device_nodes=required_device_nodes(facts, options["device_nodes"]),
        check_mode=check_mode,
        gpu_uuids=gpu_uuids(facts),
        nvidia_smi=options["nvidia_smi"],
        driver_version=host_driver_version(facts),
    )
    return answer, ""


def run(request: Request, host: Host) -> converge.ConvergeResult:
    """The ``converge_check`` module."""
    result = converge.run_converge(request.converge, host)
    if result.lock_busy:
        return result
    result.route = "stale"
    if not result.converged:
        return result
    facts = result.ansible_facts["nvidia"]
    if result.slurmd or request.slurm_controller:
        result.route = "converged"
        return result
    published = result.ansible_facts[converge.PUBLISHED_FACT]
    validate = request.validate
    if facts.get("gpu_node") and validate.get("run"):

        def run_command(argv: list[str]) -> tuple[int, str, str]:
            return host.run_command(argv, check_rc=False)

        suffix = datetime.now(timezone.utc).strftime("%Y%m%d%H%M%S%f")
        answer, why = validate_here(
            facts, result.published, validate, run_command, check_mode=host.check_mode, suffix=suffix
        )
        if answer is None:
            result.route = "quiet"
            result.validate_here = why
            return result
        published["gpufleet_validate"] = answer
        failed = failure_message(answer)
        if failed and validate.get("fail_on_error", True):
            result.validate_failed = failed
    result.route = "validate_failed" if result.validate_failed else "done"
    if result.lock_held and request.release_done:
        hostlock.release(request.converge.lock_path, request.converge.owner)
        result.lock_held = False
        result.lock_released = True
    return result
