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

ENGINES = ("docker", "containerd", "crio", "podman")
STATUS_TEXT = {
    "passed": "passed",
    "failed": "FAILED",
    "stage_failed": "FAILED (stage)",
    "not_validated": "not validated",
    "cpu_only": "CPU-only",
    "no_facts": "unreachable / no facts",
}


def _plain(value):
    """Deep copy into plain dict/list/str/int/float/bool/None (hostvars hold lazy or tagged values)."""
    if isinstance(value, dict) or (hasattr(value, "keys") and hasattr(value, "__getitem__")):
        return {str(k): _plain(value[k]) for k in list(value.keys())}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return str(value)


def _get(mapping, key, default=None):
    try:
        value = mapping[key]
    except (KeyError, TypeError, AttributeError):
        return default
    return default if value is None else value


def _host_vars(hostvars, host):
    try:
        hv = hostvars[host]
    except (KeyError, TypeError):
        return {}
    wanted = (
        "ansible_facts",
        "gpufleet_toolkit",
        "gpufleet_runtime",
        "gpufleet_validate",
        "gpufleet_device_plugin",
        "gpufleet_failed",
    )
    out = {}
    for key in wanted:
        value = _get(hv, key)
        if key == "ansible_facts":
            value = {"nvidia": _get(value, "nvidia")} if value is not None else None
        if value is not None:
            out[key] = _plain(value)
    return out


def _gpus(nvidia):
    gpus = []
    for gpu in _get(nvidia, "gpus", []):
        gpus.append(
            {
                "index": _get(gpu, "index"),
                "name": _get(gpu, "name", "unknown"),
                "uuid": _get(gpu, "uuid"),
                "pci_bus_id": _get(gpu, "pci_bus_id"),
                "memory_mib": _get(gpu, "memory_mib"),
                "mig_mode": _get(gpu, "mig_mode"),
            }
        )
    if not gpus:
        # Driver not loaded: only the PCI scan knows them.
        for dev in _get(nvidia, "pci_devices", []):
            if _get(dev, "is_gpu", False):
                gpus.append(
                    {
                        "index": None,
                        "name": "PCI device %s (driver not loaded)" % _get(dev, "device_id", "?"),
                        "uuid": None,
                        "pci_bus_id": _get(dev, "pci_bus_id"),
                        "memory_mib": None,
                        "mig_mode": None,
                    }
                )
    return gpus


def _engines(nvidia, runtime, validate):
    found = _get(nvidia, "engines", {})
    registered = _get(runtime, "engines", {})
    checked = _get(validate, "engines", {})
    names = [e for e in ENGINES if _get(_get(found, e, {}), "installed") or e in registered or e in checked]
    names += sorted(e for e in list(registered) + list(checked) if e not in names)
    out = []
    for name in names:
        fact, reg, val = _get(found, name, {}), _get(registered, name, {}), _get(checked, name)
        runtimes = _get(fact, "runtimes", [])
        out.append(
            {
                "name": name,
                "version": _get(reg, "version") or _get(fact, "version"),
                "registered": bool(_get(reg, "registered", "nvidia" in runtimes)),
                "default": bool(_get(reg, "default", _get(fact, "default_runtime") == "nvidia")),
                "cdi": bool(_get(reg, "cdi", _get(fact, "cdi_enabled", False))),
                "runtimes": list(runtimes),
                "config_path": _get(reg, "config_path") or _get(fact, "config_path"),
                "runtime_message": _get(reg, "message", ""),
                "validation": None
                if val is None
                else {
                    "passed": bool(_get(val, "passed", False)),
                    "skipped": bool(_get(val, "skipped", False)),
                    "message": _get(val, "message", ""),
                    "seconds": _get(val, "seconds"),
                    "device_nodes": list(_get(val, "device_nodes", [])),
                    "libcuda": bool(_get(val, "libcuda", False)),
                },
            }
        )
    return out


