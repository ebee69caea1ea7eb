# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What ``playbooks/remediate.yml`` does on one host: its plan, from this run's discovery and the host's remediation
record (``remediation_record`` module, ``state=read``).

Each GPU fault discovery sees is given its remediation class by ``module_utils/discovery/actions.py`` (the one home
of that fact, shared with the GPU watch's metrics): ``RESET_GPU``, ``RESTART_BM``, ``CONTACT_SUPPORT`` or ``NONE``.
The host's action is the strongest its faults ask:

* ``hold``: a ``CONTACT_SUPPORT`` fault (a row remapping failure, an Xid the catalog sends to support): drained and
  left out of service with the reason, nothing else (an RMA case);
* ``reboot``: a ``RESTART_BM`` fault (Xid 79, a lost GPU), or a ``RESET_GPU`` fault when a reset is not allowed
  (``reset=false``);
* ``reset``: only ``RESET_GPU`` faults: ``nvidia-smi -r`` on the faulty GPUs, after the drain;
* ``none``: no fault that asks anything of remediation.

The per-host budget: a host remediated ``max_per_day`` times in the last 24 hours (dry runs not counted) is refused
and nothing is done (``refused``). Faults are read from the facts as discovery reports them: XIDs already remediated
are gone from them (the record's handled marks).
"""

from __future__ import annotations

from typing import Any

from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery.actions import (
    CONTACT_SUPPORT,
    NONE,
    RESET_GPU,
    RESTART_BM,
    action_class,
)
from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery.xid import HOST_BUCKETS
from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery.xid import action as xid_action

ACTIONS = {CONTACT_SUPPORT: "hold", RESTART_BM: "reboot", RESET_GPU: "reset", NONE: "none"}
# strongest first
ORDER = (CONTACT_SUPPORT, RESTART_BM, RESET_GPU)


class PlanError(ValueError):
    """The input is no discovery facts or no record summary."""


def gpu_faults(facts: dict[str, Any]) -> list[dict[str, Any]]:
    """Every fault of the host's GPUs: ``{pci_bus_id, uuid, minor, code, class}``, one per GPU and problem code."""
    faults = []
    by_bus = {g.get("pci_bus_id"): g for g in facts.get("gpus") or () if isinstance(g, dict)}

    def add(gpu: dict[str, Any] | None, bus_id: Any, code: str) -> None:
        gpu = gpu or {}
        faults.append(
            {
                "pci_bus_id": bus_id,
                "uuid": gpu.get("uuid"),
                "minor": gpu.get("minor"),
                "code": code,
                "class": action_class(code),
            }
        )

    for gpu in by_bus.values():
        health = gpu.get("health") or {}
        rows = health.get("remapped_rows") or {}
        if gpu.get("lost"):
            add(gpu, gpu.get("pci_bus_id"), "gpu_lost")
        if health.get("ecc_uncorrected_volatile"):
            add(gpu, gpu.get("pci_bus_id"), "gpu_ecc_uncorrectable")
        if rows.get("failure"):
            add(gpu, gpu.get("pci_bus_id"), "gpu_row_remap_failed")
        elif rows.get("pending"):
            add(gpu, gpu.get("pci_bus_id"), "gpu_row_remap_pending")
        if health.get("retired_pages_pending"):
            add(gpu, gpu.get("pci_bus_id"), "gpu_retired_pages_pending")
    for event in facts.get("xid_events") or ():
        if isinstance(event, dict) and xid_action(event.get("xid", -1))[0] in HOST_BUCKETS:
            add(by_bus.get(event.get("pci_bus_id")), event.get("pci_bus_id"), f"gpu_xid_{event['xid']}")
    return faults


def _int(value: Any, name: str) -> int:
    try:
        return int(value)
    except (TypeError, ValueError) as exc:
        raise PlanError(f"{name} must be a whole number, got {value!r}") from exc


def remediation_plan(
    facts: Any, record: Any, max_per_day: Any = 3, reset: bool = True, host: str = ""
) -> dict[str, Any]:
    """The host's plan: ``{action, act, refused, gpus, reset_gpus, problems, faults, budget, message}``.

    ``facts``: ``ansible_facts.nvidia``; ``record``: the ``remediation_record`` module's ``record`` (``today``);
    ``act`` is true when the host is to be drained and remediated now."""
    if not isinstance(facts, dict):
        raise PlanError(f"the input must be ansible_facts.nvidia (a dict), got {type(facts).__name__}")
    if not isinstance(record, dict):
        raise PlanError(f"record must be remediation_record's record (a dict), got {type(record).__name__}")
    limit, today = _int(max_per_day, "remediate_max_per_day"), _int(record.get("today", 0), "record.today")
    faults = [f for f in gpu_faults(facts) if f["class"] != NONE]
    classes = {f["class"] for f in faults}
    cls = next((c for c in ORDER if c in classes), NONE)
    action = ACTIONS[cls]
    if action == "reset" and not reset:
        action = "reboot"
    gpus = sorted({f["pci_bus_id"] for f in faults if f["pci_bus_id"]})
    reset_gpus = []
    if action == "reset":
        seen = {}
        for f in faults:
            seen.setdefault(f["pci_bus_id"], {"uuid": f["uuid"], "minor": f["minor"], "pci_bus_id": f["pci_bus_id"]})
        reset_gpus = [seen[b] for b in gpus]
        if any(g["uuid"] is None or g["minor"] is None for g in reset_gpus):
            action = "reboot"  # a GPU NVML does not list (no UUID) cannot be named to nvidia-smi -r
            reset_gpus = []
    problems = sorted({f["code"] for f in faults})
    budget = {"today": today, "max_per_day": limit, "left": max(limit - today, 0)}
    refused = action != "none" and today >= limit
    who = host or "the host"
    if action == "none":
        message = f"{who}: no GPU fault that remediation acts on"
    elif refused:
        message = (
            f"{who}: refused: {today} remediation(s) in the last 24 hours reach remediate_max_per_day={limit}; "
            f"nothing done about {', '.join(problems)}. A host that keeps failing needs a person: look at "
            "/var/lib/gpufleet/remediation.json and the GPUs"
        )
    else:
        message = f"{who}: {action} for {', '.join(problems)} on {', '.join(gpus) or 'the host'}"
    return {
        "action": action,
        "act": action != "none" and not refused,
        "refused": refused,
        "gpus": gpus,
        "reset_gpus": reset_gpus,
        "problems": problems,
        "faults": faults,
        "budget": budget,
        "message": message,
    }


def remediation_check(facts: Any, plan: dict[str, Any]) -> dict[str, Any]:
    """After the remediation: ``{ok, left, message}``, whether the faults the plan acted on are gone from this
    discovery (``left``: the problem codes that persist on the plan's GPUs)."""
    if not isinstance(facts, dict) or not isinstance(plan, dict):
        raise PlanError("remediation_check takes ansible_facts.nvidia and the plan")
    gpus = set(plan.get("gpus") or ())
    left = sorted(
        {f["code"] for f in gpu_faults(facts) if f["class"] != NONE and (f["pci_bus_id"] in gpus or not gpus)}
    )
    message = "the faults are gone" if not left else f"persisting after the {plan.get('action')}: {', '.join(left)}"
    return {"ok": not left, "left": left, "message": message}
