# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The GPU watch (``gpufleet-gpu-watch``) on a real GPU host: what one run costs there, and what it writes.

    python3 bench/real_gpu/watch.py TREE OUT [ROUNDS]

TREE is the collection's tree bench/real_gpu/prepare.sh leaves in .gpu/tree. The watch is installed from it into a
temporary folder with the collection's own installer and run as its timer runs it (one process per run, the real
``/dev/kmsg`` and the real NVML), writing its metrics and state into OUT: a first run, then ROUNDS steady runs,
interleaved with bare ``python3 -IS -c pass``. CPU time (user + system of the child, ``getrusage``) and wall time per
run go to OUT/watch-timing.json; the metrics file and the state file are kept beside it. Asserts nothing.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


def timed(argv: list[str]) -> tuple[float, float, int]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    rc = subprocess.run(argv, check=False, stdout=subprocess.DEVNULL).returncode
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall, rc


def main(tree: str, out: str, rounds: str = "20") -> int:
    sys.path.insert(0, os.path.join(tree, "plugins"))
    from module_utils.hostprog import install  # the tree's namespace package

    os.makedirs(out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="gpufleet-watch-")
    bindir = os.path.join(work, "bin")
    install.install(bindir, os.path.join(work, "lib"), PYTHON, programs=["gpufleet-gpu-watch"])
    watch = [
        os.path.join(bindir, "gpufleet-gpu-watch"),
        "--textfile-dir",
        out,
        "--state",
        os.path.join(out, "gpu-watch.json"),
    ]
    first = timed(watch)
    steady, bare = [], []
    for _round in range(int(rounds)):
        steady.append(timed(watch))
        bare.append(timed([PYTHON, "-IS", "-c", "pass"]))
    result = {
        "python": PYTHON,
        "first": {"cpu_s": first[0], "wall_s": first[1], "rc": first[2]},
        "steady_cpu_s_median": statistics.median(run[0] for run in steady),
        "steady_wall_s_median": statistics.median(run[1] for run in steady),
        "steady_rcs": sorted({run[2] for run in steady}),
        "bare_python_cpu_s_median": statistics.median(run[0] for run in bare),
        "bare_python_wall_s_median": statistics.median(run[1] for run in bare),
        "rounds": int(rounds),
    }
    with open(os.path.join(out, "watch-timing.json"), "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=1)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
