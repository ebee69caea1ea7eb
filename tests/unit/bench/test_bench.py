# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""bench/bench.py's pieces that need no fleet: the DGX host tree its ``dgx`` section times (it must really hold
8 GPUs with 7 MIG devices each, or the bench would time an empty scan), and the module-execution count it reads
from the JSON callback."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess

import pytest

from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils.discovery import discovery_tree as dt

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.join(HERE, "..", "..", "..", "bench", "bench.py")
_spec = importlib.util.spec_from_file_location("gpufleet_bench", BENCH)
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


@pytest.fixture(scope="module")
def dgx(tmp_path_factory):
    work = str(tmp_path_factory.mktemp("dgx"))
    stub = dt.compile_nvml_stub(work)
    if stub is None:
        pytest.skip("no C compiler for the NVML stub")
    saved = os.environ.get("GPUFLEET_SIM_GPUS_JSON")
    try:
        yield bench.dgx_trees(work, stub)
    finally:
        if saved is None:
            os.environ.pop("GPUFLEET_SIM_GPUS_JSON", None)
        else:
            os.environ["GPUFLEET_SIM_GPUS_JSON"] = saved


def test_the_dgx_tree_yields_8_gpus_with_7_mig_devices_each_in_the_spec(dgx, monkeypatch):
    tree, config = dgx["dgx"]
    monkeypatch.setenv("GPUFLEET_SIM_GPUS_JSON", config)
    facts, spec, text = bench.dgx_scan_and_spec(tree.root)
    assert facts["sources"]["answered"][0] == "nvml"  # the real NVML path, through the stub
    assert [g["pci_bus_id"] for g in facts["gpus"]] == ["0000:%s:00.0" % b for b in dt.DGX_BUS_IDS]
    assert facts["pci_gpu_count"] == 8  # the NVSwitches on the bus are not GPUs
    assert [(g["mig_mode"], len(g["mig_devices"])) for g in facts["gpus"]] == [("enabled", 7)] * 8
    devices = {d["name"]: d["containerEdits"]["deviceNodes"] for d in spec["devices"]}
    migs = [name for name in devices if ":" in name]
    assert len(migs) == 56 and len([n for n in devices if n.startswith("MIG-")]) == 56
    # GPU 5's fourth instance: gi 10 ci 0, whose caps minors mig-minors gives (3 + 5*135 + 10*9, and the ci one after)
    gi_minor = 3 + 5 * 135 + 10 * 9
    assert [n["path"] for n in devices["5:3"]] == [
        "/dev/nvidia5",
        f"/dev/nvidia-caps/nvidia-cap{gi_minor}",
        f"/dev/nvidia-caps/nvidia-cap{gi_minor + 1}",
    ]
    assert [n["path"] for n in devices["all"]] == [f"/dev/nvidia{i}" for i in range(8)]
    assert "libcuda.so.535.261.03" in text and "nvidia-cap" in text


def test_the_baseline_tree_is_one_gpu_without_mig(dgx, monkeypatch):
    tree, config = dgx["one"]
    monkeypatch.setenv("GPUFLEET_SIM_GPUS_JSON", config)
    facts, spec, _text = bench.dgx_scan_and_spec(tree.root)
    assert [(g["mig_mode"], g.get("mig_devices") or []) for g in facts["gpus"]] == [("disabled", [])]
    assert sorted(d["name"] for d in spec["devices"]) == ["0", "GPU-a1000000-0000-0000-0000-000000000000", "all"]


def test_mig_minors_follow_the_drivers_numbering():
    minors = dict(line.split() for line in dt.mig_minors_text().splitlines())
    # the MIG User Guide's own examples
    assert (minors["config"], minors["gpu0/gi0/access"], minors["gpu0/gi0/ci2/access"]) == ("1", "3", "6")
    assert minors["gpu31/gi14/ci7/access"] == "4322"


def test_module_executions_from_a_recorded_json_callback_output():
    with open(os.path.join(HERE, "fixtures", "json-callback.json"), encoding="utf-8") as f:
        counts = bench.module_executions(f.read())
    assert counts == {
        # ping, command, set_fact, stat for "/" (its "/nonexistent" item skipped); the when: false task skipped
        "gpu-a": {
            "executed": 4,
            "on_host": 3,
            "skipped": 1,
            "modules": {"ping": 1, "command": 1, "set_fact": 1, "stat": 1},
        },
        # command skipped; both stat items ran
        "gpu-b": {"executed": 4, "on_host": 3, "skipped": 2, "modules": {"ping": 1, "set_fact": 1, "stat": 2}},
    }
    note = bench.executions_note("rerun", counts)
    assert note[1] == (
        "rerun (gpu-b): 4 executed (3 on the host, the rest controller-only), 2 skipped; stat 2, ping 1, set_fact 1"
    )


def test_a_loop_whose_items_were_all_skipped_counts_as_skipped():
    doc = {"plays": [{"tasks": [{"hosts": {"h": {"action": "ansible.builtin.stat", "results": [{"skipped": True}]}}}]}]}
    assert bench.module_executions(json.dumps(doc))["h"] == {"executed": 0, "on_host": 0, "skipped": 1, "modules": {}}


