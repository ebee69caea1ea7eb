# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""tests/ci_skips.py: with CI=true a skipped test, in any suite, fails unless the allow-list names it; xfail stays.

Each case runs a real pytest in a throwaway folder with the plugin loaded (``-p ci_skips``), as CI would: a tests/
tree with an integration folder, a unit folder (a test that needs a program this machine has not) and a controller
folder (a module that skips itself at import), none of the last two marked integration."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))
try:
    import ci_skips
finally:
    sys.path.pop(0)

SAMPLE = """
import pytest

pytestmark = pytest.mark.integration


@pytest.mark.skipif(True, reason="needs root, dockerd, runc and gcc")
def test_marked_skip():
    pass


@pytest.fixture
def engine():
    pytest.skip("no Docker engine answers")


def test_fixture_skip(engine):
    pass


@pytest.mark.xfail(strict=True, reason="podman 4.3 rejects cdiVersion 0.6.0")
def test_known_failure():
    assert False


def test_runs():
    pass
"""

MODULE_SKIP = """
import pytest

pytest.skip("no cluster given", allow_module_level=True)


def test_cluster():
    pass
"""


UNIT_SAMPLE = """
import shutil

import pytest


@pytest.mark.skipif(not shutil.which("gpufleet-no-such-program"), reason="needs gpufleet-no-such-program (Debian's x)")
def test_needs_a_program():
    pass


def test_runs():
    pass
"""

CONTROLLER_SAMPLE = """
import pytest

pytest.importorskip("gpufleet_no_such_module")


def test_filter():
    pass
"""

INTEGRATION_ALLOWED = (
    "tests/integration/test_cluster.py -- needs a live cluster\n"
    "tests/integration/test_sample.py::test_marked_skip -- needs a machine CI has not\n"
    "tests/integration/test_sample.py::test_fixture_skip -- needs an engine CI has not\n"
)
OTHERS_ALLOWED = (
    "tests/unit/test_program.py::test_needs_a_program -- needs a program no Debian package has\n"
    "tests/controller/ -- needs a module CI has not\n"
)


def _pytest(tmp_path: Path, ci: bool, allowed: str = "", *args: str) -> subprocess.CompletedProcess:
    folder = tmp_path / "tests" / "integration"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "test_sample.py").write_text(SAMPLE)
    (folder / "test_cluster.py").write_text(MODULE_SKIP)
    (tmp_path / "tests" / "unit").mkdir(exist_ok=True)
    (tmp_path / "tests" / "unit" / "test_program.py").write_text(UNIT_SAMPLE)
    (tmp_path / "tests" / "controller").mkdir(exist_ok=True)
    (tmp_path / "tests" / "controller" / "test_filters.py").write_text(CONTROLLER_SAMPLE)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n  integration: needs the fleet\n")
    (tmp_path / "allowed.txt").write_text("# allow-list\n" + allowed)
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_ADDOPTS")}
    env.update(PYTHONPATH=str(TESTS), GPUFLEET_CI_ALLOWED_SKIPS=str(tmp_path / "allowed.txt"))
    if ci:
        env["CI"] = "true"
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "ci_skips",
        "-p",
        "no:cacheprovider",
        "-rA",
        "--continue-on-collection-errors",
        "-c",
        "pytest.ini",
        *args,
    ]
    return subprocess.run([*cmd, "tests"], cwd=tmp_path, env=env, capture_output=True, text=True, check=False)


SKIPS = (
    ("tests/integration/test_sample.py::test_marked_skip", "needs root, dockerd, runc and gcc"),
    ("tests/integration/test_sample.py::test_fixture_skip", "no Docker engine answers"),
    ("tests/integration/test_cluster.py", "no cluster given"),
    ("tests/unit/test_program.py::test_needs_a_program", "needs gpufleet-no-such-program (Debian's x)"),
    ("tests/controller/test_filters.py", "could not import 'gpufleet_no_such_module'"),
)


def test_without_ci_skips_are_skips(tmp_path: Path) -> None:
    proc = _pytest(tmp_path, ci=False)
    assert proc.returncode == 0, proc.stdout
    assert "2 passed, 5 skipped, 1 xfailed" in proc.stdout


