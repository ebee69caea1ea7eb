# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The fleet report's model: what ``playbooks/report.yml`` says about each host, from hostvars.

Controller only, pure (no I/O). ``fleet_report_model(hostvars, hosts, generated)`` reads only
``ansible_facts.nvidia`` (gpu_facts), ``gpufleet_toolkit``, ``gpufleet_runtime``, ``gpufleet_validate``,
``gpufleet_device_plugin`` and ``gpufleet_failed`` of each host and returns plain dicts and lists (the JSON
report is this model serialised). The text helpers below (``status_text``, ``driver_text`` ...) derive what a
rendering shows from the model; the templates of ``report_render`` get them as Jinja filters, so every format
says the same thing and a user's template need not repeat the rules.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ansible_collections.gpufleet.nvidia.plugins.module_utils.runtime import registry
from ansible_collections.gpufleet.nvidia.plugins.module_utils.validate.stage_facts import stage_toolkit
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.exposure import (
    exposure_tags,
    fleet_exposure,
    host_exposure,
)
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.gpu_users import GateError, describe, processes
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.mapping import get as _get
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.report_remediation import (
    history_text,
    remediation_entry,
    remediation_text,
)

ENGINES = registry.NAMES
STATUS_TEXT = {
    "passed": "passed",
    "failed": "FAILED",
    "stage_failed": "FAILED (stage)",
    "not_validated": "not validated",
    "cpu_only": "CPU-only",
    "no_facts": "unreachable / no facts",
    "unreachable": "UNREACHABLE",
    "not_in_run": "not in this run",
}
# The per-host facts the model reads; nothing else of hostvars reaches the report.
HOST_VARS = (
    "ansible_facts",
    "gpufleet_toolkit",
    "gpufleet_runtime",
    "gpufleet_validate",
    "gpufleet_device_plugin",
    "gpufleet_failed",
    "gpufleet_stage_reached",
    "gpufleet_remediation",
)
SUMMARY_LINE = (
    "{hosts} hosts: {gpu_nodes} GPU nodes ({gpus} GPUs), {cpu_only} CPU-only, {no_facts} unreachable/no facts; "
    "validation: {passed} passed, {failed} failed, {not_validated} not validated; {stage_failed} failed a stage; "
    "{problems} problems"
)

Model = dict[str, Any]


class ReportError(ValueError):
    """The input is not what the report needs (the filter turns it into an AnsibleFilterError)."""


def plain(value: Any) -> Any:
    """Deep copy into plain dict/list/str/int/float/bool/None.

    Hostvars hold lazy or tagged values; a ``str`` subclass (ansible's tagged strings, ``markupsafe.Markup``)
    comes back as an exact ``str``, so nothing from a host can claim to be already escaped.
    """
    if isinstance(value, Mapping) or (hasattr(value, "keys") and hasattr(value, "__getitem__")):
        return {str(k): plain(value[k]) for k in list(value.keys())}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return str(value)


def _host_vars(hostvars: Any, host: Any) -> dict[str, Any]:
    try:
        hv = hostvars[host]
    except (KeyError, TypeError):
        return {}
    out = {}
    # A converged host's published facts come with its discovery (converge_check's ansible_facts.gpufleet_published);
    # a stage that ran sets them itself, and that value is the one read.
    published = _get(_get(hv, "ansible_facts", {}) or {}, "gpufleet_published", {}) or {}
    for key in HOST_VARS:
        value = _get(hv, key)
        if value is None:
            value = _get(published, key)
        if key == "ansible_facts":
            value = {"nvidia": _get(value, "nvidia")} if value is not None else None
        if value is not None:
            out[key] = plain(value)
    return out


def _gpus(nvidia: Mapping[str, Any]) -> list[dict[str, Any]]:
    gpus = [
        {
            "index": _get(gpu, "index"),
            "name": _get(gpu, "name", "unknown"),
            "uuid": _get(gpu, "uuid"),
            "pci_bus_id": _get(gpu, "pci_bus_id"),
            "memory_mib": _get(gpu, "memory_mib"),
            "mig_mode": _get(gpu, "mig_mode"),
            "architecture": _get(gpu, "architecture"),
        }
        for gpu in _get(nvidia, "gpus", [])
    ]
    if gpus:
        return gpus
    # Driver not loaded: only the PCI scan knows them.
    return [
        {
            "index": None,
            "name": f"PCI device {_get(dev, 'device_id', '?')} (driver not loaded)",
            "uuid": None,
            "pci_bus_id": _get(dev, "pci_bus_id"),
            "memory_mib": None,
            "mig_mode": None,
            "architecture": _get(dev, "architecture"),
        }
        for dev in _get(nvidia, "pci_devices", [])
        if _get(dev, "is_gpu", False)
    ]


