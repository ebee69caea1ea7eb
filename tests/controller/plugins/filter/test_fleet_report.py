# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The fleet report's filters (plugins/filter/fleet_report.py) on the hand-made hostvars of ../conftest.py:
registration, errors as AnsibleFilterError, the renderings byte for byte and their escaping."""

import json
import re
from html.parser import HTMLParser

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.nvidia.plugins.filter.fleet_report import (
    FilterModule,
    fleet_report_model,
    to_report_html,
    to_report_json,
    to_report_markdown,
)

RENDER = {"md": to_report_markdown, "html": to_report_html, "json": to_report_json}


@pytest.fixture
def model(fleet):
    return fleet_report_model(fleet.HOSTVARS, fleet.HOSTS, generated=fleet.GENERATED)


@pytest.fixture
def edge_model(fleet):
    return fleet_report_model(fleet.EDGE_HOSTVARS, fleet.EDGE_HOSTS)


def test_filters_registered():
    assert set(FilterModule().filters()) == {
        "fleet_report_model",
        "to_report_markdown",
        "to_report_html",
        "to_report_json",
    }


@pytest.mark.parametrize("ext", ["md", "html", "json"])
def test_renderings_match_the_golden_files(model, edge_model, fleet, ext):
    """tests/controller/plugins/plugin_utils/fixtures/report/: the renderings before the templates, byte for byte."""
    assert RENDER[ext](model) == (fleet.GOLDEN / f"fleet.{ext}").read_text(encoding="utf-8")
    assert RENDER[ext](edge_model) == (fleet.GOLDEN / f"edge.{ext}").read_text(encoding="utf-8")


def test_errors_are_filter_errors(fleet):
    with pytest.raises(AnsibleFilterError, match="list of host names"):
        fleet_report_model(fleet.HOSTVARS, "all")
    for render in RENDER.values():
        with pytest.raises(AnsibleFilterError, match="fleet_report_model"):
            render({"hosts": []})


def test_markdown(model):
    md = to_report_markdown(model)
    lines = md.splitlines()
    assert lines[0] == "# GPU fleet report" and lines[2].startswith("**7 hosts: 4 GPU nodes")
    assert "| good | passed | 2 |" in md and "| bad | FAILED | 1 |" in md and "| cpu | CPU-only | 0 |" in md
    assert "| down | unreachable / no facts | 0 |" in md
    assert "**Failed at stage driver**, task Install the driver: E: Unable to locate &lt;pkg&gt;" in md
    assert "CPU-only host" in md and "Fix: run the runtime role" in md
    # The hostile name: no raw HTML, and its pipe cannot open a new table cell.
    assert "<" not in md and "&lt;script&gt;alert('x')&lt;/script&gt;" in md
    row = next(x for x in lines if "GPU-0" in x and "script" in x)
    assert len(re.findall(r"(?<!\\)\|", row)) == 7


class _Collect(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.attrs, self.text = [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs += [pair[0] for pair in attrs]

    def handle_data(self, data):
        self.text.append(data)


def test_html_escapes_and_is_self_contained(model, fleet):
    page = to_report_html(model)
    assert page.startswith("<!DOCTYPE html>")
    parser = _Collect()
    parser.feed(page)
    # One script, the page's own inline one (report.js.j2); no value of a host makes an element.
    assert parser.tags.count("script") == 1 and "img" not in parser.tags
    assert not [a for a in parser.attrs if a.startswith("on") or a == "src"]
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page
    # The name comes back intact as text.
    assert fleet.HOSTILE in "".join(parser.text)
    assert not re.search(r"(href|src)=\"(https?:)?//", page)  # nothing external
    assert "Failed at stage driver" in page and "E: Unable to locate &lt;pkg&gt;" in page
    assert 'class="passed">passed' in page and 'class="cpu_only">CPU-only' in page
    assert "unreachable / no facts" in page


def test_json_round_trip(model):
    assert json.loads(to_report_json(model)) == model


def test_templates_dir_replaces_templates_by_file_name(model, fleet, tmp_path):
    (tmp_path / "report.md.j2").write_text("{{ summary_line }} ({{ hosts | length }} rows)\n", encoding="utf-8")
    (tmp_path / "report.css.j2").write_text("body{margin:0}", encoding="utf-8")
    assert to_report_markdown(model, templates_dir=str(tmp_path)) == model["summary_line"] + " (7 rows)\n"
    page = to_report_html(model, templates_dir=tmp_path)
    assert "<style>body{margin:0}</style>" in page and fleet.HOSTILE not in page  # shipped page, escaped
    # Empty or None: the shipped templates (what the playbook passes when report_templates_dir is unset).
    assert to_report_markdown(model, templates_dir="") == to_report_markdown(model, None)


def test_template_errors_are_filter_errors(model, tmp_path):
    with pytest.raises(AnsibleFilterError, match=r"to_report_html: report_templates_dir .* is not a directory"):
        to_report_html(model, templates_dir=str(tmp_path / "missing"))
    (tmp_path / "report.md.j2").write_text("{{ nope }}", encoding="utf-8")
    with pytest.raises(AnsibleFilterError, match=r"to_report_markdown: report template report\.md\.j2: Undefined"):
        to_report_markdown(model, templates_dir=str(tmp_path))
