# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Restarting an engine's systemd unit, and putting the previous configuration back when it does not return.

``restart_with_rollback`` restarts the unit, waits until the engine answers its probe, and when it does not
(within the timeout, or systemd reports the unit ``failed`` first) reads the unit's journal since the restart,
restores the previous files, restarts again and says whether the engine came back. Commands run through
``run_command(argv) -> (rc, stdout, stderr)`` (the module's), so it is tested without systemd.

Standard library only (target Pythons 3.8+).
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Callable, List, NamedTuple, Tuple

RunCommand = Callable[[List[str]], Tuple[int, str, str]]


class Outcome(NamedTuple):
    restarted: bool  # the engine answers with the new configuration
    engine_back: bool  # after a rollback: it answers with the old one
    journal: str  # after a rollback: what the unit said when it refused the new configuration


class Service:
    """One systemd unit and the command that tells it answers (``probe``; ``systemctl is-active`` without)."""

    def __init__(
        self,
        run_command: RunCommand,
        systemctl: str,
        unit: str,
        *,
        probe: list[str] | None = None,
        timeout: float = 60,
        journalctl: str | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.run_command = run_command
        self.systemctl = systemctl
        self.unit = unit
        self.probe = probe or [systemctl, "is-active", unit]
        self.timeout = timeout
        self.journalctl = journalctl
        self.sleep = sleep
        self.clock = clock

    def restart(self) -> None:
        # systemd refuses a start after a few in a short time (StartLimitBurst, 3 in 60s for docker 26 and later)
        # without ever running the engine: clear that counter so the engine itself judges the new configuration.
        self.run_command([self.systemctl, "reset-failed", self.unit])
        self.run_command([self.systemctl, "restart", self.unit])

    def wait(self) -> bool:
        """Whether the engine answers within the timeout."""
        deadline = self.clock() + self.timeout
        while True:
            rc, _out, _err = self.run_command(self.probe)
            if rc == 0:
                return True
            if self.clock() >= deadline:
                return False
            # A unit that systemd gave up on (no Restart=, or its start limit hit) will not answer: no use waiting
            # out the timeout. "activating" (an automatic restart pending) keeps us waiting.
            _rc, state, _err = self.run_command([self.systemctl, "is-active", self.unit])
            if state.strip() == "failed":
                return False
            self.sleep(1)

    def journal(self, since: int | None = None) -> str:
        """The unit's journal from ``since`` (seconds since the epoch) on: what the engine said."""
        if not self.journalctl:
            return "(no journalctl)"
        cmd = [self.journalctl, "-u", self.unit, "-n", "20", "--no-pager", "-o", "cat"]
        if since is not None:
            cmd += ["--since", f"@{since}"]
        _rc, out, _err = self.run_command(cmd)
        return out.strip()


def restart_with_rollback(
    service: Service, restore: Callable[[], None], now: Callable[[], float] = time.time
) -> Outcome:
    """Restart; when the engine does not answer, ``restore()`` the previous files and restart again."""
    since = int(now())
    service.restart()
    if service.wait():
        return Outcome(True, True, "")
    journal = service.journal(since)
    restore()
    service.restart()
    return Outcome(False, service.wait(), journal)


PENDING_DIR = "/run/gpufleet-nvidia/restart-pending"


class PendingRestart:
    """A mark that an engine's files were changed and its restart has not finished yet.

    Written before the files change and removed once the engine answers with them (or with the old ones, after a
    rollback). A run killed in between (SIGKILL, a lost connection) leaves the mark, and the next run, which finds
    the files already as it wants them, restarts the engine anyway instead of reporting no change while the engine
    still runs the previous configuration. The mark lives under ``/run`` (a tmpfs): after a reboot the engine has
    started with the files on disk, and the mark is gone with it.
    """

    def __init__(self, unit: str, directory: str | None = None) -> None:
        self.path = os.path.join(directory or PENDING_DIR, unit.replace("/", "_"))

    def set(self, files: list[str]) -> None:
        os.makedirs(os.path.dirname(self.path), 0o755, exist_ok=True)
        with open(self.path, "w", encoding="utf-8") as f:
            f.write("\n".join(files) + "\n")

    def __bool__(self) -> bool:
        return os.path.exists(self.path)

    def clear(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
