# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Fixtures for tests that need the simulated GPU fleet (tests/sim). Mark such tests
`@pytest.mark.integration`; they are skipped, with a message, when no Docker engine answers
(and fail instead when CI=true).

Fixtures:
* `sim_fleet` (session): the default fleet (tests/sim/fleets/default.yml) brought up once under a
  prefix unique to this run (`gf<pid>-<random>`, or $GPUFLEET_SIM_PREFIX), torn down at the end
  (kept when GPUFLEET_SIM_KEEP=1). A `tests.sim.fleet.Fleet`: `.nodes`, `.node(name)`,
  `.inventory` (Path), `.prefix`.
* `sim_node(name)`: a function -> `Node` of the default fleet: `.run(cmd) -> Result(rc, stdout,
  stderr)`, `.put(path, content)`, `.config` (the node's gpus.json), `.desc`, `.gpus`, `.container`.
* `sim_inventory`: Path of the default fleet's Ansible inventory (groups gpu_nodes, cpu_nodes).
* `ansible_playbook`: a function (playbook, *extra_args, inventory=None, limit=None) ->
  CompletedProcess, running ansible-playbook from the repo's toolchain against the default fleet's
  inventory (or the one given).
* `sim_fleet_factory`: a function (fleet dict or YAML path, name=None) -> Fleet, brought up now
  and torn down at the end of the session, for tests that need their own nodes.
* `converged_fleet` (session): the fleet one full ``site.yml`` with defaults converged (``_fleet_converged.py``:
  bookworm, trixie and sid GPU nodes, a trixie Kubernetes node and a CPU-only node), shared by `test_cri_pods.py`,
  `test_guide_commands.py`, `test_stages_alone.py` and `test_ee_runner.py`.
* `nvidia_fleet` (session): NVIDIA's toolkit's fleet (`_fleet_nvidia.py`: a bookworm node without engines for the
  `nvidia` provider through apt, a trixie node for taking a host over from NVIDIA's toolkit and giving it back) with
  the signed stand-in repository (`.repo`), shared by `test_toolkit_nvidia_provider.py` and
  `test_nvidia_adoption.py`, down after the last of them.
* `e2e_fleet` (session): the end-to-end GPU fleet (`_fleet_e2e.py`: bookworm, trixie and sid nodes with
  Debian's NVIDIA userspace, the host programs installed from this tree, the CDI spec written and the
  shim registered with docker, `gpufleet-sim/mini:latest` in every engine), shared by
  `test_cdi_e2e.py` and `test_security_e2e.py`; `.timings` has its bring-up and preparation times.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.integration import _fleet_converged, _fleet_e2e, _fleet_nvidia  # noqa: E402
from tests.sim.fleet import Fleet, Node, down  # noqa: E402

DEFAULT_FLEET = ROOT / "tests" / "sim" / "fleets" / "default.yml"


def _engine_answers() -> bool:
    if not shutil.which("docker"):
        return False
    try:
        return subprocess.run(["docker", "info"], check=False, capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _nvidia_fleet_users_together(items: list[pytest.Item]) -> None:
    """The files of the shared ``nvidia_fleet`` run one after the other (where the first of them would), so that the
    fleet goes down after the last of them, not at the end of the session."""
    users = [i for i in items if i.path.name in _fleet_nvidia.USERS]
    if not users:
        return
    first = items.index(users[0])
    rest = [i for i in items if i.path.name not in _fleet_nvidia.USERS]
    users.sort(key=lambda i: _fleet_nvidia.USERS.index(i.path.name))  # stable: each file's own order stays
    items[:] = rest[:first] + users + rest[first:]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _nvidia_fleet_users_together(items)
    wanted = [i for i in items if i.get_closest_marker("integration")]
    if not wanted or _engine_answers():
        return
    if os.environ.get("CI") == "true":
        raise pytest.UsageError("integration tests: no Docker engine answers, and CI must run them")
    skip = pytest.mark.skip(reason="no Docker engine answers (start dockerd to run the simulated fleet)")
    for item in wanted:
        item.add_marker(skip)


# Wall time per test file (setup, call and teardown of its tests; a shared session fleet counts where it is first
# used), printed at the end: CI's time budget is spent per file, and this says where.
_FILE_SECONDS: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path = report.nodeid.split("::", 1)[0]
    _FILE_SECONDS[path] = _FILE_SECONDS.get(path, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _FILE_SECONDS:
        return
    terminalreporter.section("seconds per test file")
    for path, seconds in sorted(_FILE_SECONDS.items(), key=lambda kv: -kv[1]):
        terminalreporter.write_line(f"{seconds:8.1f}  {path}")
    terminalreporter.write_line(f"{sum(_FILE_SECONDS.values()):8.1f}  in all")


_PREFIX = os.environ.get("GPUFLEET_SIM_PREFIX") or f"gf{os.getpid()}-{secrets.token_hex(2)}"
_KEEP = os.environ.get("GPUFLEET_SIM_KEEP") == "1"


@pytest.fixture(scope="session")
def sim_fleet() -> Any:
    fleet = Fleet.from_file(DEFAULT_FLEET, prefix=_PREFIX)
    try:
        fleet.up()
        yield fleet
    finally:
        if not _KEEP:
            fleet.down()


@pytest.fixture(scope="session")
def sim_node(sim_fleet: Fleet) -> Callable[[str], Node]:
    return sim_fleet.node


@pytest.fixture(scope="session")
def sim_inventory(sim_fleet: Fleet) -> Path:
    return sim_fleet.inventory


def _ansible_playbook(
    inventory: Path, playbook: str | Path, *args: str, limit: str | None = None
) -> subprocess.CompletedProcess:
    cmd = [str(ROOT / ".venv" / "bin" / "ansible-playbook"), "-i", str(inventory)]
    if limit:
        cmd += ["--limit", limit]
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".cache" / "collections"), ANSIBLE_FORCE_COLOR="0")
    return subprocess.run([*cmd, *args, str(playbook)], check=False, capture_output=True, text=True, cwd=ROOT, env=env)


@pytest.fixture(scope="session")
def ansible_playbook(sim_fleet: Fleet) -> Callable[..., subprocess.CompletedProcess]:
    def run(
        playbook: str | Path, *args: str, inventory: Path | None = None, limit: str | None = None
    ) -> subprocess.CompletedProcess:
        return _ansible_playbook(inventory or sim_fleet.inventory, playbook, *args, limit=limit)

    return run


# Fleets the session fixtures share across test files; every other fleet goes down with the file that made it.
SHARED_FLEETS = ("e2e", "converged", "nvidia")
_MADE: list[Fleet] = []


@pytest.fixture(scope="session")
def sim_fleet_factory() -> Any:
    def make(description: dict[str, Any] | str | Path, name: str | None = None) -> Fleet:
        prefix = f"{_PREFIX}-{name or len(_MADE)}"
        if isinstance(description, dict):
            fleet = Fleet.from_dict(description, prefix=prefix)
        else:
            fleet = Fleet.from_file(description, prefix=prefix)
        fleet.shared = name in SHARED_FLEETS
        _MADE.append(fleet)
        return fleet.up()

    try:
        yield make
    finally:
        if not _KEEP:
            for fleet in _MADE:
                down(fleet.prefix)
            _MADE.clear()


@pytest.fixture(scope="module", autouse=True)
def _fleets_of_this_file_go_down() -> Any:
    """A file's own fleets go down when the file is done (its module fixtures are finalised before this one), not at
    the end of the session: a dozen nodes booted at once exhaust the host (inotify instances, memory), and a node
    started then does not boot."""
    before = len(_MADE)
    yield
    if _KEEP:
        return
    for fleet in [f for f in _MADE[before:] if not f.shared]:
        down(fleet.prefix)
        _MADE.remove(fleet)


@pytest.fixture(scope="session")
def e2e_fleet(sim_fleet_factory: Callable[..., Fleet], tmp_path_factory: pytest.TempPathFactory) -> Fleet:
    """The end-to-end GPU fleet (see ``_fleet_e2e.py``), up and prepared once per session.

    Needs gcc here (the libcuda probe); the default fleet is not brought up for it.
    """
    if not shutil.which("gcc"):
        pytest.skip("needs gcc to build the libcuda probe of the e2e fleet")
    start = time.monotonic()
    fleet = sim_fleet_factory(_fleet_e2e.E2E_FLEET, name="e2e")

    def run(playbook: str | Path, *args: str, inventory: Path | None = None, limit: str | None = None):
        return _ansible_playbook(inventory or fleet.inventory, playbook, *args, limit=limit)

    fleet.timings.update(_fleet_e2e.prepare(fleet, run, tmp_path_factory.mktemp("e2e-fleet")))
    fleet.timings["total"] = time.monotonic() - start
    print(
        "[e2e] fleet {} ready in {:.0f}s (images {:.0f}s, up {:.0f}s, nodes {:.0f}s, playbook {:.0f}s)".format(
            fleet.prefix, *(fleet.timings.get(k, 0.0) for k in ("total", "images", "up", "nodes", "playbook"))
        ),
        file=sys.stderr,
    )
    return fleet


@pytest.fixture(scope="session")
def converged_fleet(sim_fleet_factory, tmp_path_factory):
    """The fleet one full site.yml with defaults converged (``_fleet_converged.py``)."""
    fleet = sim_fleet_factory(_fleet_converged.FLEET, name="converged")
    _fleet_converged.converge(fleet, tmp_path_factory.mktemp("converged"))
    return fleet


_NVIDIA_FLEET: list[Fleet] = []


@pytest.fixture(scope="session")
def nvidia_fleet(sim_fleet_factory, tmp_path_factory):
    """The two nodes and the signed stand-in repository of ``_fleet_nvidia.py`` (``.repo``), shared by
    ``test_toolkit_nvidia_provider.py`` and ``test_nvidia_adoption.py``."""
    if not shutil.which("gpg") or not shutil.which("dpkg-deb"):
        pytest.skip("needs gpg and dpkg-deb here to build the signed stand-in repository")
    start = time.monotonic()
    repo = _fleet_nvidia.build_repository(tmp_path_factory.mktemp("nvidia-fleet"))
    fleet = sim_fleet_factory(_fleet_nvidia.FLEET, name="nvidia")
    fleet.repo = repo
    _NVIDIA_FLEET.append(fleet)
    print(f"[nvidia] fleet {fleet.prefix} and repository ready in {time.monotonic() - start:.0f}s", file=sys.stderr)
    return fleet


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """After the last test of the ``nvidia_fleet`` files (they run together), its fleet goes down."""
    if not _NVIDIA_FLEET or _KEEP or item.path.name not in _fleet_nvidia.USERS:
        return
    if nextitem is not None and nextitem.path.name in _fleet_nvidia.USERS:
        return
    fleet = _NVIDIA_FLEET.pop()
    down(fleet.prefix)
    if fleet in _MADE:
        _MADE.remove(fleet)
