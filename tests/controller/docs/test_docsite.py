# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The docsite (docs/docsite): every guide the table of contents names exists and every guide is named; the
troubleshooting guide is what tests/tools/problem_docs.py generates from the problem codes, and has a section for every
code the discovery code can report (found here by a plain pattern, apart from the generator's parser); the repository
paths the guides, the README and CONTRIBUTING.md name exist."""

import importlib.util
import re
from pathlib import Path

import yaml

from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery import xid

REPO = Path(__file__).resolve().parents[3]
DOCSITE = REPO / "docs" / "docsite"
LABEL = "ansible_collections.gpufleet.nvidia.docsite."


def _problem_docs():
    spec = importlib.util.spec_from_file_location("problem_docs", REPO / "tests" / "tools" / "problem_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_table_of_contents_and_the_guides_match():
    extra = yaml.safe_load((DOCSITE / "extra-docs.yml").read_text())
    named = [page for section in extra["sections"] for page in section["toctree"]]
    on_disk = sorted(p.stem for p in (DOCSITE / "rst").glob("*.rst"))
    assert sorted(named) == on_disk and len(named) == len(set(named))
    for page in named:
        text = (DOCSITE / "rst" / f"{page}.rst").read_text()
        assert text.startswith(f".. _{LABEL}{page}:\n"), page  # the label antsibull-docs wants, the page's name


def test_the_troubleshooting_guide_is_generated_from_the_problem_codes():
    tool = _problem_docs()
    assert tool.GUIDE.read_text(encoding="utf-8") == tool.generate(), "run tests/tools/problem_docs.py"


def test_every_problem_code_has_a_section_with_its_fix():
    source = (REPO / "plugins" / "module_utils" / "discovery" / "problems.py").read_text()
    codes = set(re.findall(r'problem\(\s*"([a-z0-9_]+)"', source))
    assert len(codes) > 20 and 'f"gpu_xid_' in source
    codes |= {f"gpu_xid_{n}" for n, (bucket, _m, _t) in xid.ACTIONS.items() if bucket in xid.HOST_BUCKETS}
    guide = (DOCSITE / "rst" / "troubleshooting.rst").read_text()
    sections = dict(re.findall(r"^``([a-z0-9_<>]+)``\n-+\n\n(.*?)(?=^\.\. _|\Z)", guide, re.M | re.S))
    sections.update(re.findall(r"^``([a-z0-9_<>]+)``\n~+\n\n(.*?)(?=^\.\. _|\Z)", guide, re.M | re.S))
    missing = sorted(c for c in codes if c not in sections)
    assert not missing, f"problem codes without a troubleshooting entry: {missing} (run tests/tools/problem_docs.py)"
    assert all("**Fix**: " in sections[c] for c in codes)


def test_a_new_code_without_a_docs_entry_is_caught():
    tool = _problem_docs()
    source = tool.PROBLEMS.read_text(encoding="utf-8") + '\n\nproblem("brand_new_code", "m", "f")\n'
    text = tool.render(source, tool.XID.read_text(encoding="utf-8"))
    assert "``brand_new_code``" in text and text != tool.GUIDE.read_text(encoding="utf-8")


def test_the_paths_the_docs_name_exist():
    """Paths like ``docs/report.md`` or ``extensions/awx`` in the guides, the README, CONTRIBUTING.md and docs/*.md."""
    pages = [REPO / "README.md", REPO / "CONTRIBUTING.md", *sorted((REPO / "docs").glob("*.md"))]
    pages += sorted((DOCSITE / "rst").glob("*.rst"))
    pattern = re.compile(r"[`(]((?:docs|extensions|playbooks|roles|plugins|tests)/[A-Za-z0-9_./-]+?)[`)]")
    named = {
        (page.name, m)
        for page in pages
        for m in pattern.findall(page.read_text())
        if "<" not in m and not m.startswith("tests/output/")  # what a run writes
    }
    assert len(named) > 20
    missing = sorted((page, path) for page, path in named if not (REPO / path.rstrip("/.")).exists())
    assert not missing, missing
