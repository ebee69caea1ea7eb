# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""CI cannot be green by skipping (a pytest plugin; tests/conftest.py loads it for every pytest run).

With ``CI=true`` (``.ci/run`` sets it), a skipped test fails, in every suite ``make test`` runs (unit, unit-py38,
controller, integration, faults: all of them sit under tests/conftest.py), unless ``tests/ci_allowed_skips.txt`` (or
the file named by ``GPUFLEET_CI_ALLOWED_SKIPS``) names it with the reason it cannot run in CI. That covers a
``skipif`` mark, a ``pytest.skip()`` in a test or a fixture, and a module that skips itself at import time
(``allow_module_level=True``, ``importorskip``). A test that needs a program skips without it on a developer's
machine and fails in CI: ``make setup`` (tests/tools/host_setup.sh) installs what the tests need. An xfail is not a
skip (its report carries ``wasxfail``) and is left as it is; a strict xfail that passes fails on its own. A test
deselected by ``-m`` or ``-k`` is not a skip either (no report: make integration and make faults split the folder so).

Run alone: ``python -m pytest -p ci_skips`` with ``tests/`` on ``PYTHONPATH``.
"""

from __future__ import annotations

import os

import pytest

ALLOWED_SKIPS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ci_allowed_skips.txt")


def allowed_skips(path: str | None = None) -> dict[str, str]:
    """``{node id or prefix: reason}`` from the allow-list; a line without `` -- <reason>`` is an error."""
    path = path or os.environ.get("GPUFLEET_CI_ALLOWED_SKIPS") or ALLOWED_SKIPS_FILE
    allowed: dict[str, str] = {}
    with open(path, encoding="utf-8") as f:
        for number, raw in enumerate(f, 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            prefix, sep, reason = line.partition(" -- ")
            if not sep or not prefix.strip() or not reason.strip():
                raise pytest.UsageError(f"{path}:{number}: want '<node id or prefix> -- <reason>', got {line!r}")
            allowed[prefix.strip()] = reason.strip()
    return allowed


def is_allowed(nodeid: str, allowed: dict[str, str]) -> bool:
    """The node id is an entry, or lies under one (a file, a folder ending in ``/``, a ``file::Class``)."""
    return any(
        nodeid == entry or nodeid.startswith(entry if entry.endswith("/") else entry + "::") for entry in allowed
    )


def _strict() -> bool:
    return os.environ.get("CI") == "true"


def _as_failure(report, nodeid: str) -> None:
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    report.outcome = "failed"
    report.longrepr = (
        f"CI=true: {nodeid} was skipped ({reason}), and CI must run every test. Give the CI machine what the test "
        "needs (a Debian package: tests/tools/host_setup.sh, which make setup runs), or name it in "
        "tests/ci_allowed_skips.txt with the reason it cannot run in CI."
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if (
        _strict()
        and report.skipped
        and not hasattr(report, "wasxfail")
        and not is_allowed(item.nodeid, allowed_skips())
    ):
        _as_failure(report, item.nodeid)


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    report = outcome.get_result()
    if _strict() and report.skipped and not is_allowed(report.nodeid, allowed_skips()):
        _as_failure(report, report.nodeid)
