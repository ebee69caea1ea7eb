# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What one run of the GPU watch costs (``gpufleet-gpu-watch``, what its timer starts every interval), without a fleet.

bench/gpu_watch.py [--rounds N] [--gpus 2,8] [--records 8000]

For each GPU count a host tree with that many GPUs, the driver loaded and NVML answering through the simulated
fleet's compiled stub (``tests/sim/nvml``; the real ctypes path), ECC and row remapping counters on every GPU, one
with a pending row remap, and a kernel log stand-in of ``--records`` ``/dev/kmsg`` records (about 1 MiB at 8000, a
typical ring buffer) with an Xid 79 and an Xid 48 among them. The watch is installed from this tree into a temporary
folder with the collection's own installer and run as the timer runs it, one process per run (``python3 -IS``
launcher): a first run (every record parsed) and then steady-state runs (20 new records each, the rest skipped by
sequence number), interleaved with bare ``python3 -IS -c pass`` (the floor any Python program pays). Wall time, and
CPU time (user + system) of the child from ``getrusage``. Writes ``bench/results/<date>-gpu-watch.{json,md}``;
asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = "/usr/bin/python3"
sys.path.insert(0, os.path.join(REPO, ".cache", "collections"))

from ansible_collections.gpufleet.nvidia.plugins.module_utils.hostprog import install  # noqa: E402
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils.discovery.discovery_tree import (  # noqa: E402
    compile_nvml_stub,
    gpu_host,
    stub_config,
)

# Every GPU has ECC and row remapping counters (so each writes its series); GPU 0 a remap pending.
CLEAN = {
    "ecc_uncorrected_volatile": 0,
    "ecc_uncorrected_aggregate": 0,
    "remapped_rows": {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False},
}
PENDING = {**CLEAN, "remapped_rows": {"correctable": 0, "uncorrectable": 1, "pending": True, "failure": False}}