def test_the_per_host_marginal_is_the_slope_over_fleet_sizes():
    # two sizes: (t24 - t1) / 23, the fixed part of a run (parsing, report) left out
    assert bench.marginal([(1, 40.0), (24, 86.0)]) == pytest.approx(2.0)
    # more sizes: the least-squares slope (1, 2, 3 hosts at 10, 13, 14 s: 2 s per host)
    assert bench.marginal([(1, 10.0), (2, 13.0), (3, 14.0)]) == pytest.approx(2.0)
    # a run that got faster with more hosts (a loaded machine) gives a negative marginal, not a clamped one
    assert bench.marginal([(1, 68.0), (2, 53.0)]) == pytest.approx(-15.0)


def test_a_marginal_needs_two_fleet_sizes():
    with pytest.raises(ValueError, match="two fleet sizes"):
        bench.marginal([(24, 80.0), (24, 82.0)])


def test_the_timing_wrapper_runs_the_runtime_and_logs_each_call(tmp_path):
    """The profile's wrapper, run by the real /bin/sh around a stand-in runtime, as docker calls a runtime."""
    runtime = tmp_path / "runtime"
    runtime.write_text('#!/bin/sh\necho "runtime: $*"\ncase "$*" in *fail*) exit 3;; esac\n')
    runtime.chmod(0o755)
    log = tmp_path / "calls.log"
    wrapper = tmp_path / "wrapper"
    wrapper.write_text(bench.TRACE_WRAPPER % {"real": str(runtime), "log": str(log)})
    wrapper.chmod(0o755)
    argv_create = ["--root", "/run/docker/runtime-runc/moby", "--log", "/x/create/log.json", "create", "--bundle", "b"]
    out = subprocess.run([str(wrapper), *argv_create, "c1"], capture_output=True, text=True, check=False)
    assert out.returncode == 0
    assert out.stdout == "runtime: " + " ".join([*argv_create, "c1"]) + "\n"  # arguments passed through unchanged
    assert subprocess.run([str(wrapper), "--root", "r", "start", "c1"], check=False).returncode == 0
    assert subprocess.run([str(wrapper), "delete", "--force", "fail"], capture_output=True, check=False).returncode == 3
    calls = bench.trace_calls(log.read_text())
    assert sorted(calls) == ["create", "delete", "start"]  # the subcommand, not the --log path's "create"
    assert all(len(v) == 1 and 0 < v[0] < 5 for v in calls.values())


def test_a_failed_create_in_the_profile_is_an_error_a_failed_delete_is_not():
    assert bench.trace_calls("delete 1000000000 1002000000 1\n") == {"delete": [0.002]}
    with pytest.raises(RuntimeError, match="create"):
        bench.trace_calls("create 1000000000 1020000000 1\n")


def test_the_scale_sizes_are_two_or_more_ascending():
    assert bench.scale_sizes("96, 1,24") == [1, 24, 96]
    for bad in ("24", "0,24", ""):
        with pytest.raises(ValueError, match="GPUFLEET_BENCH_SCALE_SIZES"):
            bench.scale_sizes(bad)


def test_linearity_is_the_inner_sizes_distance_from_the_line_between_the_ends():
    assert bench.linearity([(1, 10.0), (24, 240.0), (96, 960.0)]) == [pytest.approx(0.0)]
    # a per-host cost that grows with the fleet: the middle size lies below the line through the ends
    assert bench.linearity([(1, 1.0), (24, 24.0 * 2), (96, 96.0 * 8)])[0] < 0
    assert bench.linearity([(1, 1.0), (24, 24.0)]) == []


def test_each_task_kind_makes_a_play_of_that_many_tasks_after_the_discovery():
    import yaml

    for kind, body in bench.TASK_KINDS:
        play = yaml.safe_load(bench.task_play(body, 3, "/inc.yml"))[0]
        tasks = play["tasks"]
        assert list(tasks[0]) == ["gpufleet.nvidia.gpu_facts"], kind  # the facts a site.yml task sees, first
        assert len(tasks) == 4, kind
        assert len({yaml.safe_dump(t) for t in tasks[1:]}) in (1, 3), kind  # the same task, or numbered ones
    set_facts = yaml.safe_load(bench.task_play(dict(bench.TASK_KINDS)["set_fact"], 2, "/inc.yml"))[0]["tasks"][1:]
    assert [list(t["ansible.builtin.set_fact"]) for t in set_facts] == [["x0"], ["x1"]]
    include = yaml.safe_load(bench.task_play(bench.TASK_KINDS[3][1], 1, "/inc.yml"))[0]["tasks"][1]
    assert include == {"ansible.builtin.include_tasks": "/inc.yml"}
    copy = dict(bench.TASK_KINDS)["copy of a new small file"]
    first, second = (yaml.safe_load(bench.task_play(copy, 1, "/inc.yml"))[0]["tasks"][1] for _round in range(2))
    assert first["ansible.builtin.copy"]["dest"] != second["ansible.builtin.copy"]["dest"]  # a new file each round
    assert bench.task_play("", 0, "/inc.yml") == bench.TASK_PLAY  # the baseline: the discovery alone
