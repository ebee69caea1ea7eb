# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""plugin_utils/remediate.py: the remediation plan of a host (each fault's class, the strongest for the host, the
budget), the check after it, and the report's remediation part (report_remediation.py)."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils import report_remediation
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.remediate import (
    PlanError,
    gpu_faults,
    remediation_check,
    remediation_plan,
)

A, B = "0000:17:00.0", "0000:65:00.0"


def _gpu(bus, minor, **health):
    return {"pci_bus_id": bus, "uuid": f"GPU-{minor}", "minor": minor, "health": health}


def _facts(*gpus, xids=()):
    return {"gpus": list(gpus), "xid_events": [{"pci_bus_id": b, "xid": x, "count": 1} for b, x in xids]}


NO_RUNS = {"today": 0}


def test_xid_48_and_its_ecc_count_reset_that_gpu_only():
    plan = remediation_plan(_facts(_gpu(A, 0, ecc_uncorrected_volatile=1), _gpu(B, 1), xids=[(A, 48)]), NO_RUNS)
    assert plan["action"] == "reset" and plan["act"] and not plan["refused"]
    assert plan["problems"] == ["gpu_ecc_uncorrectable", "gpu_xid_48"] and plan["gpus"] == [A]
    assert plan["reset_gpus"] == [{"uuid": "GPU-0", "minor": 0, "pci_bus_id": A}]


def test_pending_row_remap_resets_and_a_remap_failure_holds():
    pending = _gpu(A, 0, remapped_rows={"pending": True, "failure": False})
    assert remediation_plan(_facts(pending), NO_RUNS)["action"] == "reset"
    failed = _gpu(B, 1, remapped_rows={"pending": True, "failure": True})
    plan = remediation_plan(_facts(pending, failed), NO_RUNS)
    assert plan["action"] == "hold" and plan["problems"] == ["gpu_row_remap_failed", "gpu_row_remap_pending"]


def test_xid_79_or_a_lost_gpu_reboots_and_wins_over_a_reset():
    plan = remediation_plan(_facts(_gpu(A, 0, retired_pages_pending=1), _gpu(B, 1), xids=[(B, 79)]), NO_RUNS)
    assert plan["action"] == "reboot" and plan["reset_gpus"] == [] and plan["gpus"] == [A, B]
    lost = dict(_gpu(B, 1), lost=True)
    assert remediation_plan(_facts(lost), NO_RUNS)["action"] == "reboot"


def test_reset_not_allowed_or_a_gpu_without_uuid_reboots():
    facts = _facts(_gpu(A, 0, ecc_uncorrected_volatile=2))
    assert remediation_plan(facts, NO_RUNS, reset=False)["action"] == "reboot"
    facts["gpus"][0]["uuid"] = None
    assert remediation_plan(facts, NO_RUNS)["action"] == "reboot"


def test_an_applications_xid_and_throttled_clocks_ask_nothing():
    facts = _facts(_gpu(A, 0, clocks_event_reasons=["HwThermalSlowdown"]), xids=[(A, 13), (A, 31)])
    plan = remediation_plan(facts, NO_RUNS, host="n1")
    assert (
        plan["action"] == "none" and not plan["act"] and plan["message"] == "n1: no GPU fault that remediation acts on"
    )


def test_budget_spent_refuses():
    facts = _facts(_gpu(A, 0, ecc_uncorrected_volatile=1))
    plan = remediation_plan(facts, {"today": 3}, max_per_day="3", host="n1")
    assert plan["refused"] and not plan["act"] and plan["budget"] == {"today": 3, "max_per_day": 3, "left": 0}
    assert "3 remediation(s) in the last 24 hours reach remediate_max_per_day=3" in plan["message"]
    assert remediation_plan(facts, {"today": 2}, max_per_day=3)["act"]
    # nothing to do is never refused
    assert not remediation_plan(_facts(_gpu(A, 0)), {"today": 9}, max_per_day=1)["refused"]


def test_bad_input_is_refused():
    with pytest.raises(PlanError):
        remediation_plan([], NO_RUNS)
    with pytest.raises(PlanError):
        remediation_plan({}, None)
    with pytest.raises(PlanError, match="remediate_max_per_day"):
        remediation_plan({}, NO_RUNS, max_per_day="many")


def test_check_after_the_remediation():
    plan = remediation_plan(_facts(_gpu(A, 0, remapped_rows={"pending": True}), xids=[(A, 48)]), NO_RUNS)
    assert remediation_check(_facts(_gpu(A, 0, remapped_rows={"pending": False})), plan)["ok"]
    left = remediation_check(
        _facts(_gpu(A, 0, remapped_rows={"pending": True}), _gpu(B, 1, ecc_uncorrected_volatile=1)), plan
    )
    assert left == {
        "ok": False,
        "left": ["gpu_row_remap_pending"],
        "message": "persisting after the reset: gpu_row_remap_pending",
    }


def test_faults_name_their_class():
    classes = {
        f["code"]: f["class"] for f in gpu_faults(_facts(_gpu(A, 0, remapped_rows={"failure": True}), xids=[(A, 79)]))
    }
    assert classes == {"gpu_row_remap_failed": "CONTACT_SUPPORT", "gpu_xid_79": "RESTART_BM"}


def test_report_entry_and_text():
    fact = {
        "action": "reset",
        "result": "returned",
        "problems": ["gpu_xid_48"],
        "gpus": [A],
        "dcgm": "dcgmi diag -r 1: passed (3 results)",
        "history": [{"time": 0, "action": "reset", "gpus": [A], "problems": ["gpu_xid_48"], "result": "returned"}],
    }
    entry = report_remediation.remediation_entry(fact)
    assert report_remediation.remediation_text(entry) == (
        f"reset for gpu_xid_48 on {A}: returned; DCGM: dcgmi diag -r 1: passed (3 results)"
    )
    assert report_remediation.history_text(entry["history"][0]) == (
        f"1970-01-01 00:00:00 UTC: reset for gpu_xid_48 on {A}: returned"
    )
    assert report_remediation.remediation_entry(None) is None
