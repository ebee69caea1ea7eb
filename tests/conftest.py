# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Makes the working tree importable as ``ansible_collections.gpufleet.nvidia``, for every test folder.

``make setup`` links the repository in as ``.cache/collections/ansible_collections/gpufleet/nvidia``;
putting ``.cache/collections`` first on ``sys.path`` lets the tests import the working tree's code
exactly as ansible-core will, with no copy anywhere. tests/unit, tests/controller and tests/integration
all sit under this file, so they share the one setup.
"""

import importlib.util
import os
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLECTIONS = os.path.join(REPO_ROOT, ".cache", "collections")
_LINK = os.path.join(COLLECTIONS, "ansible_collections", "gpufleet", "nvidia")

if not os.path.isdir(_LINK):
    os.makedirs(os.path.dirname(_LINK), exist_ok=True)
    os.symlink(os.path.join("..", "..", "..", ".."), _LINK)
if COLLECTIONS not in sys.path:
    sys.path.insert(0, COLLECTIONS)

# CI=true: a skipped test fails unless tests/ci_allowed_skips.txt allows it (tests/ci_skips.py), in every suite: unit,
# unit-py38, controller, integration and faults all run under this file.
_spec = importlib.util.spec_from_file_location("gpufleet_ci_skips", os.path.join(REPO_ROOT, "tests", "ci_skips.py"))
_ci_skips = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_ci_skips)
pytest_runtest_makereport = _ci_skips.pytest_runtest_makereport
pytest_make_collect_report = _ci_skips.pytest_make_collect_report

# CI=true: property tests draw the same examples on every run (hypothesis' derandomize), so a landing is decided by
# the code, not by the draw; every local run still explores new examples, and a failure it finds becomes a fix.
if os.environ.get("CI") == "true" and importlib.util.find_spec("hypothesis") is not None:
    from hypothesis import settings as _hypothesis_settings

    _hypothesis_settings.register_profile("gpufleet-ci", derandomize=True, database=None)
    _hypothesis_settings.load_profile("gpufleet-ci")
