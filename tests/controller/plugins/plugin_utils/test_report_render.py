# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The report's Jinja2 renderings (plugins/plugin_utils/report_render.py): the shipped templates byte for byte,
escaping that no template can forget, and a user's folder that replaces templates by file name."""

import pytest

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils import report, report_render

SCRIPT = "<script>alert('x')</script>"


@pytest.fixture
def model(fleet):
    return report.fleet_report_model(fleet.HOSTVARS, fleet.HOSTS, generated=fleet.GENERATED)


@pytest.fixture
def edge_model(fleet):
    return report.fleet_report_model(fleet.EDGE_HOSTVARS, fleet.EDGE_HOSTS)


@pytest.fixture
def hostile_model(fleet):
    """A crafted host name (inventory) and GPU name (gathered from the host)."""
    return report.fleet_report_model({SCRIPT: fleet.HOSTVARS["bad"]}, [SCRIPT])


@pytest.mark.parametrize(("fmt", "ext"), [("markdown", "md"), ("html", "html")])
def test_shipped_templates_match_the_golden_files(model, edge_model, fleet, fmt, ext):
    assert report_render.render(model, fmt) == (fleet.GOLDEN / f"fleet.{ext}").read_text(encoding="utf-8")
    assert report_render.render(edge_model, fmt) == (fleet.GOLDEN / f"edge.{ext}").read_text(encoding="utf-8")


def test_shipped_templates_are_in_the_collection():
    assert report_render.SHIPPED_DIR.parts[-3:] == ("playbooks", "templates", "report")
    names = {p.name for p in report_render.SHIPPED_DIR.iterdir()}
    assert names == {"report.md.j2", "report.html.j2", "report.css.j2", "report.js.j2"}


def test_html_escapes_a_crafted_host_name_and_gpu_name(hostile_model, fleet):
    page = report_render.render(hostile_model, "html")
    # The one script is the page's own (report.js.j2); no value of a host makes another element.
    assert page.count("<script") == 1 and "<script>\n\n(function ()" in page
    assert "<img" not in page and "onerror=alert(1)>" not in page
    escaped = "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;"
    assert f'<a href="#host-0">{escaped}</a>' in page and f'<h2 id="host-0">{escaped} &mdash;' in page
    assert report_render.html_text(fleet.HOSTILE) in page  # the GPU name


def test_markdown_escapes_a_crafted_host_name(hostile_model):
    md = report_render.render(hostile_model, "markdown")
    assert "<" not in md and "## &lt;script&gt;alert('x')&lt;/script&gt; - FAILED" in md


def test_escaping_helpers():
    assert report_render.markdown_text("a |b*\n <c> & _d_ `e` [f] #g \\") == (
        "a \\|b\\* &lt;c&gt; &amp; \\_d\\_ \\`e\\` \\[f\\] \\#g \\\\"
    )
    assert report_render.markdown_text(None) == "" and report_render.markdown_text(0) == "0"
    assert report_render.html_text("<a href=\"x\">'&'</a>") == "&lt;a href=&quot;x&quot;&gt;&#x27;&amp;&#x27;&lt;/a&gt;"
    assert report_render.html_text(None) == ""


def _write(folder, **templates):
    for name, text in templates.items():
        (folder / name.replace("_", ".")).write_text(text, encoding="utf-8")
    return folder


def test_a_users_template_replaces_the_shipped_one_by_file_name(tmp_path, hostile_model, model):
    folder = _write(
        tmp_path,
        report_md_j2="{% for h in hosts %}- {{ h.name }}: {{ h.status | status_text }}\n{% endfor %}",
        report_html_j2="<ul>{% for h in hosts %}<li>{{ h.name }} {{ h | passed_engines }}</li>{% endfor %}</ul>",
    )
    assert report_render.render(model, "markdown", folder).startswith("- good: passed\n- bad: FAILED\n")
    # The environment escapes for the user's template too.
    assert report_render.render(hostile_model, "markdown", folder) == (
        "- &lt;script&gt;alert('x')&lt;/script&gt;: FAILED\n"
    )
    assert report_render.render(hostile_model, "html", folder) == (
        "<ul><li>&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; podman</li></ul>\n"
    )


def test_a_missing_template_falls_back_to_the_shipped_one(tmp_path, model, fleet):
    folder = _write(tmp_path, report_css_j2="body{color:red}\n")
    page = report_render.render(model, "html", folder)
    assert "<style>body{color:red}</style>" in page  # the user's style sheet in the shipped page
    assert page.replace("<style>body{color:red}</style>", "") == (
        (fleet.GOLDEN / "fleet.html").read_text(encoding="utf-8").split("<style>")[0]
        + (fleet.GOLDEN / "fleet.html").read_text(encoding="utf-8").split("</style>")[1]
    )
    # No Markdown template in the folder: the shipped one, byte for byte.
    assert report_render.render(model, "markdown", folder) == (fleet.GOLDEN / "fleet.md").read_text(encoding="utf-8")


def test_a_users_template_extends_the_shipped_one(tmp_path, model):
    folder = _write(
        tmp_path,
        report_html_j2='{% extends "shipped/report.html.j2" %}'
        "{% block title %}Rack 7{% endblock %}{% block style %}{{ super() }}h1{color:red}{% endblock %}",
    )
    page = report_render.render(model, "html", folder)
    assert "<title>Rack 7</title>" in page and "{width:20em}h1{color:red}</style>" in page
    assert '<p class="summary">7 hosts: 4 GPU nodes' in page


def test_safe_is_the_only_way_around_escaping(tmp_path, hostile_model):
    folder = _write(tmp_path, report_md_j2="{{ '<br>' | safe }}{{ '<br>' }}{{ hosts[0].name | safe }}")
    # | safe is the template author's; a host's value is a plain string and never arrives as markup.
    assert report_render.render(hostile_model, "markdown", folder) == f"<br>&lt;br&gt;{SCRIPT}\n"


def test_errors_name_the_template(tmp_path, model):
    with pytest.raises(report.ReportError, match="is not a directory"):
        report_render.render(model, "html", tmp_path / "nope")
    _write(tmp_path, report_md_j2="{% for h in hosts %}")
    with pytest.raises(report.ReportError, match=r"report\.md\.j2 line 1"):
        report_render.render(model, "markdown", tmp_path)
    _write(tmp_path, report_md_j2="{{ hosts[0].nope }}")
    with pytest.raises(report.ReportError, match="UndefinedError"):
        report_render.render(model, "markdown", tmp_path)
    with pytest.raises(report.ReportError, match="unknown report format 'pdf'"):
        report_render.render(model, "pdf")
    with pytest.raises(report.ReportError, match="fleet_report_model"):
        report_render.render({"hosts": []}, "html")


def test_previous_model_parses_json_text_and_passes_a_dict():
    assert report_render.previous_model("") is None
    assert report_render.previous_model(None) is None
    assert report_render.previous_model('{"a": 1}') == {"a": 1}
    assert report_render.previous_model(b'{"a": 1}') == {"a": 1}
    assert report_render.previous_model({"b": 2}) == {"b": 2}
    with pytest.raises(report.ReportError, match=r"^previous: not a fleet report's JSON \(.*\); remove or restore"):
        report_render.previous_model("{not json")
