# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The GPU watch's state file (``/var/lib/gpufleet/gpu-watch.json``), as discovery reads it.

The watch (``hostprog/gpu_watch.py``, the ``gpu_watch`` role's timer) writes it every interval: the boot it counted
in (``boot_id``), the kernel log position it read up to, the XID events of this boot it saw (per GPU and XID, the
same summaries as ``xid.summarize``), when it last ran, its interval, and what went wrong in that run. Discovery
reads it so that

* XIDs the watch saw that the kernel ring buffer no longer holds still count (``merge_xids``): only when the state's
  boot is this boot; per GPU and XID the larger count wins (the watch counted every record since it started, the ring
  may hold records the watch has not read yet);
* the watch's last run, its age and whether it is stale are facts (``watch_facts``, ``ansible_facts.nvidia.gpu_watch``);
* a stale or failing watch is a problem with its fix (``gpu_watch_problems``).

Standard library only (target Pythons 3.8+).
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable

from ..base.pathsafe import host_path

STATE_PATH = "/var/lib/gpufleet/gpu-watch.json"
STATE_VERSION = 1
MAX_STATE_BYTES = 4 * 1024 * 1024
# A watch is stale when its last run is older than this many intervals (a timer that fires late now and then is not).
STALE_INTERVALS = 3
STALE_MIN_S = 180


def read_state(root: str = "/", path: str = STATE_PATH) -> tuple[dict[str, Any] | None, str | None]:
    """``(state, error)``: the state file under ``root``; ``(None, None)`` when there is none, ``(None, why)`` when it
    cannot be read or is no state of this version."""
    full = host_path(root, path)
    try:
        if os.path.getsize(full) > MAX_STATE_BYTES:
            return None, f"{path} is larger than {MAX_STATE_BYTES} bytes"
        with open(full, encoding="utf-8") as f:
            state = json.load(f)
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError) as exc:
        return None, f"{path}: {exc}"
    if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
        return None, f"{path} is no GPU watch state of version {STATE_VERSION}"
    return state, None


def merge_xids(
    ring: list[dict[str, Any]],
    state: dict[str, Any] | None,
    current_boot: str | None,
    handled: Callable[[dict[str, Any]], bool] | None = None,
) -> list[dict[str, Any]]:
    """The ring buffer's XID summaries with the watch's of the same boot: per (GPU, XID) the larger count (and that
    side's last message); the watch's that the ring no longer holds are added with ``source: gpu_watch``.
    ``handled(event)`` (the remediation record's ``xid_handled``): a watch summary whose latest event
    (``last_uptime_s``) was remediated is left out (one remediated after the watch's last run)."""
    if not state or not current_boot or state.get("boot_id") != current_boot:
        return ring
    merged = [dict(e) for e in ring]
    by_key = {(e["pci_bus_id"], e["xid"]): e for e in merged}
    for event in state.get("xid_events") or ():
        key = (event.get("pci_bus_id"), event.get("xid"))
        if not isinstance(key[1], int):
            continue
        if handled is not None and handled({"pci_bus_id": key[0], "uptime_s": event.get("last_uptime_s")}):
            continue
        mine = by_key.get(key)
        if mine is None:
            mine = by_key[key] = {
                "pci_bus_id": key[0],
                "xid": key[1],
                "count": 0,
                "bucket": event.get("bucket"),
                "last_message": event.get("last_message") or "",
                "source": "gpu_watch",
            }
            merged.append(mine)
        if int(event.get("count") or 0) > mine["count"]:
            mine["count"] = int(event["count"])
            mine["last_message"] = event.get("last_message") or mine["last_message"]
    return merged


def watch_facts(state: dict[str, Any] | None, error: str | None, now: float, path: str = STATE_PATH) -> dict[str, Any]:
    """``ansible_facts.nvidia.gpu_watch``: ``{installed, state_file, last_run, age_s, interval_s, stale, error,
    nvml_up, kmsg_lost}``; ``installed`` False (the rest None) when no state file was found."""
    facts: dict[str, Any] = {
        "installed": state is not None or error is not None,
        "state_file": path,
        "last_run": None,
        "age_s": None,
        "interval_s": None,
        "stale": None,
        "error": error,
        "nvml_up": None,
        "kmsg_lost": None,
    }
    if state is None:
        facts["stale"] = True if error else None
        return facts
    last = state.get("last_run")
    interval = state.get("interval_s")
    facts.update(
        last_run=last,
        interval_s=interval,
        error=state.get("error"),
        nvml_up=state.get("nvml_up"),
        kmsg_lost=(state.get("kmsg") or {}).get("lost"),
    )
    if isinstance(last, (int, float)):
        facts["age_s"] = round(max(0.0, now - last), 1)
        limit = max(STALE_INTERVALS * (interval if isinstance(interval, (int, float)) else 60), STALE_MIN_S)
        facts["stale"] = now - last > limit
    else:
        facts["stale"] = True
    return facts


def problem(code: str, message: str, fix: str) -> dict[str, str]:
    return {"code": code, "message": message, "fix": fix}


def gpu_watch_problems(host: Any) -> list[dict[str, str]]:
    """``gpu_watch_stale`` when the watch's last run is too old (or its state unreadable), ``gpu_watch_failed`` when
    its last run recorded an error; nothing where no watch is installed. ``host``: a ``problems.Host``."""
    watch = host.facts.get("gpu_watch") or {}
    if not watch.get("installed"):
        return []
    found = []
    if watch.get("stale"):
        if watch.get("last_run") is None:
            why = f"its state {watch['state_file']} cannot be read ({watch.get('error')})"
        else:
            why = f"its last run was {watch['age_s']:.0f} s ago (every {watch.get('interval_s')} s)"
        found.append(
            problem(
                "gpu_watch_stale",
                f"the GPU watch does not run ({why}): GPU health and XIDs between runs are not recorded and its "
                "metrics are old",
                "'systemctl status gpufleet-gpu-watch.timer' and 'journalctl -u gpufleet-gpu-watch.service' say why; "
                "'systemctl enable --now gpufleet-gpu-watch.timer', or run the gpufleet.nvidia.gpu_watch role again",
            )
        )
    error = str(watch.get("error") or "")[:200]
    if error and watch.get("last_run") is not None:
        found.append(
            problem(
                "gpu_watch_failed",
                f"the GPU watch's last run failed: {error}",
                "fix what the message names (the textfile directory, the kernel log, the state folder), then "
                "'systemctl start gpufleet-gpu-watch.service'; 'journalctl -u gpufleet-gpu-watch.service' has each "
                "run's error",
            )
        )
    return found
