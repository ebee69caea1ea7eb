# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""base.hostlock: one run at a time on a host, with real holder processes and real flocks."""

import contextlib
import os
import signal
import time

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.base import hostlock


@pytest.fixture
def lock(tmp_path):
    path = str(tmp_path / "run" / "site.lock")
    holders = []

    def take(owner, timeout=0, lease=30):
        taken, holder = hostlock.acquire(path, owner, timeout, lease)
        if taken:
            holders.append(holder["pid"])
        return taken, holder

    yield path, take
    for pid in holders:  # end what a failed test left running, and reap it (the holders are our children here)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)


def _gone(pid, within=5.0):
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        done, _status = os.waitpid(pid, os.WNOHANG)
        if done:
            return True
        time.sleep(0.05)
    return False


def test_taken_once_per_owner_refused_to_another_with_the_holder_named(lock):
    path, take = lock
    taken, holder = take("run-a")
    assert taken and holder["owner"] == "run-a" and holder["lease_until"] - holder["started"] == 30
    assert hostlock.read_holder(path) == holder
    assert take("run-a") == (False, holder)  # a later play of the same run
    start = time.monotonic()
    with pytest.raises(hostlock.LockBusy) as exc:
        take("run-b", timeout=1)
    assert time.monotonic() - start >= 1
    msg = str(exc.value)
    assert path in msg and f"PID {holder['pid']}" in msg and "'run-a'" in msg and f"kill {holder['pid']}" in msg
    assert "gpufleet_lock_timeout" in msg


def test_release_only_by_its_owner_then_free(lock):
    path, take = lock
    _taken, holder = take("run-a")
    assert hostlock.release(path, "run-b") == (False, holder)
    assert os.kill(holder["pid"], 0) is None  # still there
    assert hostlock.release(path, "run-a") == (True, holder)
    assert _gone(holder["pid"])
    assert take("run-b")[0]
    assert hostlock.release(str(os.path.dirname(path)) + "/none.lock", "run-a") == (False, {})


def test_a_killed_holder_or_an_ended_lease_frees_the_lock(lock):
    _path, take = lock
    _taken, holder = take("run-a")
    os.kill(holder["pid"], signal.SIGKILL)
    assert _gone(holder["pid"])
    taken, second = take("run-b", lease=1)
    assert taken
    assert _gone(second["pid"], within=5)  # the lease ends: the holder leaves by itself
    assert take("run-c")[0]


def test_a_waiting_run_gets_the_lock_when_it_is_released(lock):
    _path, take = lock
    _taken, holder = take("run-a", lease=2)
    taken, second = take("run-b", timeout=10)
    assert taken and second["owner"] == "run-b"
    assert _gone(holder["pid"])


def test_unreadable_holder_description_reads_empty(tmp_path):
    bad = tmp_path / "site.lock"
    bad.write_text("[1, 2]")
    assert hostlock.read_holder(str(bad)) == {}
    bad.write_text("{")
    assert hostlock.read_holder(str(bad)) == {}
    assert hostlock.read_holder(str(tmp_path / "missing")) == {}
    assert "owner '?'" in hostlock.busy_message(str(bad), {}, 3)