def _engine_names(found: Mapping[str, Any], registered: Mapping[str, Any], checked: Mapping[str, Any]) -> list[str]:
    """The known engines in their usual order, then any other engine the runtime or validate role named, once."""
    names = [e for e in ENGINES if _get(_get(found, e, {}), "installed") or e in registered or e in checked]
    return names + sorted({e for e in [*registered, *checked] if e not in names})


def _engines(nvidia: Mapping[str, Any], runtime: Mapping[str, Any], validate: Mapping[str, Any]) -> list[dict]:
    found = _get(nvidia, "engines", {})
    registered = _get(runtime, "engines", {})
    checked = _get(validate, "engines", {})
    out = []
    for name in _engine_names(found, registered, checked):
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


def _status(entry: Mapping[str, Any], failed: Any, validate: Any) -> str:
    if entry["gpu_count"] == 0:
        return "stage_failed" if failed else "cpu_only"
    if failed is not None:
        return "stage_failed"
    if validate is None or entry["validation"]["skipped"]:
        return "not_validated"
    return "passed" if entry["validation"]["passed"] else "failed"


def host_entry(name: str, hv: Mapping[str, Any], today: Any = None) -> dict[str, Any]:
    """One host of the model from its (plain) report variables (``HOST_VARS``); ``today`` (a date or the report's
    ``generated`` text) dates the driver branches' end of life (``exposure``)."""
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
        "gpu_users": [],
        "failed": None,
        "lost_at": None,  # the stage of this run the host went unreachable in (fleet_report_model's active)
        # This run's toolkit and runtime stages, else what gpu_facts read from the host (a stage run alone).
        "toolkit": stage_toolkit(_get(hv, "gpufleet_toolkit"), nvidia),
        "device_plugin": _get(hv, "gpufleet_device_plugin"),
        "cdi_spec": _get(_get(hv, "gpufleet_runtime", {}), "cdi_spec") or _get(nvidia or {}, "cdi_spec"),
        "exposure": None,
        "dra": None,  # gpu_facts' DRA verdict (set below from the facts)
        # what playbooks/remediate.yml did this run, and the host's remediation history
        "remediation": remediation_entry(_get(hv, "gpufleet_remediation")),
    }
    if failed is not None:
        entry["failed"] = {
            "stage": str(_get(failed, "stage", "?")),
            "task": str(_get(failed, "task", "?")),
            "msg": str(_get(failed, "msg", "")),
            # site.yml's rescue found the host no longer answering (a connection that reports it as a failure)
            "unreachable": _get(failed, "unreachable", False) in (True, "True", "true"),
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
        # gpu_facts' verdict on NVIDIA's DRA driver (discovery/dra.py): {ready, release, checks}; None without GPUs.
        dra=_get(nvidia, "dra"),
        problems=[
            {"code": _get(p, "code", ""), "message": _get(p, "message", ""), "fix": _get(p, "fix", "")}
            for p in _get(nvidia, "problems", [])
        ],
    )
    # NVIDIA's bulletins and branch lifecycle joined with what the host runs (plugin_utils/exposure.py); its
    # problems join discovery's.
    packages = _get(_get(nvidia, "nvidia_toolkit", {}) or {}, "packages", {})
    exposure = host_exposure(entry, packages, today)
    entry["problems"] += exposure.pop("problems")
    entry["exposure"] = exposure
    try:
        # The processes holding a GPU (gpu_facts' gpu_users), each {pid, command, devices, engine, container_id, ...}.
        entry["gpu_users"] = processes(_get(nvidia, "gpu_users"))
    except GateError:
        entry["gpu_users"] = []
    if validate is not None:
        entry["validation"] = {
            "passed": bool(_get(validate, "passed", False)),
            "skipped": bool(_get(validate, "skipped", False)),
            "message": _get(validate, "message", ""),
        }
    entry["status"] = _status(entry, failed, validate)
    return entry


