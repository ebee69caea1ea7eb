# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""runtime/service: restart an engine's unit, and roll back when it does not come back."""

from ansible_collections.gpufleet.nvidia.plugins.module_utils.runtime.service import Service, restart_with_rollback


class Unit:
    """systemctl/journalctl/probe as an engine shows them; ``healthy()`` says whether the current files work."""

    def __init__(self, healthy, states=("failed",)):
        self.healthy = healthy
        self.states = list(states)
        self.calls = []
        self.clock = 0.0

    def run(self, cmd):
        self.calls.append(cmd)
        if cmd[0] == "probe":
            return (0, "", "") if self.healthy() else (1, "", "down")
        if cmd[:2] == ["systemctl", "is-active"]:
            state = self.states.pop(0) if len(self.states) > 1 else self.states[0]
            return (0 if state == "active" else 3), state + "\n", ""
        if cmd[0] == "journalctl":
            return 0, "level=fatal msg=bad config\n", ""
        return 0, "", ""

    def sleep(self, seconds):
        self.clock += seconds


def _service(unit, timeout=30):
    return Service(
        unit.run,
        "systemctl",
        "docker",
        probe=["probe"],
        timeout=timeout,
        journalctl="journalctl",
        sleep=unit.sleep,
        clock=lambda: unit.clock,
    )


def test_a_healthy_restart_clears_the_start_limit_first_and_does_not_roll_back():
    unit = Unit(lambda: True)
    restored = []
    outcome = restart_with_rollback(_service(unit), lambda: restored.append(1), now=lambda: 1700000000)
    assert outcome.restarted and outcome.engine_back and not restored
    assert unit.calls[:3] == [["systemctl", "reset-failed", "docker"], ["systemctl", "restart", "docker"], ["probe"]]


def test_a_failed_unit_is_rolled_back_at_once_with_the_journal_since_the_restart():
    files = {"good": False}
    unit = Unit(lambda: files["good"])
    outcome = restart_with_rollback(_service(unit), lambda: files.update(good=True), now=lambda: 1700000000)
    assert not outcome.restarted and outcome.engine_back
    assert outcome.journal == "level=fatal msg=bad config"
    assert unit.clock == 0  # systemd said failed: the timeout was not waited out
    journal = next(c for c in unit.calls if c[0] == "journalctl")
    assert journal[-2:] == ["--since", "@1700000000"]
    restarts = [c for c in unit.calls if c[:2] == ["systemctl", "restart"]]
    assert len(restarts) == 2


def test_activating_keeps_waiting_until_the_timeout_then_rolls_back_and_reports_not_back():
    unit = Unit(lambda: False, states=["activating"])
    outcome = restart_with_rollback(_service(unit, timeout=5), lambda: None, now=lambda: 0)
    assert not outcome.restarted and not outcome.engine_back
    assert unit.clock >= 5  # waited the timeout (twice: the new files, then the restored ones)


def test_without_a_probe_systemd_decides_and_without_journalctl_it_says_so():
    unit = Unit(lambda: True, states=["active"])
    service = Service(unit.run, "systemctl", "crio", sleep=unit.sleep, clock=lambda: unit.clock)
    assert service.probe == ["systemctl", "is-active", "crio"] and service.wait()
    assert service.journal(1) == "(no journalctl)"
