# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""One fleet report from the JSON reports of a sliced run (AWX job slicing: each slice runs ``site.yml`` on its share
of the inventory and reports its own hosts; every other host of the inventory is ``not_in_run`` in its report).

``merge_reports(reports)``: ``reports`` are the slices' models (the JSON report files, parsed), in any order; an entry
that is None stands for a slice that left no report (its job failed before the report play). Per host, the entry of
the slice that ran it wins over ``not_in_run`` ones; a host two slices ran (overlapping slices, a rerun of one slice)
keeps the entry of the later report (``generated``; the later in ``reports`` order on a tie) and is listed in
``merge.duplicates``. A host no slice ran stays ``not_in_run``; with a slice missing, ``summary.ok`` is false and the
summary line says so, since the missing slice's hosts are among those. The result is a model like
``report.fleet_report_model``'s (every rendering takes it), ``generated`` the latest slice's, plus ``merge``: the
slices (generated, hosts run, ok) and the duplicates.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.exposure import fleet_exposure
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.report import (
    SUMMARY_LINE,
    Model,
    ReportError,
    problem_groups,
    summarize,
)


def _check(index: int, model: Any) -> Mapping[str, Any]:
    hosts = model.get("hosts") if isinstance(model, Mapping) else None
    if not isinstance(hosts, list) or not all(isinstance(h, Mapping) and "name" in h and "status" in h for h in hosts):
        raise ReportError(
            f"merge_fleet_reports: report {index} is not a fleet report (the JSON report of playbooks/report.yml: "
            "a mapping with a list 'hosts' of entries with 'name' and 'status')"
        )
    return model


def merge_reports(reports: Any, generated: Any = None) -> Model:
    """The slices' reports as one (see the module's docstring); ``generated``: the merged report's time, default the
    latest slice's."""
    if not isinstance(reports, (list, tuple)):
        raise ReportError("merge_fleet_reports: the input must be a list of fleet reports (one per slice)")
    slices: list[dict[str, Any]] = []
    order: list[str] = []  # every host once, in the order the slices list them
    chosen: dict[str, tuple[str, int, Mapping[str, Any]]] = {}  # name -> (generated, index, entry)
    idle: dict[str, Mapping[str, Any]] = {}  # name -> a not_in_run entry (a host no slice ran keeps one)
    duplicates: set[str] = set()
    for index, raw in enumerate(reports):
        if raw is None:
            slices.append({"index": index, "missing": True, "generated": "", "hosts_run": 0, "ok": False})
            continue
        model = _check(index, raw)
        when = str(model.get("generated") or "")
        ran = 0
        for entry in model["hosts"]:
            name = str(entry["name"])
            if name not in idle and name not in chosen:
                order.append(name)
            if entry["status"] == "not_in_run":
                idle.setdefault(name, entry)
                continue
            ran += 1
            if name in chosen:
                duplicates.add(name)
                if (when, index) < chosen[name][:2]:
                    continue
            chosen[name] = (when, index, entry)
        summary = model.get("summary")
        ok = bool(summary.get("ok")) if isinstance(summary, Mapping) else False
        slices.append({"index": index, "missing": False, "generated": when, "hosts_run": ran, "ok": ok})
    entries = [dict(chosen[n][2]) if n in chosen else dict(idle[n]) for n in order]
    summary = summarize(entries)
    missing = sum(1 for s in slices if s["missing"])
    line = SUMMARY_LINE.format(**summary)
    if summary["unreachable"]:
        lost = ", ".join(
            f"{e['name']} (at {e.get('lost_at') or 'discover'})" for e in entries if e["status"] == "unreachable"
        )
        line += f"; {summary['unreachable']} unreachable: {lost}"
    if summary["not_in_run"]:
        line += f"; {summary['not_in_run']} not in any slice"
    if missing:
        summary["ok"] = False
        line += f"; {missing} of {len(slices)} slices left no report"
    times = [s["generated"] for s in slices if s["generated"]]
    return {
        "generated": str(generated) if generated else max(times, default=""),
        "summary": summary,
        "summary_line": line,
        "hosts": entries,
        "problem_groups": problem_groups(entries),
        "exposure": fleet_exposure(entries),
        "merge": {"slices": slices, "duplicates": sorted(duplicates)},
    }
