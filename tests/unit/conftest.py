# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Unit tests of the code that runs on the targets: modules, module_utils (and the simulated fleet's pieces).

The collection is made importable by tests/conftest.py. Nothing here imports controller code
(``ansible.errors``, ``ansible.template``, a filter plugin...): importing it switches ansible-core into its
controller mode for the whole process, and then ``module.warn()`` goes to the controller's display instead
of the module's result. ansible-test runs module and module_utils unit tests apart from controller code for
the same reason; here the controller-side tests live in tests/controller and run in their own pytest
process (``make controller``).
"""

import os
import sys

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEBIAN_TREE = os.path.join(REPO_ROOT, ".cache", "debian-nvidia", "root")
# What importing controller code loads first (ansible-core sets its controller mode there).
_CONTROLLER_PACKAGE = "ansible._internal"


def pytest_collection_finish(session: pytest.Session) -> None:
    """Refuse a run that mixes these tests with controller code: the module tests would not see a target."""
    if _CONTROLLER_PACKAGE in sys.modules and any("tests/unit/" in item.nodeid for item in session.items):
        raise pytest.UsageError(
            "controller code was imported alongside tests/unit (a tests/controller test, or a unit test importing "
            "ansible.errors, ansible.template or a plugin): ansible-core then runs modules in controller mode. "
            "Run tests/unit and tests/controller as separate pytest processes (make unit; make controller)."
        )


@pytest.fixture(scope="session")
def debian_driver_tree():
    """``(root, version)`` of the real Debian 12 NVIDIA 535 userspace, extracted from Debian's own
    packages with its ld.so.cache written by the real ldconfig (see tests/tools/debian_driver_tree.py).
    Built once, then reused; needs Debian's package mirror the first time."""
    sys.path.insert(0, os.path.join(REPO_ROOT, "tests", "tools"))
    try:
        import debian_driver_tree as builder
    finally:
        sys.path.pop(0)
    return DEBIAN_TREE, builder.build(DEBIAN_TREE)


@pytest.fixture
def lock_holders(monkeypatch):
    """The PIDs of the host-lock holder processes a test starts (``hostlock.acquire`` wrapped to note them): ended and
    reaped after the test, whatever it left (the holders are this process's children)."""
    import contextlib
    import signal

    from ansible_collections.gpufleet.nvidia.plugins.module_utils.base import hostlock

    holders = []
    real_acquire = hostlock.acquire

    def acquire(*args, **kwargs):
        taken, holder = real_acquire(*args, **kwargs)
        if taken:
            holders.append(holder["pid"])
        return taken, holder

    monkeypatch.setattr(hostlock, "acquire", acquire)
    yield holders
    for pid in holders:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
