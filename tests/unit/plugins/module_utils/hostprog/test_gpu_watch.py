# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""hostprog/gpu_watch.py (``gpufleet-gpu-watch``): the kernel log read from where the last run stopped (a wrapped
ring buffer counted, a new boot or a log that starts again dropping the old XIDs), the problems discovery's checks see
with each GPU's labels and remediation class, the metrics in Prometheus' text format, and whole runs on a host tree
whose NVML is the simulated fleet's stub."""

from __future__ import annotations

import json
import os
import re

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery import gpu_watch_state
from ansible_collections.gpufleet.nvidia.plugins.module_utils.hostprog import gpu_watch
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils.discovery.discovery_tree import (
    compile_nvml_stub,
    gpu_host,
    stub_config,
)

XID79 = "4,{seq},93112000123,-;NVRM: Xid (PCI:0000:06:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off\n"
XID48 = "4,{seq},95000000000,-;NVRM: Xid (PCI:0000:05:00): 48, pid=77, name=train, An uncorrectable double bit error\n"
XID13 = "4,{seq},96000000000,-;NVRM: Xid (PCI:0000:05:00): 13, pid=77, name=train, Graphics Exception\n"
OTHER = "6,{seq},1000,-;eth0: link up\n"
HOT = {
    "ecc_uncorrected_volatile": 2,
    "ecc_uncorrected_aggregate": 7,
    "remapped_rows": {"correctable": 1, "uncorrectable": 3, "pending": True, "failure": False},
    "clocks_event_reasons": 0x40,
}


def log(*records: tuple[str, int]) -> str:
    return "".join(line.format(seq=seq) for line, seq in records)


def test_new_records_first_run_then_only_what_came_after():
    text = log((OTHER, 10), (XID79, 11), (OTHER, 12))
    assert gpu_watch.new_records(text, None) == (text.splitlines(), 12, 0, False)
    more = text + log((XID48, 13))
    assert gpu_watch.new_records(more, 12) == ([XID48.format(seq=13).rstrip("\n")], 13, 0, False)
    assert gpu_watch.new_records(more, 13) == ([], 13, 0, False)


def test_new_records_counts_what_a_wrapped_ring_buffer_dropped():
    # Read up to 12; the ring now starts at 20: records 13-19 were overwritten before this run.
    lines, seq, lost, restarted = gpu_watch.new_records(log((XID48, 20), (OTHER, 21)), 12)
    assert (len(lines), seq, lost, restarted) == (2, 21, 7, False)


def test_new_records_a_log_that_starts_again_is_read_whole():
    lines, seq, lost, restarted = gpu_watch.new_records(log((OTHER, 1), (XID79, 2)), 500)
    assert (len(lines), seq, lost, restarted) == (2, 2, 0, True)


def test_new_records_continuation_lines_and_dmesg_lines():
    kmsg = log((XID48, 5)) + " DEVICE=+pci:0000:05:00.0\n"
    assert gpu_watch.new_records(kmsg, None)[:2] == ([XID48.format(seq=5).rstrip("\n")], 5)
    dmesg = "[ 1.0] a\n[ 2.0] NVRM: Xid (PCI:0000:05:00): 48, pid=1, name=x, DBE\n"
    assert gpu_watch.new_records(dmesg, 1) == ([dmesg.splitlines()[1]], 2, 0, False)
    assert gpu_watch.new_records("", 7) == ([], 7, 0, False)