@pytest.mark.parametrize("workers", [(), ("-n", "2")], ids=["one-process", "xdist"])
def test_under_ci_every_skip_in_every_folder_fails_naming_the_test_and_the_fix(tmp_path: Path, workers) -> None:
    proc = _pytest(tmp_path, True, "", *workers)
    assert proc.returncode == 1, proc.stdout
    assert "2 passed, 1 xfailed, 5 errors" in proc.stdout, proc.stdout
    for nodeid, reason in SKIPS:
        assert f"CI=true: {nodeid} was skipped (" in proc.stdout, proc.stdout
        assert reason in proc.stdout
    assert "tests/ci_allowed_skips.txt" in proc.stdout


def test_under_ci_an_allowed_skip_stays_a_skip(tmp_path: Path) -> None:
    proc = _pytest(tmp_path, ci=True, allowed=INTEGRATION_ALLOWED + OTHERS_ALLOWED)
    assert proc.returncode == 0, proc.stdout
    assert "2 passed, 5 skipped, 1 xfailed" in proc.stdout


def test_under_ci_only_the_unlisted_skips_fail(tmp_path: Path) -> None:
    """Listed skips stay skips in the same run in which a unit and a controller skip, not listed, fail it."""
    proc = _pytest(tmp_path, ci=True, allowed=INTEGRATION_ALLOWED)
    assert proc.returncode == 1, proc.stdout
    assert "2 passed, 3 skipped, 1 xfailed, 2 errors" in proc.stdout, proc.stdout
    for nodeid, _reason in SKIPS[:3]:
        assert f"CI=true: {nodeid} was skipped" not in proc.stdout
    for nodeid, _reason in SKIPS[3:]:
        assert f"CI=true: {nodeid} was skipped (" in proc.stdout


def test_every_suite_loads_the_rule(pytestconfig) -> None:
    """tests/conftest.py, above tests/unit, tests/controller and tests/integration, hands pytest the plugin's hooks:
    this run (make unit, make unit-py38) has them, and so has every other pytest run under tests/."""
    conftest = pytestconfig.pluginmanager.get_plugin(str(TESTS / "conftest.py"))
    assert conftest is not None, [getattr(p, "__file__", p) for p in pytestconfig.pluginmanager.get_plugins()]
    for hook in ("pytest_runtest_makereport", "pytest_make_collect_report"):
        code = getattr(conftest, hook).__code__  # the same file, loaded under a module name of its own
        assert (code.co_filename, code.co_firstlineno) == (
            ci_skips.__file__,
            getattr(ci_skips, hook).__code__.co_firstlineno,
        )


def test_an_entry_without_a_reason_is_refused(tmp_path: Path) -> None:
    proc = _pytest(tmp_path, ci=True, allowed="tests/integration/test_cluster.py\n")
    assert proc.returncode != 0
    assert "want '<node id or prefix> -- <reason>'" in proc.stdout + proc.stderr


@pytest.mark.parametrize(
    ("nodeid", "allowed"),
    [
        ("tests/integration/test_a.py", True),
        ("tests/integration/test_a.py::test_x", True),
        ("tests/integration/test_a.py::test_x[1]", True),
        ("tests/integration/test_ab.py::test_x", False),
        ("tests/integration/test_b.py::test_x", False),
    ],
)
def test_entries_match_a_node_or_what_lies_under_it(nodeid: str, allowed: bool) -> None:
    assert ci_skips.is_allowed(nodeid, {"tests/integration/test_a.py": "why"}) is allowed


def test_the_allow_list_names_existing_files_each_with_a_reason() -> None:
    entries = ci_skips.allowed_skips(ci_skips.ALLOWED_SKIPS_FILE)
    assert entries, "the allow-list is empty: remove the file's mention from the docs, or keep the cluster test"
    for entry, reason in entries.items():
        assert (TESTS.parent / entry.split("::")[0]).is_file(), entry
        assert len(reason) > 20, (entry, reason)
