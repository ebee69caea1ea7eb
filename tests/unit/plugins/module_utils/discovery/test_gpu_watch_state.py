# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""discovery/gpu_watch_state.py and discovery/actions.py: the GPU watch's state as discovery reads it (its XIDs of
this boot merged with the ring buffer's, its last run a fact, a stale or failing watch a problem) and the remediation
class of each GPU problem."""

from __future__ import annotations

import json

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery import actions
from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery import gpu_watch_state as watch
from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery.problems import Host


def event(bus, xid, count, message="m"):
    return {"pci_bus_id": bus, "xid": xid, "count": count, "bucket": "RESTART_BM", "last_message": message}


STATE = {
    "version": 1,
    "boot_id": "boot-a",
    "last_run": 1000.0,
    "interval_s": 60,
    "error": None,
    "nvml_up": True,
    "kmsg": {"source": "/dev/kmsg", "seq": 40, "lost": 3},
    "xid_events": [event("0000:06:00.0", 79, 2, "watch"), event("0000:05:00.0", 48, 1, "watch")],
}


def test_merge_keeps_what_the_ring_buffer_lost_and_the_larger_count():
    ring = [event("0000:05:00.0", 48, 3, "ring"), event("0000:07:00.0", 13, 1)]
    merged = watch.merge_xids(ring, STATE, "boot-a")
    assert [(e["pci_bus_id"], e["xid"], e["count"], e["last_message"]) for e in merged] == [
        ("0000:05:00.0", 48, 3, "ring"),  # the ring holds records the watch has not read yet
        ("0000:07:00.0", 13, 1, "m"),
        ("0000:06:00.0", 79, 2, "watch"),  # gone from the ring, still counted
    ]
    assert merged[2]["source"] == "gpu_watch" and "source" not in merged[0]
    assert watch.merge_xids(ring, STATE, "boot-b") == ring  # another boot's XIDs do not count
    # A remediation after the watch's last run: the GPU's summary whose latest event it covers is left out.
    stamped = {**STATE, "xid_events": [{**event("0000:06:00.0", 79, 2), "last_uptime_s": 93112.0}]}
    assert watch.merge_xids([], stamped, "boot-a", lambda e: e["uptime_s"] <= 93200.0) == []
    assert len(watch.merge_xids([], stamped, "boot-a", lambda e: e["uptime_s"] <= 90000.0)) == 1
    assert watch.merge_xids(ring, None, "boot-a") == ring


def test_watch_facts_fresh_stale_missing_and_unreadable():
    fresh = watch.watch_facts(STATE, None, 1100.0)
    assert fresh == {
        "installed": True,
        "state_file": watch.STATE_PATH,
        "last_run": 1000.0,
        "age_s": 100.0,
        "interval_s": 60,
        "stale": False,
        "error": None,
        "nvml_up": True,
        "kmsg_lost": 3,
    }
    assert watch.watch_facts(STATE, None, 1000.0 + 181)["stale"] is True  # 3 intervals, at least 180 s
    assert watch.watch_facts({**STATE, "interval_s": 300}, None, 1000.0 + 600)["stale"] is False
    assert watch.watch_facts(None, None, 0.0)["installed"] is False
    broken = watch.watch_facts(None, "gpu-watch.json: Expecting value", 0.0)
    assert broken["installed"] is True and broken["stale"] is True


def test_problems_of_a_stale_a_failing_and_an_absent_watch():
    def codes(facts):
        return [(p["code"], p["message"], p["fix"]) for p in watch.gpu_watch_problems(Host({"gpu_watch": facts}))]

    assert codes(watch.watch_facts(STATE, None, 1100.0)) == []
    assert codes(watch.watch_facts(None, None, 0.0)) == []
    [(code, message, fix)] = codes(watch.watch_facts(STATE, None, 2000.0))
    assert code == "gpu_watch_stale" and "1000 s ago" in message and "systemctl enable --now" in fix
    [(code, message, _fix)] = codes(watch.watch_facts({**STATE, "error": "cannot write /x: EROFS"}, None, 1010.0))
    assert code == "gpu_watch_failed" and "EROFS" in message
    [(code, message, _fix)] = codes(watch.watch_facts(None, "bad json", 0.0))
    assert code == "gpu_watch_stale" and "bad json" in message


def test_read_state(tmp_path):
    assert watch.read_state(str(tmp_path)) == (None, None)
    path = tmp_path / watch.STATE_PATH.lstrip("/")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(STATE))
    assert watch.read_state(str(tmp_path)) == (STATE, None)
    path.write_text("{")
    assert watch.read_state(str(tmp_path))[1].startswith(watch.STATE_PATH)
    path.write_text(json.dumps({**STATE, "version": 9}))
    assert "no GPU watch state of version 1" in watch.read_state(str(tmp_path))[1]


@pytest.mark.parametrize(
    ("code", "cls"),
    [
        ("gpu_xid_79", "RESTART_BM"),
        ("gpu_xid_48", "RESET_GPU"),  # WORKFLOW_XID_48: the catalog's procedure ends in a reset
        ("gpu_xid_74", "RESET_GPU"),  # WORKFLOW_NVLINK_ERR
        ("gpu_xid_95", "RESET_GPU"),
        ("gpu_xid_13", "NONE"),  # RESTART_APP: the application's
        ("gpu_xid_63", "NONE"),  # IGNORE: the remap itself is gpu_row_remap_pending
        ("gpu_xid_999", "NONE"),
        ("gpu_ecc_uncorrectable", "RESET_GPU"),
        ("gpu_row_remap_pending", "RESET_GPU"),
        ("gpu_retired_pages_pending", "RESET_GPU"),
        ("gpu_row_remap_failed", "CONTACT_SUPPORT"),
        ("gpu_lost", "RESTART_BM"),
        ("gpu_clocks_throttled", "NONE"),
        ("nouveau_loaded", "NONE"),
        ("gpu_xid_", "NONE"),
    ],
)
def test_action_class(code, cls):
    assert actions.action_class(code) == cls
    assert cls in actions.CLASSES


def test_discover_merges_the_watchs_xids_and_leaves_out_the_handled(tmp_path):
    """gpu_facts on a host whose ring buffer lost the Xid 79 (the watch's state has it) and the Xid 48 of another GPU
    is in the log: both count, with the watch as a fact; once the remediation record marks the first GPU handled up
    to after its XID, it is left out."""
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery.discover import discover

    (tmp_path / "proc/sys/kernel/random").mkdir(parents=True)
    (tmp_path / "proc/sys/kernel/random/boot_id").write_text("boot-a\n")
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev/kmsg").write_text(
        "4,50,95000000000,-;NVRM: Xid (PCI:0000:05:00): 48, pid=7, name=x, An uncorrectable double bit error\n"
    )
    state = {**STATE, "xid_events": [{**event("0000:06:00.0", 79, 2, "watch"), "last_uptime_s": 93112.0}]}
    path = tmp_path / watch.STATE_PATH.lstrip("/")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({**state, "last_run": 4e9}))  # a last run in the future is no stale one
    facts = discover(str(tmp_path))
    assert [(e["xid"], e["count"], e.get("source")) for e in facts["xid_events"]] == [
        (48, 1, None),
        (79, 2, "gpu_watch"),
    ]
    assert facts["gpu_watch"]["installed"] and facts["gpu_watch"]["stale"] is False
    assert {"gpu_xid_48", "gpu_xid_79"} <= {p["code"] for p in facts["problems"]}
    mark = {"0000:06:00.0": {"boot_id": "boot-a", "uptime_s": 93500.0}}
    (path.parent / "remediation.json").write_text(json.dumps({"version": 1, "history": [], "handled_xids": mark}))
    assert [e["xid"] for e in discover(str(tmp_path))["xid_events"]] == [48]
