# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The GPU container start storm, shared by ``test_load_storm.py`` (small, in ``make test``) and
``make bench`` (``bench/bench.py``, section ``storm``: at least 200 starts).

On each simulated node prepared as ``_fleet_e2e`` prepares them (host programs, the CDI spec and index from
``gpufleet.nvidia.cdi_spec``, the shim registered as docker's runtime ``nvidia``, ``gpufleet-sim/mini:latest`` in every
engine), ``NODE_SCRIPT`` starts ``count`` containers, ``parallel`` at a time, a mix of requests:

* docker through the shim: ``--gpus all``, ``--gpus device=<uuid>``, ``NVIDIA_VISIBLE_DEVICES=<index>``, ``=<uuid>``,
  ``=none`` (no GPU);
* docker 25+ through its native CDI: ``--device nvidia.com/gpu=<index>``, ``=<uuid>``, ``=all``;
* containerd through ``ctr run --runc-binary <shim>``: ``--env NVIDIA_VISIBLE_DEVICES=all``, ``=<index>``,
  ``=<uuid>``, ``=none``, and ``--gpus <index>``;
* podman 5 through CDI (``--device nvidia.com/gpu=<index>``) where the node has podman 5.

Every container prints ``ls /dev``; a start passes when it exits 0 and its ``/dev/nvidia<N>`` are exactly the
requested GPUs' (from the CDI index read before the storm: index and UUID -> device node). Meanwhile, on the node,
``gpufleet-cdi-refresh --force`` rewrites the spec and the index in a loop (what the boot unit runs: the same
``generate``, written by rename), and on the controller ``regenerate`` (the caller's) runs ``gpufleet.nvidia.cdi_spec``
and ``gpufleet.nvidia.container_runtime`` again and again through ansible-playbook. ``REGENERATE_PLAYBOOK`` is that
playbook; its last run, after the storm, puts the module's spec back (the refresh loop's differs: no ``gpus`` of
discovery's, its own defaults), so a shared fleet is left as it was.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

SHIM = "/usr/local/bin/gpufleet-container-runtime"
IMAGE = "gpufleet-sim/mini:latest"
CTR_IMAGE = "docker.io/" + IMAGE  # ctr takes no short names
# What the shared e2e fleet's preparation wrote, once more (``_fleet_e2e.PLAYBOOK``): unchanged, so neither the spec
# nor docker's configuration changes, and docker is not restarted, unless the refresh loop changed the spec.
REGENERATE_PLAYBOOK = """
- hosts: all
  gather_facts: false
  tasks:
    - name: Regenerate the CDI spec and index (GPUs from discovery)
      gpufleet.nvidia.cdi_spec: {}
    - name: Register the shim as docker's runtime nvidia again
      gpufleet.nvidia.container_runtime:
        engine: docker
        path: /usr/local/bin/gpufleet-container-runtime
        cdi: "{{ gpufleet_sim.suite != 'bookworm' }}"
        restart: true
"""
# The files the storm must leave as it found them on a shared fleet.
STATE_FILES = ("/etc/cdi/nvidia.yaml", "/etc/gpufleet/cdi-nvidia.json", "/etc/docker/daemon.json")

NODE_SCRIPT = r"""
import json, os, random, re, subprocess, sys, threading, time
from concurrent.futures import ThreadPoolExecutor

opts = json.load(sys.stdin)
count, parallel, seed, tag = opts["count"], opts["parallel"], opts["seed"], opts["tag"]
image, shim, engines = opts["image"], opts["shim"], set(opts["engines"])
with open("/etc/gpufleet/cdi-nvidia.json") as f:
    index = json.load(f)
minor = {}
for name, dev in index["devices"].items():
    nodes = [n["path"] for n in dev.get("deviceNodes") or () if re.fullmatch(r"/dev/nvidia\d+", n["path"])]
    minor[name] = sorted(int(p[len("/dev/nvidia"):]) for p in nodes)
gpus = sorted(k for k in minor if k.isdigit())
uuids = sorted(k for k in minor if k.startswith("GPU-"))
every = minor["all"]
ctr = ["ctr", "run", "--rm"] + (["--cpu-shares", "0"] if opts["suite"] == "sid" else [])
dock = ["docker", "run", "--rm", "--network", "none"]

def kinds():
    out = []
    def add(engine, request, argv, want):
        out.append((engine, request, argv, want))
    if "docker" in engines:
        rt = dock + ["--runtime=nvidia"]
        add("docker", "--gpus all", rt + ["--gpus", "all", image], every)
        for u in uuids[:1]:
            add("docker", "--gpus device=uuid", rt + ["--gpus", "device=" + u, image], minor[u])
        for g in gpus[-1:]:
            add("docker", "NVIDIA_VISIBLE_DEVICES=index", rt + ["-e", "NVIDIA_VISIBLE_DEVICES=" + g, image], minor[g])
        for u in uuids[-1:]:
            add("docker", "NVIDIA_VISIBLE_DEVICES=uuid", rt + ["-e", "NVIDIA_VISIBLE_DEVICES=" + u, image], minor[u])
        add("docker", "NVIDIA_VISIBLE_DEVICES=none", rt + ["-e", "NVIDIA_VISIBLE_DEVICES=none", image], [])
        if opts["docker_cdi"]:
            for name in gpus[:1] + uuids[1:2] + ["all"]:
                kind = "uuid" if name.startswith("GPU-") else name if name == "all" else "index"
                argv = dock + ["--device", "nvidia.com/gpu=" + name, image]
                add("docker-cdi", "--device nvidia.com/gpu=" + kind, argv, minor[name])
    if "containerd" in engines:
        rb, cimage = ctr + ["--runc-binary", shim], opts["ctr_image"]
        for value, want in [("all", every), (gpus[-1], minor[gpus[-1]]), (uuids[0], minor[uuids[0]]), ("none", [])]:
            kind = "uuid" if value.startswith("GPU-") else value if value in ("all", "none") else "index"
            argv = rb + ["--env", "NVIDIA_VISIBLE_DEVICES=" + value, cimage]
            add("containerd", "NVIDIA_VISIBLE_DEVICES=" + kind, argv, want)
        add("containerd", "--gpus index", rb + ["--gpus", gpus[0], cimage], minor[gpus[0]])
    if "podman" in engines:
        pod = ["podman", "run", "--rm", "--network", "none"]
        add("podman", "--device nvidia.com/gpu=index", pod + ["--device", "nvidia.com/gpu=" + gpus[-1], image],
            minor[gpus[-1]])
    return out

mix = kinds()
# Engines in turn, each engine's requests in turn: a small storm still starts through every engine.
by_engine = {}
for k in mix:
    by_engine.setdefault(k[0], []).append(k)
names = sorted(by_engine)
plan = [by_engine[names[i % len(names)]][(i // len(names)) % len(by_engine[names[i % len(names)]])]
        for i in range(count)]
rng = random.Random(seed)
rng.shuffle(plan)

stop = threading.Event()
refreshes = {"ok": 0, "failed": 0, "last_error": ""}
def refresh_loop():
    while not stop.is_set():
        r = subprocess.run(["gpufleet-cdi-refresh", "--force"], capture_output=True, text=True)
        if r.returncode == 0:
            refreshes["ok"] += 1
        else:
            refreshes["failed"] += 1
            refreshes["last_error"] = (r.stdout + r.stderr)[-500:]
        time.sleep(opts["refresh_pause"])

def run_once(engine, argv, i, attempt):
    argv = list(argv)
    if engine == "containerd":
        argv.append("%s-%d%s" % (tag, i, "-r" if attempt else ""))
    argv += ["ls", "/dev"]
    t0 = time.perf_counter()
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=opts["timeout"])
        rc, out, err = r.returncode, r.stdout, r.stderr
    except subprocess.TimeoutExpired as exc:
        rc, out, err = -1, "", "timed out after %ss" % exc.timeout
    return argv, rc, out, err, time.perf_counter() - t0

def start(i):
    engine, request, argv, want = plan[i]
    argv, rc, out, err, seconds = run_once(engine, argv, i, 0)
    # Every /dev lists null: an exit 0 without it is output the engine's client lost (a short-lived container's
    # stdout racing its exit, containerd/containerd#770), not a start without GPUs. That start is run once more and
    # the second one is judged; the count of such retries goes into the result.
    lost = rc == 0 and "null" not in out.split()
    if lost:
        argv, rc, out, err, seconds = run_once(engine, plan[i][2], i, 1)
    seen = sorted(int(d[len("nvidia"):]) for d in out.split() if re.fullmatch(r"nvidia\d+", d))
    error = "" if rc == 0 else (err or out)[-600:]
    if rc == 0 and "null" not in out.split():
        error = "no output, twice (out=%r err=%r)" % (out[-200:], err[-200:])
    return {"engine": engine, "request": request, "rc": rc, "seconds": seconds, "want": want, "seen": seen,
            "ok": rc == 0 and seen == want and "null" in out.split(), "error": error, "output_lost": lost,
            "argv": " ".join(argv)}

loop = threading.Thread(target=refresh_loop, daemon=True)
if opts["refresh"]:
    loop.start()
t0 = time.perf_counter()
with ThreadPoolExecutor(parallel) as pool:
    results = list(pool.map(start, range(count)))
wall = time.perf_counter() - t0
stop.set()
if opts["refresh"]:
    loop.join()
print(json.dumps({"results": results, "wall": wall, "refreshes": refreshes, "kinds": len(mix)}))
"""


def node_storm(
    container: str,
    *,
    suite: str,
    engines: list[str],
    count: int,
    parallel: int,
    docker_cdi: bool,
    refresh: bool = True,
    seed: int = 19,
    tag: str = "storm",
    refresh_pause: float = 0.2,
    timeout: int = 300,
) -> dict[str, Any]:
    """Run ``NODE_SCRIPT`` in ``container`` (a node); -> its JSON (results, wall, refreshes)."""
    opts = {
        "count": count,
        "parallel": parallel,
        "seed": seed,
        "tag": tag,
        "image": IMAGE,
        "ctr_image": CTR_IMAGE,
        "shim": SHIM,
        "engines": engines,
        "suite": suite,
        "docker_cdi": docker_cdi,
        "refresh": refresh,
        "refresh_pause": refresh_pause,
        "timeout": timeout,
    }
    argv = ["docker", "exec", "-i", container, "python3", "-c", NODE_SCRIPT]
    proc = subprocess.run(argv, input=json.dumps(opts), capture_output=True, text=True, check=False, timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"{container}: the storm script failed (rc {proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def storm(
    nodes: dict[str, dict[str, Any]], regenerate: Callable[[], subprocess.CompletedProcess] | None
) -> dict[str, Any]:
    """``nodes``: name -> ``node_storm`` keyword arguments (with ``container``), all stormed at once while
    ``regenerate`` (the controller's ansible-playbook of ``REGENERATE_PLAYBOOK``) runs again and again until every
    node is done, then once more. -> {"nodes": {name: node_storm's}, "regenerations": [rc...], "final": proc}."""
    out: dict[str, Any] = {"nodes": {}, "errors": {}, "regenerations": []}

    def one(name: str) -> None:
        try:
            out["nodes"][name] = node_storm(**nodes[name])
        except Exception as exc:  # reported by the caller, with the node's name
            out["errors"][name] = str(exc)

    threads = [threading.Thread(target=one, args=(name,)) for name in nodes]
    start = time.monotonic()
    for t in threads:
        t.start()
    if regenerate is not None:
        while any(t.is_alive() for t in threads):
            proc = regenerate()
            out["regenerations"].append({"rc": proc.returncode, "tail": proc.stdout[-1500:]})
    for t in threads:
        t.join()
    out["wall"] = time.monotonic() - start
    if regenerate is not None:
        out["final"] = regenerate()
    return out


def percentile(xs: list[float], q: float) -> float:
    """The ``q`` (0-100) percentile, nearest rank."""
    xs = sorted(xs)
    rank = max(1, -(-len(xs) * q // 100))
    return xs[int(rank) - 1]


def distribution(seconds: list[float]) -> dict[str, float]:
    return {
        "n": len(seconds),
        "median": statistics.median(seconds),
        "p90": percentile(seconds, 90),
        "p99": percentile(seconds, 99),
        "max": max(seconds),
        "min": min(seconds),
    }


def failures(result: dict[str, Any]) -> list[str]:
    """One line per failed start (rc, or devices seen != requested) of ``storm``'s result."""
    lines = [f"{name}: {err}" for name, err in result["errors"].items()]
    for name, node in result["nodes"].items():
        lines += [
            "{}: {} {} rc={} want={} seen={}: {} [{}]".format(
                name, r["engine"], r["request"], r["rc"], r["want"], r["seen"], r["error"].strip(), r["argv"]
            )
            for r in node["results"]
            if not r["ok"]
        ]
    return lines


def starts(result: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for node in result["nodes"].values() for r in node["results"]]
