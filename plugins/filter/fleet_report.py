# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The fleet report of ``playbooks/report.yml``: the model from hostvars, and its renderings.

``fleet_report_model(hostvars, hosts, generated='', in_run=None, active=None)`` is ``plugin_utils/report.py``'s model;
``to_report_markdown(model, templates_dir=None, previous=None)`` and ``to_report_html(model, templates_dir=None,
previous=None)`` render it
through the Jinja2 templates of ``playbooks/templates/report/`` or those of ``templates_dir``
(``plugin_utils/report_render.py``); ``to_report_json(model)`` serialises it. Documentation: the ``.yml``
files of the same names.
"""

from __future__ import annotations

import json
from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils import report, report_render


def fleet_report_model(
    hostvars: Any, hosts: Any, generated: Any = "", in_run: Any = None, active: Any = None
) -> report.Model:
    """The report's data; see ``fleet_report_model.yml``."""
    try:
        return report.fleet_report_model(hostvars, hosts, generated, in_run, active)
    except report.ReportError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def _render(model: Any, fmt: str, templates_dir: Any, previous: Any) -> str:
    try:
        folder = str(templates_dir) if templates_dir else None
        return report_render.render(model, fmt, folder, report_render.previous_model(previous))
    except report.ReportError as exc:
        raise AnsibleFilterError(f"to_report_{fmt}: {exc}") from exc


def to_report_markdown(model: Any, templates_dir: Any = None, previous: Any = None) -> str:
    """Markdown from ``report.md.j2``; every value escaped for Markdown."""
    return _render(model, "markdown", templates_dir, previous)


def to_report_html(model: Any, templates_dir: Any = None, previous: Any = None) -> str:
    """A self-contained HTML page from ``report.html.j2`` (inline CSS, SVG and script); every value escaped."""
    return _render(model, "html", templates_dir, previous)


def to_report_json(model: Any) -> str:
    """The model as indented JSON (keys sorted), for the report's JSON file."""
    try:
        data = report.check_model(model)
    except report.ReportError as exc:
        raise AnsibleFilterError(f"to_report_json: {exc}") from exc
    return json.dumps(report.plain(data), indent=2, sort_keys=True) + "\n"


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "fleet_report_model": fleet_report_model,
            "to_report_markdown": to_report_markdown,
            "to_report_html": to_report_html,
            "to_report_json": to_report_json,
        }
