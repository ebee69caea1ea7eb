# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The remediation record (``/var/lib/gpufleet/remediation.json``), written by ``playbooks/remediate.yml`` through
the ``remediation_record`` module and read by discovery and the GPU watch.

It holds

* ``history``: one entry per remediation, ``{time, action, gpus, problems, result, dry_run, reason}`` (``time`` in
  seconds since the epoch); the per-host budget counts the entries of the last day that were no dry run;
* ``handled_xids``: per GPU PCI bus id, the kernel log position up to which its XIDs were remediated,
  ``{boot_id, uptime_s}``: an XID of that GPU logged in that boot at or before that uptime is handled, and discovery
  and the watch no longer report it. A later XID, or any XID of another boot, counts again.

Standard library only (target Pythons 3.8+).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from ..base.pathsafe import host_path

RECORD_PATH = "/var/lib/gpufleet/remediation.json"
RECORD_VERSION = 1
MAX_RECORD_BYTES = 4 * 1024 * 1024
# History entries kept (the oldest go first); a day's budget never needs more.
MAX_HISTORY = 200
DAY_S = 86400


def empty() -> dict[str, Any]:
    return {"version": RECORD_VERSION, "history": [], "handled_xids": {}}


def read_record(root: str = "/", path: str = RECORD_PATH) -> tuple[dict[str, Any], str | None]:
    """``(record, error)``: the record under ``root``; an empty record when there is none, and with ``error`` when
    it cannot be read or is no record of this version (the caller says so; nothing counts as handled then)."""
    full = host_path(root, path)
    try:
        if os.path.getsize(full) > MAX_RECORD_BYTES:
            return empty(), f"{path} is larger than {MAX_RECORD_BYTES} bytes"
        with open(full, encoding="utf-8") as f:
            record = json.load(f)
    except FileNotFoundError:
        return empty(), None
    except (OSError, ValueError) as exc:
        return empty(), f"{path}: {exc}"
    if not isinstance(record, dict) or record.get("version") != RECORD_VERSION:
        return empty(), f"{path} is no remediation record of version {RECORD_VERSION}"
    record.setdefault("history", [])
    record.setdefault("handled_xids", {})
    return record, None


def xid_handled(event: dict[str, Any], record: dict[str, Any] | None, boot_id: str | None) -> bool:
    """Whether the XID ``event`` (one of ``xid.parse``'s: ``pci_bus_id``, ``uptime_s``) was remediated: its GPU's
    mark in ``record`` is of this boot and the event was logged at or before the mark's uptime. An event without an
    uptime (a journal line without one) is never handled."""
    if not record or not boot_id:
        return False
    mark = (record.get("handled_xids") or {}).get(event.get("pci_bus_id"))
    uptime = event.get("uptime_s")
    if not isinstance(mark, dict) or mark.get("boot_id") != boot_id or not isinstance(uptime, (int, float)):
        return False
    limit = mark.get("uptime_s")
    return isinstance(limit, (int, float)) and uptime <= limit


def drop_handled(events: list[dict[str, Any]], record: dict[str, Any] | None, boot_id: str | None) -> list[dict]:
    """The XID events of ``events`` that are not handled (``xid_handled``), in order."""
    return [e for e in events if not xid_handled(e, record, boot_id)]


def count_since(record: dict[str, Any] | None, since: float) -> int:
    """The remediations of ``record`` at or after ``since`` that were carried out (dry runs do not count)."""
    history = (record or {}).get("history") or []
    return sum(
        1
        for h in history
        if isinstance(h, dict)
        and not h.get("dry_run")
        and isinstance(h.get("time"), (int, float))
        and h["time"] >= since
    )


def summary(record: dict[str, Any] | None, error: str | None, now: float | None = None) -> dict[str, Any]:
    """What the remediation plan reads: ``{today, last, error, history}`` (``today``: remediations of the last 24 h,
    ``last``: the latest entry or None, ``history``: the last 20 entries)."""
    now = time.time() if now is None else now
    history = [h for h in (record or {}).get("history") or [] if isinstance(h, dict)]
    return {
        "today": count_since(record, now - DAY_S),
        "last": history[-1] if history else None,
        "error": error,
        "history": history[-20:],
    }


def boot_id(root: str = "/") -> str | None:
    """This boot's id (``/proc/sys/kernel/random/boot_id`` under ``root``), None where it cannot be read."""
    try:
        with open(host_path(root, "/proc/sys/kernel/random/boot_id"), encoding="ascii") as f:
            return f.read().strip() or None
    except (OSError, ValueError):
        return None


def uptime_s(root: str = "/") -> float | None:
    """Seconds since boot (``/proc/uptime``'s first field), None where it cannot be read."""
    try:
        with open(host_path(root, "/proc/uptime"), encoding="ascii") as f:
            return float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def with_entry(
    record: dict[str, Any],
    entry: dict[str, Any],
    handled: list[str],
    boot_id: str | None,
    uptime: float | None,
    *,
    amend: bool = False,
) -> dict[str, Any]:
    """A copy of ``record`` with ``entry`` appended to its history (the oldest dropped past ``MAX_HISTORY``), or with
    ``amend`` merged into the latest entry (its time kept: how a remediation's outcome is written), and, for each bus
    id in ``handled``, the XIDs logged so far in this boot marked handled."""
    history = list(record.get("history") or [])
    if amend and history and isinstance(history[-1], dict):
        history[-1] = dict(history[-1], **{k: v for k, v in entry.items() if k != "time" and v not in ("", [])})
    else:
        history.append(entry)
    out = {"version": RECORD_VERSION, "history": history}
    out["history"] = out["history"][-MAX_HISTORY:]
    marks = dict(record.get("handled_xids") or {})
    if boot_id and uptime is not None:
        for bus_id in handled:
            marks[bus_id] = {"boot_id": boot_id, "uptime_s": uptime}
    out["handled_xids"] = marks
    return out
