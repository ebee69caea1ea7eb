# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The ``converge_check`` module's work: the first call of a ``site.yml`` run on a host, and for a converged host the
only one before validation.

In one module process: discover the host (``discover.discover``, what ``gpu_facts`` returns), take the run's host
lock (``base.hostlock``), then check every stamped stage's stamp against the facts just discovered (``stamp``: the same
comparison ``stage_stamp`` makes, a stale stamp removed outside check mode). The answer says which stages are stale;
the host is *converged* when it is not a GPU node (no stage acts on it), or when every stamped stage is current and
nothing else of the run may change it (``hold``: a MIG layout to apply, a Kubernetes node's device plugin; a MIG
boot unit that holds a layout). Whether ``slurmd`` is installed is part of the answer: the Slurm stage acts only on GPU
nodes with ``slurmd`` (and the Slurm controllers), so a converged host without it enters no play but validation.
The lock stays held for the rest of the run (the stages that still act on every host,
validation): ``site.yml`` gives it back before the report.

Discovery comes first and the lock after it, as in the separate tasks: discovery reads only; the stamps are checked,
and stale ones removed, under the lock. A lock held by another run is an answer (``lock_busy``), not a module failure,
so that the facts just discovered still reach the report. Standard library only (target Pythons 3.8+).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from ..base import hostlock
from ..base.runner import Failure, Host, Result
from . import stamp
from .discover import discover
from .toolkit import DEFAULT_BINDIR

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

STAGE_OPTIONS: dict[str, Any] = {
    "stage": {"type": "str", "required": True},
    "inputs": {"type": "raw", "default": {}},
    "paths": {"type": "list", "elements": "str", "default": []},
    "units": {"type": "list", "elements": "str", "default": []},
    "packages": {"type": "list", "elements": "str", "default": []},
    "engine_configs": {"type": "bool", "default": False},
    "published_inputs": {"type": "list", "elements": "str", "default": []},
}


PLAN_OPTIONS: dict[str, Any] = {
    "fast_path": {"type": "bool", "default": True},
    "hold": {"type": "bool", "default": False},
    "stages": {"type": "list", "elements": "dict", "default": [], "options": STAGE_OPTIONS},
}


def argspec() -> dict[str, Any]:
    return {
        "owner": {"type": "str", "required": True},
        "lock": {"type": "bool", "default": True},
        "lock_path": {"type": "path", "default": hostlock.DEFAULT_PATH},
        "timeout": {"type": "int", "default": 600},
        "lease": {"type": "int", "default": 10800},
        "toolkit_bindir": {"type": "path", "default": DEFAULT_BINDIR},
        "plan": {"type": "dict", "required": True, "options": PLAN_OPTIONS},
        "dir": {"type": "path", "default": stamp.STAMP_DIR},
    }


@dataclass(frozen=True)
class ConvergeRequest:
    """What ``converge_check`` is asked: the lock's owner and terms, discovery's one option, the stamped stages."""

    owner: str
    lock: bool
    lock_path: str
    timeout: int
    lease: int
    toolkit_bindir: str
    fast_path: bool
    stages: list[dict[str, Any]]
    hold: bool
    dir: str

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> ConvergeRequest:
        plan = params["plan"]
        for spec in plan["stages"]:
            stamp.check_stage_name(spec["stage"], "plan.stages")
        fields = {name: params[name] for name in argspec() if name != "plan"}
        return cls(**fields, fast_path=plan["fast_path"], stages=plan["stages"], hold=plan["hold"])


# The key of ansible_facts under which a converged host's published facts are returned (the plays read
# ansible_facts.gpufleet_published.<name> where the stage's set_fact did not run: report.py, the validate role).
PUBLISHED_FACT = "gpufleet_published"


@dataclass
class ConvergeResult(Result):
    """``converge_check``'s return values (RETURN)."""

    ansible_facts: dict[str, Any]
    changed: bool = False
    converged: bool = False
    stale: list[str] = field(default_factory=list)
    reasons: dict[str, str] = field(default_factory=dict)
    published: dict[str, Any] = field(default_factory=dict)
    unstamped: list[str] = field(default_factory=list)
    lock_held: bool = False
    holder: dict[str, Any] = field(default_factory=dict)
    lock_busy: str | None = None
    msg: str | None = None
    slurmd: bool = False
    # Set by validate.converged, which runs this work first: the host's route through site.yml, why its validation
    # is left to the role, why it failed validation, and that the lock was given back.
    route: str | None = None
    validate_here: str | None = None
    validate_failed: str | None = None
    lock_released: bool | None = None


