# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The fleet view of a report for hundreds of hosts: counts for the charts, and what changed since the previous run.

Controller only, pure (no I/O). ``counts(model)`` tallies the model of ``report.fleet_report_model`` by GPU model,
driver version, container engine and validation result; ``changes(previous, model)`` compares it with the previous
run's model (the JSON report that run wrote, parsed): drivers that changed version, hosts newly failing, hosts
recovered, hosts added or gone. ``report_render`` gives both to every template as ``counts`` and ``changes``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .report import STATUS_TEXT, ReportError

# A host in one of these states needs someone: it failed validation or a stage, or the run lost it.
FAILING = frozenset(("failed", "stage_failed", "no_facts", "unreachable"))
NONE = "none"


def _tally(values: list[str]) -> list[dict[str, Any]]:
    """``[{label, count}]``, most first, then by label."""
    seen: dict[str, int] = {}
    for value in values:
        seen[value] = seen.get(value, 0) + 1
    return [{"label": k, "count": n} for k, n in sorted(seen.items(), key=lambda kv: (-kv[1], kv[0]))]


def driver_version(host: Mapping[str, Any]) -> str:
    """The driver a host runs: the loaded version, else the installed one, else ``none`` (``""`` without facts)."""
    driver = host.get("driver") or {}
    if not host.get("facts") or (not host.get("gpu_count") and not driver.get("installed_version")):
        return ""
    return str(driver.get("loaded_version") or driver.get("installed_version") or NONE)


def counts(model: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The fleet's tallies, each ``[{label, count}]`` most first: ``gpu_model`` (GPUs per model name), ``driver``
    (hosts per driver version: those with GPUs or a driver; ``none``: GPUs but no driver), ``engine`` (hosts per
    container engine found on them) and ``validation`` (hosts per status, as ``report.status_text`` writes it)."""
    hosts = _hosts(model)
    return {
        "gpu_model": _tally([str(g.get("name") or "?") for h in hosts for g in h.get("gpus") or []]),
        "driver": _tally([v for v in (driver_version(h) for h in hosts) if v]),
        "engine": _tally([str(e.get("name")) for h in hosts for e in h.get("engines") or []]),
        "validation": _tally([STATUS_TEXT.get(h.get("status"), str(h.get("status"))) for h in hosts]),
    }


def _hosts(model: Any) -> list[Mapping[str, Any]]:
    if not isinstance(model, Mapping) or not isinstance(model.get("hosts"), list):
        raise ReportError("the previous report must be a fleet report's JSON (an object with a list of hosts)")
    return [h for h in model["hosts"] if isinstance(h, Mapping) and "name" in h]


def _version_key(version: str) -> tuple:
    return tuple(int(p) if p.isdigit() else -1 for p in version.split("."))


def changes(previous: Any, model: Mapping[str, Any]) -> dict[str, Any] | None:
    """What changed since ``previous`` (the previous run's model; None or empty: no previous run, returns None).

    ``drivers``: ``{host, before, after, direction}`` for each host whose driver version changed (``direction``
    ``upgraded``, ``downgraded`` or ``changed`` when either side is not a version); ``newly_failing`` and
    ``recovered``: ``{host, before, after}`` (statuses as shown) of hosts that entered or left a failing state
    (FAILING); ``added`` and ``removed``: host names in only one of the two reports. Hosts ``not_in_run`` this
    time are left out of the comparison (this run did not look at them). ``previous_generated``: its timestamp."""
    if not previous:
        return None
    before = {str(h["name"]): h for h in _hosts(previous)}
    now = {str(h["name"]): h for h in _hosts(model)}
    out: dict[str, Any] = {
        "previous_generated": str(previous.get("generated") or ""),
        "drivers": [],
        "newly_failing": [],
        "recovered": [],
        "added": [n for n in now if n not in before],
        "removed": [n for n in before if n not in now],
    }
    for name, host in now.items():
        old = before.get(name)
        if old is None or host.get("status") == "not_in_run" or old.get("status") == "not_in_run":
            continue
        was, is_ = driver_version(old), driver_version(host)
        if was and is_ and was != is_:
            if NONE in (was, is_):
                direction = "changed"
            else:
                direction = "upgraded" if _version_key(is_) > _version_key(was) else "downgraded"
            out["drivers"].append({"host": name, "before": was, "after": is_, "direction": direction})
        shown = {"host": name, "before": _text(old), "after": _text(host)}
        if host.get("status") in FAILING and old.get("status") not in FAILING:
            out["newly_failing"].append(shown)
        elif old.get("status") in FAILING and host.get("status") not in FAILING:
            out["recovered"].append(shown)
    out["any"] = any(out[k] for k in ("drivers", "newly_failing", "recovered", "added", "removed"))
    return out


def _text(host: Mapping[str, Any]) -> str:
    return STATUS_TEXT.get(host.get("status"), str(host.get("status")))
