# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The ``remediation_record`` module's work: read the remediation record (``state=read``: what the per-host budget
and the plan need) or append one remediation to it (``state=present``), marking the XIDs of the GPUs it handled so
discovery and the GPU watch no longer report them (``discovery/remediation_record.py`` is the record's one reader).

The file is written atomically; check mode says what would be written and writes nothing; with --diff the history
entry is the diff. Standard library only (target Pythons 3.8+).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from ..base.fileio import atomic_write
from ..base.pathsafe import host_path
from ..base.runner import Failure, Host, Result
from ..discovery import remediation_record as rr


class RecordRequest:
    def __init__(self, params: dict[str, Any]) -> None:
        self.state = params["state"]
        self.path = params["path"]
        self.root = params["root"]
        self.entry = {
            "action": params["action"],
            "gpus": list(params["gpus"] or []),
            "problems": list(params["problems"] or []),
            "result": params["result"],
            "dry_run": bool(params["dry_run"]),
            "reason": params["reason"] or "",
        }
        self.handled = list(params["handled"] or [])
        self.amend = bool(params["amend"])
        if self.state == "present" and not self.entry["action"] and not params["amend"]:
            raise Failure("remediation_record: state=present needs action (reset, reboot, hold, none)")

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> RecordRequest:
        return cls(params)


class RecordResult(Result):
    def __init__(self, changed: bool, record: dict[str, Any], entry: dict[str, Any] | None, diff: Any = None):
        self.changed = changed
        self.record = record
        self.entry = entry
        self.diff = diff


def run_record(req: RecordRequest, host: Host) -> RecordResult:
    record, error = rr.read_record(req.root, req.path)
    if req.state == "read":
        return RecordResult(False, rr.summary(record, error), None)
    if error and os.path.exists(host_path(req.root, req.path)):
        raise Failure(
            f"{req.path}: {error}; not replacing it. Move it aside (its history is the remediations' record) and rerun"
        )
    entry = dict(req.entry, time=round(time.time(), 3))
    after = rr.with_entry(record, entry, req.handled, rr.boot_id(req.root), rr.uptime_s(req.root), amend=req.amend)
    entry = after["history"][-1]
    diff = {"before": "", "after": json.dumps(entry, sort_keys=True) + "\n"} if host.diff else None
    if not host.check_mode:
        atomic_write(
            host_path(req.root, req.path), json.dumps(after, indent=1, sort_keys=True) + "\n", 0o644, makedirs=True
        )
    return RecordResult(True, rr.summary(after, None, entry["time"]), entry, diff)
