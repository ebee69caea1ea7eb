# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""``gpufleet-gpu-watch``: one run of the GPU watch, which the ``gpu_watch`` role's timer starts every interval.

A run reads each GPU's health through NVML (``discovery.nvml.query``: uncorrected ECC, row remapping, retired pages,
clock event reasons) and the XID records the kernel log gained since the last run (``discovery.xid``), judges them
with discovery's own checks (``discovery.problems``: ``GPU_CHECKS`` per GPU, ``gpu_xids``, ``gpu_lost``) and writes,
each atomically:

* ``<textfile dir>/gpufleet_gpu.prom``, Prometheus metrics for the node exporter's textfile collector (``render``);
* the state file ``/var/lib/gpufleet/gpu-watch.json`` (``discovery.gpu_watch_state``): the boot, the kernel log
  position read up to (the record sequence number), this boot's XID events per GPU and XID, the last run.

Only the records after the remembered position are parsed (``new_records``); a ring buffer that wrapped past
records never read is counted (``kmsg.lost``), and a new boot (another ``boot_id``) or a log that starts again
drops the XIDs of the earlier one. Standard library only (target Pythons 3.8+).
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from typing import Any, Callable

from ..base.fileio import atomic_write
from ..base.oneline import error_line
from ..base.pathsafe import host_path
from ..cdi.driver_files import read_driver_cache
from ..discovery.actions import action_class, xid_class
from ..discovery.gpu_watch_state import STATE_PATH, STATE_VERSION, read_state
from ..discovery.nvml import NvmlError, NvmlUnavailable, nvml_candidates, query
from ..discovery.problems import GPU_CHECKS, Host, gpu_lost, gpu_xids
from ..discovery.remediation_record import boot_id, read_record, xid_handled
from ..discovery.xid import parse, read_kmsg, summarize

NAME = "gpufleet-gpu-watch"
TEXTFILE_DIR = "/var/lib/prometheus/node-exporter"  # Debian's prometheus-node-exporter reads *.prom here
METRICS_FILE = "gpufleet_gpu.prom"
KERNEL_LOG = "/dev/kmsg"
DEFAULT_INTERVAL = 60
_SEQ = re.compile(r"^\d+,(?P<seq>\d+),")

# name -> (type, help)
METRICS = {
    "gpufleet_gpu_problem": ("gauge", "A current problem of the GPU (1), by discovery's code and remediation class."),
    "gpufleet_gpu_ecc_uncorrected_volatile_total": ("counter", "Uncorrected ECC errors since the GPU's last reset."),
    "gpufleet_gpu_ecc_uncorrected_aggregate_total": ("counter", "Uncorrected ECC errors over the GPU's life."),
    "gpufleet_gpu_remapped_rows": ("gauge", "Rows remapped, by the kind of error that caused it."),
    "gpufleet_gpu_row_remap_pending": ("gauge", "1 while a row remapping waits for the next GPU reset."),
    "gpufleet_gpu_row_remap_failure": ("gauge", "1 when a row remapping failed (no spare row left)."),
    "gpufleet_gpu_last_xid": ("gauge", "The last XID the GPU logged this boot, with its remediation class."),
    "gpufleet_gpu_xid_events_total": ("counter", "XID events of the GPU this boot, by XID."),
    "gpufleet_gpu_watch_last_run_timestamp_seconds": ("gauge", "When the GPU watch last ran (Unix time)."),
    "gpufleet_gpu_watch_nvml_up": ("gauge", "1 when NVML answered the GPU watch's last run."),
}


