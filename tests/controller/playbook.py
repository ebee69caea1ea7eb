# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The one way the controller tests run ``ansible-playbook``: this tree's collection, no colour, output captured."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
COLLECTIONS = str(REPO / ".cache" / "collections")
PLAYBOOK_BIN = Path(sys.executable).parent / "ansible-playbook"


def run_playbook(
    *args: str | os.PathLike, cwd: str | os.PathLike | None = None, collections: str = COLLECTIONS, **env: str
) -> subprocess.CompletedProcess:
    """``ansible-playbook *args`` with ``ANSIBLE_COLLECTIONS_PATH=collections`` and ``env`` added; never raises on
    a failed play (the tests read ``returncode``, ``stdout`` and ``stderr``)."""
    environ = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=collections, ANSIBLE_NOCOLOR="1", **env)
    return subprocess.run(
        [str(PLAYBOOK_BIN), *map(str, args)], capture_output=True, text=True, env=environ, cwd=cwd, check=False
    )
