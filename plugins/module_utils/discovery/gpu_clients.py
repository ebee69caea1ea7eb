# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The GPU's system clients: NVIDIA's services that hold every GPU while they run, stopped around a change that needs
the GPUs free (a MIG mode change, a GPU reset) and started again after it.

The list and the order are NVIDIA mig-parted's (deployments/systemd/hooks.sh at commit 0a6734e6 and service.sh at
219e780d, read 2026-11-27: its driver_services are nvsm and nvidia-dcgm, stopped in reverse and started in order),
with NVIDIA's persistence daemon and Fabric Manager first and ``dcgm.service``, DCGM's unit name in its own packages.
``run`` is the caller's way to run a command (its exit status). Standard library only (Python 3.8+).
"""

from __future__ import annotations

from typing import Callable, Sequence

# The GPU's clients, in the order they start.
CLIENTS = (
    "nvidia-persistenced.service",
    "nvidia-fabricmanager.service",
    "nvsm.service",
    "nvidia-dcgm.service",
    "dcgm.service",
)

Run = Callable[[Sequence[str]], int]


def active_clients(run: Run) -> list[str]:
    """The clients running now, in ``CLIENTS``' order (reads only: check mode may ask)."""
    return [unit for unit in CLIENTS if run(["systemctl", "is-active", "--quiet", unit]) == 0]


def stop_clients(run: Run) -> tuple[list[str], list[str]]:
    """The active clients stopped, last first: (stopped, those that would not stop)."""
    stopped, failed = [], []
    for unit in reversed(active_clients(run)):
        (stopped if run(["systemctl", "stop", unit]) == 0 else failed).append(unit)
    return stopped, failed


def start_clients(run: Run, units: Sequence[str], booting: bool = False) -> list[str]:
    """``units`` started again in ``CLIENTS``' order (``--no-block`` while the system boots); those that failed."""
    extra = ["--no-block"] if booting else []
    return [u for u in CLIENTS if u in units and run(["systemctl", "start", *extra, u]) != 0]