def new_records(text: str, last_seq: int | None) -> tuple[list[str], int | None, int, bool]:
    """``(lines, seq, lost, restarted)``: the kernel log lines of ``text`` after record ``last_seq`` (the second field
    of a ``/dev/kmsg`` record; for lines without one, such as ``dmesg`` output, the line's number), the last
    sequence number now, how many records the ring buffer dropped before they were read, and whether the log started
    again (its last record is before ``last_seq``: everything in it is new)."""
    records: list[tuple[int, str]] = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith(" "):
            continue  # a /dev/kmsg record's continuation (KEY=value)
        match = _SEQ.match(line)
        records.append((int(match.group("seq")) if match else number, line))
    if not records:
        return [], last_seq, 0, False
    first, last = records[0][0], records[-1][0]
    if last_seq is None:
        return [line for _seq, line in records], last, 0, False
    if last < last_seq:
        return [line for _seq, line in records], last, 0, True
    lost = max(0, first - last_seq - 1)
    return [line for seq, line in records if seq > last_seq], last, lost, False


def merge_events(known: list[dict[str, Any]], new: list[dict[str, Any]], seq: int | None) -> list[dict[str, Any]]:
    """``known`` (the state's per GPU and XID summaries) with the parsed XID events ``new`` added (``xid.parse``'s):
    counts summed, the last message, ``last_seq`` (the position of the run that saw it last, which orders the GPU's
    XIDs) and ``last_uptime_s`` (the latest event's seconds since boot, what a remediation's mark is compared with)."""
    merged = [dict(e) for e in known]
    by_key = {(e["pci_bus_id"], e["xid"]): e for e in merged}
    for summary in summarize(new):
        key = (summary["pci_bus_id"], summary["xid"])
        mine = by_key.get(key)
        if mine is None:
            mine = by_key[key] = {"pci_bus_id": key[0], "xid": key[1], "count": 0, "bucket": summary["bucket"]}
            merged.append(mine)
        mine["count"] += summary["count"]
        mine["last_message"] = summary["last_message"]
        mine["last_seq"] = seq
        uptimes = [e["uptime_s"] for e in new if (e["pci_bus_id"], e["xid"]) == key and e["uptime_s"] is not None]
        if uptimes:
            mine["last_uptime_s"] = max([*uptimes, mine.get("last_uptime_s") or 0.0])
    return merged


def update_state(
    state: dict[str, Any] | None,
    boot: str | None,
    text: str | None,
    source: str,
    handled: Callable[[dict[str, Any]], bool] | None = None,
) -> dict[str, Any]:
    """The state's boot, kernel log position and XID events after reading ``text`` (None: no kernel log readable,
    nothing changes); a state of another boot starts over. ``handled(event)``: whether an XID event
    (``pci_bus_id``, ``uptime_s``) was remediated (the remediation record's ``xid_handled``); such events are not
    counted, and a summary whose latest event was handled is dropped (the GPU was reset or the node rebooted since)."""
    state = dict(state or {})
    if state.get("boot_id") != boot:
        state = {"boot_id": boot, "kmsg": {"source": source, "seq": None, "lost": 0}, "xid_events": []}
    kmsg = dict(state.get("kmsg") or {"seq": None, "lost": 0})
    events = list(state.get("xid_events") or [])
    if handled is not None:
        events = [e for e in events if not handled({"pci_bus_id": e["pci_bus_id"], "uptime_s": e.get("last_uptime_s")})]
    if text is not None:
        lines, seq, lost, restarted = new_records(text, kmsg.get("seq"))
        if restarted:
            events, kmsg["lost"] = [], 0
        kmsg["seq"] = seq
        kmsg["lost"] = int(kmsg.get("lost") or 0) + lost
        if lines:
            parsed = parse("\n".join(lines))
            if handled is not None:
                parsed = [e for e in parsed if not handled(e)]
            events = merge_events(events, parsed, seq)
    kmsg["source"] = source
    state.update(boot_id=boot, kmsg=kmsg, xid_events=events)
    return state


def _identity(gpu: dict[str, Any] | None, bus_id: str | None = None) -> dict[str, str]:
    gpu = gpu or {}
    index = gpu.get("index")
    return {
        "gpu": "" if index is None else str(index),
        "uuid": gpu.get("uuid") or "",
        "pci_bus_id": gpu.get("pci_bus_id") or bus_id or "",
    }


