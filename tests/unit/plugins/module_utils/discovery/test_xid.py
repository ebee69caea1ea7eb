# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""discovery/xid.py: XID lines as the NVIDIA driver writes them, in the three shapes a host shows them.

The lines follow real ones: Xid 79 as a 570-era driver prints it with ``pid='<unknown>', name=<unknown>``;
Xid 79 without pid as in github.com/NVIDIA/open-gpu-kernel-modules#1151 (journal, ``kernel:`` prefix); Xid 63
with ``pid=1896`` as in stas00/ml-engineering's debug guide; Xid 31 with the MMU fault text of a 470-era driver.
"""

from __future__ import annotations

import os
import re

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery import xid as _xid

KMSG = (
    "6,1021,5023401,-;NVRM: loading NVIDIA UNIX x86_64 Kernel Module  535.261.03\n"
    "4,1388,93112000123,-;NVRM: Xid (PCI:0000:17:00): 79, pid='<unknown>', name=<unknown>, "
    "GPU has fallen off the bus.\n"
    "4,1389,93112000200,-;NVRM: GPU 0000:17:00.0: GPU has fallen off the bus.\n"
    "4,1390,95000000000,-;NVRM: Xid (PCI:0000:37:00): 63, pid=1896, name=python3, Row Remapper: New row marked for "
    "remapping, reset gpu to activate.\n"
)
DMESG = (
    "[ 8123.456789] NVRM: Xid (PCI:0000:08:00): 31, Ch 0000003b, intr 10000000. MMU Fault: ENGINE GRAPHICS "
    "HUBCLIENT_SCC faulted @ 0x0_04687000. Fault is of type FAULT_PDE ACCESS_TYPE_READ\n"
)
JOURNAL = "May 18 19:02:39 host kernel: NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus.\n"


def test_kmsg_records():
    events = _xid.parse(KMSG)
    assert events == [
        {"xid": 79, "pci_bus_id": "0000:17:00.0", "message": "GPU has fallen off the bus.", "pid": None,
         "process": None, "uptime_s": 93112.000123},
        {"xid": 63, "pci_bus_id": "0000:37:00.0",
         "message": "Row Remapper: New row marked for remapping, reset gpu to activate.", "pid": 1896,
         "process": "python3", "uptime_s": 95000.0},
    ]  # fmt: skip


def test_dmesg_and_journal_lines():
    (fault,) = _xid.parse(DMESG)
    assert (fault["xid"], fault["pci_bus_id"], fault["uptime_s"], fault["pid"]) == (
        31,
        "0000:08:00.0",
        8123.456789,
        None,
    )
    assert fault["message"].startswith("Ch 0000003b, intr 10000000. MMU Fault")
    (lost,) = _xid.parse(JOURNAL)
    assert (lost["xid"], lost["pci_bus_id"], lost["uptime_s"]) == (79, "0000:2b:00.0", None)


def test_lines_that_are_not_xids_are_ignored():
    assert (
        _xid.parse("NVRM: GPU at PCI:0000:2b:00: GPU-0b11d014\nXid without NVRM: 79\nNVRM: Xid (garbage): 5, x\n") == []
    )


def test_summary_counts_per_gpu_and_xid_and_keeps_the_last_message():
    text = KMSG + KMSG.replace("name=python3", "name=train")
    summary = _xid.summarize(_xid.parse(text))
    assert [(e["pci_bus_id"], e["xid"], e["count"], e["bucket"]) for e in summary] == [
        ("0000:17:00.0", 79, 2, "RESTART_BM"),
        ("0000:37:00.0", 63, 2, "IGNORE"),
    ]


def test_actions_know_the_memory_xids_and_send_unknown_ones_to_the_catalog():
    assert _xid.action(13)[0] == "RESTART_APP"  # an application's fault, not the host's
    assert _xid.action(48)[0] in _xid.HOST_BUCKETS
    assert _xid.action(95)[0] in _xid.HOST_BUCKETS and _xid.action(94)[0] == "RESTART_APP"
    bucket, _meaning, todo = _xid.action(9999)
    assert bucket == "UNKNOWN" and "docs.nvidia.com/deploy/xid-errors" in todo


def test_read_kmsg_from_a_file_and_absent(tmp_path):
    path = tmp_path / "kmsg"
    path.write_text(KMSG)
    assert _xid.read_kmsg(str(path)) == KMSG
    assert _xid.read_kmsg(str(tmp_path / "absent")) is None


def test_read_kmsg_does_not_block_on_a_fifo(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert _xid.read_kmsg(str(fifo)) == ""  # no writer: non-blocking open and read end at once


@pytest.mark.skipif(not os.access("/dev/kmsg", os.R_OK), reason="this machine's /dev/kmsg is not readable here")
def test_read_kmsg_of_the_real_device_ends_with_one_record_a_line():
    # This machine's own ring buffer: the reader stops at EAGAIN (never waits) and every record is a line of its own.
    text = _xid.read_kmsg("/dev/kmsg")
    lines = text.splitlines()
    assert lines and all(re.match(r"^\d+,\d+,\d+,[^;]*;", line) for line in lines if not line.startswith(" "))


# The common XIDs and the bucket each is filed under (``ACTIONS``), and so whether it is a host problem: NVIDIA's Xid
# catalog's "Resolution Bucket (Immediate Action)", as xid.py's docstring says where each row was checked (61 is a
# pre-Ampere XID the catalog does not list).
COMMON = {
    13: "RESTART_APP",
    31: "RESTART_APP",
    43: "IGNORE",
    45: "WORKFLOW_XID_45",
    46: "RESET_GPU",
    48: "WORKFLOW_XID_48",
    61: "RESET_GPU",
    62: "RESET_GPU",
    63: "IGNORE",
    64: "RESET_GPU",
    74: "WORKFLOW_NVLINK_ERR",
    79: "RESTART_BM",
    92: "IGNORE",
    94: "RESTART_APP",
    95: "RESET_GPU",
    119: "RESET_GPU",
    120: "RESET_GPU",
}


@pytest.mark.parametrize(("xid", "bucket"), sorted(COMMON.items()))
def test_the_common_xids_buckets_and_whether_the_host_must_act(xid, bucket):
    got, meaning, todo = _xid.action(xid)
    assert got == bucket and meaning and todo
    host = ("RESET_GPU", "RESTART_BM", "CONTACT_SUPPORT", "WORKFLOW_XID_48", "WORKFLOW_NVLINK_ERR")
    assert (got in _xid.HOST_BUCKETS) is (bucket in host)
    if got in ("RESET_GPU", "WORKFLOW_XID_48", "WORKFLOW_NVLINK_ERR"):
        assert "reset" in todo
    if got == "RESTART_BM":
        assert "reboot" in todo