def test_update_state_counts_each_record_once_and_a_new_boot_starts_over():
    text = log((XID79, 11), (XID13, 12))
    state = gpu_watch.update_state(None, "boot-a", text, "/dev/kmsg")
    assert state["kmsg"] == {"source": "/dev/kmsg", "seq": 12, "lost": 0}
    assert {(e["pci_bus_id"], e["xid"], e["count"]) for e in state["xid_events"]} == {
        ("0000:06:00.0", 79, 1),
        ("0000:05:00.0", 13, 1),
    }
    again = gpu_watch.update_state(state, "boot-a", text + log((XID79, 13)), "/dev/kmsg")
    assert {(e["xid"], e["count"], e["last_seq"]) for e in again["xid_events"]} == {(79, 2, 13), (13, 1, 12)}
    # The ring buffer moved on (the XIDs are no longer in it): the counts stay.
    later = gpu_watch.update_state(again, "boot-a", log((OTHER, 40)), "/dev/kmsg")
    assert {(e["xid"], e["count"]) for e in later["xid_events"]} == {(79, 2), (13, 1)}
    assert later["kmsg"] == {"source": "/dev/kmsg", "seq": 40, "lost": 26}
    rebooted = gpu_watch.update_state(later, "boot-b", log((OTHER, 1)), "/dev/kmsg")
    assert rebooted["xid_events"] == [] and rebooted["kmsg"]["seq"] == 1 and rebooted["kmsg"]["lost"] == 0
    unreadable = gpu_watch.update_state(later, "boot-a", None, "/dev/kmsg")
    assert unreadable["xid_events"] == later["xid_events"] and unreadable["kmsg"]["seq"] == 40


def test_update_state_leaves_out_what_remediation_handled():
    """A remediation's mark on GPU 0000:06:00.0 (its XIDs up to ``uptime`` handled), as the remediation record's
    ``xid_handled`` answers it."""

    def marked(uptime):
        return lambda e: e["pci_bus_id"] == "0000:06:00.0" and e["uptime_s"] is not None and e["uptime_s"] <= uptime

    text = log((XID79, 11), (XID48, 12))  # 79 at 93112.000123 s on 0000:06:00.0, 48 at 95000 s on 0000:05:00.0
    state = gpu_watch.update_state(None, "a", text, "k")
    assert [(e["xid"], e["last_uptime_s"]) for e in state["xid_events"]] == [(79, 93112.000123), (48, 95000.0)]
    # The GPU was reset after the Xid 79: the next run drops it, the other GPU's 48 stays.
    after = gpu_watch.update_state(state, "a", text, "k", marked(93500.0))
    assert [(e["xid"], e["count"]) for e in after["xid_events"]] == [(48, 1)]
    # Records not read before and already handled are not counted either; a mark older than the event is not enough.
    assert [e["xid"] for e in gpu_watch.update_state(None, "a", text, "k", marked(93500.0))["xid_events"]] == [48]
    assert [e["xid"] for e in gpu_watch.update_state(None, "a", text, "k", marked(90000.0))["xid_events"]] == [79, 48]
    again = gpu_watch.update_state(after, "a", text + log((XID79, 13)).replace("93112000123", "94000000000"), "k",
                                   marked(93500.0))  # fmt: skip
    assert sorted((e["xid"], e["count"]) for e in again["xid_events"]) == [(48, 1), (79, 1)]


GPUS = [
    {
        "index": 0,
        "uuid": "GPU-a",
        "pci_bus_id": "0000:05:00.0",
        "health": {**HOT, "clocks_event_reasons": ["hw_slowdown"]},
    },
    {"index": 1, "uuid": "GPU-b", "pci_bus_id": "0000:06:00.0", "health": {"ecc_uncorrected_volatile": 0}},
]


def test_gpu_problems_carry_the_gpu_and_the_remediation_class():
    events = gpu_watch.update_state(None, "b", log((XID79, 1), (XID48, 2), (XID13, 3)), "k")["xid_events"]
    found = {
        (p["gpu"], p["uuid"], p["pci_bus_id"], p["code"], p["action"]) for p in gpu_watch.gpu_problems(GPUS, events)
    }
    assert found == {
        ("0", "GPU-a", "0000:05:00.0", "gpu_ecc_uncorrectable", "RESET_GPU"),
        ("0", "GPU-a", "0000:05:00.0", "gpu_row_remap_pending", "RESET_GPU"),
        ("0", "GPU-a", "0000:05:00.0", "gpu_clocks_throttled", "NONE"),
        ("0", "GPU-a", "0000:05:00.0", "gpu_xid_48", "RESET_GPU"),
        ("1", "GPU-b", "0000:06:00.0", "gpu_xid_79", "RESTART_BM"),
    }
    # A GPU NVML no longer lists (it fell off the bus): its XIDs still count, labelled by the bus id alone.
    orphan = gpu_watch.gpu_problems(GPUS[:1], events)
    assert [(p["gpu"], p["pci_bus_id"], p["code"]) for p in orphan if p["code"] == "gpu_xid_79"] == [
        ("", "0000:06:00.0", "gpu_xid_79")
    ]
    lost = gpu_watch.gpu_problems([{"index": 2, "uuid": None, "lost": True, "health": {}}], [])
    assert [(p["gpu"], p["code"], p["action"]) for p in lost] == [("2", "gpu_lost", "RESTART_BM")]