def stage_request(
    request: ConvergeRequest, spec: dict[str, Any], facts: dict[str, Any], published: dict[str, Any]
) -> stamp.StampRequest:
    """The ``stage_stamp`` check of one stage, as ``tasks/stage.yml`` would ask it in its play: with these facts, the
    engines' configuration files they name (``engine_configs``), and the inputs an earlier stage publishes taken from
    its stamp (``published_inputs``; the earlier stage is current, or this check is not reached)."""
    paths = list(spec["paths"])
    if spec["engine_configs"]:
        paths = stamp.with_engine_configs(paths, facts)
    inputs = spec["inputs"]
    if spec["published_inputs"] and isinstance(inputs, dict):
        inputs = {**inputs, **{name: published.get(name, "") for name in spec["published_inputs"]}}
    return stamp.StampRequest(
        stage=spec["stage"],
        state="check",
        inputs=inputs,
        facts=facts,
        paths=paths,
        units=list(spec["units"]),
        packages=list(spec["packages"]),
        published={},
        dir=request.dir,
    )


def mig_boot_layout(facts: dict[str, Any]) -> bool:
    """Whether the MIG boot unit holds a layout: the mig stage runs for such a host (to keep or remove the unit)."""
    return (facts.get("mig_boot") or {}).get("layout") is not None


def run_converge(request: ConvergeRequest, host: Host) -> ConvergeResult:
    """The ``converge_check`` module: discover, take the lock, check the stamped stages in order."""

    def run_command(argv: list[str]) -> tuple[int, str, str]:
        return host.run_command(argv, check_rc=False)

    try:
        facts = discover(run_command=run_command, toolkit_bindir=request.toolkit_bindir)
    except ValueError as exc:
        raise Failure(f"converge_check: discovery: {exc}") from None
    # The Slurm stage's own test (slurm_gres: module_utils/slurm/files.py): slurmd found where the module looks for it.
    result = ConvergeResult(
        ansible_facts={"nvidia": facts, PUBLISHED_FACT: {}}, slurmd=bool(host.get_bin_path("slurmd"))
    )
    if request.lock:
        try:
            acquired, result.holder = hostlock.acquire(request.lock_path, request.owner, request.timeout, request.lease)
        except hostlock.LockBusy as exc:
            result.holder, result.lock_busy = exc.holder, str(exc)
            result.msg = result.lock_busy
            return result
        except OSError as exc:
            raise Failure(f"{request.lock_path}: cannot use the host's lock file: {exc}", **result.fields()) from None
        result.lock_held = acquired or result.holder.get("owner") == request.owner
    gpu_node = bool(facts.get("gpu_node"))
    if gpu_node and request.fast_path:
        for spec in request.stages:
            if result.stale:  # a later stage is checked again in its play, after the stale one ran
                result.stale.append(spec["stage"])
                result.reasons[spec["stage"]] = f"checked in its play, after the stage {result.stale[0]}"
                continue
            check = stamp.run_stamp(stage_request(request, spec, facts, result.published), host)
            result.reasons[spec["stage"]] = check.reason or ""
            if check.current:
                result.published.update(check.published or {})
            else:
                result.stale.append(spec["stage"])
        # A stale stage without a stamp now (none written, or a stale one just removed) is stale in its play too:
        # stamps are written only at the end of a run, under this lock. Its play need not check it again.
        result.unstamped = [s for s in result.stale if not os.path.exists(stamp.stamp_path(request.dir, s))]
    result.converged = not gpu_node or (
        request.fast_path and not result.stale and not request.hold and not mig_boot_layout(facts)
    )
    result.ansible_facts[PUBLISHED_FACT] = converged_facts(result, gpu_node)
    return result


def converged_facts(result: ConvergeResult, gpu_node: bool) -> dict[str, Any]:
    """What a converged host's plays read instead of the stages' ``set_fact``: the facts the stamped runs published,
    and for a GPU node the stage the report names should it stop answering (validate, the only stage that contacts it
    again). Empty for a host that is not converged: its stages publish their facts themselves, and a facts cache
    holding an earlier run's dictionary is overwritten."""
    if not result.converged:
        return {}
    return {**result.published, **({"gpufleet_stage_reached": "validate"} if gpu_node else {})}
