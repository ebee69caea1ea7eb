# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The fleet report's remediation part of a host: what ``playbooks/remediate.yml`` did this run (its
``gpufleet_remediation`` fact) and the host's remediation history (``/var/lib/gpufleet/remediation.json``, as the
playbook read it). Controller only, pure."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.mapping import get as _get

HISTORY_SHOWN = 10


def _when(stamp: Any) -> str:
    if not isinstance(stamp, (int, float)):
        return "?"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(stamp))


def remediation_entry(fact: Any) -> dict[str, Any] | None:
    """The host's remediation for the report model, None when remediate.yml did not run on it."""
    if not isinstance(fact, Mapping):
        return None
    history = []
    for h in list(_get(fact, "history", []) or [])[-HISTORY_SHOWN:]:
        if isinstance(h, Mapping):
            history.append(
                {
                    "when": _when(_get(h, "time")),
                    "action": str(_get(h, "action", "")),
                    "gpus": [str(g) for g in _get(h, "gpus", []) or []],
                    "problems": [str(p) for p in _get(h, "problems", []) or []],
                    "result": str(_get(h, "result", "")),
                    "dry_run": bool(_get(h, "dry_run", False)),
                    "reason": str(_get(h, "reason", "") or ""),
                }
            )
    return {
        "action": str(_get(fact, "action", "none")),
        "result": str(_get(fact, "result", "")),
        "dry_run": bool(_get(fact, "dry_run", False)),
        "problems": [str(p) for p in _get(fact, "problems", []) or []],
        "gpus": [str(g) for g in _get(fact, "gpus", []) or []],
        "message": str(_get(fact, "message", "")),
        "held_reason": str(_get(fact, "held_reason", "") or ""),
        # DCGM's diagnostic: its summary, that DCGM is not installed, or that it was not asked for
        "dcgm": str(_get(fact, "dcgm", "") or ""),
        "budget": dict(_get(fact, "budget", {}) or {}),
        "history": history,
    }


def remediation_text(entry: Mapping[str, Any]) -> str:
    """One line: ``reset for gpu_xid_48 on 00000000:17:00.0: returned (DCGM: ...)``."""
    text = f"{entry['action']}"
    if entry["problems"]:
        text += f" for {', '.join(entry['problems'])}"
    if entry["gpus"]:
        text += f" on {', '.join(entry['gpus'])}"
    text += f": {'dry run, nothing changed' if entry['result'] == 'dry_run' else entry['result']}"
    if entry["held_reason"]:
        text += f" ({entry['held_reason']})"
    if entry["dcgm"]:
        text += f"; DCGM: {entry['dcgm']}"
    return text


def history_text(h: Mapping[str, Any]) -> str:
    dry = " (dry run)" if h.get("dry_run") else ""
    what = f"{h.get('action')}{dry} for {', '.join(h.get('problems') or []) or '-'}"
    return f"{h.get('when')}: {what} on {', '.join(h.get('gpus') or []) or 'the host'}: {h.get('result')}"
