# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The ``slurm_drain`` module's work: take a Slurm node out of service with a reason and wait until its GPU jobs
ended, or return it to service; ``node.py`` has the command lines and reads the node's state.

* ``state=drained``: ``scontrol update ... State=DRAIN Reason=<reason>`` (a node already drained keeps its drain; the
  reason is updated to the one given only when the drain is the collection's, its reason starting with ``prefix``:
  an admin's drain keeps its reason, so that ``state=resumed`` leaves it in place), then ``squeue`` every ``poll``
  seconds until no job that holds a GPU
  (``%b``, the job's GRES/TRES per node, names ``gpu``) runs on the node; at the timeout the module fails naming the
  jobs and the node stays drained (nothing new starts there).
* ``state=resumed``: ``State=RESUME``, only when the node's drain reason starts with ``reason`` (the drain this
  collection made); a node an admin drained for another reason is left drained and named in the result.
* A host without ``scontrol`` is not a Slurm node: nothing is done (``slurm: false``).

Rules: https://slurm.schedmd.com/scontrol.html, https://slurm.schedmd.com/squeue.html (``-w``, ``-t``, ``-o``),
https://slurm.schedmd.com/sinfo.html (``-R``), cited 2026-11-27; what ``%b`` prints for a GPU job (``gres:gpu:1``) and
every state here were checked against Debian 12's Slurm 22.05 (tests/integration/test_upgrade_drain.py).
Standard library only (target Pythons 3.8+).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ..base.runner import Failure, Host, Result
from . import node as slurm_node

SQUEUE_FORMAT = "%i|%u|%j|%T|%b"


@dataclass(frozen=True)
class DrainRequest:
    node: str
    state: str
    reason: str
    timeout: int
    poll: float
    prefix: str = "gpufleet:"

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> DrainRequest:
        return cls(
            params["node"] or "", params["state"], params["reason"], params["timeout"], params["poll"], params["prefix"]
        )


@dataclass
class DrainResult(Result):
    changed: bool
    slurm: bool
    node: str | None = None
    before: str | None = None
    after: str | None = None
    reason: str | None = None
    jobs: list[dict[str, str]] = field(default_factory=list)
    waited: float | None = None
    msg: str | None = None


def gpu_jobs(squeue_out: str) -> list[dict[str, str]]:
    """The jobs of ``squeue -h -o '%i|%u|%j|%T|%b'`` that hold a GPU."""
    jobs = []
    for line in squeue_out.splitlines():
        parts = line.strip().split("|", 4)
        if len(parts) == 5 and "gpu" in parts[4]:
            jobs.append(dict(zip(("id", "user", "name", "state", "gres"), parts)))
    return jobs


def _describe(jobs: list[dict[str, str]]) -> str:
    return ", ".join(f"job {j['id']} ({j['name']}, user {j['user']}, {j['gres']})" for j in jobs)


class _Slurm:
    def __init__(self, host: Host, scontrol: str, squeue: str | None, node: str) -> None:
        self.host, self.scontrol, self.squeue, self.node = host, scontrol, squeue, node

    def call(self, argv: list[str]) -> str:
        rc, out, err = self.host.run_command(argv)
        if rc != 0:
            raise Failure(f"slurm_drain: {' '.join(argv)} failed (rc {rc}): {(err or out).strip()}")
        return out

    def show(self) -> dict[str, object]:
        fields = slurm_node.parse_show_node(self.call([self.scontrol, "show", "node", self.node, "--oneliner"]))
        return slurm_node.drain_state(fields)

    def update(self, argv: list[str]) -> None:
        self.call([self.scontrol, *argv[1:]])

    def jobs(self) -> list[dict[str, str]]:
        if not self.squeue:
            raise Failure("slurm_drain: squeue is not installed on this host (Debian: slurm-client); install it")
        argv = [self.squeue, "-h", "-w", self.node, "-t", "RUNNING,COMPLETING", "-o", SQUEUE_FORMAT]
        return gpu_jobs(self.call(argv))


def _node_name(host: Host, given: str) -> str:
    if given:
        return given
    slurmd = host.get_bin_path("slurmd")
    if slurmd:
        rc, out, _err = host.run_command([slurmd, "-C"])
        first = (out.splitlines() or [""])[0].split()
        if rc == 0 and first and first[0].startswith("NodeName="):
            return first[0].split("=", 1)[1]
    rc, out, _err = host.run_command(["hostname", "-s"])
    if rc != 0 or not out.strip():
        # scontrol show node with an empty name lists every node: never guess
        raise Failure("slurm_drain: cannot tell this node's Slurm name (slurmd -C and hostname -s gave none); set node")
    return out.strip()


def slurm_drain(
    request: DrainRequest, host: Host, clock: Callable[[], float] = time.monotonic, sleep: Callable = time.sleep
) -> DrainResult:
    scontrol = host.get_bin_path("scontrol")
    result = DrainResult(changed=False, slurm=bool(scontrol))
    if not scontrol:
        return result
    slurm = _Slurm(host, scontrol, host.get_bin_path("squeue"), _node_name(host, request.node))
    result.node = slurm.node
    try:
        now = slurm.show()
    except ValueError as exc:
        msg = f"slurm_drain: node {slurm.node} unknown to Slurm ({exc}); set the node name"
        raise Failure(msg, **result.fields()) from exc
    result.before, result.reason = str(now["state"]), str(now["reason"])
    if request.state == "resumed":
        if not request.reason.strip():
            raise Failure(
                "slurm_drain: state=resumed with an empty reason would resume any drain, an admin's too; set reason "
                "to the prefix of the drain to undo (gpufleet:)",
                **result.fields(),
            )
        ours = str(now["reason"]).startswith(request.reason)
        if now["state"] == "in_service" or not ours:
            result.after = result.before
            if now["state"] != "in_service":
                result.msg = f"{slurm.node} stays drained: an admin's drain ({now['reason']}), not '{request.reason}'"
            return result
        result.changed, result.after = True, "in_service"
        if not host.check_mode:
            slurm.update(slurm_node.resume_argv(slurm.node))
            result.after = str(slurm.show()["state"])
        return result
    try:
        argv = slurm_node.drain_argv(slurm.node, request.reason)
    except ValueError as exc:
        raise Failure(f"slurm_drain: {exc}; set the reason", **result.fields()) from exc
    admins = now["state"] != "in_service" and not str(now["reason"]).startswith(request.prefix)
    same = str(now["reason"]).startswith(request.reason.strip())
    result.changed = now["state"] == "in_service" or not (admins or same)
    if admins:
        result.msg = f"{slurm.node} was drained by an admin ({now['reason']}): that drain and its reason stay"
    result.jobs = slurm.jobs()
    if host.check_mode:
        result.after = "draining" if result.jobs else "drained"
        return result
    if result.changed:
        slurm.update(argv)
    start = clock()
    while result.jobs and clock() - start < request.timeout:
        sleep(min(request.poll, max(0.0, request.timeout - (clock() - start))))
        result.jobs = slurm.jobs()
    result.waited = round(clock() - start, 1)
    after = slurm.show()
    result.after, result.reason = str(after["state"]), str(after["reason"])
    if result.jobs:
        raise Failure(
            f"slurm_drain: {slurm.node} is drained (no new job starts there) but GPU jobs still run after "
            f"{request.timeout}s: {_describe(result.jobs)}; wait for them, or cancel them (scancel <job>), then run "
            "again",
            **result.fields(),
        )
    return result