def _host(name, hv):
    nvidia = _get(_get(hv, "ansible_facts", {}), "nvidia")
    failed = _get(hv, "gpufleet_failed")
    validate = _get(hv, "gpufleet_validate")
    entry = {
        "name": name,
        "facts": nvidia is not None,
        "gpu_count": 0,
        "gpus": [],
        "driver": None,
        "engines": [],
        "validation": None,
        "problems": [],
        "failed": None,
        "toolkit": _get(hv, "gpufleet_toolkit"),
        "device_plugin": _get(hv, "gpufleet_device_plugin"),
        "cdi_spec": _get(_get(hv, "gpufleet_runtime", {}), "cdi_spec"),
    }
    if failed is not None:
        entry["failed"] = {
            "stage": str(_get(failed, "stage", "?")),
            "task": str(_get(failed, "task", "?")),
            "msg": str(_get(failed, "msg", "")),
        }
    if nvidia is None:
        entry["status"] = "stage_failed" if failed else "no_facts"
        return entry
    driver = _get(nvidia, "driver", {})
    entry.update(
        gpu_count=int(_get(nvidia, "pci_gpu_count", 0) or _get(nvidia, "gpu_count", 0) or 0),
        gpus=_gpus(nvidia),
        driver={
            "installed_version": _get(driver, "installed_version"),
            "loaded_version": _get(driver, "loaded_version"),
            "loaded": bool(_get(driver, "loaded", False)),
            "cuda_version": _get(driver, "cuda_version"),
            "reboot_required": bool(_get(driver, "reboot_required", False)),
        },
        engines=_engines(nvidia, _get(hv, "gpufleet_runtime", {}), validate or {}),
        problems=[
            {"code": _get(p, "code", ""), "message": _get(p, "message", ""), "fix": _get(p, "fix", "")}
            for p in _get(nvidia, "problems", [])
        ],
    )
    if validate is not None:
        entry["validation"] = {
            "passed": bool(_get(validate, "passed", False)),
            "skipped": bool(_get(validate, "skipped", False)),
            "message": _get(validate, "message", ""),
        }
    if entry["gpu_count"] == 0:
        entry["status"] = "stage_failed" if failed else "cpu_only"
    elif failed is not None:
        entry["status"] = "stage_failed"
    elif validate is None or entry["validation"]["skipped"]:
        entry["status"] = "not_validated"
    else:
        entry["status"] = "passed" if entry["validation"]["passed"] else "failed"
    return entry


def fleet_report_model(hostvars, hosts, generated=""):
    """The report's data; see the filter's documentation (``fleet_report_model.yml``)."""
    if hosts is None or isinstance(hosts, (str, bytes)):
        raise AnsibleFilterError("fleet_report_model: hosts must be a list of host names (groups['all'])")
    entries = [_host(str(h), _host_vars(hostvars, h)) for h in hosts]
    count = {s: sum(1 for e in entries if e["status"] == s) for s in STATUS_TEXT}
    summary = {
        "hosts": len(entries),
        "gpu_nodes": sum(1 for e in entries if e["gpu_count"] > 0),
        "gpus": sum(e["gpu_count"] for e in entries),
        "cpu_only": count["cpu_only"],
        "no_facts": count["no_facts"],
        "passed": count["passed"],
        "failed": count["failed"],
        "stage_failed": count["stage_failed"],
        "not_validated": count["not_validated"],
        "problems": sum(len(e["problems"]) for e in entries),
    }
    summary["ok"] = summary["failed"] == 0 and summary["stage_failed"] == 0 and summary["no_facts"] == 0
    line = (
        "{hosts} hosts: {gpu_nodes} GPU nodes ({gpus} GPUs), {cpu_only} CPU-only, {no_facts} unreachable/no facts; "
        "validation: {passed} passed, {failed} failed, {not_validated} not validated; {stage_failed} failed a stage; "
        "{problems} problems"
    ).format(**summary)
    return {"generated": str(generated or ""), "summary": summary, "summary_line": line, "hosts": entries}


def _check(model):
    if not isinstance(model, dict) or "hosts" not in model or "summary_line" not in model:
        raise AnsibleFilterError("the input must be the output of gpufleet.nvidia.fleet_report_model")
    return model


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
