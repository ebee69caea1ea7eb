# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The fleet view of the report (plugins/plugin_utils/report_fleet.py): the charts' tallies, and what changed since
the previous run's JSON report, on a synthetic fleet of 300 hosts whose expected answers are counted from how it
was made (conftest.synthetic_fleet), not from the code under test."""

import json

import pytest

from ansible_collections.gpufleet.nvidia.plugins.filter import fleet_report
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils import report, report_fleet, report_render

N = 300


def _model(fleet, run):
    hostvars, hosts = fleet.synthetic(N, run)
    return report.fleet_report_model(hostvars, hosts, generated=f"run {run}")


def _down(i):
    return i % 50 == 49


def _cpu(i):
    return i % 25 == 24 and not _down(i)


def test_counts_of_300_hosts(fleet):
    counts = report_fleet.counts(_model(fleet, 1))
    gpu_hosts = [i for i in range(N) if not _down(i) and not _cpu(i)]
    want_models = {m: sum(1 + i % 4 for i in gpu_hosts if i % 3 == k) for k, m in enumerate(fleet.MODELS)}
    assert {c["label"]: c["count"] for c in counts["gpu_model"]} == want_models
    assert [c["count"] for c in counts["gpu_model"]] == sorted(want_models.values(), reverse=True)
    assert counts["driver"] == [{"label": "535.261.03", "count": N - 6}]
    assert counts["engine"] == [{"label": "docker", "count": N - 6}]
    failed = sum(1 for i in gpu_hosts if i % 10 == 3)
    assert {c["label"]: c["count"] for c in counts["validation"]} == {
        "passed": len(gpu_hosts) - failed,
        "FAILED": failed,
        "CPU-only": sum(1 for i in range(N) if _cpu(i)),
        "unreachable / no facts": 6,
    }


def test_changes_since_the_previous_json_report(fleet):
    previous = json.loads(fleet_report.to_report_json(_model(fleet, 1)))
    changes = report_fleet.changes(previous, _model(fleet, 2))
    assert changes["previous_generated"] == "run 1" and changes["any"]
    upgraded = [f"node-{i:03d}" for i in range(N) if i % 4 == 0 and not _down(i)]
    assert [d["host"] for d in changes["drivers"]] == upgraded
    assert {(d["before"], d["after"], d["direction"]) for d in changes["drivers"]} == {
        ("535.261.03", "550.127.05", "upgraded")
    }
    newly = [f"node-{i:03d}" for i in range(N) if i % 10 == 7 and not _cpu(i) and not _down(i)]
    assert [c["host"] for c in changes["newly_failing"]] == newly
    assert {(c["before"], c["after"]) for c in changes["newly_failing"]} == {("passed", "FAILED")}
    recovered = [f"node-{i:03d}" for i in range(N) if i % 10 == 3 and not _cpu(i) and not _down(i)]
    assert [c["host"] for c in changes["recovered"]] == recovered
    assert changes["added"] == changes["removed"] == []
    # Back again: the same hosts the other way round.
    back = report_fleet.changes(_model(fleet, 2), _model(fleet, 1))
    assert [c["host"] for c in back["recovered"]] == newly
    assert {d["direction"] for d in back["drivers"]} == {"downgraded"}


def test_changes_of_hosts_added_gone_or_not_in_this_run(fleet):
    hostvars, hosts = fleet.synthetic(5, 1)
    before = report.fleet_report_model(hostvars, hosts)
    after = report.fleet_report_model(hostvars, [*hosts[1:], "node-new"], in_run=hosts[2:])
    changes = report_fleet.changes(before, after)
    assert changes["added"] == ["node-new"] and changes["removed"] == ["node-000"]
    # node-001 was left out of this run (not_in_run): not "newly failing", not "recovered"
    assert changes["newly_failing"] == changes["recovered"] == changes["drivers"] == []
    assert report_fleet.changes(before, before)["any"] is False
    assert report_fleet.changes(None, before) is None and report_fleet.changes({}, before) is None


def test_a_driver_appearing_is_changed_not_upgraded():
    host = {"name": "a", "facts": True, "gpu_count": 1, "status": "passed"}
    old = dict(host, driver={"installed_version": None})
    new = dict(host, driver={"installed_version": "535.261.03", "loaded_version": "535.261.03"})
    changes = report_fleet.changes({"hosts": [old]}, {"hosts": [new]})
    assert changes["drivers"] == [{"host": "a", "before": "none", "after": "535.261.03", "direction": "changed"}]


def test_a_previous_report_that_is_not_one_is_an_error(fleet):
    model = _model(fleet, 1)
    with pytest.raises(report.ReportError, match="previous report must be a fleet report"):
        report_fleet.changes({"hosts": "x"}, model)
    with pytest.raises(fleet_report.AnsibleFilterError, match="remove or restore the previous JSON report"):
        fleet_report.to_report_html(model, previous="{not json")


def test_the_page_says_what_changed(fleet):
    previous = fleet_report.to_report_json(_model(fleet, 1))  # as report.yml passes it: the file's text
    page = fleet_report.to_report_html(_model(fleet, 2), previous=previous)
    assert "<p>Compared with run 1:</p>" in page
    assert "<li>driver upgraded on node-000: 535.261.03 &rarr; 550.127.05</li>" in page
    assert '<li class="failed">newly failing: node-007 (passed &rarr; FAILED)</li>' in page
    assert '<li class="passed">recovered: node-003 (FAILED &rarr; passed)</li>' in page
    assert "No previous report" in report_render.render(_model(fleet, 2), "html")