def kmsg(records: int, start: int = 1) -> str:
    lines = []
    for seq in range(start, start + records):
        if seq == start + records // 2:
            text = "NVRM: Xid (PCI:0000:06:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
        elif seq == start + records // 3:
            text = "NVRM: Xid (PCI:0000:05:00): 48, pid=77, name=train, An uncorrectable double bit error"
        else:
            text = f"eth0: renamed from veth{seq:06x}; audit: type=1400 apparmor=STATUS operation=profile_load"
        lines.append(f"6,{seq},{seq * 1000},-;{text}\n")
    return "".join(lines)


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """``(wall ms, CPU ms)`` of one child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, check=True, env=env, stdout=subprocess.DEVNULL)
    wall = (time.perf_counter() - start) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000
    return wall, cpu


def summary(values: list[float]) -> dict[str, float]:
    q = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
    return {"median": round(statistics.median(values), 2), "iqr": round(q[2] - q[0], 2), "min": round(min(values), 2),
            "max": round(max(values), 2), "n": len(values)}  # fmt: skip


def bench_gpus(work: str, stub: str, bindir: str, count: int, *, rounds: int, records: int) -> dict[str, object]:
    root = os.path.join(work, f"root-{count}")
    tree = gpu_host(root, count, stub)
    config = os.path.join(work, f"gpus-{count}.json")
    with open(config, "w", encoding="utf-8") as f:
        json.dump(stub_config(count=count, health={i: PENDING if i == 0 else CLEAN for i in range(count)}), f)
    env = dict(os.environ, GPUFLEET_SIM_GPUS_JSON=config)
    tree.write("/proc/sys/kernel/random/boot_id", "bench\n")
    watch = [os.path.join(bindir, "gpufleet-gpu-watch"), "--root", root, "--textfile-dir", "/prom"]
    state = os.path.join(root, "var/lib/gpufleet/gpu-watch.json")
    first, steady, floor = [], [], []
    log = kmsg(records)
    for _round in range(rounds):
        if os.path.exists(state):
            os.unlink(state)
        tree.write("/dev/kmsg", log)
        first.append(timed(watch, env))
        floor.append(timed([PYTHON, "-IS", "-c", "pass"], env))
        # Steady state: the ring buffer moved on by 20 records since the last run.
        tree.write("/dev/kmsg", kmsg(records, start=21))
        steady.append(timed(watch, env))
    with open(state, encoding="utf-8") as f:
        written = json.load(f)
    with open(os.path.join(root, "prom/gpufleet_gpu.prom"), encoding="utf-8") as f:
        series = sum(1 for line in f if line and not line.startswith("#"))
    return {
        "gpus": count,
        "records": records,
        "kmsg_bytes": len(log.encode()),
        "series": series,
        "problems": sorted({p["code"] for p in written["problems"]}),
        "first": {"wall_ms": summary([w for w, _c in first]), "cpu_ms": summary([c for _w, c in first])},
        "steady": {"wall_ms": summary([w for w, _c in steady]), "cpu_ms": summary([c for _w, c in steady])},
        "floor": {"wall_ms": summary([w for w, _c in floor]), "cpu_ms": summary([c for _w, c in floor])},
    }


def markdown(result: dict[str, object]) -> str:
    out = [
        f"# GPU watch: cost of one run ({result['date']})",
        "",
        f"`bench/gpu_watch.py --rounds {result['rounds']}` on {result['machine']} (Python {result['python']}), "
        "no fleet: a host tree with NVML answering through the simulated fleet's compiled stub, the watch installed "
        "from this tree and run as its timer runs it (one `python3 -IS` process per run). Medians of interleaved "
        "rounds (IQR in brackets); CPU is the child's user + system time.",
        "",
        "| GPUs | kernel log | run | wall ms | CPU ms | bare `python3 -IS` wall / CPU ms | series written |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in result["rows"]:
        log = f"{row['records']} records ({row['kmsg_bytes'] // 1024} KiB)"
        floor = f"{row['floor']['wall_ms']['median']} / {row['floor']['cpu_ms']['median']}"
        for kind, label in (("first", "first (every record parsed)"), ("steady", "steady (20 new records)")):
            wall, cpu = row[kind]["wall_ms"], row[kind]["cpu_ms"]
            out.append(
                f"| {row['gpus']} | {log} | {label} | {wall['median']} [{wall['iqr']}] | {cpu['median']} "
                f"[{cpu['iqr']}] | {floor} | {row['series']} |"
            )
    steady = {row["gpus"]: row["steady"]["cpu_ms"]["median"] for row in result["rows"]}
    out += [
        "",
        "Per interval of 60 s, a steady run's CPU time is "
        + ", ".join(f"{ms / 600:.3f}% of one core with {gpus} GPUs" for gpus, ms in steady.items())
        + ". The machine is shared (2 cores, other work running): wall times are upper bounds.",
        "",
    ]
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--gpus", default="2,8")
    parser.add_argument("--records", type=int, default=8000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpufleet-watch-bench-") as work:
        stub = compile_nvml_stub(work)
        if stub is None:
            print("needs a C compiler for the NVML stub", file=sys.stderr)
            return 1
        bindir = os.path.join(work, "bin")
        install.install(bindir, os.path.join(work, "lib"), PYTHON, programs=["gpufleet-gpu-watch"])
        rows = [
            bench_gpus(work, stub, bindir, int(n), rounds=args.rounds, records=args.records)
            for n in args.gpus.split(",")
        ]
    date = time.strftime("%Y-%m-%dT%H%M%SZ", time.gmtime())
    result = {"date": date, "rounds": args.rounds, "machine": f"{platform.machine()} {os.cpu_count()} CPUs",
              "python": platform.python_version(), "rows": rows}  # fmt: skip
    base = os.path.join(REPO, "bench", "results", f"{date}-gpu-watch")
    with open(base + ".json", "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    text = markdown(result)
    with open(base + ".md", "w", encoding="utf-8") as f:
        f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
