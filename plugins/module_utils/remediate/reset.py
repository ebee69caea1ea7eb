# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The ``gpu_reset`` module's work: reset GPUs with ``nvidia-smi -r`` when no process holds a GPU.

``nvidia-smi --gpu-reset`` (``-r``) with ``-i`` is NVIDIA's way to reset chosen GPUs, "typically useful if a double
bit ECC error has occurred"; it requires root, and "there can't be any applications using these devices ... There also
can't be any compute applications running on any other GPU in the system"; after it "the health of each reset GPU
[should] be verified before further use" (nvidia-smi(1), section ``-r, --gpu-reset``, as shipped in Debian's
nvidia-smi 535.261.03 package; read 2026-11-28). A reset clears the volatile ECC counts and makes a pending row remap
or page retirement take effect (NVIDIA's "GPU Memory Error Management",
https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/, read 2026-11-28). The GPU is named by its UUID, which
``-i`` accepts and which, unlike the index, does not change.

Before the reset NVIDIA's services that hold every GPU while they run (``discovery.gpu_clients``: the persistence
daemon, Fabric Manager, NVSM, DCGM) are stopped, last first, when ``stop_clients`` (the default), and started again
after it whatever happened, as mig-parted does around a MIG mode change. Then the processes holding any GPU's device
file (``/dev/nvidia<N>``, discovery's ``gpu_users``) are read: any one (but those in ``ignore``) refuses the reset,
naming each. Standard library only (Python 3.8+).
"""

from __future__ import annotations

import os
from typing import Any

from ..base.runner import Failure, Host, Result
from ..discovery.gpu_clients import active_clients, start_clients, stop_clients
from ..discovery.gpu_users import command_in, gpu_users

DEFAULT_COMMAND = ["nvidia-smi", "-r", "-i", "{uuid}"]


class ResetRequest:
    def __init__(
        self, gpus: list[dict[str, Any]], command: list[str], ignore: list[str], root: str, stop: bool = True
    ) -> None:
        self.gpus = gpus
        self.command = command
        self.ignore = ignore
        self.root = root
        self.stop_clients = stop

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> ResetRequest:
        gpus = []
        for gpu in params["gpus"]:
            if not gpu.get("uuid") or gpu.get("minor") is None:
                raise Failure(f"gpu_reset: each of gpus needs uuid and minor (from gpu_facts), got {gpu!r}")
            gpus.append({"uuid": gpu["uuid"], "minor": int(gpu["minor"]), "pci_bus_id": gpu.get("pci_bus_id")})
        if "{uuid}" not in " ".join(params["command"]):
            raise Failure("gpu_reset: command must name the GPU with {uuid}, such as [nvidia-smi, -r, -i, '{uuid}']")
        return cls(
            gpus, list(params["command"]), list(params["ignore"]), params["root"], params.get("stop_clients", True)
        )


class ResetResult(Result):
    def __init__(
        self,
        changed: bool,
        reset: list[str],
        holders: list[dict[str, Any]],
        commands: list[list[str]],
        clients: list[str] | None = None,
    ):
        self.changed = changed
        self.reset = reset
        self.holders = holders
        self.commands = commands
        self.clients_stopped = clients or []


def _gpu_device(path: str) -> bool:
    return path.startswith("/dev/nvidia") and path[len("/dev/nvidia") :].isdigit()


def holders_of(users: dict[str, Any], ignore: list[str]) -> list[dict[str, Any]]:
    """The processes of ``users`` (``gpu_users``) holding a GPU's device file (any GPU: nvidia-smi -r wants no
    compute application on any GPU of the system), but those named in ``ignore``."""
    return [
        p
        for p in users.get("processes") or []
        if any(_gpu_device(d) for d in p.get("devices") or ()) and not command_in(p.get("command"), ignore)
    ]


def describe(process: dict[str, Any]) -> str:
    container = process.get("container") or {}
    where = f" in {container.get('engine')} container {container.get('id')}" if container.get("id") else ""
    return (
        f"pid {process.get('pid')} ({process.get('command')}{where}) holding {', '.join(process.get('devices') or [])}"
    )


def run_reset(req: ResetRequest, host: Host) -> ResetResult:
    """Stop the GPU's clients (``stop_clients``), refuse while a process holds a GPU, reset each GPU; the clients
    stopped are started again on every way out."""
    uuids = [g["uuid"] for g in req.gpus]
    commands = [[part.replace("{uuid}", u) for part in req.command] for u in uuids]

    def run(argv: Any) -> int:
        return host.run_command(list(argv))[0]

    if not req.gpus:
        return ResetResult(False, [], [], commands)
    if host.check_mode:
        clients = active_clients(run) if req.stop_clients else []
        holders = holders_of(_users(req), req.ignore + [_command_of(u) for u in clients])
        _refuse(uuids, holders)
        return ResetResult(True, uuids, [], commands, clients)
    stopped: list[str] = []
    try:
        if req.stop_clients:
            stopped, refused = stop_clients(run)
            if refused:
                raise Failure(
                    f"not resetting {', '.join(uuids)}: {', '.join(refused)} would not stop (systemctl stop); stop it "
                    "by hand, or set stop_clients=false and name its command in ignore where your driver resets with "
                    "it running",
                    reset=[],
                    clients_stopped=stopped,
                )
        _refuse(uuids, holders_of(_users(req), req.ignore))
        for uuid, argv in zip(uuids, commands):
            rc, out, err = host.run_command(argv)
            if rc != 0:
                raise Failure(
                    f"{' '.join(argv)} failed (rc {rc}): {(err or out).strip()[:400]}. The GPU {uuid} was not reset; "
                    "reboot the host to recover it",
                    rc=rc,
                    stdout=out,
                    stderr=err,
                    reset=uuids[: uuids.index(uuid)],
                    clients_stopped=stopped,
                )
    finally:
        not_started = start_clients(run, stopped) if stopped else []
    if not_started:
        raise Failure(
            f"reset {', '.join(uuids)}, but {', '.join(not_started)} did not start again: 'systemctl status "
            f"{not_started[0]}' says why; start it before returning the host to service",
            reset=uuids,
            clients_stopped=stopped,
        )
    return ResetResult(True, uuids, [], commands, stopped)


def _users(req: ResetRequest) -> dict[str, Any]:
    return gpu_users(req.root, exclude_pids=(os.getpid(),) if os.path.abspath(req.root) == "/" else ())


def _command_of(unit: str) -> str:
    """The process name a client unit runs (``nvidia-persistenced.service`` -> ``nvidia-persistenced``), for check
    mode, where the client still runs but would be stopped first."""
    return {"dcgm.service": "nv-hostengine", "nvidia-dcgm.service": "nv-hostengine"}.get(unit, unit.rsplit(".", 1)[0])


def _refuse(uuids: list[str], holders: list[dict[str, Any]]) -> None:
    if holders:
        raise Failure(
            f"not resetting {', '.join(uuids)}: {'; '.join(describe(p) for p in holders)}. Drain the host first "
            "(gpufleet.nvidia.drain) or stop these processes; the reset needs a GPU nobody holds",
            holders=holders,
            reset=[],
        )