def gpu_problems(gpus: list[dict[str, Any]], events: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Every GPU problem discovery's checks see in ``gpus`` (NVML's records) and ``events`` (XID summaries), each with
    the GPU's ``gpu``/``uuid``/``pci_bus_id`` and its ``action`` class."""
    found: list[dict[str, str]] = []
    by_bus = {g.get("pci_bus_id"): g for g in gpus}
    for gpu in gpus:
        checked = dict(gpu, pci_bus_id=gpu.get("pci_bus_id"), minor=gpu.get("minor"))
        own = [e for e in events if e["pci_bus_id"] == gpu.get("pci_bus_id")]
        host = Host({"gpus": [checked], "xid_events": own})
        own_problems = [p for gpu_check in GPU_CHECKS for p in gpu_check(checked)]
        own_problems += gpu_xids(host) + gpu_lost(host)
        found += [dict(p, **_identity(gpu)) for p in own_problems]
    orphans = [e for e in events if e["pci_bus_id"] not in by_bus]  # a GPU NVML no longer lists (fell off the bus)
    for bus_id in dict.fromkeys(e["pci_bus_id"] for e in orphans):
        host = Host({"gpus": [], "xid_events": [e for e in orphans if e["pci_bus_id"] == bus_id]})
        found += [dict(p, **_identity(None, bus_id)) for p in gpu_xids(host)]
    for p in found:
        p["action"] = action_class(p["code"])
    return found


def _escape(value: object) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(labels: dict[str, object]) -> str:
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items()) + "}"


def render(
    gpus: list[dict[str, Any]], problems: list[dict[str, str]], events: list[dict[str, Any]], now: float, nvml_up: bool
) -> str:
    """The textfile: Prometheus' text exposition format (``# HELP``, ``# TYPE``, one sample a line), every per-GPU
    series labelled ``gpu``, ``uuid`` and ``pci_bus_id``."""
    samples: dict[str, list[str]] = {name: [] for name in METRICS}

    def add(name: str, labels: dict[str, object], value: object) -> None:
        samples[name].append(f"{name}{_labels(labels)} {value}" if labels else f"{name} {value}")

    for p in problems:
        ident = {k: p[k] for k in ("gpu", "uuid", "pci_bus_id")}
        add("gpufleet_gpu_problem", {**ident, "code": p["code"], "action": p["action"]}, 1)
    by_bus = {g.get("pci_bus_id"): g for g in gpus}
    for gpu in gpus:
        ident, health = _identity(gpu), gpu.get("health") or {}
        for key in ("ecc_uncorrected_volatile", "ecc_uncorrected_aggregate"):
            if key in health:
                add(f"gpufleet_gpu_{key}_total", ident, int(health[key]))
        rows = health.get("remapped_rows")
        if rows:
            for kind in ("correctable", "uncorrectable"):
                add("gpufleet_gpu_remapped_rows", {**ident, "kind": kind}, int(rows[kind]))
            add("gpufleet_gpu_row_remap_pending", ident, int(bool(rows["pending"])))
            add("gpufleet_gpu_row_remap_failure", ident, int(bool(rows["failure"])))
    last: dict[str | None, dict[str, Any]] = {}
    for event in events:
        ident = _identity(by_bus.get(event["pci_bus_id"]), event["pci_bus_id"])
        add("gpufleet_gpu_xid_events_total", {**ident, "xid": event["xid"]}, int(event["count"]))
        seen = last.get(event["pci_bus_id"])
        if seen is None or (event.get("last_seq") or -1) >= (seen.get("last_seq") or -1):
            last[event["pci_bus_id"]] = event
    for bus_id, event in last.items():
        ident = _identity(by_bus.get(bus_id), bus_id)
        add("gpufleet_gpu_last_xid", {**ident, "action": xid_class(event["xid"])}, int(event["xid"]))
    add("gpufleet_gpu_watch_last_run_timestamp_seconds", {}, f"{now:.3f}")
    add("gpufleet_gpu_watch_nvml_up", {}, int(nvml_up))
    out = []
    for name, (kind, text) in METRICS.items():
        if samples[name]:
            out += [f"# HELP {name} {text}", f"# TYPE {name} {kind}", *samples[name]]
    return "\n".join(out) + "\n"


