# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import ast
import os
import re

from ansible_collections.gpufleet.nvidia.plugins.module_utils.base import names

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), *[os.pardir] * 5))


def test_collection_version_is_galaxys():
    with open(os.path.join(REPO, "galaxy.yml"), encoding="utf-8") as f:
        assert re.search(r"(?m)^version: (\S+)$", f.read()).group(1) == names.COLLECTION_VERSION


def test_names_imports_nothing():
    """``nvidia-container-cli --version`` and ``nvidia-docker version`` import this module and must stay cheap."""
    with open(names.__file__, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    imports = [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert [getattr(n, "module", None) for n in imports] == ["__future__"]