def test_render_is_prometheus_text_with_every_contract_series():
    events = gpu_watch.update_state(None, "b", log((XID48, 1), (XID13, 2), (XID79, 3)), "k")["xid_events"]
    problems = gpu_watch.gpu_problems(GPUS, events)
    text = gpu_watch.render(GPUS, problems, events, 1764300000.5, True)
    lines = text.splitlines()
    sample = re.compile(r'^[a-z_]+(\{([a-z_]+="(?:[^"\\]|\\.)*",?)*\})? -?[0-9.]+$')
    assert all(line.startswith("# ") or sample.match(line) for line in lines), text
    for name, (kind, _help) in gpu_watch.METRICS.items():
        assert f"# TYPE {name} {kind}" in lines
    ident0 = 'gpu="0",uuid="GPU-a",pci_bus_id="0000:05:00.0"'
    ident1 = 'gpu="1",uuid="GPU-b",pci_bus_id="0000:06:00.0"'
    for line in (
        f'gpufleet_gpu_problem{{{ident0},code="gpu_row_remap_pending",action="RESET_GPU"}} 1',
        f'gpufleet_gpu_problem{{{ident1},code="gpu_xid_79",action="RESTART_BM"}} 1',
        f"gpufleet_gpu_ecc_uncorrected_volatile_total{{{ident0}}} 2",
        f"gpufleet_gpu_ecc_uncorrected_aggregate_total{{{ident0}}} 7",
        f"gpufleet_gpu_ecc_uncorrected_volatile_total{{{ident1}}} 0",
        f'gpufleet_gpu_remapped_rows{{{ident0},kind="uncorrectable"}} 3',
        f"gpufleet_gpu_row_remap_pending{{{ident0}}} 1",
        f"gpufleet_gpu_row_remap_failure{{{ident0}}} 0",
        # the last XID of GPU 0 is the application's 13 (no action); GPU 1's the 79
        f'gpufleet_gpu_last_xid{{{ident0},action="NONE"}} 13',
        f'gpufleet_gpu_last_xid{{{ident1},action="RESTART_BM"}} 79',
        f'gpufleet_gpu_xid_events_total{{{ident0},xid="48"}} 1',
        "gpufleet_gpu_watch_last_run_timestamp_seconds 1764300000.500",
        "gpufleet_gpu_watch_nvml_up 1",
    ):
        assert line in lines, line
    assert not any(line.startswith("gpufleet_gpu_remapped_rows") and ident1 in line for line in lines)
    down = gpu_watch.render([], [], [], 5.0, False)
    assert "gpufleet_gpu_watch_nvml_up 0" in down.splitlines() and "gpufleet_gpu_problem" not in down


def test_render_escapes_label_values():
    gpu = {"index": 0, "uuid": 'G"\\\n', "pci_bus_id": "b", "health": {"ecc_uncorrected_volatile": 1}}
    assert 'uuid="G\\"\\\\\\n"' in gpu_watch.render([gpu], [], [], 1.0, True)


@pytest.fixture(scope="module")
def stub(tmp_path_factory):
    path = compile_nvml_stub(str(tmp_path_factory.mktemp("nvml-stub")))
    if path is None:
        pytest.skip("no C compiler for the NVML stub")
    return path


