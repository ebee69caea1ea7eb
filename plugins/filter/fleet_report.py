# Copyright (c) gpufleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet report of ``playbooks/report.yml``: a model from hostvars, and its Markdown and HTML renderings.

Pure functions (no I/O): ``fleet_report_model(hostvars, hosts, generated='')`` reads only
``ansible_facts.nvidia`` (gpu_facts), ``gpufleet_toolkit``, ``gpufleet_runtime``, ``gpufleet_validate``,
``gpufleet_device_plugin`` and ``gpufleet_failed`` of each host; ``to_report_markdown(model)`` and
``to_report_html(model)`` render it (the HTML page is self-contained: inline CSS, no script, no external
reference; every value from a host is escaped).
"""

import html
import json

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils import report
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.report import STATUS_TEXT


def fleet_report_model(hostvars, hosts, generated=""):
    """The report's data; see the filter's documentation (``fleet_report_model.yml``)."""
    try:
        return report.fleet_report_model(hostvars, hosts, generated)
    except report.ReportError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def _check(model):
    try:
        return report.check_model(model)
    except report.ReportError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def _md(text):
    """A Markdown table cell: no line breaks, pipes and markup characters escaped, HTML as entities (inert)."""
    text = " ".join(str("" if text is None else text).split())
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    for ch in "\\`*_[]|#":
        text = text.replace(ch, "\\" + ch)
    return text


def _yes(value):
    return "yes" if value else "no"


def _engine_validation(engine):
    val = engine["validation"]
    if val is None:
        return "not run"
    if val["skipped"]:
        return "skipped"
    return ("passed" if val["passed"] else "FAILED") + (" (%.1f s)" % val["seconds"] if val["seconds"] else "")


def _driver_text(driver):
    if not driver:
        return "unknown"
    text = "installed %s, loaded %s" % (driver["installed_version"] or "none", driver["loaded_version"] or "none")
    if driver["cuda_version"]:
        text += ", CUDA %s" % driver["cuda_version"]
    if driver["reboot_required"]:
        text += ", reboot required"
    return text


def to_report_markdown(model):
    """Markdown rendering of ``fleet_report_model``; every host value escaped for Markdown."""
    model = _check(model)
    out = ["# GPU fleet report", "", "**" + _md(model["summary_line"]) + "**", ""]
    if model["generated"]:
        out += ["Generated " + _md(model["generated"]) + ".", ""]
    out += ["| host | status | GPUs | driver | engines passed |", "| --- | --- | --- | --- | --- |"]
    for h in model["hosts"]:
        passed = [e["name"] for e in h["engines"] if e["validation"] and e["validation"]["passed"]]
        out.append(
            "| %s | %s | %s | %s | %s |"
            % (
                _md(h["name"]),
                STATUS_TEXT[h["status"]],
                h["gpu_count"],
                _md(_driver_text(h["driver"]) if h["facts"] else "-"),
                _md(", ".join(passed) or "-"),
            )
        )
    for h in model["hosts"]:
        out += ["", "## " + _md(h["name"]) + " - " + STATUS_TEXT[h["status"]], ""]
        if h["failed"]:
            f = h["failed"]
            out += ["**Failed at stage %s**, task %s: %s" % (_md(f["stage"]), _md(f["task"]), _md(f["msg"])), ""]
        if not h["facts"]:
            out += ["Unreachable, or no facts gathered (the discover stage did not run on it).", ""]
            continue
        if h["gpu_count"] == 0:
            out += ["CPU-only host: discovered and reported, nothing installed.", ""]
        else:
            out += ["Driver: " + _md(_driver_text(h["driver"])), "", "| # | GPU | UUID | PCI | memory MiB | MIG |"]
            out.append("| --- | --- | --- | --- | --- | --- |")
            for g in h["gpus"]:
                out.append(
                    "| %s | %s | %s | %s | %s | %s |"
                    % tuple(_md(g[k]) for k in ("index", "name", "uuid", "pci_bus_id", "memory_mib", "mig_mode"))
                )
            out.append("")
        if h["engines"]:
            out += ["| engine | version | nvidia registered | default | CDI | validation | detail |"]
            out.append("| --- | --- | --- | --- | --- | --- | --- |")
            for e in h["engines"]:
                detail = e["validation"]["message"] if e["validation"] else e["runtime_message"]
                out.append(
                    "| %s | %s | %s | %s | %s | %s | %s |"
                    % (
                        _md(e["name"]),
                        _md(e["version"] or "?"),
                        _yes(e["registered"]),
                        _yes(e["default"]),
                        _yes(e["cdi"]),
                        _engine_validation(e),
                        _md(detail),
                    )
                )
            out.append("")
        elif h["gpu_count"]:
            out += ["No container engine found.", ""]
        if h["validation"]:
            out += ["Validation: " + _md(h["validation"]["message"]), ""]
        if h["problems"]:
            out += ["Problems:", ""]
            for p in h["problems"]:
                out.append("* **%s**: %s. Fix: %s" % (_md(p["code"]), _md(p["message"]), _md(p["fix"])))
            out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


_CSS = (
    "body{font-family:system-ui,sans-serif;margin:2em;color:#222}"
    "table{border-collapse:collapse;margin:.5em 0 1em}"
    "td,th{border:1px solid #bbb;padding:.25em .5em;text-align:left;vertical-align:top}"
    "th{background:#eee}.passed{color:#176b21;font-weight:bold}.failed,.stage_failed,.no_facts{color:#b00020;"
    "font-weight:bold}.not_validated,.skipped{color:#8a6d00}.cpu_only{color:#555}"
    ".summary{font-size:1.1em;padding:.5em;border:1px solid #bbb;background:#f6f6f6}code{background:#f0f0f0}"
)


def _e(value):
    return html.escape("" if value is None else str(value), quote=True)


def _row(cells, header=False):
    tag = "th" if header else "td"
    return "<tr>" + "".join("<%s>%s</%s>" % (tag, c, tag) for c in cells) + "</tr>"


def _status(status):
    return '<span class="%s">%s</span>' % (status, _e(STATUS_TEXT[status]))


def to_report_html(model):
    """A self-contained HTML page of ``fleet_report_model`` (inline CSS, no script); every value escaped."""
    model = _check(model)
    body = ["<h1>GPU fleet report</h1>", '<p class="summary">%s</p>' % _e(model["summary_line"])]
    if model["generated"]:
        body.append("<p>Generated %s.</p>" % _e(model["generated"]))
    body.append("<table>" + _row(["host", "status", "GPUs", "driver", "engines passed"], header=True))
    for h in model["hosts"]:
        passed = [e["name"] for e in h["engines"] if e["validation"] and e["validation"]["passed"]]
        body.append(
            _row(
                [
                    '<a href="#host-%d">%s</a>' % (model["hosts"].index(h), _e(h["name"])),
                    _status(h["status"]),
                    _e(h["gpu_count"]),
                    _e(_driver_text(h["driver"]) if h["facts"] else "-"),
                    _e(", ".join(passed) or "-"),
                ]
            )
        )
    body.append("</table>")
    for i, h in enumerate(model["hosts"]):
        body.append('<h2 id="host-%d">%s &mdash; %s</h2>' % (i, _e(h["name"]), _status(h["status"])))
        if h["failed"]:
            f = h["failed"]
            body.append(
                '<p class="failed">Failed at stage %s, task %s: %s</p>' % (_e(f["stage"]), _e(f["task"]), _e(f["msg"]))
            )
        if not h["facts"]:
            body.append("<p>Unreachable, or no facts gathered (the discover stage did not run on it).</p>")
            continue
        if h["gpu_count"] == 0:
            body.append("<p>CPU-only host: discovered and reported, nothing installed.</p>")
        else:
            body.append("<p>Driver: %s</p>" % _e(_driver_text(h["driver"])))
            body.append("<table>" + _row(["#", "GPU", "UUID", "PCI", "memory MiB", "MIG"], header=True))
            for g in h["gpus"]:
                body.append(_row([_e(g[k]) for k in ("index", "name", "uuid", "pci_bus_id", "memory_mib", "mig_mode")]))
            body.append("</table>")
        if h["engines"]:
            heads = ["engine", "version", "nvidia registered", "default", "CDI", "validation", "detail"]
            body.append("<table>" + _row(heads, header=True))
            for e in h["engines"]:
                val = _engine_validation(e)
                cls = (
                    "skipped" if val in ("skipped", "not run") else ("passed" if val.startswith("passed") else "failed")
                )
                detail = e["validation"]["message"] if e["validation"] else e["runtime_message"]
                body.append(
                    _row(
                        [
                            _e(e["name"]),
                            _e(e["version"] or "?"),
                            _yes(e["registered"]),
                            _yes(e["default"]),
                            _yes(e["cdi"]),
                            '<span class="%s">%s</span>' % (cls, _e(val)),
                            _e(detail),
                        ]
                    )
                )
            body.append("</table>")
        elif h["gpu_count"]:
            body.append("<p>No container engine found.</p>")
        if h["validation"]:
            body.append("<p>Validation: %s</p>" % _e(h["validation"]["message"]))
        if h["problems"]:
            body.append("<p>Problems:</p><ul>")
            for p in h["problems"]:
                body.append(
                    "<li><code>%s</code>: %s. <b>Fix:</b> %s</li>" % (_e(p["code"]), _e(p["message"]), _e(p["fix"]))
                )
            body.append("</ul>")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        "<title>GPU fleet report</title><style>%s</style></head><body>\n%s\n</body></html>\n" % (_CSS, "\n".join(body))
    )


def to_report_json(model):
    """The model as indented JSON (keys sorted), for the report's JSON file."""
    return json.dumps(_check(model), indent=2, sort_keys=True) + "\n"


class FilterModule:
    def filters(self):
        return {
            "fleet_report_model": fleet_report_model,
            "to_report_markdown": to_report_markdown,
            "to_report_html": to_report_html,
            "to_report_json": to_report_json,
        }
