# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""XID events from the kernel log: the NVIDIA driver reports every GPU error it sees as a line

    NVRM: Xid (PCI:0000:17:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.

in the kernel ring buffer. ``parse`` reads them out of ``/dev/kmsg`` records (``6,1234,5678,-;NVRM: ...``),
``dmesg`` lines (``[  12.345678] NVRM: ...``) or ``journalctl -k`` lines (``Nov 23 ... kernel: NVRM: ...``);
``read_kmsg`` reads ``/dev/kmsg`` without blocking (the ring buffer holds what it still holds since boot).

What each XID asks of an operator (``ACTIONS``) follows NVIDIA's Xid catalog for Ampere and later
(https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, its "Resolution Bucket (Immediate
Action)" column: RESTART_APP, RESET_GPU, RESTART_BM, CONTACT_SUPPORT, IGNORE, and WORKFLOW_<name> where the catalog's
page gives a procedure). Checked on 2026-11-23: XIDs 8, 11 and 13 against the page's text (RESTART_APP each); every
row of ``ACTIONS`` but 61 against a copy of the catalog's spreadsheet (Xid-Catalog.xlsx, retrieved 2026-09-15,
generated into github.com/riteshsonawane1372/gputop internal/gpu/nvidia/xid_catalog.go at 7f2c974; it agrees with
the page's rows 8, 11 and 13), and 79 (RESTART_BM) against NVIDIA NVSentinel's syslog health monitor test data too.
61 is a pre-Ampere XID, not in that catalog (kept as NVIDIA's older XID page has it: reset the GPU). The catalog
files 63 (a row marked for remapping) under IGNORE: the remap itself is reported by NVML's row-remapping counters
(``gpu_row_remap_pending``, which asks for the reset), not by the log line. For the memory XIDs, NVIDIA's "GPU Memory
Error Management" (https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/, row remapping needs a GPU reset to take
effect) and "Dynamic Page Retirement" (https://docs.nvidia.com/deploy/dynamic-page-retirement/, XIDs 48, 63, 64).
XIDs whose bucket is RESTART_APP, IGNORE or WORKFLOW_XID_45 are an application's fault (or follow another XID): they
stay in the facts and are not host problems.

Standard library only (target Pythons 3.8+).
"""

from __future__ import annotations

import errno
import os
import re
import stat
from typing import Any

from .pci import normalize_bus_id

# The 3-byte PCI address (domain:bus:device) NVRM prints; the function is always 0 for a GPU.
_XID = re.compile(
    r"NVRM: Xid \(PCI:(?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})(?:\.[0-7])?\): "
    r"(?P<xid>\d+),\s*(?P<rest>.*)$"
)
_KMSG_PREFIX = re.compile(r"^\d+,\d+,(?P<usec>\d+),[^;]*;")
_DMESG_PREFIX = re.compile(r"^\[\s*(?P<sec>\d+\.\d+)\]")
_PID = re.compile(r"^pid=(?P<pid>'?[^,']*'?),\s*(?:name=(?P<name>[^,]*),\s*)?")

MAX_KMSG_BYTES = 32 * 1024 * 1024  # the largest kernel ring buffer (log_buf_len) is 32 MiB
MAX_EVENTS = 1000  # per host; the count of each XID goes on counting

# xid: (NVIDIA's immediate action bucket, what it means, what to do). Buckets as the catalog names them.
ACTIONS: dict[int, tuple[str, str, str]] = {
    8: ("RESTART_APP", "GPU stopped processing", "restart the application"),
    13: ("RESTART_APP", "graphics engine exception", "restart the application; check its code if it recurs"),
    31: ("RESTART_APP", "GPU memory page fault", "restart the application; check its code if it recurs"),
    43: ("IGNORE", "GPU stopped processing (the application hit an error)", "restart the application"),
    45: (
        "WORKFLOW_XID_45",
        "preemptive cleanup after an earlier error or a killed application",
        "look at the XID before it",
    ),
    46: ("RESET_GPU", "GPU stopped processing (timeout)", "drain the GPU and reset it or reboot"),
    48: (
        "WORKFLOW_XID_48",
        "double-bit (uncorrectable) ECC error",
        "drain the GPU, then reset it ('nvidia-smi -r -i <index>') or reboot; contact NVIDIA support if it recurs",
    ),
    61: ("RESET_GPU", "internal micro-controller breakpoint/warning", "drain the GPU and reset it or reboot"),
    62: ("RESET_GPU", "internal micro-controller halt", "drain the GPU and reset it or reboot"),
    63: (
        "IGNORE",
        "a row was marked for remapping (a page for retirement on pre-Ampere GPUs)",
        "nothing for this line: the row remapping check (gpu_row_remap_pending) asks for the reset while it is pending",
    ),
    64: (
        "RESET_GPU",
        "row remapping (page retirement) failed to record",
        "drain the GPU and reset it; if it recurs the GPU is out of spare rows: contact NVIDIA support (RMA)",
    ),
    74: (
        "WORKFLOW_NVLINK_ERR",
        "NVLink error",
        "drain the GPU and reset it or reboot; check the NVLink bridges/baseboard if it recurs",
    ),
    79: (
        "RESTART_BM",
        "GPU has fallen off the bus",
        "drain the node and reboot it; check the GPU's seating, power and cooling, contact NVIDIA support if it recurs",
    ),
    92: ("IGNORE", "high single-bit ECC error rate", "watch the ECC counters; corrected errors need no action"),
    94: (
        "RESTART_APP",
        "contained ECC error (only the application that touched the memory was stopped)",
        "restart the application; reset the GPU when it is idle to remap the row",
    ),
    95: (
        "RESET_GPU",
        "uncontained ECC error (every application on the GPU was stopped)",
        "drain the GPU and reset it ('nvidia-smi -r -i <index>') or reboot",
    ),
    109: ("RESET_GPU", "context switch timeout", "drain the GPU and reset it or reboot"),
    119: ("RESET_GPU", "GSP RPC timeout", "drain the GPU and reset it or reboot"),
    120: ("RESET_GPU", "GSP error", "drain the GPU and reset it or reboot"),
    140: ("RESET_GPU", "unrecovered ECC error", "drain the GPU and reset it or reboot"),
    143: ("RESET_GPU", "GPU initialization error", "drain the GPU and reset it or reboot"),
}
# Buckets that are the host's concern (a problem), not one application's.
# WORKFLOW_XID_48 (a double-bit ECC error) and WORKFLOW_NVLINK_ERR: the catalog's procedures for them end in a GPU
# reset or a node reboot.
HOST_BUCKETS = ("RESET_GPU", "RESTART_BM", "CONTACT_SUPPORT", "WORKFLOW_XID_48", "WORKFLOW_NVLINK_ERR")


def parse(text: str) -> list[dict[str, Any]]:
    """Every XID line of ``text`` in order: ``{xid, pci_bus_id, message, pid, process, uptime_s}`` (``uptime_s``:
    seconds since boot when the line carries it, ``pid``/``process`` when NVRM printed them)."""
    events = []
    for line in text.splitlines():
        if "Xid" not in line:
            continue
        match = _XID.search(line)
        if not match:
            continue
        uptime = None
        prefix = _KMSG_PREFIX.match(line)
        if prefix:
            uptime = int(prefix.group("usec")) / 1e6
        else:
            prefix = _DMESG_PREFIX.match(line)
            if prefix:
                uptime = float(prefix.group("sec"))
        rest = match.group("rest").strip()
        pid = process = None
        who = _PID.match(rest)
        if who:
            pid_text = who.group("pid").strip("'")
            pid = int(pid_text) if pid_text.isdigit() else None
            name = (who.group("name") or "").strip()
            process = name if name and name != "<unknown>" else None
            rest = rest[who.end() :]
        events.append(
            {
                "xid": int(match.group("xid")),
                "pci_bus_id": normalize_bus_id(match.group("bus") + ".0"),
                "message": rest,
                "pid": pid,
                "process": process,
                "uptime_s": uptime,
            }
        )
        if len(events) >= MAX_EVENTS:
            break
    return events


def read_kmsg(path: str) -> str | None:
    """The kernel log records ``path`` (``/dev/kmsg``, or a regular file standing for it) holds now, one a line;
    None when it cannot be opened (absent, no CAP_SYSLOG with ``dmesg_restrict``).

    ``/dev/kmsg`` gives one record per read, from the oldest the ring buffer still holds; opened non-blocking, a read
    past the last one fails with EAGAIN instead of waiting. EPIPE means records were overwritten while reading (read
    on); EINVAL a record larger than the buffer (stop)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    chunks: list[bytes] = []
    total = 0
    try:
        regular = stat.S_ISREG(os.fstat(fd).st_mode)
        while total < MAX_KMSG_BYTES:
            try:
                data = os.read(fd, 65536 if regular else 8192)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EPIPE:
                    continue
                break
            if not data:
                break
            chunks.append(data if regular or data.endswith(b"\n") else data + b"\n")
            total += len(data)
    finally:
        os.close(fd)
    return b"".join(chunks).decode("utf-8", "replace")


def action(xid: int) -> tuple[str, str, str]:
    """``(bucket, meaning, what to do)`` for ``xid``; unknown ones point at the catalog."""
    return ACTIONS.get(
        xid,
        (
            "UNKNOWN",
            "an XID this collection has no entry for",
            "look it up in NVIDIA's Xid catalog (https://docs.nvidia.com/deploy/xid-errors/) and act on its "
            "resolution bucket",
        ),
    )


def summarize(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (GPU, XID): ``{pci_bus_id, xid, count, last_message, bucket}``, in order of first appearance."""
    seen: dict[tuple[str | None, int], dict[str, Any]] = {}
    for event in events:
        key = (event["pci_bus_id"], event["xid"])
        entry = seen.get(key)
        if entry is None:
            entry = seen[key] = {
                "pci_bus_id": event["pci_bus_id"],
                "xid": event["xid"],
                "count": 0,
                "bucket": action(event["xid"])[0],
            }
        entry["count"] += 1
        entry["last_message"] = event["message"]
    return list(seen.values())