def test_runs_on_a_host_whose_nvml_is_the_stub(tmp_path, monkeypatch, stub):
    tree = gpu_host(tmp_path / "root", 2, stub)
    config = stub_config(count=2, health={0: HOT})
    (tmp_path / "gpus.json").write_text(json.dumps(config))
    monkeypatch.setenv("GPUFLEET_SIM_GPUS_JSON", str(tmp_path / "gpus.json"))
    tree.write("/proc/sys/kernel/random/boot_id", "boot-1\n")
    tree.write("/dev/kmsg", log((OTHER, 1), (XID79, 2)))
    root = str(tmp_path / "root")
    state = gpu_watch.run(root, textfile_dir="/prom", kernel_log="/dev/kmsg", interval=30, now=1000.0)
    assert (state["error"], state["nvml_up"], state["interval_s"], state["boot_id"]) == (None, True, 30, "boot-1")
    metrics = (tmp_path / "root/prom/gpufleet_gpu.prom").read_text()
    assert 'code="gpu_row_remap_pending",action="RESET_GPU"} 1' in metrics
    assert 'gpufleet_gpu_xid_events_total{gpu="1",uuid="GPU-00000000-0000-0000-0000-000000000001"' in metrics
    written = json.loads((tmp_path / "root" / gpu_watch_state.STATE_PATH.lstrip("/")).read_text())
    assert written == json.loads(json.dumps(state))
    # The next run reads the records after 2 only; the XID 79 is counted once.
    tree.write("/dev/kmsg", log((OTHER, 1), (XID79, 2), (XID48, 3)))
    state = gpu_watch.run(root, textfile_dir="/prom", kernel_log="/dev/kmsg", interval=30, now=1060.0)
    assert sorted((e["xid"], e["count"]) for e in state["xid_events"]) == [(48, 1), (79, 1)]
    # What discovery makes of it: the watch's XIDs merged (the ring no longer holds them), its run a fact.
    assert gpu_watch_state.read_state(root) == (state, None)
    assert [e["xid"] for e in gpu_watch_state.merge_xids([], state, "boot-1")] == [79, 48]
    assert os.stat(tmp_path / "root/prom/gpufleet_gpu.prom").st_mode & 0o777 == 0o644
    # remediate.yml reset GPU 1 after its Xid 79 (the remediation record's mark): the next run drops it.
    record = tmp_path / "root/var/lib/gpufleet/remediation.json"
    mark = {"0000:06:00.0": {"boot_id": "boot-1", "uptime_s": 93200.0}}
    record.write_text(json.dumps({"version": 1, "history": [], "handled_xids": mark}))
    state = gpu_watch.run(root, textfile_dir="/prom", kernel_log="/dev/kmsg", interval=30, now=1120.0)
    assert [(e["xid"], e["count"]) for e in state["xid_events"]] == [(48, 1)]
    assert "xid_79" not in (tmp_path / "root/prom/gpufleet_gpu.prom").read_text()
    # A record that cannot be read marks nothing handled, and is no failure of the watch.
    record.write_text("{")
    state = gpu_watch.run(root, textfile_dir="/prom", kernel_log="/dev/kmsg", interval=30, now=1180.0)
    assert state["error"] is None and state["remediation_record_error"].startswith("/var/lib/gpufleet/remediation")


def test_a_run_without_nvml_and_with_an_unwritable_textfile_dir_says_so(tmp_path):
    (tmp_path / "prom").write_text("a file, not a folder")
    assert gpu_watch.main(["x", "--root", str(tmp_path), "--textfile-dir", "/prom", "--interval", "5"]) == 1
    state = json.loads((tmp_path / gpu_watch_state.STATE_PATH.lstrip("/")).read_text())
    assert state["nvml_up"] is False and "cannot write /prom/gpufleet_gpu.prom" in state["error"]
    assert "cannot read the kernel log /dev/kmsg" in state["error"]
    assert gpu_watch.main(["x", "--interval", "soon"]) == 2
    assert gpu_watch.main(["x", "--bogus", "1"]) == 2