def summarize(entries: list[Mapping[str, Any]]) -> dict[str, Any]:
    """The fleet's counts; ``ok`` when no host failed validation or a stage and every host answered."""
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
        "not_in_run": count["not_in_run"],
        "unreachable": count["unreachable"],
        "problems": sum(len(e["problems"]) for e in entries),
    }
    summary["ok"] = not (summary["failed"] or summary["stage_failed"] or summary["no_facts"] or summary["unreachable"])
    return summary


def problem_groups(entries: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The fleet's problems by code: ``{code, hosts, count, fix}`` (``hosts``: the names, each once, in report order;
    ``count``: how many entries of that code over the fleet, a host with two bad GPUs counting two; ``fix``: the first
    host's), most hosts first, then by code. A code names one kind of problem, so an operator acts on a group at once
    (reset every GPU with a pending row remap, reboot every host that logged Xid 79)."""
    groups: dict[str, dict[str, Any]] = {}
    for entry in entries:
        for item in entry["problems"]:
            group = groups.setdefault(item["code"], {"code": item["code"], "hosts": [], "count": 0, "fix": item["fix"]})
            group["count"] += 1
            if entry["name"] not in group["hosts"]:
                group["hosts"].append(entry["name"])
    return sorted(groups.values(), key=lambda g: (-len(g["hosts"]), g["code"]))


def _lost(entry: dict[str, Any], hv: Mapping[str, Any]) -> None:
    """``entry`` of a host the run lost (unreachable, or failed outside a stage's rescue): status ``unreachable``,
    ``lost_at`` the last stage it entered (``gpufleet_stage_reached``; ``discover`` when it never answered)."""
    entry["status"] = "unreachable"
    entry["lost_at"] = str(_get(hv, "gpufleet_stage_reached") or "discover")


def fleet_report_model(
    hostvars: Any,
    hosts: Iterable[Any] | None,
    generated: Any = "",
    in_run: Iterable[Any] | None = None,
    active: Iterable[Any] | None = None,
) -> Model:
    """The report's data; see the filter's documentation (``plugins/filter/fleet_report_model.yml``).

    ``in_run``: the hosts this run's stages targeted (``--limit``, ``gpufleet_hosts``); every other host of ``hosts``
    is listed as ``not_in_run``, not as unreachable, and does not fail the run. None: every host was in the run.
    ``active``: the hosts of the run still answering at the report (``ansible_play_hosts``: Ansible drops a host that
    went unreachable, from that task on); a host of the run not among them, with no stage failure recorded and no
    failed validation (which also drops it), is ``unreachable``, with ``lost_at`` the stage it was lost in. None:
    every host of the run answered."""
    if hosts is None or isinstance(hosts, (str, bytes)):
        raise ReportError("fleet_report_model: hosts must be a list of host names (groups['all'])")
    for name, value in (("in_run", in_run), ("active", active)):
        if isinstance(value, (str, bytes)):
            raise ReportError(f"fleet_report_model: {name} must be a list of host names")
    ran = None if in_run is None else {str(h) for h in in_run}
    answered = None if active is None else {str(h) for h in active}
    entries = []
    for host in hosts:
        hv = _host_vars(hostvars, host)
        entry = host_entry(str(host), hv, generated)
        if ran is not None and str(host) not in ran:
            entry["status"] = "not_in_run"
        elif entry["failed"] is not None and entry["failed"]["unreachable"]:
            entry["status"], entry["lost_at"] = "unreachable", entry["failed"]["stage"]
        elif (
            answered is not None
            and str(host) not in answered
            and entry["failed"] is None
            and entry["status"] != "failed"
        ):
            # Ansible also drops a host whose validation failed the play (validate_fail_on_error): that one answered
            _lost(entry, hv)
        entries.append(entry)
    summary = summarize(entries)
    line = SUMMARY_LINE.format(**summary)
    if summary["unreachable"]:
        lost = ", ".join(f"{e['name']} (at {e['lost_at']})" for e in entries if e["status"] == "unreachable")
        line += f"; {summary['unreachable']} unreachable: {lost}"
    if summary["not_in_run"]:
        line += f"; {summary['not_in_run']} not in this run"
    return {
        "generated": str(generated or ""),
        "summary": summary,
        "summary_line": line,
        "hosts": entries,
        "problem_groups": problem_groups(entries),
        "exposure": fleet_exposure(entries),
    }


def check_model(model: Any) -> Model:
    """The model itself, or ReportError when ``model`` is not the output of ``fleet_report_model``."""
    if not isinstance(model, Mapping) or "hosts" not in model or "summary_line" not in model:
        raise ReportError("the input must be the output of gpufleet.nvidia.fleet_report_model")
    return model


# What a rendering shows, derived from the model (Jinja filters in the templates).


def status_text(status: str) -> str:
    """``failed`` -> ``FAILED``, ``no_facts`` -> ``unreachable / no facts`` ..."""
    return STATUS_TEXT.get(status, str(status))


def driver_text(driver: Mapping[str, Any] | None) -> str:
    """``installed 535.261.03, loaded 535.261.03, CUDA 12.2[, reboot required]``; ``unknown`` without facts."""
    if not driver:
        return "unknown"
    text = f"installed {driver['installed_version'] or 'none'}, loaded {driver['loaded_version'] or 'none'}"
    if driver["cuda_version"]:
        text += f", CUDA {driver['cuda_version']}"
    if driver["reboot_required"]:
        text += ", reboot required"
    return text


def engine_validation(engine: Mapping[str, Any]) -> str:
    """``passed (0.4 s)``, ``FAILED``, ``skipped`` or ``not run``."""
    val = engine["validation"]
    if val is None:
        return "not run"
    if val["skipped"]:
        return "skipped"
    return ("passed" if val["passed"] else "FAILED") + (f" ({val['seconds']:.1f} s)" if val["seconds"] else "")


def engine_result(engine: Mapping[str, Any]) -> str:
    """The engine's validation as a class: ``passed``, ``failed`` or ``skipped`` (also when not run)."""
    val = engine["validation"]
    if val is None or val["skipped"]:
        return "skipped"
    return "passed" if val["passed"] else "failed"


def engine_detail(engine: Mapping[str, Any]) -> str:
    """The validation's message, else the runtime role's."""
    return engine["validation"]["message"] if engine["validation"] else engine["runtime_message"]


def passed_engines(host: Mapping[str, Any]) -> str:
    """The engines of a host whose validation passed, in the model's order (``docker, containerd``), or ``-``."""
    return ", ".join(e["name"] for e in host["engines"] if e["validation"] and e["validation"]["passed"]) or "-"


def gpu_user_text(user: Mapping[str, Any]) -> str:
    """``pid 4242 (python3) in docker container 4f3c2b1a0e9d holds /dev/nvidia0`` (the driver role's wording)."""
    return describe(user)


def yes_no(value: Any) -> str:
    return "yes" if value else "no"


def dra_text(verdict: Mapping[str, Any] | None) -> str:
    """The DRA verdict in a table cell: ``ready``, or ``not ready:`` and each failing check with what it found."""
    if not verdict:
        return ""
    if verdict.get("ready"):
        return "ready"
    failing = [c for c in verdict.get("checks") or [] if not c.get("ok")]
    return "not ready: " + "; ".join(f"{c.get('name')} ({c.get('found')})" for c in failing)


def dra_fixes(verdict: Mapping[str, Any] | None) -> list[str]:
    """The fixes of the verdict's failing checks, each once, in check order."""
    fixes: list[str] = []
    for check in (verdict or {}).get("checks") or []:
        fix = check.get("fix")
        if not check.get("ok") and fix and fix not in fixes:
            fixes.append(fix)
    return fixes


TEXT_FILTERS = {
    "status_text": status_text,
    "driver_text": driver_text,
    "engine_validation": engine_validation,
    "engine_result": engine_result,
    "engine_detail": engine_detail,
    "passed_engines": passed_engines,
    "gpu_user_text": gpu_user_text,
    "yes_no": yes_no,
    "dra_text": dra_text,
    "dra_fixes": dra_fixes,
    "exposure_tags": exposure_tags,
    "remediation_text": remediation_text,
    "history_text": history_text,
}