def read_gpus(root: str) -> tuple[list[dict[str, Any]], bool, str | None]:
    """``(gpus, nvml_up, why not)``: NVML's GPU records (each with ``health``), as discovery reads them."""
    try:
        library = nvml_candidates(root, read_driver_cache(root))
        answer = query(library or ["libnvidia-ml.so.1"])
    except (NvmlUnavailable, NvmlError, OSError, ValueError) as exc:
        return [], False, str(exc)
    return answer["gpus"], True, None


def run(
    root: str = "/",
    *,
    textfile_dir: str = TEXTFILE_DIR,
    state_path: str = STATE_PATH,
    kernel_log: str = KERNEL_LOG,
    interval: int = DEFAULT_INTERVAL,
    now: float | None = None,
) -> dict[str, Any]:
    """One run: read, judge, write the textfile and the state file; returns the state written."""
    started = time.monotonic()
    now = time.time() if now is None else now
    old, _why = read_state(root, state_path)
    gpus, nvml_up, nvml_error = read_gpus(root)
    text = read_kmsg(host_path(root, kernel_log))
    boot = boot_id(root)
    record, record_error = read_record(root)
    state = update_state(old, boot, text, kernel_log, lambda event: xid_handled(event, record, boot))
    problems = gpu_problems(gpus, state["xid_events"])
    errors = [] if text is not None else [f"cannot read the kernel log {kernel_log}"]
    try:
        atomic_write(
            host_path(root, os.path.join(textfile_dir, METRICS_FILE)),
            render(gpus, problems, state["xid_events"], now, nvml_up),
            0o644,
            makedirs=True,
        )
    except OSError as exc:
        errors.append(f"cannot write {os.path.join(textfile_dir, METRICS_FILE)}: {exc}")
    state.update(
        version=STATE_VERSION,
        last_run=round(now, 3),
        interval_s=interval,
        duration_s=round(time.monotonic() - started, 4),
        nvml_up=nvml_up,
        nvml_error=nvml_error,
        # A record that cannot be read marks nothing as handled; the watch itself did not fail.
        remediation_record_error=record_error,
        error="; ".join(errors) or None,
        gpus=[_identity(g) for g in gpus],
        problems=problems,
    )
    atomic_write(host_path(root, state_path), json.dumps(state, sort_keys=True) + "\n", 0o644, makedirs=True)
    return state


USAGE = f"usage: {NAME} [--root DIR] [--textfile-dir DIR] [--state FILE] [--kernel-log FILE] [--interval SECONDS]\n"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv[1:]
    options = {"--root": "/", "--textfile-dir": TEXTFILE_DIR, "--state": STATE_PATH, "--kernel-log": KERNEL_LOG}
    options["--interval"] = str(DEFAULT_INTERVAL)
    while args:
        if args[0] not in options or len(args) < 2:
            sys.stderr.write(USAGE)
            return 2
        options[args[0]], args = args[1], args[2:]
    if not options["--interval"].isdigit():
        sys.stderr.write(error_line(NAME, f"--interval must be a whole number of seconds, not {options['--interval']}"))
        return 2
    try:
        state = run(
            options["--root"],
            textfile_dir=options["--textfile-dir"],
            state_path=options["--state"],
            kernel_log=options["--kernel-log"],
            interval=int(options["--interval"]),
        )
    except Exception as exc:  # one line for the journal, never a traceback
        sys.stderr.write(error_line(NAME, f"internal error ({type(exc).__name__}: {exc})"))
        return 1
    if state["error"]:
        sys.stderr.write(error_line(NAME, state["error"]))
        return 1
    return 0
