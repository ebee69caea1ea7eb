# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""discovery/remediation_record.py: which XIDs a remediation handled (contract 2 of issue 37: discovery and the GPU
watch leave them out), the per-host budget count, the history kept."""

from __future__ import annotations

import json

from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery import remediation_record as rr
from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery import xid

BUS = "0000:17:00.0"
OTHER = "0000:65:00.0"
KMSG = (
    "4,1000,5000000,-;NVRM: Xid (PCI:0000:17:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit "
    "error (DBE) has been detected on GPU in the framebuffer at partition 0, subpartition 0.\n"
    "4,1001,9000000,-;NVRM: Xid (PCI:0000:65:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"
    "4,1002,12000000,-;NVRM: Xid (PCI:0000:17:00): 48, pid='<unknown>', name=<unknown>, again.\n"
)


def _record(bus=BUS, boot="boot-a", uptime=10.0):
    return {"version": 1, "history": [], "handled_xids": {bus: {"boot_id": boot, "uptime_s": uptime}}}


def test_an_xid_logged_before_the_mark_of_this_boot_is_handled_a_later_one_is_not():
    events = xid.parse(KMSG)
    left = rr.drop_handled(events, _record(), "boot-a")
    # 48 at 5 s handled; 79 of another GPU and 48 at 12 s (after the mark at 10 s) still count
    assert [(e["xid"], e["uptime_s"]) for e in left] == [(79, 9.0), (48, 12.0)]


def test_another_boot_or_no_record_or_no_uptime_handles_nothing():
    events = xid.parse(KMSG)
    assert rr.drop_handled(events, _record(), "boot-b") == events
    assert rr.drop_handled(events, None, "boot-a") == events
    assert rr.drop_handled(events, _record(), None) == events
    journal_line = dict(events[0], uptime_s=None)
    assert not rr.xid_handled(journal_line, _record(), "boot-a")


def test_read_record_absent_broken_and_foreign(tmp_path):
    assert rr.read_record(str(tmp_path)) == (rr.empty(), None)
    path = tmp_path / "var/lib/gpufleet/remediation.json"
    path.parent.mkdir(parents=True)
    path.write_text("{broken")
    record, error = rr.read_record(str(tmp_path))
    assert record == rr.empty() and "remediation.json" in error
    path.write_text(json.dumps({"version": 9}))
    assert "no remediation record of version 1" in rr.read_record(str(tmp_path))[1]
    path.write_text(json.dumps(_record()))
    assert rr.read_record(str(tmp_path)) == (_record(), None)


def test_budget_counts_the_last_day_without_dry_runs():
    now = 1_000_000.0
    record = {
        "history": [
            {"time": now - 90_000, "action": "reset"},  # more than a day ago
            {"time": now - 3_600, "action": "reset"},
            {"time": now - 60, "action": "reboot", "dry_run": True},
            {"time": now - 10, "action": "reboot"},
        ]
    }
    assert rr.count_since(record, now - rr.DAY_S) == 2
    summary = rr.summary(record, None, now)
    assert summary["today"] == 2 and summary["last"]["action"] == "reboot" and len(summary["history"]) == 4


def test_with_entry_appends_marks_and_amends_the_latest():
    record = rr.empty()
    one = rr.with_entry(record, {"time": 1.0, "action": "reset", "result": "started"}, [], "boot-a", 50.0)
    assert one["history"] == [{"time": 1.0, "action": "reset", "result": "started"}] and one["handled_xids"] == {}
    two = rr.with_entry(one, {"time": 2.0, "result": "remediated", "action": ""}, [BUS], "boot-a", 60.0, amend=True)
    assert two["history"] == [{"time": 1.0, "action": "reset", "result": "remediated"}]
    assert two["handled_xids"] == {BUS: {"boot_id": "boot-a", "uptime_s": 60.0}}
    assert one["history"][0]["result"] == "started"  # a copy
    many = rr.empty()
    for i in range(rr.MAX_HISTORY + 5):
        many = rr.with_entry(many, {"time": float(i)}, [], None, None)
    assert len(many["history"]) == rr.MAX_HISTORY and many["history"][0]["time"] == 5.0


def test_boot_id_and_uptime_from_proc(tmp_path):
    (tmp_path / "proc/sys/kernel/random").mkdir(parents=True)
    (tmp_path / "proc/sys/kernel/random/boot_id").write_text("abc-123\n")
    (tmp_path / "proc/uptime").write_text("93112.55 180000.00\n")
    assert rr.boot_id(str(tmp_path)) == "abc-123" and rr.uptime_s(str(tmp_path)) == 93112.55
    assert rr.boot_id(str(tmp_path / "none")) is None and rr.uptime_s(str(tmp_path / "none")) is None
