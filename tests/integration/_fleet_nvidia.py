# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The fleet and the signed stand-in repository of NVIDIA's toolkit, shared by ``test_toolkit_nvidia_provider.py``
and ``test_nvidia_adoption.py`` (fixture ``nvidia_fleet``): one bring-up and one repository build for both (CI time
is limited). Each file has its own node, so neither depends on what the other left:

* ``nv-bookworm`` (no engines; Debian's real apt 2.6 and gpgv): the ``nvidia`` provider through apt, its repository
  served on the node (``test_toolkit_nvidia_provider.py``);
* ``adopt-trixie`` (docker 26 with CDI, containerd 1.7, podman 5.4, Debian's driver userspace preinstalled): a host
  as NVIDIA's toolkit leaves it, taken over by ``site.yml`` and given back by ``uninstall.yml``
  (``test_nvidia_adoption.py``).

The repository (``tests/sim/apt_repo.py``): NVIDIA's four packages at both versions, signed with a key made for this
run, and under ``other/`` a copy signed by another key. conftest keeps the two files next to each other in a run and
takes the fleet down after the last test that uses it.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from tests.integration import _tomlkit
from tests.sim import apt_repo

BOOKWORM = "nv-bookworm"
TRIXIE = "adopt-trixie"
FLEET = {
    "nodes": [
        {"name": BOOKWORM, "suite": "bookworm", "driver_state": "loaded", "engines": [], "gpus": 1},
        {"name": TRIXIE, "suite": "trixie", "driver_state": "loaded", "driver_packages": True, "gpus": 1},
    ]
}
USERS = ("test_toolkit_nvidia_provider.py", "test_nvidia_adoption.py")


def build_repository(work: Path) -> apt_repo.Repo:
    """Both versions signed by this run's key, and the copy signed by another key under ``other/``."""
    repo = apt_repo.build(work / "mirror")
    other = apt_repo.build(work / "other", key_name="gpufleet other key")
    shutil.move(str(other.root / "libnvidia-container"), str(repo.root / "other" / "libnvidia-container"))
    return repo


def debs(repo: apt_repo.Repo, version: str) -> list[Path]:
    """The four packages at ``version``."""
    return sorted(repo.deb_dir.glob(f"*_{version}_*.deb"))


def install_tomlkit(node: Any) -> None:
    """tomlkit for the target's Python (``_tomlkit.py``), put there before a snapshot."""
    _tomlkit.install_tomlkit(node)
