# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Merging a sliced run's fleet reports (plugins/plugin_utils/report_merge.py): slices made by fleet_report_model with
``in_run`` from the hand-made hostvars of ../conftest.py, as each slice's report.yml makes them, through JSON."""

import json

import pytest

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils import report
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.report_merge import merge_reports
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.report_render import render


def _slice(fleet, hosts, generated):
    """A slice's report as its JSON file holds it: every host of the inventory, those of the slice run."""
    model = report.fleet_report_model(fleet.HOSTVARS, fleet.HOSTS, generated=generated, in_run=hosts)
    return json.loads(json.dumps(report.plain(model)))


def _status(model):
    return {h["name"]: h["status"] for h in model["hosts"]}


@pytest.fixture
def whole(fleet):
    return report.fleet_report_model(fleet.HOSTVARS, fleet.HOSTS, generated="2026-11-23 10:00:00 UTC")


def test_two_slices_make_the_whole_fleet(fleet, whole):
    # AWX slices by index: slice 1 the hosts 0, 2, 4, ..., slice 2 the hosts 1, 3, 5, ...
    one, two = fleet.HOSTS[0::2], fleet.HOSTS[1::2]
    merged = merge_reports(
        [_slice(fleet, one, "2026-11-23 10:00:00 UTC"), _slice(fleet, two, "2026-11-23 10:00:07 UTC")]
    )
    assert merged["hosts"] == json.loads(json.dumps(report.plain(whole["hosts"])))
    assert merged["summary"] == whole["summary"]
    assert merged["summary_line"] == whole["summary_line"]
    assert merged["problem_groups"] == whole["problem_groups"]
    assert merged["generated"] == "2026-11-23 10:00:07 UTC"
    assert merged["merge"]["duplicates"] == []
    assert [(s["index"], s["missing"], s["hosts_run"]) for s in merged["merge"]["slices"]] == [
        (0, False, len(one)),
        (1, False, len(two)),
    ]
    # every rendering takes the merged model
    assert "<h1>GPU fleet report</h1>" in render(merged, "html", None)
    assert merged["summary_line"] in render(merged, "markdown", None)


def test_a_host_two_slices_ran_keeps_the_later_report(fleet):
    early = _slice(fleet, ["good", "bad"], "2026-11-23 10:00:00 UTC")
    late = _slice(fleet, ["bad", "cpu"], "2026-11-23 11:00:00 UTC")
    late_bad = next(h for h in late["hosts"] if h["name"] == "bad")
    late_bad["status"] = "passed"  # the rerun fixed it
    for order in ([early, late], [late, early]):
        merged = merge_reports(order)
        assert _status(merged)["bad"] == "passed"
        assert merged["merge"]["duplicates"] == ["bad"]
        assert merged["generated"] == "2026-11-23 11:00:00 UTC"
    # the same time on both: the later in the list wins
    same = _slice(fleet, ["bad"], "2026-11-23 10:00:00 UTC")
    assert _status(merge_reports([same, early]))["bad"] == "failed"
    assert _status(merge_reports([early, same]))["bad"] == "failed"
    fixed = json.loads(json.dumps(same))
    next(h for h in fixed["hosts"] if h["name"] == "bad")["status"] = "passed"
    assert _status(merge_reports([early, fixed]))["bad"] == "passed"
    assert _status(merge_reports([fixed, early]))["bad"] == "failed"


def test_a_slice_that_left_no_report(fleet):
    merged = merge_reports([_slice(fleet, ["good"], "2026-11-23 10:00:00 UTC"), None])
    status = _status(merged)
    assert status["good"] == "passed"
    assert {s for n, s in status.items() if n != "good"} == {"not_in_run"}
    assert merged["summary"]["ok"] is False
    assert merged["summary_line"].endswith("; 6 not in any slice; 1 of 2 slices left no report")
    assert merged["merge"]["slices"][1] == {"index": 1, "missing": True, "generated": "", "hosts_run": 0, "ok": False}


def test_a_slice_whose_hosts_failed(fleet):
    merged = merge_reports(
        [_slice(fleet, ["good"], "2026-11-23 10:00:00 UTC"), _slice(fleet, ["stage"], "2026-11-23 10:00:00 UTC")]
    )
    assert [s["ok"] for s in merged["merge"]["slices"]] == [True, False]
    assert merged["summary"]["ok"] is False and merged["summary"]["stage_failed"] == 1
    assert _status(merged)["stage"] == "stage_failed"


def test_a_host_only_one_slice_knows(fleet):
    # an inventory that changed between the slices: the host is listed once, where it appears first
    a = _slice(fleet, ["good"], "2026-11-23 10:00:00 UTC")
    b = _slice(fleet, ["bad"], "2026-11-23 10:00:00 UTC")
    b["hosts"] = [h for h in b["hosts"] if h["name"] != "good"] + [{**b["hosts"][0], "name": "new", "status": "passed"}]
    merged = merge_reports([a, b])
    names = [h["name"] for h in merged["hosts"]]
    assert names == [*fleet.HOSTS, "new"] and len(set(names)) == len(names)
    assert _status(merged)["new"] == "passed"


@pytest.mark.parametrize("bad", ["not a list", [{"hosts": "x"}], [{"summary": {}}], [{"hosts": [{"name": "a"}]}]])
def test_not_reports(bad):
    with pytest.raises(report.ReportError, match="merge_fleet_reports"):
        merge_reports(bad)


def test_no_slices():
    merged = merge_reports([])
    assert merged["hosts"] == [] and merged["summary"]["hosts"] == 0 and merged["generated"] == ""
