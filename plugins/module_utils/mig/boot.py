# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""``gpufleet-mig-boot``: the host's MIG layout applied again at boot, before the engines, kubelet and the CDI refresh.

MIG instances do not survive a reboot, and from Hopper on neither does the MIG mode (NVIDIA gpu-operator issue
#2600), so a node comes back without its slices. ``gpufleet-mig-layout.service`` (installed by the ``mig`` role)
runs this program after the driver: it reads the layout the role applied (``RECORD``, written by the role), plans it
against the GPUs NVML finds (``mig.layout.plan`` with each GPU's profiles read from NVML) and, when a GPU differs:

1. stops the GPU's clients that are active (``discovery.gpu_clients``), last first, and unloads ``nvidia_drm`` when
   it is loaded (it holds the GPU and blocks the reset a MIG mode change needs: NVIDIA mig-parted issue #181);
2. applies each changed GPU's step through NVML (``mig.nvml_mig.Session``);
3. on a failure, destroys what it made and turns MIG off on the GPUs it changed, so the node is left with MIG
   disabled rather than half-made;
4. loads ``nvidia_drm`` again and starts the clients it stopped, in their order.

The order is NVIDIA mig-parted's (deployments/systemd/hooks.sh at commit 0a6734e6 and service.sh at 219e780d, read
2026-11-27: driver services stopped in reverse and started in order; started with ``--no-block`` while the system
is still booting, so that a client ordered after this unit does not wait on it). What it did goes to ``STATUS`` (read
by discovery's ``mig_boot_failed`` check) and, on a failure, one line to the journal.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Callable, Sequence

from ..base.fileio import atomic_write
from ..base.oneline import error_line
from ..cdi.driver_files import read_driver_cache
from ..discovery.discover import discover, nvml_candidates
from ..discovery.gpu_clients import start_clients, stop_clients
from ..discovery.mig_boot_check import RECORD, STATUS
from .apply import read_tables
from .layout import LayoutError, plan
from .nvml_mig import Session

NAME = "gpufleet-mig-boot"
DRM_MODULE = "nvidia_drm"

Run = Callable[[Sequence[str]], int]


def _spawn(argv: Sequence[str]) -> tuple[int, str]:
    """``argv`` (found on ``PATH``) run to its end: its exit status (127 when it cannot start) and its first 4 KiB of
    output; its errors are discarded. A boot program of the target, not a module: fork and exec."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: output to the pipe, errors to /dev/null, then the program
        try:
            os.dup2(write_end, 1)
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 2)
            os.close(read_end)
            os.execvp(argv[0], list(argv))  # noqa: S606  # systemctl and modprobe, fixed arguments
        finally:
            os._exit(127)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        out = pipe.read(4096)
        while pipe.read(65536):
            pass
    _pid, status = os.waitpid(pid, 0)
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)
    return code, out.decode("utf-8", "replace")


def _run(argv: Sequence[str]) -> int:
    return _spawn(argv)[0]


def booting(run: Run) -> bool:
    """Whether systemd is still starting the system (``systemctl is-system-running`` neither running nor degraded)."""
    return _spawn(["systemctl", "is-system-running"])[1].strip() not in ("running", "degraded")


def _undo(session: Session, steps: list[dict[str, Any]]) -> list[str]:
    """MIG off on each changed GPU (its instances destroyed first); the GPUs that could not be put back."""
    left = []
    for step in steps:
        what = f"GPU {step['index']} ({step['name']})"
        try:
            handle = session.handle(step["uuid"])
            session.destroy_all(handle, what)
            session.set_mig_mode(handle, False, what)
        except Exception as exc:  # each GPU on its own: the next may still be put back
            left.append(f"{what}: {exc}")
    return left


def reapply(root: str = "/", run: Run = _run, is_booting: Callable[[Run], bool] = booting) -> dict[str, Any]:
    """Apply the recorded layout again; the status written to ``STATUS``: ``{ok, changed, message, gpus, stopped,
    applied, drm_unloaded, problems}``."""
    status: dict[str, Any] = {"ok": True, "changed": False, "gpus": [], "stopped": [], "drm_unloaded": False}
    with open(os.path.join(root, RECORD.lstrip("/")), encoding="utf-8") as f:
        record = json.load(f)
    facts = discover(root=root, sources=["nvml"])
    if "nvml" not in facts["sources"]["answered"]:
        return dict(status, ok=False, message="NVML does not answer (driver not loaded?); the layout was not applied")
    library = nvml_candidates(root, read_driver_cache(root))
    try:
        steps = [s for s in plan(facts["gpus"], record["layout"], read_tables(library, facts["gpus"])) if s["changed"]]
    except LayoutError as exc:
        return dict(status, ok=False, message=f"the recorded layout does not fit this host's GPUs: {exc}")
    status["gpus"] = [{"index": s["index"], "before": s["before"], "after": s["after"]} for s in steps]
    if not steps:
        return dict(status, message="the layout is in place")
    problems: list[str] = []
    stopped, refused = stop_clients(run)
    status["stopped"] = stopped
    problems += [f"{unit} would not stop" for unit in refused]
    drm = os.path.isdir(os.path.join(root, "sys/module", DRM_MODULE))
    if drm:
        status["drm_unloaded"] = run(["modprobe", "-r", DRM_MODULE]) == 0
        if not status["drm_unloaded"]:
            problems.append(f"{DRM_MODULE} could not be unloaded (a display server or console holds it)")
    applied = True
    try:
        with Session(library) as session:
            try:
                for step in steps:
                    session.apply(step)
            except Exception as exc:
                applied = False
                problems.append(str(exc))
                problems += [f"not put back to MIG disabled: {what}" for what in _undo(session, steps)]
    except Exception as exc:
        applied = False
        problems.append(str(exc))
    status["changed"] = True
    if status["drm_unloaded"] and run(["modprobe", DRM_MODULE]) != 0:
        problems.append(f"{DRM_MODULE} could not be loaded again")
    problems += [f"{unit} did not start again" for unit in start_clients(run, stopped, is_booting(run))]
    if applied:
        message = "applied: " + "; ".join(f"GPU {s['index']} {s['after']}" for s in steps)
        message += f" (but: {'; '.join(problems)})" if problems else ""
    else:
        message = "the layout could not be applied, MIG left disabled on the GPUs it changes: " + "; ".join(problems)
    return dict(status, ok=not problems, applied=applied, message=message, problems=problems)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv if argv is None else argv
    root = argv[1] if len(argv) > 1 else "/"
    if not os.path.exists(os.path.join(root, RECORD.lstrip("/"))):
        return 0
    try:
        status = reapply(root)
    except Exception as exc:  # one line for the journal, never a traceback at boot
        status = {"ok": False, "changed": False, "message": f"internal error ({type(exc).__name__}: {exc})"}
    try:
        os.makedirs(os.path.dirname(os.path.join(root, STATUS.lstrip("/"))), exist_ok=True)
        atomic_write(os.path.join(root, STATUS.lstrip("/")), json.dumps(status, sort_keys=True) + "\n", 0o644)
    except OSError as exc:
        sys.stderr.write(error_line(NAME, f"cannot write {STATUS}: {exc}"))
    if not status["ok"]:
        sys.stderr.write(error_line(NAME, status["message"]))
        return 1
    sys.stdout.write(f"{NAME}: {status['message']}\n")
    return 0
