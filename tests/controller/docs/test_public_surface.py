# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What semantic versioning covers (docs/architecture.md, "Public surface"): every filter the collection ships is
named there, public or internal, and every package of module_utils and plugin_utils says it is private."""

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.controller
REPO = Path(__file__).resolve().parents[3]
PRIVATE = "Private to this collection: no compatibility promise"


def shipped_filters() -> set[str]:
    """Each filter's name: its documentation file's (plugins/filter/<name>.yml) or its module's, when it documents
    itself (a DOCUMENTATION string)."""
    folder = REPO / "plugins" / "filter"
    names = {path.stem for path in folder.glob("*.yml")}
    names |= {path.stem for path in folder.glob("*.py") if re.search(r"^DOCUMENTATION\s*=", path.read_text(), re.M)}
    return names


def surface() -> str:
    text = (REPO / "docs" / "architecture.md").read_text()
    return text.partition("## Public surface")[2].partition("\n## ")[0]


def test_every_filter_is_public_or_internal_in_the_architecture_page():
    named = set(re.findall(r"`([a-z_0-9]+)`", surface()))
    missing = sorted(shipped_filters() - named)
    assert not missing, f"filters docs/architecture.md's Public surface does not name: {missing}"
    assert len(shipped_filters()) > 30


def test_every_package_of_module_utils_and_plugin_utils_says_it_is_private():
    packages = [REPO / "plugins" / "plugin_utils"]
    packages += [path.parent for path in (REPO / "plugins" / "module_utils").rglob("__init__.py")]
    packages += [path.parent for path in (REPO / "plugins" / "plugin_utils").rglob("__init__.py")]
    silent = [str(p.relative_to(REPO)) for p in packages if PRIVATE not in (p / "__init__.py").read_text()]
    assert not silent, f"packages whose __init__.py does not say they are private: {silent}"
