# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The fleet report's Markdown and HTML renderings: Jinja2 templates over the model of ``report``.

The shipped templates live in ``playbooks/templates/report/`` (next to ``playbooks/report.yml``, the play
that writes the report). A folder given as ``templates_dir`` (the playbook's ``report_templates_dir``) is
searched first, so a file there replaces the shipped file of the same name and any file it lacks comes from
the collection; its templates can also extend or include a shipped one as ``shipped/<name>``.

Escaping is the environment's, not each template's: in HTML every ``{{ expression }}`` is HTML-escaped
(Jinja autoescape; the text spelled as ``html.escape`` does), in Markdown it is escaped for a table cell
(one line, pipes and markup characters backslashed, ``<``/``>``/``&`` as entities). ``| safe`` marks a
value as already rendered. Values from hosts are plain strings (``report.plain``), never ``Markup``.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from .report import TEXT_FILTERS, ReportError, check_model, plain
from .report_fleet import changes, counts

SHIPPED_DIR = Path(__file__).resolve().parents[2] / "playbooks" / "templates" / "report"
SHIPPED_PREFIX = "shipped"
TEMPLATES = {"markdown": "report.md.j2", "html": "report.html.j2"}
_MARKDOWN_SPECIAL = "\\`*_[]|#"


def markdown_text(value: Any) -> str:
    """A Markdown table cell: no line breaks, pipes and markup characters escaped, HTML as entities (inert)."""
    text = " ".join(str("" if value is None else value).split())
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    for ch in _MARKDOWN_SPECIAL:
        text = text.replace(ch, "\\" + ch)
    return text


def html_text(value: Any) -> str:
    """HTML text or attribute value: ``& < > " '`` as entities, ``None`` as nothing."""
    return html.escape("" if value is None else str(value), quote=True)


def _finalize_markdown(value: Any) -> str:
    return str(value) if hasattr(value, "__html__") else markdown_text(value)


def _finalize_html(value: Any) -> Markup:
    # Autoescape would escape too, with markupsafe's spelling (&#39;); html.escape's keeps the page as it was.
    return value if hasattr(value, "__html__") else Markup(html_text(value))  # noqa: S704 - escaped just now


def environment(fmt: str, templates_dir: str | Path | None = None) -> jinja2.Environment:
    """The Jinja2 environment of one format: the user's folder first, then the shipped templates."""
    if fmt not in TEMPLATES:
        raise ReportError(f"unknown report format {fmt!r}; known: {', '.join(TEMPLATES)}")
    shipped = jinja2.FileSystemLoader(str(SHIPPED_DIR))
    loaders: list[jinja2.BaseLoader] = []
    if templates_dir:
        folder = Path(templates_dir).expanduser()
        if not folder.is_dir():
            raise ReportError(f"report_templates_dir {str(templates_dir)!r} is not a directory")
        loaders.append(jinja2.FileSystemLoader(str(folder)))
    loaders += [shipped, jinja2.PrefixLoader({SHIPPED_PREFIX: shipped})]
    env = jinja2.Environment(
        loader=jinja2.ChoiceLoader(loaders),
        # Markdown is not HTML: its escaping is _finalize_markdown's (entities for <, >, & included).
        autoescape=fmt == "html",  # noqa: S701
        finalize=_finalize_html if fmt == "html" else _finalize_markdown,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        auto_reload=False,
    )
    env.filters.update(TEXT_FILTERS)
    env.filters["markdown_text"] = markdown_text
    return env


def render(model: Any, fmt: str, templates_dir: str | Path | None = None, previous: Any = None) -> str:
    """The model rendered by the format's template; the document ends with exactly one newline.

    The template sees the model's keys (``generated``, ``summary``, ``summary_line``, ``hosts``, ``problem_groups``),
    the whole model as ``report``, ``counts`` (``report_fleet.counts``) and ``changes`` (``report_fleet.changes``
    against ``previous``, the previous run's model as its JSON report holds it; None without one).
    """
    data = plain(check_model(model))
    data.setdefault("exposure", None)  # a model merged from reports older than the exposure section
    for host in data.get("hosts") or []:
        if isinstance(host, dict):
            host.setdefault("dra", None)  # a host of a report older than the DRA verdict
    env = environment(fmt, templates_dir)
    name = TEMPLATES[fmt]
    fleet = {"counts": counts(data), "changes": changes(plain(previous), data)}
    try:
        text = env.get_template(name).render(data, report=data, **fleet)
    except jinja2.TemplateSyntaxError as exc:
        raise ReportError(f"report template {exc.filename or exc.name or name} line {exc.lineno}: {exc}") from exc
    except jinja2.TemplateError as exc:
        raise ReportError(f"report template {name}: {type(exc).__name__}: {exc}") from exc
    return text.rstrip("\n") + "\n"


def previous_model(previous: Any) -> Any:
    """The previous model: a dict, or the JSON report's text (parsed here); empty or null: none. ``ReportError``
    when the text is not JSON."""
    if not previous:
        return None
    if isinstance(previous, (str, bytes)):
        try:
            return json.loads(previous)
        except ValueError as exc:
            raise ReportError(
                f"previous: not a fleet report's JSON ({exc}); remove or restore the previous JSON report"
            ) from exc
    return previous
