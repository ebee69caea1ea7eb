# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""``make bench``: timings on the simulated fleet, each paired with a baseline from the same run.

Writes ``bench/results/<date>.json``, ``<date>.md`` (a table) and ``<date>.png`` (a plot, with
``.venv-bench``'s matplotlib). Every figure is the median of interleaved rounds (variant A, its baseline,
A, baseline...) with its spread (quartiles, min, max, every sample in the JSON). Nothing here asserts:
the targets are reported as met or missed.

* container start: ``docker run --rm`` through the shim with one GPU vs plain runc on docker 20.10
  (bookworm), 26 (trixie) and 28 (sid), and containerd 1.6 through ``ctr run --runc-binary <shim>``; docker's
  native CDI with our spec on 26 and 28; podman 5.4 with a CDI device vs without; with
  ``GPUFLEET_BENCH_NVIDIA_RUNTIME``, on trixie, the shim against NVIDIA's runtime in CDI mode and our spec against
  NVIDIA's (``nvidia-ctk cdi generate``) through docker's and podman's native CDI;
* profile: each OCI runtime call of a GPU start (create, start, kill, delete) timed through a wrapper, the shim
  against runc given the same mounts and devices (docker 26);
* shim: its own CPU time and peak RSS per ``create`` (``wait4`` rusage) vs a bare ``python3 -IS`` start;
* discovery: ``ansible -m gpufleet.nvidia.gpu_facts`` vs ``ansible -m ansible.builtin.ping`` on one node;
  the pure ``discover()`` scan for 1, 8 and 16 GPUs (NVML stub) vs the same scan without NVML;
* CDI generation (``gather`` + ``build_spec`` + ``render``) for Debian's 535 tree vs ``gather`` alone;
* ldcache (no fleet): the merge of an image's ``ld.so.cache`` with the driver's libraries (or its fallback) for each
  crafted worst-case shape of ``tests/unit/.../cdi/crafted_ldcache.py`` (up to 8 MiB) vs this machine's own cache;
* DGX (no fleet): 8 GPUs x 7 MIG instances scanned and the CDI spec generated, in-process and as the
  ``gpu_facts`` + ``cdi_spec`` module processes, vs 1 GPU without MIG and a bare ``python3 -IS`` start;
* fleet: ``playbooks/site.yml`` first run and no-change rerun on 1, 2 and 3 GPU nodes
  (``GPUFLEET_BENCH_FLEET_NODES``), with the module executions per host from the JSON callback;
* scale: light hosts (GPU nodes without engines), ``site.yml`` first run and no-change rerun at each size of
  ``GPUFLEET_BENCH_SCALE_SIZES`` (default ``1,24,96``, each size on fresh hosts of one fleet), the per-host marginal
  wall time and controller CPU (the slope over the sizes) and the curve against a bare ``gather_facts`` play on the
  same hosts, forks
  ``GPUFLEET_BENCH_SCALE_FORKS`` (default 5), strategy linear, Ansible's ``internal_poll_interval``
  ``GPUFLEET_BENCH_SCALE_POLL`` (default: Ansible's, 0.001 s), ``GPUFLEET_BENCH_SCALE_FIRST_ROUNDS`` (default 1: first
  runs per size, each on fresh hosts, the median), module executions per host;
* storm: ``GPUFLEET_BENCH_STORM`` (default 110) GPU container starts per node, 16 at a time, on both
  nodes at once, the mix of ``tests/integration/_storm.py`` (docker through the shim and its CDI, containerd through
  ``ctr run --runc-binary``, podman's CDI; all GPUs, one by index, one by UUID, none) while the spec and index are
  rewritten on the node and ``cdi_spec`` / ``container_runtime`` run again from the controller: start-time median,
  p90, p99, max, against the same mix one at a time with nothing rewritten; every start must see exactly its GPUs.

Environment: ``GPUFLEET_BENCH_PREFIX`` (fleet prefix, default ``gfbench<pid>``), ``GPUFLEET_BENCH_ROUNDS``
(default 15), ``GPUFLEET_BENCH_ONLY`` (comma list of sections: start,profile,shim,discovery,scan,cdi,ldcache,dgx,fleet,
storm,scale), ``GPUFLEET_BENCH_NVIDIA_RUNTIME`` (a folder with NVIDIA's ``nvidia-container-runtime``, ``nvidia-ctk`` and
``nvidia-cdi-hook``, built from its source: the start section's baseline),
``GPUFLEET_BENCH_KEEP=1`` (keep the fleet for another run), ``GPUFLEET_BENCH_MODULE_UTILS`` (install the
host programs from another ``module_utils`` folder, e.g. an older commit's, to compare).
"""

import datetime
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, ".cache", "collections"))

FLEET_PY = os.path.join(REPO, "tests", "sim", "fleet.py")
IMAGE = "gpufleet-sim/mini:latest"
SHIM = "/usr/local/bin/gpufleet-container-runtime"
SITE = os.path.join(REPO, "playbooks", "site.yml")
PREPARE = os.path.join(REPO, "tests", "sim", "playbooks", "prepare.yml")
# The targets: a GPU start through the shim within 5% of plain runc and at most 0.85x NVIDIA's runtime in CDI
# mode; a no-change rerun a quarter of the first run; 8 GPUs x 7 MIG in 50 ms; per host in controller CPU, a rerun
# 3x a bare gather_facts play and a first run 40x.
TARGETS = {
    "shim_ratio": 1.05,
    "vs_nvidia_cdi": 0.85,
    "rerun_fraction": 0.25,
    "scan_16_s": 0.050,
    "rerun_vs_gather": 3.0,
    "first_vs_gather": 40.0,
}
NVIDIA_REF = "/opt/nvidia-ref"  # on a bench node: NVIDIA's runtime, nvidia-ctk and nvidia-cdi-hook, when given
NVIDIA_REF_PROGRAMS = ("nvidia-container-runtime", "nvidia-ctk", "nvidia-cdi-hook")
NVIDIA_REF_KIND = "nvidia-ref.com/gpu"  # NVIDIA's spec under its own kind, beside ours (nvidia.com/gpu)
NVIDIA_REF_CONFIG = """# NVIDIA's runtime as a bench baseline (bench/bench.py): CDI mode, its own spec's kind
[nvidia-container-runtime]
mode = "cdi"
runtimes = ["runc"]
[nvidia-container-runtime.modes.cdi]
default-kind = "%s"
spec-dirs = ["/etc/cdi"]
[nvidia-ctk]
path = "%s/nvidia-ctk"
""" % (NVIDIA_REF_KIND, NVIDIA_REF)
DOCKER_RUN = ("docker", "run", "--rm", "--network", "none")  # every timed docker start
PREPARE_PLAYBOOK = """
- hosts: all
  gather_facts: false
  tasks:
    - name: Write the CDI spec (GPUs from discovery)
      gpufleet.nvidia.cdi_spec: {}
    - name: Register the shim as docker's runtime nvidia
      gpufleet.nvidia.container_runtime:
        engine: docker
        path: /usr/local/bin/gpufleet-container-runtime
        cdi: "{{ gpufleet_sim.suite != 'bookworm' }}"
        restart: true
"""


def log(msg):
    print("bench: " + msg, flush=True)


def summary(samples):
    """Median and spread of ``samples`` (seconds or any unit)."""
    xs = sorted(samples)
    if len(xs) >= 2:
        q1, _q2, q3 = statistics.quantiles(xs, n=4, method="inclusive")
    else:
        q1 = q3 = xs[0]
    return {
        "median": statistics.median(xs),
        "q1": q1,
        "q3": q3,
        "min": xs[0],
        "max": xs[-1],
        "n": len(xs),
        "samples": samples,
    }


def pair(name, unit, value, baseline_name, baseline, *, target=None, note=""):
    """One result row: a measurement and the baseline measured in the same interleaved run."""
    row = {
        "name": name,
        "unit": unit,
        "value": summary(value),
        "baseline": {"name": baseline_name, **summary(baseline)},
    }
    row["ratio"] = row["value"]["median"] / row["baseline"]["median"] if row["baseline"]["median"] else None
    if target is not None:
        row["target"] = target
    if note:
        row["note"] = note
    return row


def run(argv, check=True, **kwargs):
    out = subprocess.run(argv, capture_output=True, text=True, check=False, **kwargs)
    if check and out.returncode != 0:
        raise RuntimeError(
            "%s: exit %d\n%s\n%s" % (" ".join(argv), out.returncode, out.stdout[-2000:], out.stderr[-2000:])
        )
    return out


# --------------------------------------------------------------------------------------------------
# The fleet


class Fleet:
    def __init__(self, prefix, config):
        self.prefix, self.config = prefix, config
        self.inventory = None

    def up(self):
        out = run([sys.executable, FLEET_PY, "up", "--config", self.config, "--name", self.prefix], timeout=900)
        self.inventory = out.stdout.strip().splitlines()[-1]
        return self

    def down(self):
        run([sys.executable, FLEET_PY, "down", "--name", self.prefix], check=False, timeout=300)

    def exec(self, node, argv, **kwargs):
        if isinstance(argv, str):
            argv = ["sh", "-c", argv]
        return run(["docker", "exec", "-i", f"{self.prefix}-{node}", *argv], **kwargs)

    def put(self, node, path, text):
        self.exec(node, ["sh", "-c", 'mkdir -p "$(dirname "$1")" && cat > "$1"', "-", path], input=text)


def prepare_gpu_nodes(fleet, nodes):
    """What tests/integration/test_cdi_e2e.py does: host programs from this tree, the mini image, the
    CDI spec and the shim registered as docker's runtime ``nvidia``."""
    if REPO not in sys.path:  # tests/sim imports itself as ``tests.sim``
        sys.path.insert(0, REPO)
    from tests.sim.fleet import host_program_files

    files = host_program_files(os.environ.get("GPUFLEET_BENCH_MODULE_UTILS"))
    procs = []
    for node in nodes:
        for path, text in files.items():
            fleet.put(node, path, text)
        fleet.exec(node, "python3 /tmp/gf/tests/tools/install_host_programs.py >/dev/null")
        procs.append(
            subprocess.Popen(
                ["docker", "exec", f"{fleet.prefix}-{node}", "gpufleet-sim-mini-image", IMAGE, "--python"],
                stdout=subprocess.DEVNULL,
            )
        )
    for proc in procs:
        if proc.wait(600) != 0:
            raise RuntimeError("gpufleet-sim-mini-image failed")
    run_playbook(fleet, PREPARE_PLAYBOOK, "preparing the nodes", timeout=900)


def run_playbook(fleet, text, what, timeout=600):
    """``ansible-playbook`` on the fleet's inventory with the playbook ``text``; RuntimeError naming ``what``."""
    with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as f:
        f.write(text)
    try:
        out = run(["ansible-playbook", "-i", fleet.inventory, f.name], check=False, timeout=timeout)
    finally:
        os.unlink(f.name)
    if out.returncode != 0:
        raise RuntimeError(f"{what} failed:\n" + out.stdout[-3000:])


def gpu0_docker_args(fleet, node):
    """docker's ``--device``/``-v`` arguments for the very device nodes and (utility, compute) mounts the shim injects
    for GPU 0, read from the node's CDI index: runc given what the shim gives, without the shim."""
    index = json.loads(fleet.exec(node, "cat /etc/gpufleet/cdi-nvidia.json").stdout)
    same = []
    for edit in (index.get("containerEdits") or {}, index["devices"]["0"]):
        same += ["--device={}".format(d.get("hostPath", d["path"])) for d in edit.get("deviceNodes") or ()]
        for m in edit.get("mounts") or ():
            if set(index.get("mountCapabilities", {}).get(m["containerPath"], ())) <= {"utility", "compute"}:
                same += ["-v", "{}:{}:ro".format(m["hostPath"], m["containerPath"])]
    return same


def nvidia_reference():
    """The folder of NVIDIA's own programs to compare against (``GPUFLEET_BENCH_NVIDIA_RUNTIME``), or None.

    Built by whoever runs the bench from NVIDIA's source (``go build ./cmd/nvidia-container-runtime
    ./cmd/nvidia-ctk ./cmd/nvidia-cdi-hook`` in a checkout of NVIDIA/nvidia-container-toolkit, vendored modules, no
    network); nothing of NVIDIA's is committed or built by this repository."""
    folder = os.environ.get("GPUFLEET_BENCH_NVIDIA_RUNTIME")
    if not folder:
        return None
    missing = [p for p in NVIDIA_REF_PROGRAMS if not os.access(os.path.join(folder, p), os.X_OK)]
    if missing:
        raise RuntimeError(f"GPUFLEET_BENCH_NVIDIA_RUNTIME={folder}: no executable {', '.join(missing)} there")
    return folder


def nvidia_ctk_generate(output, quiet=False):
    """``nvidia-ctk cdi generate`` on a bench node: NVIDIA's spec for the node's GPUs under ``NVIDIA_REF_KIND``, its
    hooks calling the copied ``nvidia-cdi-hook``, written to ``output``."""
    vendor, klass = NVIDIA_REF_KIND.split("/")
    argv = [f"{NVIDIA_REF}/nvidia-ctk", *(["--quiet"] if quiet else []), "cdi", "generate"]
    argv += ["--vendor", vendor, "--class", klass, "--nvidia-cdi-hook-path", f"{NVIDIA_REF}/nvidia-cdi-hook"]
    return [*argv, "--output", output]


def prepare_nvidia_reference(fleet, node, folder):
    """NVIDIA's runtime registered beside ours on ``node`` as docker's runtime ``nvidia-ref``, in CDI mode, with
    the spec ``nvidia-ctk cdi generate`` writes for the node's GPUs under the kind ``nvidia-ref.com/gpu`` (so the
    engines' CDI registries hold both specs without a conflict). -> ``nvidia-ctk --version``'s first line."""
    container = f"{fleet.prefix}-{node}"
    fleet.exec(node, ["mkdir", "-p", NVIDIA_REF])
    for program in NVIDIA_REF_PROGRAMS:
        run(["docker", "cp", os.path.join(folder, program), f"{container}:{NVIDIA_REF}/{program}"])
    # The runtime reads its config from NVIDIA_CTK_CONFIG_FILE_PATH or /etc/nvidia-container-runtime/config.toml;
    # docker passes a runtime no environment of its own, so the bench node gets the file (nothing of ours reads it
    # there: the shim's settings are its own).
    fleet.put(node, "/etc/nvidia-container-runtime/config.toml", NVIDIA_REF_CONFIG)
    fleet.exec(node, nvidia_ctk_generate("/etc/cdi/nvidia-ref.yaml"), timeout=300)
    playbook = textwrap.dedent(
        f"""
        - hosts: {node}
          gather_facts: false
          tasks:
            - name: Register NVIDIA's runtime beside ours
              gpufleet.nvidia.container_runtime:
                engine: docker
                name: nvidia-ref
                path: {NVIDIA_REF}/nvidia-container-runtime
                restart: true
        """
    )
    run_playbook(fleet, playbook, f"registering NVIDIA's runtime on {node}")
    return fleet.exec(node, [f"{NVIDIA_REF}/nvidia-ctk", "--version"]).stdout.strip().splitlines()[0]


# --------------------------------------------------------------------------------------------------
# Container start (inside a node: the engines are there)

START = textwrap.dedent(
    """
    import json, subprocess, sys, time
    rounds, variants = int(sys.argv[1]), json.loads(sys.argv[2])
    times = {k: [] for k in variants}
    for argv in variants.values():
        subprocess.run(argv, check=True, capture_output=True)  # warm up
    for _round in range(rounds):
        for name, argv in variants.items():
            start = time.perf_counter()
            subprocess.run(argv, check=True, capture_output=True)
            times[name].append(time.perf_counter() - start)
    print(json.dumps(times))
    """
)


def container_start(fleet, node, engine, variants, rounds):
    fleet.put(node, "/tmp/bench-start.py", START)
    out = fleet.exec(node, ["python3", "/tmp/bench-start.py", str(rounds), json.dumps(variants)], timeout=1800)
    return json.loads(out.stdout)


def docker_start_rows(fleet, node, label, rounds, *, cdi=False, nvidia=False):
    """``docker run --rm`` through the shim with 1 GPU and without, against plain runc; with ``cdi`` (the engine
    reads CDI specs itself) also docker's native CDI with our spec; with ``nvidia`` (``prepare_nvidia_reference``
    ran on the node) NVIDIA's runtime in CDI mode and docker's native CDI with NVIDIA's spec."""
    variants = {
        "runc": [*DOCKER_RUN, IMAGE, "true"],
        "shim-gpu": [*DOCKER_RUN, "--runtime=nvidia", "-e", "NVIDIA_VISIBLE_DEVICES=0", IMAGE, "true"],
        "shim-nogpu": [*DOCKER_RUN, "--runtime=nvidia", IMAGE, "true"],
    }
    # Where the time goes: runc given the very mounts and device nodes the shim injects for GPU 0 (by
    # docker's -v/--device, no shim, no hook): what any injection costs, before the shim's own processes.
    variants["runc-same-mounts"] = [*DOCKER_RUN, *gpu0_docker_args(fleet, node), IMAGE, "true"]
    if cdi:
        variants["cdi-ours"] = [*DOCKER_RUN, "--device", "nvidia.com/gpu=0", IMAGE, "true"]
    if nvidia:
        variants["nvidia-cdi"] = [*DOCKER_RUN, "--runtime=nvidia-ref", "-e", "NVIDIA_VISIBLE_DEVICES=0", IMAGE, "true"]
        if cdi:
            variants["cdi-nvidia"] = [*DOCKER_RUN, "--device", NVIDIA_REF_KIND + "=0", IMAGE, "true"]
    t = container_start(fleet, node, "docker", variants, rounds)
    target = TARGETS["shim_ratio"]
    rows = [
        pair(f"{label}: docker run --rm, shim + 1 GPU", "s", t["shim-gpu"], "plain runc", t["runc"], target=target),
        pair(f"{label}: docker run --rm, shim, no GPU", "s", t["shim-nogpu"], "plain runc", t["runc"]),
        pair(
            f"{label}: docker run --rm, runc + the GPU's mounts/devices (no shim/hook)",
            "s",
            t["runc-same-mounts"],
            "plain runc",
            t["runc"],
            note="the injection itself: the rest of the shim's overhead is its own processes",
        ),
    ]
    if nvidia:
        rows.append(
            pair(
                f"{label}: docker run --rm, shim + 1 GPU",
                "s",
                t["shim-gpu"],
                "NVIDIA's runtime, CDI mode, 1 GPU",
                t["nvidia-cdi"],
                target=TARGETS["vs_nvidia_cdi"],
            )
        )
        rows.append(
            pair(
                f"{label}: docker run --rm, NVIDIA's runtime, CDI mode, 1 GPU",
                "s",
                t["nvidia-cdi"],
                "plain runc",
                t["runc"],
            )
        )
    if cdi:
        rows.append(
            pair(
                f"{label}: docker run --rm --device nvidia.com/gpu=0 (our spec)",
                "s",
                t["cdi-ours"],
                "plain runc",
                t["runc"],
            )
        )
    if cdi and nvidia:
        rows.append(
            pair(
                f"{label}: docker run --rm --device <kind>=0, our spec",
                "s",
                t["cdi-ours"],
                "NVIDIA's spec (nvidia-ctk cdi generate)",
                t["cdi-nvidia"],
                target=1.0,
            )
        )
    return rows


TRACE_DIR = "/usr/local/libexec/gfbench"
TRACE_WRAPPER = """#!/bin/sh
# bench/bench.py: times one OCI runtime call (the runtime's whole run, its children included) into a log line
t0=$(date +%%s%%N)
%(real)s "$@"
rc=$?
t1=$(date +%%s%%N)
cmd=other
for a; do case "$a" in create|start|delete|kill|state|features) cmd=$a; break;; esac; done
echo "$cmd $t0 $t1 $rc" >> %(log)s
exit $rc
"""
TRACE_PLAYBOOK = """
- hosts: %(node)s
  gather_facts: false
  tasks:
    - name: Register the timing wrappers as docker runtimes
      gpufleet.nvidia.container_runtime:
        engine: docker
        name: "{{ item.name }}"
        path: "{{ item.path }}"
        restart: true
      loop:
        - {name: gfbench-shim, path: %(dir)s/shim}
        - {name: gfbench-runc, path: %(dir)s/runc}
"""


def trace_calls(log_text):
    """A timing wrapper's log (``TRACE_WRAPPER``) as ``{call: [seconds, ...]}``; a failed create or start is an error
    (a kill or delete of a container that is already gone may fail, as it does under plain runc)."""
    calls = {}
    for line in log_text.splitlines():
        cmd, t0, t1, rc = line.split()
        if rc != "0" and cmd in {"create", "start"}:
            raise RuntimeError(f"a traced runtime call failed: {line}")
        calls.setdefault(cmd, []).append((int(t1) - int(t0)) / 1e9)
    return calls


def start_profile_rows(fleet, node, label, rounds):
    """Where a GPU start's time goes: each OCI runtime call docker makes (create, start, kill, delete, state),
    timed by a wrapper around our launcher (1 GPU) and around runc given the same mounts and devices; the calls
    that differ carry the shim's cost, the rest of ``docker run`` is the engine's own."""
    runc = fleet.exec(node, "command -v runc").stdout.strip()
    for name, real in (("shim", SHIM), ("runc", runc)):
        text = TRACE_WRAPPER % {"real": real, "log": f"{TRACE_DIR}/{name}.log"}
        fleet.put(node, f"{TRACE_DIR}/{name}", text)
    fleet.exec(node, ["chmod", "755", f"{TRACE_DIR}/shim", f"{TRACE_DIR}/runc"])
    run_playbook(fleet, TRACE_PLAYBOOK % {"node": node, "dir": TRACE_DIR}, f"registering the timing wrappers on {node}")
    same = gpu0_docker_args(fleet, node)
    variants = {
        "shim": [*DOCKER_RUN, "--runtime=gfbench-shim", "-e", "NVIDIA_VISIBLE_DEVICES=0", IMAGE, "true"],
        "runc": [*DOCKER_RUN, "--runtime=gfbench-runc", *same, IMAGE, "true"],
    }
    fleet.exec(node, f"rm -f {TRACE_DIR}/*.log")
    totals = container_start(fleet, node, "docker", variants, rounds)
    calls = {name: trace_calls(fleet.exec(node, f"cat {TRACE_DIR}/{name}.log").stdout) for name in variants}
    rows = []
    for cmd in ("create", "start", "kill", "delete", "state"):
        shim, plain = calls["shim"].get(cmd), calls["runc"].get(cmd)
        if not shim or not plain:
            continue
        rows.append(
            pair(
                f"{label}: profile, one OCI '{cmd}' call, shim + 1 GPU",
                "s",
                shim,
                "runc + the same mounts/devices",
                plain,
                note=f"calls per start: {len(shim) / (rounds + 1):.1f} and {len(plain) / (rounds + 1):.1f}",
            )
        )
    rows.append(
        pair(
            f"{label}: profile, whole docker run --rm through the timing wrapper, shim + 1 GPU",
            "s",
            totals["shim"],
            "runc + the same mounts/devices",
            totals["runc"],
        )
    )
    return rows


def cdi_generate_rows(fleet, node, label, rounds):
    """The CDI spec made on the node from the live driver: ``gpufleet-cdi-refresh --force`` (discovery, the spec and
    index rendered and written, as at boot) against ``nvidia-ctk cdi generate --output`` (``prepare_nvidia_reference``),
    both into ``/tmp``."""
    ctk = nvidia_ctk_generate("/tmp/gfbench-nvidia-ref.yaml", quiet=True)
    # ours with the defaults cdi_spec had, written to /tmp as nvidia-ctk's is (the live spec and index stay as they are)
    config = {"path": "/tmp/gfbench-ours.yaml", "index_path": "/tmp/gfbench-ours.json"}
    fleet.put(node, "/tmp/gfbench-cdi-refresh.json", json.dumps(config))
    ours = ["/usr/local/bin/gpufleet-cdi-refresh", "--config", "/tmp/gfbench-cdi-refresh.json", "--force"]
    variants = {"ours": ours, "nvidia": ctk}
    t = container_start(fleet, node, "cdi", variants, rounds)
    return [
        pair(
            f"{label}: CDI spec from the live driver, gpufleet-cdi-refresh --force",
            "s",
            t["ours"],
            "nvidia-ctk cdi generate",
            t["nvidia"],
        )
    ]


def ctr_start_rows(fleet, node, label, rounds):
    """containerd through ``ctr run --rm --runc-binary <shim>`` with 1 GPU against plain ``ctr run --rm`` (runc):
    the path of a containerd without CDI (1.6) or a CRI with the shim as its runtime binary."""
    fleet.exec(node, f"docker save {IMAGE} | ctr -n gfbench images import - >/dev/null", timeout=600)
    ref = "docker.io/" + IMAGE
    ctr = ["ctr", "-n", "gfbench", "run", "--rm"]
    variants = {
        "runc": [*ctr, ref, "gfbench-runc", "true"],
        "shim-gpu": [*ctr, "--runc-binary", SHIM, "--env", "NVIDIA_VISIBLE_DEVICES=0", ref, "gfbench-shim", "true"],
    }
    t = container_start(fleet, node, "containerd", variants, rounds)
    return [
        pair(
            f"{label}: ctr run --rm --runc-binary <shim>, 1 GPU",
            "s",
            t["shim-gpu"],
            "plain ctr run --rm (runc)",
            t["runc"],
            target=TARGETS["shim_ratio"],
        )
    ]


def podman_start_rows(fleet, node, label, rounds, nvidia=False):
    base = ["podman", "run", "--rm", "--network", "none"]
    variants = {"plain": [*base, IMAGE, "true"], "cdi": [*base, "--device", "nvidia.com/gpu=0", IMAGE, "true"]}
    if nvidia:
        variants["cdi-nvidia"] = [*base, "--device", NVIDIA_REF_KIND + "=0", IMAGE, "true"]
    t = container_start(fleet, node, "podman", variants, rounds)
    rows = [pair(f"{label}: podman run --rm --device nvidia.com/gpu=0", "s", t["cdi"], "no device", t["plain"])]
    if nvidia:
        rows.append(
            pair(
                f"{label}: podman run --rm --device <kind>=0, our spec",
                "s",
                t["cdi"],
                "NVIDIA's spec (nvidia-ctk cdi generate)",
                t["cdi-nvidia"],
                target=1.0,
            )
        )
    return rows


SHIM_RUSAGE = textwrap.dedent(
    """
    import json, os, shutil, subprocess, sys, tempfile, time
    rounds = int(sys.argv[1])
    argv = ["docker", "run", "-d", "--network", "none", "-e", "NVIDIA_VISIBLE_DEVICES=0",
            "%(image)s", "python3", "-c", "import time; time.sleep(60)"]
    cid = subprocess.run(argv, check=True, capture_output=True, text=True).stdout.strip()
    try:
        src = "/run/containerd/io.containerd.runtime.v2.task/moby/%%s/config.json" %% cid
        with open(src, "rb") as f:
            original = f.read()
    finally:
        subprocess.run(["docker", "rm", "-f", cid], capture_output=True)
    bundle = tempfile.mkdtemp()
    env = dict(os.environ, GPUFLEET_RUNTIME="/bin/true")

    def measure(argv):
        with open(os.path.join(bundle, "config.json"), "wb") as f:
            f.write(original)
        start = time.perf_counter()
        pid = os.spawnve(os.P_NOWAIT, argv[0], argv, env)
        _pid, status, ru = os.wait4(pid, 0)
        wall = time.perf_counter() - start
        assert status == 0, (argv, status)
        return wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss * 1024
    variants = {
        "shim": ["%(shim)s", "--root", "/tmp/none", "create", "--bundle", bundle, "bench"],
        "python": ["/usr/bin/python3", "-IS", "-c", "pass"],
    }
    out = {k: {"wall": [], "cpu": [], "rss": []} for k in variants}
    for argv in variants.values():
        measure(argv)
    for _round in range(rounds):
        for name, argv in variants.items():
            wall, cpu, rss = measure(argv)
            out[name]["wall"].append(wall); out[name]["cpu"].append(cpu); out[name]["rss"].append(rss)
    measure(variants["shim"])
    with open(os.path.join(bundle, "config.json"), "rb") as f:
        assert b"gpufleet.nvidia/injected" in f.read(), "the shim did not inject"
    shutil.rmtree(bundle)
    print(json.dumps(out))
    """
)


def shim_rows(fleet, node, label, rounds):
    fleet.put(node, "/tmp/bench-shim.py", SHIM_RUSAGE % {"image": IMAGE, "shim": SHIM})
    r = json.loads(fleet.exec(node, ["python3", "/tmp/bench-shim.py", str(rounds)], timeout=900).stdout)
    s, p = r["shim"], r["python"]
    return [
        pair(f"{label}: shim create (1 GPU), wall", "s", s["wall"], "python3 -IS -c pass", p["wall"]),
        pair(f"{label}: shim create (1 GPU), CPU user+sys", "s", s["cpu"], "python3 -IS -c pass", p["cpu"]),
        pair(f"{label}: shim create (1 GPU), peak RSS", "bytes", s["rss"], "python3 -IS -c pass", p["rss"]),
    ]


# --------------------------------------------------------------------------------------------------
# Storm: many GPU container starts at once while the spec is rewritten and the runtime re-registered


def storm_rows(fleet, nodes, per_node, parallel):
    if REPO not in sys.path:
        sys.path.insert(0, REPO)
    from tests.integration import _storm

    engines = {"b-bookworm": ["docker", "containerd"], "b-trixie": ["docker", "containerd", "podman"]}

    def plan(count, par, refresh, tag):
        return {
            n: {
                "container": f"{fleet.prefix}-{n}",
                "suite": n.split("-", 1)[1],
                "engines": engines[n],
                "count": count,
                "parallel": par,
                "docker_cdi": n != "b-bookworm",
                "refresh": refresh,
                "tag": tag,
            }
            for n in nodes
        }

    with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as f:
        f.write(_storm.REGENERATE_PLAYBOOK)

    def regen():
        return run(["ansible-playbook", "-i", fleet.inventory, f.name], check=False, timeout=900)

    try:
        log("storm baseline: the same mix one at a time, nothing rewritten")
        base = _storm.storm(plan(max(10, per_node // 5), 1, False, "stormbase%d" % os.getpid()), None)
        log("storm: %d starts per node, %d at a time, on %s" % (per_node, parallel, ", ".join(nodes)))
        result = _storm.storm(plan(per_node, parallel, True, "storm%d" % os.getpid()), regen)
    finally:
        os.unlink(f.name)
    starts = _storm.starts(result)
    failed = _storm.failures(result) + _storm.failures(base)
    seconds = [s["seconds"] for s in starts]
    dist = _storm.distribution(seconds) if seconds else {}
    refreshes = {n: r["refreshes"] for n, r in result["nodes"].items()}
    regenerations = result["regenerations"]
    row = pair(
        "storm: %d GPU container starts, %d at a time on each of %d nodes, spec rewritten meanwhile"
        % (len(starts), parallel, len(nodes)),
        "s",
        seconds,
        "same mix, one at a time, nothing rewritten",
        [s["seconds"] for s in _storm.starts(base)],
        note="",
    )
    row["storm"] = {
        "starts": len(starts),
        "failed_starts": len(failed),
        "failures": failed[:50],
        "distribution": dist,
        "wall_s": result["wall"],
        "by_engine": {
            e: _storm.distribution([s["seconds"] for s in starts if s["engine"] == e])
            for e in sorted({s["engine"] for s in starts})
        },
        "spec_refreshes": refreshes,
        "playbook_runs": [r["rc"] for r in regenerations],
        "final_playbook_rc": result["final"].returncode,
    }
    rows = [row]
    if dist:
        rows.append(
            {
                "name": "storm: start time p90 / p99 / max; failed starts",
                "unit": "s",
                "value": {"median": dist["p90"], "n": dist["n"]},
                "note": "p90 %.2f s, p99 %.2f s, max %.2f s; %d failed of %d; %d spec rewrites on the nodes, %d "
                "cdi_spec + container_runtime playbook runs (rc %s) during the storm"
                % (
                    dist["p90"],
                    dist["p99"],
                    dist["max"],
                    len(failed),
                    len(starts),
                    sum(r["ok"] for r in refreshes.values()),
                    len(regenerations),
                    sorted({r["rc"] for r in regenerations}),
                ),
            }
        )
    return rows


# --------------------------------------------------------------------------------------------------
# Discovery


def discovery_rows(fleet, node, rounds):
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="oneline")
    variants = {
        "gpu_facts": ["ansible", "-i", fleet.inventory, node, "-m", "gpufleet.nvidia.gpu_facts"],
        "ping": ["ansible", "-i", fleet.inventory, node, "-m", "ansible.builtin.ping"],
    }
    times = {k: [] for k in variants}
    for argv in variants.values():
        run(argv, env=env, timeout=300)
    for _round in range(max(3, rounds // 2)):
        for name, argv in variants.items():
            start = time.perf_counter()
            run(argv, env=env, timeout=300)
            times[name].append(time.perf_counter() - start)
    return [
        pair(f"discovery: ansible -m gpu_facts ({node})", "s", times["gpu_facts"], "ansible -m ping", times["ping"])
    ]


def no_commands(argv):
    """discover()'s run_command with no programs installed: the pure file scan (plus NVML)."""
    return 127, "", f"{argv[0]}: not found"


def scan_rows(rounds):
    """The pure ``discover()`` of a generated host tree (sysfs, procfs, /dev, NVML stub) for 1, 8, 16 GPUs."""
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery.discover import discover
    from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils.discovery import discovery_tree as dt

    rows = []
    with tempfile.TemporaryDirectory() as work:
        os.makedirs(os.path.join(work, "stub"))
        stub = dt.compile_nvml_stub(os.path.join(work, "stub"))
        if stub is None:
            return [{"name": "discovery scan", "skipped": "no C compiler for the NVML stub"}]
        for count in (1, 8, 16):
            config = os.path.join(work, "gpus-%d.json" % count)
            dt.write_stub_config(config, count=count)
            os.environ["GPUFLEET_SIM_GPUS_JSON"] = config
            tree = dt.gpu_host(os.path.join(work, "host-%d" % count), count, stub=stub)
            discover(tree.root, run_command=no_commands)  # warm: the first dlopen of this copy
            times = {"auto": [], "nonvml": []}
            for _round in range(max(rounds, 15)):
                for name, sources in (("auto", ["auto"]), ("nonvml", ["procfs", "sysfs"])):
                    start = time.perf_counter()
                    facts = discover(tree.root, sources=sources, run_command=no_commands)
                    times[name].append(time.perf_counter() - start)
                    assert facts["gpu_count"] == count, facts
            target = TARGETS["scan_16_s"] if count == 16 else None
            row = pair(
                "discovery scan, %d GPUs (NVML stub)" % count,
                "s",
                times["auto"],
                "same, sysfs+procfs only",
                times["nonvml"],
            )
            if target:
                row["target_abs_s"] = target
            rows.append(row)
    os.environ.pop("GPUFLEET_SIM_GPUS_JSON", None)
    return rows


def cdi_rows(rounds):
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi.spec import build_spec, gather, render

    sys.path.insert(0, os.path.join(REPO, "tests", "tools"))
    import debian_driver_tree as builder

    root = os.path.join(REPO, ".cache", "debian-nvidia")
    builder.build(root)
    with tempfile.TemporaryDirectory() as work:
        dev = os.path.join(work, "dev")
        os.makedirs(dev)
        for name, major, minor in (("nvidia0", 195, 0), ("nvidiactl", 195, 255), ("nvidia-uvm", 511, 0)):
            os.mknod(os.path.join(dev, name), 0o666 | 0o020000, os.makedev(major, minor))
        gpus = [{"index": 0, "minor": 0, "uuid": "GPU-00000000-0000-0000-0000-000000000000"}]
        times = {"full": [], "gather": []}
        for _round in range(max(rounds, 15)):
            start = time.perf_counter()
            gather(driver_root=root, dev_root=work, gpus=gpus)
            times["gather"].append(time.perf_counter() - start)
            start = time.perf_counter()
            _v, inputs = gather(driver_root=root, dev_root=work, gpus=gpus)
            spec, _index = build_spec(hook_path="/usr/local/bin/gpufleet-cdi-hook", **inputs)
            render(spec, "yaml")
            times["full"].append(time.perf_counter() - start)
    return [
        pair(
            "CDI generation, Debian 535 tree (gather+build+render)", "s", times["full"], "gather alone", times["gather"]
        )
    ]


def ldcache_rows(rounds):
    """The merge of an image's ``ld.so.cache`` with the driver's libraries, as the CDI hook and the shim do it (the
    fallback, the driver's entries alone, where the image's cache cannot be merged), for the crafted shapes of
    ``crafted_ldcache`` against this machine's own cache, interleaved; no fleet."""
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi.ldcache import LdCacheError, add_entries
    from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils.cdi import crafted_ldcache as crafted

    def merge(data):
        try:
            return add_entries(data, crafted.DRIVER_LIBRARIES), "merged"
        except LdCacheError:
            return add_entries(b"", crafted.DRIVER_LIBRARIES), "fallback"

    with open("/etc/ld.so.cache", "rb") as f:
        normal = f.read()
    rows = []
    for shape in crafted.WORST_CASES:
        data = crafted.worst_case(shape)
        outcome = merge(data)[1]
        times = {"shape": [], "normal": []}
        for _round in range(max(rounds, 15)):
            for name, cache in (("shape", data), ("normal", normal)):
                start = time.process_time()
                merge(cache)
                times[name].append(time.process_time() - start)
        rows.append(
            pair(
                f"ld.so.cache merge (CPU), {shape} ({len(data) / (1 << 20):.1f} MiB, {outcome})",
                "s",
                times["shape"],
                f"this machine's cache ({len(normal) >> 10} KiB)",
                times["normal"],
            )
        )
    return rows


# --------------------------------------------------------------------------------------------------
# Discovery at the high end: a DGX-class host tree, no fleet.

DGX_TARGET_S = 0.050


def dgx_trees(work, stub):
    """``{"dgx": (tree, stub config path), "one": ...}``: 8 A100-SXM4-40GB x 7 MIG 1g.5gb, and 1 GPU without MIG
    (tests/unit/.../discovery/discovery_tree.py's ``dgx_host``, NVML through the compiled stub)."""
    from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils.discovery import discovery_tree as dt

    trees = {}
    for name, gpus, migs in (("dgx", 8, 7), ("one", 1, 0)):
        config = os.path.join(work, f"gpus-{name}.json")
        with open(config, "w", encoding="utf-8") as f:
            json.dump(dt.dgx_stub_config(gpus=gpus, migs=migs), f)
        os.environ["GPUFLEET_SIM_GPUS_JSON"] = config
        trees[name] = (dt.dgx_host(os.path.join(work, "host-" + name), stub, gpus=gpus, migs=migs, work=work), config)
    return trees


def dgx_scan_and_spec(root):
    """What ``gpu_facts`` and then ``cdi_spec`` compute for the host under ``root`` (the role hands the facts' GPUs to
    ``cdi_spec``): ``(facts, spec, spec_text)``."""
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi.generate import generate
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery.discover import discover

    facts = discover(root, run_command=no_commands)
    _v, spec, text, _index, _itext = generate({"root": root, "gpus": facts["gpus"]})
    return facts, spec, text


def _module_argv(module, args, work, tag):
    """``python -m <module> <args file>``: the module's own process on the target, as AnsiballZ ends up running it
    (without the wrapper's unzip and the transport)."""
    path = os.path.join(work, f"args-{module}-{tag}.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"ANSIBLE_MODULE_ARGS": args}, f)
    return [sys.executable, "-m", "ansible_collections.gpufleet.nvidia.plugins.modules." + module, path]


def _children_cpu():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _time_argvs(variants, rounds, env):
    """Wall and CPU time (the children's user + system) of each variant's commands run one after the other."""
    times = {k: [] for k in variants}
    times.update({"cpu-" + k: [] for k in variants})
    for argvs in variants.values():
        for argv in argvs:
            run(argv, env=env, timeout=120)  # warm
    for _round in range(rounds):
        for name, argvs in variants.items():
            cpu = _children_cpu()
            start = time.perf_counter()
            for argv in argvs:
                run(argv, env=env, timeout=120)
            times[name].append(time.perf_counter() - start)
            times["cpu-" + name].append(_children_cpu() - cpu)
    return times


def _with_tree_proc_driver(root, argv):
    """``argv`` in a private mount namespace where the tree's ``/proc/driver`` is over this machine's: nvidia-ctk reads
    the MIG capability minors from ``/proc/driver/nvidia-caps/mig-minors`` itself, not under ``--driver-root``
    (nvidia-container-toolkit internal/nvcaps/nvcaps.go). Needs root and ``unshare``; otherwise ``argv`` as it is
    (and nvidia-ctk then fails on the MIG devices, which the row says)."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return argv
    script = 'mount --bind "$0/proc/driver" /proc/driver && exec "$@"'
    return ["unshare", "-m", "--propagation", "private", "sh", "-c", script, root, *argv]


def _compare_mig_specs(ctk_path, ours):
    """One note: NVIDIA's spec (nvidia-ctk) against ours on the same tree - device names, and for each MIG device
    named ``<gpu>:<mig>`` in both, whether the device nodes (container paths) are the same."""
    import yaml

    with open(ctk_path, encoding="utf-8") as f:
        theirs = yaml.safe_load(f)

    def nodes(spec):
        return {
            d["name"]: sorted(n["path"] for n in (d.get("containerEdits") or {}).get("deviceNodes") or ())
            for d in spec["devices"]
        }

    a, b = nodes(theirs), nodes(ours)
    migs = sorted(n for n in set(a) & set(b) if ":" in n)
    differ = [n for n in migs if a[n] != b[n]]
    return (
        "nvidia-ctk cdi generate on the DGX tree: {} devices ({} MIG by index), ours {} ({} MIG by index); of the {} "
        "MIG devices both name, {} have the same device nodes{}".format(
            len(a),
            sum(":" in n for n in a),
            len(b),
            sum(":" in n for n in b),
            len(migs),
            len(migs) - len(differ),
            "" if not differ else " (differ: {})".format(", ".join(differ[:5])),
        )
    )


def dgx_rows(rounds):
    """8 GPUs x 7 MIG instances scanned and the CDI spec generated, in-process and as processes, against 1 GPU
    without MIG and a bare ``python3 -IS`` start in the same run; ``nvidia-ctk cdi generate`` on the same tree where
    ``GPUFLEET_BENCH_NVIDIA_CTK`` names it."""
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi.generate import generate
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery.discover import discover
    from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils.discovery import discovery_tree as dt

    rows, notes = [], []
    rounds = max(rounds, 15)
    with tempfile.TemporaryDirectory() as work:
        stub = dt.compile_nvml_stub(work)
        if stub is None:
            return [{"name": "DGX discovery", "skipped": "no C compiler for the NVML stub"}], notes
        trees = dgx_trees(work, stub)
        shape = {}
        for name, (tree, config) in trees.items():
            os.environ["GPUFLEET_SIM_GPUS_JSON"] = config
            facts, spec, _text = dgx_scan_and_spec(tree.root)  # warm: the first dlopen of the stub
            shape[name] = (len(facts["gpus"]), sum(len(g.get("mig_devices") or ()) for g in facts["gpus"]))
            shape[name] += (len(spec["devices"]),)
        if shape["dgx"][:2] != (8, 56):
            raise RuntimeError(f"the DGX tree scanned as {shape['dgx']}, not 8 GPUs with 56 MIG devices")
        notes.append(
            "DGX tree: {} GPUs, {} MIG devices, {} CDI devices in the spec; 1-GPU tree: {} GPU, {} CDI devices".format(
                *shape["dgx"], shape["one"][0], shape["one"][2]
            )
        )
        times = {f"{part}-{name}": [] for part in ("full", "scan", "spec", "cpu") for name in trees}
        for _round in range(rounds):
            for name, (tree, config) in trees.items():
                os.environ["GPUFLEET_SIM_GPUS_JSON"] = config
                cpu = time.process_time()
                start = time.perf_counter()
                facts = discover(tree.root, run_command=no_commands)
                middle = time.perf_counter()
                generate({"root": tree.root, "gpus": facts["gpus"]})
                end = time.perf_counter()
                times[f"cpu-{name}"].append(time.process_time() - cpu)
                times[f"full-{name}"].append(end - start)
                times[f"scan-{name}"].append(middle - start)
                times[f"spec-{name}"].append(end - middle)
        row = pair(
            "DGX: scan + CDI spec, 8 GPUs x 7 MIG (in-process)",
            "s",
            times["full-dgx"],
            "same, 1 GPU without MIG",
            times["full-one"],
        )
        row["target_abs_s"] = DGX_TARGET_S
        rows.append(row)
        row = pair(
            "DGX: the same, CPU time (free of the machine's load)",
            "s",
            times["cpu-dgx"],
            "same, 1 GPU without MIG",
            times["cpu-one"],
        )
        row["target_abs_s"] = DGX_TARGET_S
        rows.append(row)
        rows.append(pair("DGX: scan alone (discover)", "s", times["scan-dgx"], "1 GPU", times["scan-one"]))
        rows.append(pair("DGX: CDI spec alone (generate)", "s", times["spec-dgx"], "1 GPU", times["spec-one"]))

        # As processes: gpu_facts then cdi_spec, each in its own Python, as on the target.
        env = dict(os.environ, PYTHONPATH=os.path.join(REPO, ".cache", "collections"))
        variants = {"bare": [["python3", "-IS", "-c", "pass"]]}
        for name, (tree, config) in trees.items():
            os.environ["GPUFLEET_SIM_GPUS_JSON"] = config
            facts, _spec, _text = dgx_scan_and_spec(tree.root)
            variants[name] = [
                _module_argv("gpu_facts", {"root": tree.root}, work, name),
                _module_argv(
                    "cdi_spec",
                    {"root": tree.root, "gpus": json.loads(json.dumps(facts["gpus"])), "cdi_version": "0.6.0"},
                    work,
                    name,
                ),
            ]
        proc = {}
        for name in trees:
            env["GPUFLEET_SIM_GPUS_JSON"] = trees[name][1]
            part = _time_argvs({"bare": variants["bare"], name: variants[name]}, rounds, env)
            proc[name], proc["bare-" + name] = part[name], part["bare"]
            proc["cpu-" + name], proc["cpu-bare-" + name] = part["cpu-" + name], part["cpu-bare"]
        rows.append(
            pair(
                "DGX: gpu_facts + cdi_spec module processes, 8 GPUs x 7 MIG",
                "s",
                proc["dgx"],
                "bare python3 -IS -c pass",
                proc["bare-dgx"],
            )
        )
        rows.append(
            pair(
                "1 GPU: gpu_facts + cdi_spec module processes",
                "s",
                proc["one"],
                "bare python3 -IS -c pass",
                proc["bare-one"],
            )
        )
        rows.append(
            pair(
                "DGX: gpu_facts + cdi_spec module processes, CPU time",
                "s",
                proc["cpu-dgx"],
                "bare python3 -IS -c pass, CPU time",
                proc["cpu-bare-dgx"],
            )
        )
        rows.append(
            pair(
                "1 GPU: gpu_facts + cdi_spec module processes, CPU time",
                "s",
                proc["cpu-one"],
                "bare python3 -IS -c pass, CPU time",
                proc["cpu-bare-one"],
            )
        )
        bare_cpu, bare_wall = statistics.median(proc["cpu-bare-dgx"]), statistics.median(proc["bare-dgx"])
        notes.append(
            "DGX: a bare python3 -IS start took {:.1f} ms CPU, {:.1f} ms wall in this run (about 11.9 ms "
            "wall on a quiet machine): the in-process scan + spec used the CPU time of {:.2f} such starts".format(
                bare_cpu * 1000, bare_wall * 1000, statistics.median(times["cpu-dgx"]) / bare_cpu
            )
        )
        runtime_ctk = os.path.join(os.environ.get("GPUFLEET_BENCH_NVIDIA_RUNTIME") or "/nonexistent", "nvidia-ctk")
        ctk = os.environ.get("GPUFLEET_BENCH_NVIDIA_CTK") or (
            runtime_ctk if os.access(runtime_ctk, os.X_OK) else shutil.which("nvidia-ctk")
        )
        tree, config = trees["dgx"]
        if ctk and os.access(ctk, os.X_OK):
            ctk_env = dict(env, GPUFLEET_SIM_GPUS_JSON=config, LD_LIBRARY_PATH=tree.path(dt.LIBDIR))
            argv = [ctk, "cdi", "generate", "--driver-root", tree.root, "--dev-root", tree.root]
            argv = _with_tree_proc_driver(tree.root, [*argv, "--output", os.path.join(work, "ctk.yaml")])
            out = run(argv, check=False, env=ctk_env, timeout=120)
            if out.returncode != 0:
                why = " ".join(out.stderr.strip().splitlines()[-1:])[-300:]  # one line: it is a table cell
                rows.append({"name": "DGX: nvidia-ctk cdi generate", "skipped": f"{ctk} failed: {why}"})
            else:
                both = _time_argvs({"ctk": [argv], "ours": variants["dgx"]}, rounds, ctk_env)
                rows.append(
                    pair("DGX: nvidia-ctk cdi generate", "s", both["ctk"], "gpu_facts + cdi_spec", both["ours"])
                )
                os.environ["GPUFLEET_SIM_GPUS_JSON"] = config  # ours on the same tree (the stub reads it)
                notes.append(_compare_mig_specs(os.path.join(work, "ctk.yaml"), dgx_scan_and_spec(tree.root)[1]))
        else:
            notes.append(
                "nvidia-ctk cdi generate: not run, no nvidia-ctk on this machine (set GPUFLEET_BENCH_NVIDIA_CTK to "
                "its path to time it on the same tree, with the NVML stub on LD_LIBRARY_PATH)"
            )
    os.environ.pop("GPUFLEET_SIM_GPUS_JSON", None)
    return rows, notes


# --------------------------------------------------------------------------------------------------
# Module executions per host, from the JSON stdout callback (ansible.posix.json).

# Actions that run on the controller only (no module is sent to the host): counted, and shown apart.
CONTROLLER_ACTIONS = frozenset(
    "ansible.builtin." + name
    for name in (
        "set_fact", "debug", "assert", "fail", "meta", "include_tasks", "import_tasks", "include_role",
        "import_role", "include_vars", "add_host", "group_by", "set_stats", "pause", "validate_argument_spec",
    )
)  # fmt: skip


def _short(action):
    return action[len("ansible.builtin.") :] if action.startswith("ansible.builtin.") else action


def _skipped(result):
    # ansible-core 2.21 leaves "skipped" out of a loop item's result in the JSON callback; "skip_reason" stays
    return bool(result.get("skipped")) or "skip_reason" in result


def module_executions(callback_output):
    """Per host, what a playbook run executed, from the JSON callback's output (text or parsed): ``{host:
    {"executed": n, "on_host": n, "skipped": n, "modules": {action: n}}}``. A task result counts once per host
    unless skipped; a loop counts each item that was not skipped (each is one module run); ``on_host`` leaves out
    ``CONTROLLER_ACTIONS``. Action names are shortened for ``ansible.builtin``."""
    doc = json.loads(callback_output) if isinstance(callback_output, str) else callback_output
    counts = {}
    for play in doc.get("plays") or ():
        for task in play.get("tasks") or ():
            for host, result in (task.get("hosts") or {}).items():
                entry = counts.setdefault(host, {"executed": 0, "on_host": 0, "skipped": 0, "modules": {}})
                if _skipped(result):
                    entry["skipped"] += 1
                    continue
                items = result.get("results")
                runs = sum(1 for item in items if not _skipped(item)) if isinstance(items, list) else 1
                if runs == 0:
                    entry["skipped"] += 1
                    continue
                action = result.get("action") or "?"
                entry["executed"] += runs
                if action not in CONTROLLER_ACTIONS:
                    entry["on_host"] += runs
                name = _short(action)
                entry["modules"][name] = entry["modules"].get(name, 0) + runs
    return counts


CPU_CALLBACKS = os.path.join(HERE, "callback_plugins")


def cpu_env(env, path):
    """``env`` with the bench's ``cpu_per_task`` callback enabled, writing to ``path``."""
    enabled = ",".join(filter(None, [env.get("ANSIBLE_CALLBACKS_ENABLED", ""), "cpu_per_task"]))
    plugins = ":".join(filter(None, [CPU_CALLBACKS, env.get("ANSIBLE_CALLBACK_PLUGINS", "")]))
    return dict(env, ANSIBLE_CALLBACKS_ENABLED=enabled, ANSIBLE_CALLBACK_PLUGINS=plugins, GPUFLEET_CPU_PER_TASK=path)


def cpu_by_action(doc, hosts):
    """The ``cpu_per_task`` callback's rows (text or parsed) summed by action and divided by ``hosts``: ``[(action,
    tasks, cpu seconds per host)]``, the costliest first. Include processing is the ``include`` action, the time
    between plays ``play``, the playbook's parsing ``start``; an action's name is shortened as in the module counts."""
    doc = json.loads(doc) if isinstance(doc, str) else doc
    cpu, tasks = {}, {}
    for _name, action, _path, seconds in doc["rows"]:
        name = _short(action)
        cpu[name] = cpu.get(name, 0.0) + seconds
        tasks[name] = tasks.get(name, 0) + 1
    return sorted(((a, tasks[a], cpu[a] / hosts) for a in cpu), key=lambda t: (-t[2], t[0]))


def cpu_by_action_note(label, hosts, doc, top=14):
    """One line: a run's controller CPU per host by action (``cpu_by_action``), the costliest ``top``."""
    ranked = cpu_by_action(doc, hosts)
    total = sum(c for _a, _n, c in ranked)
    return "scale %s, controller CPU per host by action over %d hosts (%.2f s; tasks, then seconds per host): %s" % (
        label,
        hosts,
        total,
        ", ".join("%s %d %.3f" % (a, n, c) for a, n, c in ranked[:top]) + (", ..." if len(ranked) > top else ""),
    )


def executions_note(label, counts, top=12):
    """One line per host: totals and the modules by count, most first."""
    lines = []
    for host in sorted(counts):
        c = counts[host]
        ranked = sorted(c["modules"].items(), key=lambda kv: (-kv[1], kv[0]))
        lines.append(
            "{} ({}): {} executed ({} on the host, the rest controller-only), {} skipped; {}".format(
                label,
                host,
                c["executed"],
                c["on_host"],
                c["skipped"],
                ", ".join(f"{name} {n}" for name, n in ranked[:top]) + (", ..." if len(ranked) > top else ""),
            )
        )
    return lines


# --------------------------------------------------------------------------------------------------
# Fleet: site.yml, first run and no-change rerun.


def fleet_rows(prefix, rounds, counts=(1, 2, 3)):
    """``site.yml`` first run and no-change rerun on fleets of ``counts`` GPU nodes (``GPUFLEET_BENCH_FLEET_NODES``),
    with the module executions per host of each (JSON callback): ``(rows, notes)``."""
    rows, firsts, notes = [], {}, []
    # the JSON callback, for the module executions per host; its output is only printed at the end of the run
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json")
    for count in counts:
        config = os.path.join(tempfile.mkdtemp(), "fleet.yml")
        with open(config, "w", encoding="utf-8") as f:
            f.write("nodes:\n")
            for i in range(count):
                # no driver packages: the first run installs Debian's driver userspace, as on a new host
                f.write("  - {name: f%d, suite: bookworm, driver_state: loaded, gpus: 1}\n" % i)
        fleet = Fleet("%s-f%d" % (prefix, count), config).up()
        report_dir = tempfile.mkdtemp()
        site = ["ansible-playbook", "-i", fleet.inventory, SITE, "-e", "report_dir=" + report_dir]
        executions = {}
        try:
            first, again = [], []
            for _round in range(rounds):
                # the validation image (no registry in the sim): a site's own preparation, not timed
                run(["ansible-playbook", "-i", fleet.inventory, PREPARE], timeout=600)
                start = time.perf_counter()
                out = run(site, check=False, timeout=3600, env=env)
                first.append(time.perf_counter() - start)
                if out.returncode != 0:
                    return [*rows, {"name": "fleet %d nodes" % count, "failed": out.stdout[-2000:]}], notes
                executions["first run"] = module_executions(out.stdout)
                start = time.perf_counter()
                out = run(site, check=False, timeout=3600, env=env)
                if out.returncode != 0:
                    return [*rows, {"name": "fleet %d nodes, rerun" % count, "failed": out.stdout[-2000:]}], notes
                again.append(time.perf_counter() - start)
                executions["no-change rerun"] = module_executions(out.stdout)
                if len(first) < rounds:  # a fresh fleet for the next first run
                    fleet.down()
                    fleet.up()
        finally:
            fleet.down()
        firsts[count] = statistics.median(first)
        row = pair("fleet: site.yml no-change rerun, %d GPU node(s)" % count, "s", again, "first run", first)
        row["target"] = TARGETS["rerun_fraction"]
        row["module_executions"] = executions
        rows.append(row)
        for label, per_host in executions.items():
            notes += executions_note("%d node(s), %s" % (count, label), per_host)
    if 1 in firsts and 3 in firsts:
        rows.append(
            {
                "name": "fleet: per-host marginal time of the first run",
                "unit": "s",
                "value": {"median": (firsts[3] - firsts[1]) / 2, "n": 1},
                "note": "(first run with 3 nodes - with 1 node) / 2",
            }
        )
    return rows, notes


# --------------------------------------------------------------------------------------------------
# Scale: site.yml on a fleet of light hosts, per-host marginal time against a bare gather_facts play.

SCALE_NODE = "  - {name: %s, suite: bookworm, driver_state: loaded, driver_packages: true, engines: [], gpus: 1}\n"
GATHER_FACTS_PLAY = "- hosts: all\n  gather_facts: true\n  tasks: []\n"


def light_fleet(prefix, names):
    """A fleet (not yet up) of light hosts named ``names`` (``SCALE_NODE``), its configuration in a new folder."""
    config = os.path.join(tempfile.mkdtemp(), "fleet.yml")
    with open(config, "w", encoding="utf-8") as f:
        f.write("nodes:\n" + "".join(SCALE_NODE % name for name in names))
    return Fleet(prefix, config)


def marginal(points):
    """The per-host marginal cost from ``(hosts, value)`` points (a run's seconds or CPU seconds at each fleet size):
    the least-squares slope of value over hosts; with two sizes, ``(v2 - v1) / (n2 - n1)``. What a run costs with one
    host more, its fixed part (playbook parsing, the report, the run's first connection) left out."""
    points = [(float(n), float(v)) for n, v in points]
    sizes = {n for n, _v in points}
    if len(sizes) < 2:
        raise ValueError("a marginal needs at least two fleet sizes, got %s" % sorted(sizes))
    mean_n = sum(n for n, _v in points) / len(points)
    mean_v = sum(v for _n, v in points) / len(points)
    return sum((n - mean_n) * (v - mean_v) for n, v in points) / sum((n - mean_n) ** 2 for n, _v in points)


def _timed(argv, env, timeout=3600):
    """Run ``argv``; ``(wall seconds, CPU seconds of it and its children on this machine, CompletedProcess)``. The
    CPU is the controller's: ansible-playbook, its forks and the ``docker exec`` clients of the connection plugin
    (what the node containers run is not counted)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    out = run(argv, check=False, timeout=timeout, env=env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, out


def scale_sizes(text):
    """``GPUFLEET_BENCH_SCALE_SIZES`` (``"1,24,96"``): the fleet sizes of the scale section, ascending, at least two."""
    sizes = sorted({int(n) for n in str(text).split(",") if n.strip()})
    if len(sizes) < 2 or sizes[0] < 1:
        raise ValueError("GPUFLEET_BENCH_SCALE_SIZES: at least two sizes of 1 or more hosts, got %r" % text)
    return sizes


def linearity(points):
    """How far a curve is from a line through its ends: each inner size's value against the straight line between
    the smallest and the largest size, as a fraction of the largest value (0: on the line). A per-host cost that grows
    with the fleet bends the curve up: the inner points fall below the line."""
    points = sorted((float(n), float(v)) for n, v in points)
    (n0, v0), (n1, v1) = points[0], points[-1]
    out = []
    for n, v in points[1:-1]:
        line = v0 + (v1 - v0) * (n - n0) / (n1 - n0)
        out.append((v - line) / v1 if v1 else 0.0)
    return out


RERUN_ROUNDS = 3


def poll_config(poll):
    """An ansible.cfg that sets only ``internal_poll_interval`` (it has no environment variable), its path; ``None``
    for Ansible's default (0.001 s: while a task runs, ``ansible-playbook``'s main loop wakes every millisecond to
    look for results, about 5% of a core for the whole wall time of the run)."""
    if poll is None:
        return None
    with tempfile.NamedTemporaryFile("w", suffix=".cfg", delete=False) as f:
        f.write("[defaults]\ninternal_poll_interval = %s\n" % poll)
    return f.name


def scale_rows(prefix, sizes=(1, 24, 96), forks=5, gather_rounds=2, *, poll=None, first_rounds=1):
    """``site.yml`` first run and no-change rerun at each fleet size of ``sizes`` (``GPUFLEET_BENCH_SCALE_SIZES``),
    each on fresh light hosts of one fleet of ``sum(sizes)``, against a bare ``gather_facts`` play on the same hosts:
    ``(rows, notes, info)``.

    A light host is a bookworm GPU node (1 GPU, Debian's 535 userspace installed, driver loaded) without any container
    engine: every stage runs its normal path for such a host (driver held, toolkit installed, CDI spec and device-node
    units written, validation reports that no engine is there), nothing starts a container. The hosts of a size are
    their own slice of the fleet (``s000``.. for the first size, the next ones for the next), so every first run meets
    fresh hosts and the fleet comes up once. The per-host marginal is the least-squares slope over the sizes.
    ``first_rounds`` (``GPUFLEET_BENCH_SCALE_FIRST_ROUNDS``) first runs per size, each on hosts of its own (the median
    is taken: one first run is one sample of a noisy machine); the reruns and the gather play use the first set."""
    sizes = list(sizes)
    names = ["s%03d" % i for i in range(sum(sizes) * first_rounds)]
    rounds, start = {n: [] for n in sizes}, 0
    for _round in range(first_rounds):
        for n in sizes:
            rounds[n].append(names[start : start + n])
            start += n
    sets = {n: rounds[n][0] for n in sizes}
    with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as f:
        f.write(GATHER_FACTS_PLAY)
    gather = f.name
    env = dict(os.environ, ANSIBLE_FORKS=str(forks), ANSIBLE_STRATEGY="linear")
    config = poll_config(poll)
    if config:  # the same setting for the gather_facts plays and site.yml
        env["ANSIBLE_CONFIG"] = config
    json_env = dict(env, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json")
    info = {
        "forks": forks,
        "strategy": "linear",
        "sizes": sizes,
        "fleet": len(names),
        "internal_poll_interval": poll,
        "first_rounds": first_rounds,
    }
    report_dir = tempfile.mkdtemp()
    fleet = light_fleet("%s-scale" % prefix, names)
    log("scale: fleet of %d light hosts up (%s)" % (len(names), fleet.prefix))
    start_all = time.perf_counter()
    wall = {k: {n: [] for n in sizes} for k in ("gather", "first", "rerun")}
    cpu = {k: {n: [] for n in sizes} for k in ("gather", "first", "rerun")}
    executions, changed, cpu_split = {}, {}, {}

    def site(hosts, label):
        argv = ["ansible-playbook", "-i", fleet.inventory, SITE, "--limit", ",".join(hosts)]
        argv += ["-e", "report_dir=" + report_dir, "-e", "gpufleet_fail_on_host_failure=false"]
        log("scale: site.yml %s on %d host(s)" % (label, len(hosts)))
        # The largest size's runs also split their controller CPU by task (the cpu_per_task callback: at each task
        # start it joins the finished workers and reads getrusage; no CPU of its own worth counting).
        split = os.path.join(report_dir, "cpu-%s.json" % label) if len(hosts) == sizes[-1] else None
        w, c, out = _timed(argv, cpu_env(json_env, split) if split else json_env)
        if split and os.path.exists(split):
            with open(split, encoding="utf-8") as f:
                cpu_split[label] = json.load(f)
        if out.returncode != 0:
            raise RuntimeError(
                "scale: site.yml %s on %d hosts: exit %d\n%s" % (label, len(hosts), out.returncode, out.stdout[-3000:])
            )
        doc = json.loads(out.stdout)
        wall[label][len(hosts)].append(w)
        cpu[label][len(hosts)].append(c)
        executions.setdefault(label, {}).update(module_executions(doc))
        changed.setdefault(label, {}).update({h: s.get("changed", 0) for h, s in (doc.get("stats") or {}).items()})

    def gather_facts():
        for n in sizes:
            argv = ["ansible-playbook", "-i", fleet.inventory, gather, "--limit", ",".join(sets[n])]
            w, c, out = _timed(argv, env)
            if out.returncode != 0:
                raise RuntimeError(
                    "scale: gather_facts on %d hosts: exit %d\n%s" % (n, out.returncode, out.stdout[-3000:])
                )
            wall["gather"][n].append(w)
            cpu["gather"][n].append(c)

    try:
        fleet.up()
        info["fleet_up_s"] = round(time.perf_counter() - start_all, 1)
        log("scale: gather_facts play on %s hosts, %d rounds" % (sizes, gather_rounds))
        gather_facts()
        for r in range(first_rounds):
            for n in sizes:
                site(rounds[n][r], "first")
        # A rerun is short and its controller CPU the figure with a target: three rounds across the sizes, medians
        # (one round is at the mercy of whatever else the machine does for those seconds).
        for _round in range(RERUN_ROUNDS):
            for n in sizes:
                site(sets[n], "rerun")
        for _round in range(max(1, gather_rounds - 1)):
            gather_facts()
    finally:
        os.unlink(gather)
        if config:
            os.unlink(config)
        shutil.rmtree(report_dir, ignore_errors=True)
        if os.environ.get("GPUFLEET_BENCH_KEEP") != "1":
            fleet.down()
    info["section_wall_s"] = round(time.perf_counter() - start_all, 1)
    info["wall"], info["controller_cpu"] = wall, cpu

    def slope(series):
        return [marginal([(n, statistics.median(series[n])) for n in sizes])]

    how = "per-host marginal = least-squares slope over %s hosts, fresh hosts per size; forks %d, strategy linear" % (
        sizes,
        forks,
    )
    rows = []
    targets = {"first": TARGETS["first_vs_gather"], "rerun": TARGETS["rerun_vs_gather"]}
    for series, measure in ((wall, "wall time (forks %d, linear)" % forks), (cpu, "controller CPU")):
        for label, what in (("first", "first run"), ("rerun", "no-change rerun")):
            row = pair(
                "scale: site.yml %s, per-host marginal %s" % (what, measure),
                "s",
                slope(series[label]),
                "bare gather_facts play",
                slope(series["gather"]),
                note=how,
            )
            if series is cpu:
                row["target"] = targets[label]
            row["sizes"] = {"value": series[label], "baseline": series["gather"]}
            rows.append(row)
    curve = []
    for label in ("gather", "first", "rerun"):
        per_host = [
            "%d: %.3f s CPU, %.2f s wall"
            % (n, statistics.median(cpu[label][n]) / n, statistics.median(wall[label][n]) / n)
            for n in sizes
        ]
        bend = linearity([(n, statistics.median(cpu[label][n])) for n in sizes])
        curve.append(
            "scale: %s, per host by size (run total / hosts, the run's fixed part included): %s; controller CPU "
            "against the straight line between the smallest and largest size: %s"
            % (label, "; ".join(per_host), ", ".join("%+.1f%%" % (100 * b) for b in bend) or "-")
        )
    notes = [
        "scale: a fleet of %d light hosts (bookworm GPU nodes, 1 GPU, Debian's 535 installed, no container engine), "
        "brought up once in %.0f s; site.yml first run (%d round(s), each on fresh hosts, the median) then no-change "
        "rerun (%d rounds) at %s hosts, each size on its own fresh hosts (the inventory turns pipelining on), a bare "
        "gather_facts play on the same host sets before and after; "
        "forks %d, strategy linear; internal_poll_interval %s; %s; controller CPU = this process's children "
        "(ansible-playbook, its forks, the docker exec clients), not the nodes'; the nodes share this machine's cores "
        "with the controller; section wall time %.0f s"
        % (
            len(names),
            info["fleet_up_s"],
            first_rounds,
            RERUN_ROUNDS,
            sizes,
            forks,
            "%s s (GPUFLEET_BENCH_SCALE_POLL)" % poll if poll is not None else "Ansible's default (0.001 s)",
            how,
            info["section_wall_s"],
        ),
        "scale: wall times by size (s): "
        + "; ".join(
            "%s %s" % (k, ", ".join("%d hosts %s" % (n, "/".join("%.1f" % x for x in xs)) for n, xs in v.items()))
            for k, v in wall.items()
        ),
        "scale: controller CPU by size (s): "
        + "; ".join(
            "%s %s" % (k, ", ".join("%d hosts %s" % (n, "/".join("%.1f" % x for x in xs)) for n, xs in v.items()))
            for k, v in cpu.items()
        ),
        *curve,
        "scale: validation on these hosts reports 'no container engine found to validate' (no engine, by design of "
        "the light host), so the runs pass gpufleet_fail_on_host_failure=false",
    ]
    big = sets[sizes[-1]]
    for label in ("first", "rerun"):
        per_host = {h: c for h, c in executions[label].items() if h in big}
        on_host = sorted(c["on_host"] for c in per_host.values())
        executed = sorted(c["executed"] for c in per_host.values())
        info.setdefault("module_executions", {})[label] = executions[label]
        notes.append(
            "scale: %s, module executions per host over the %d hosts of the largest size: %s executed (%s on the "
            "host; the highest is the run's first host, which also carries the run-once tasks), changed tasks per "
            "host %s"
            % (
                label,
                len(per_host),
                _span(executed),
                _span(on_host),
                _span(sorted(changed[label][h] for h in per_host)),
            )
        )
        notes += executions_note("scale %s" % label, {big[-1]: executions[label][big[-1]]})
        if label in cpu_split:
            info.setdefault("cpu_by_task", {})[label] = cpu_split[label]
            notes.append(cpu_by_action_note(label, len(big), cpu_split[label]))
    rows[1]["module_executions"] = {"first run": executions["first"], "no-change rerun": executions["rerun"]}
    return rows, notes, info


# --------------------------------------------------------------------------------------------------
# Tasks: what one task of each kind costs the control node per host, against a bare gather_facts play.

# Each kind as one task line of a play (%d: the task's index, for a set_fact's distinct name). The play first runs
# gpu_facts, so that the hosts carry the facts a site.yml task sees.
TASK_KINDS = (
    ("skipped", "    - ansible.builtin.debug: {msg: x}\n      when: false\n"),
    ("debug", "    - ansible.builtin.debug: {msg: x}\n"),
    ("set_fact", '    - ansible.builtin.set_fact: {x%d: "{{ ansible_facts.nvidia.gpu_count | default(0) }}"}\n'),
    ("include_tasks (one skipped task inside)", "    - ansible.builtin.include_tasks: {include}\n"),
    ("command on the host", "    - ansible.builtin.command: 'true'\n      changed_when: false\n"),
    ("copy of a new small file", "    - ansible.builtin.copy: {content: x, dest: '/tmp/{nonce}-%d', mode: '0644'}\n"),
    ("gpufleet.nvidia.gpu_facts", "    - gpufleet.nvidia.gpu_facts:\n"),
)
TASK_PLAY = "- hosts: all\n  gather_facts: false\n  tasks:\n    - gpufleet.nvidia.gpu_facts:\n"


def task_play(body, count, include):
    """The text of a play that discovers the host, then runs ``count`` tasks of ``body`` (a ``TASK_KINDS`` line):
    ``{include}`` is the included file, ``{nonce}`` a new name each call (a copy writes a new file each round)."""
    body = body.replace("{include}", include).replace("{nonce}", "gpufleet-bench-%x" % random.getrandbits(48))
    return TASK_PLAY + "".join(body % i if "%d" in body else body for i in range(count))


def task_cost_rows(prefix, hosts=12, count=30, forks=5, rounds=2):
    """Per kind of task (``TASK_KINDS``), its controller CPU per host per task: the slope over 1 and ``hosts`` light
    hosts of (a play of ``count`` such tasks) minus (the same play with none), divided by ``count``; against a bare
    ``gather_facts`` play's controller CPU per host (its slope over the same sizes). The budget a site.yml run has per
    host in tasks of each kind follows: the scale section's first-run target is 40 gather_facts plays."""
    names = ["t%03d" % i for i in range(hosts + 1)]
    work = tempfile.mkdtemp()
    include = os.path.join(work, "include.yml")
    with open(include, "w", encoding="utf-8") as f:
        f.write("- name: Inside\n  ansible.builtin.debug: {msg: x}\n  when: false\n")
    env = dict(os.environ, ANSIBLE_FORKS=str(forks), ANSIBLE_STRATEGY="linear")
    small, big = names[:1], names[1:]
    fleet = light_fleet("%s-tasks" % prefix, names)

    def cpu(text, limit):
        path = os.path.join(work, "play.yml")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        _w, c, out = _timed(["ansible-playbook", "-i", fleet.inventory, path, "--limit", ",".join(limit)], env)
        if out.returncode != 0:
            raise RuntimeError("tasks: exit %d\n%s" % (out.returncode, out.stdout[-3000:]))
        return c

    def slope(text):
        return marginal([(1, cpu(text, small)), (len(big), cpu(text, big))])

    rows, start = [], time.perf_counter()
    log("tasks: fleet of %d light hosts up (%s)" % (len(names), fleet.prefix))
    try:
        fleet.up()
        baseline = [slope(GATHER_FACTS_PLAY) for _round in range(rounds)]
        empty = task_play("", 0, include)
        for kind, body in TASK_KINDS:
            log("tasks: %d x %s" % (count, kind))
            per_task = [(slope(task_play(body, count, include)) - slope(empty)) / count for _round in range(rounds)]
            rows.append(
                pair(
                    "tasks: one %s task, controller CPU per host" % kind,
                    "s",
                    per_task,
                    "bare gather_facts play",
                    baseline,
                    note="slope over 1 and %d light hosts of %d such tasks after a gpu_facts task, less the same "
                    "play without them, per task; forks %d, linear" % (len(big), count, forks),
                )
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if os.environ.get("GPUFLEET_BENCH_KEEP") != "1":
            fleet.down()
    note = "tasks: %d light hosts, %d tasks per kind, %d rounds, section wall time %.0f s; a ratio is the task's " % (
        len(names),
        count,
        rounds,
        time.perf_counter() - start,
    )
    note += "controller CPU per host in bare gather_facts plays (the scale section's first-run target is 40)"
    return rows, [note]


def _span(xs):
    return str(xs[0]) if xs[0] == xs[-1] else "%s-%s (median %s)" % (xs[0], xs[-1], statistics.median(xs))


# --------------------------------------------------------------------------------------------------
# Output


def met(row):
    if "target" in row and row.get("ratio") is not None:
        return row["ratio"] <= row["target"]
    if "target_abs_s" in row:
        return row["value"]["median"] < row["target_abs_s"]
    return None


def fmt(value, unit):
    if unit == "bytes":
        return "%.1f MiB" % (value / 1048576)
    return "%.1f ms" % (value * 1000) if value < 10 else f"{value:.1f} s"


def markdown(result):
    lines = [
        "# gpufleet.nvidia benchmarks, {}".format(result["date"]),
        "",
        "Host: {}. Medians of {} interleaved rounds; spread is the interquartile range [min-max].".format(
            result["host"], result["rounds"]
        ),
        "",
        "| measurement | median | IQR [min-max] | baseline (same run) | baseline median | ratio | target |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in result["rows"]:
        if "skipped" in row or "failed" in row:
            lines.append("| {} | {} | | | | | |".format(row["name"], row.get("skipped") or "FAILED"))
            continue
        v, u = row["value"], row["unit"]
        spread = (
            "{}-{} [{}-{}]".format(fmt(v["q1"], u), fmt(v["q3"], u), fmt(v["min"], u), fmt(v["max"], u))
            if "q1" in v
            else ""
        )
        b = row.get("baseline")
        target, ok = "", met(row)
        if "target" in row:
            target = "<= {:.2f}".format(row["target"])
        elif "target_abs_s" in row:
            target = "< {}".format(fmt(row["target_abs_s"], "s"))
        if ok is not None:
            target += " (%s)" % ("met" if ok else "MISSED")
        lines.append(
            "| {} | {} | {} | {} | {} | {} | {} |".format(
                row["name"],
                fmt(v["median"], u),
                spread,
                b["name"] if b else row.get("note", ""),
                fmt(b["median"], u) if b else "",
                "{:.3f}".format(row["ratio"]) if row.get("ratio") else "",
                target,
            )
        )
    lines += ["", "Notes:", ""] + ["* " + n for n in result["notes"]]
    return "\n".join(lines) + "\n"


def main():
    prefix = os.environ.get("GPUFLEET_BENCH_PREFIX", "gfbench%d" % os.getpid())
    rounds = int(os.environ.get("GPUFLEET_BENCH_ROUNDS", "15"))
    sections = "start,profile,shim,discovery,scan,cdi,ldcache,dgx,fleet,storm,scale,tasks"
    only = set(filter(None, os.environ.get("GPUFLEET_BENCH_ONLY", sections).split(",")))
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H%M%SZ")
    result = {"date": date, "rounds": rounds, "host": "%d CPUs, load %.2f" % (os.cpu_count(), os.getloadavg()[0])}
    result["rows"], result["notes"] = [], []
    rows = result["rows"]
    if only & {"start", "profile", "shim", "discovery", "storm"}:
        fleet = Fleet(prefix, os.path.join(HERE, "fleet.yml"))
        log(f"fleet {prefix} up ({fleet.config})")
        fleet.up()
        try:
            gpu_nodes = ["b-bookworm", "b-trixie", "b-sid"]
            prepare_gpu_nodes(fleet, gpu_nodes)
            versions = {n: fleet.exec(n, "docker version -f '{{.Server.Version}}'").stdout.strip() for n in gpu_nodes}
            versions["podman"] = fleet.exec("b-trixie", "podman --version").stdout.split()[-1]
            versions["containerd"] = fleet.exec("b-bookworm", "containerd --version").stdout.split()[2]
            nvidia = nvidia_reference()
            if nvidia and "start" in only:
                log(f"NVIDIA's runtime from {nvidia} on b-trixie")
                versions["nvidia"] = prepare_nvidia_reference(fleet, "b-trixie", nvidia)
                result["notes"].append(
                    "NVIDIA's runtime: {} (GPUFLEET_BENCH_NVIDIA_RUNTIME), CDI mode, on b-trixie beside ours, its spec "
                    "from nvidia-ctk cdi generate under the kind {}".format(versions["nvidia"], NVIDIA_REF_KIND)
                )
            elif "start" in only:
                result["notes"].append(
                    "NVIDIA's runtime: not compared (set GPUFLEET_BENCH_NVIDIA_RUNTIME to a folder with its "
                    "nvidia-container-runtime, nvidia-ctk and nvidia-cdi-hook)"
                )
            result["versions"] = versions
            if "start" in only:
                log("container start, docker {} (bookworm)".format(versions["b-bookworm"]))
                rows += docker_start_rows(fleet, "b-bookworm", "docker {}".format(versions["b-bookworm"]), rounds)
                log("container start, containerd {} (bookworm)".format(versions["containerd"]))
                rows += ctr_start_rows(fleet, "b-bookworm", "containerd {}".format(versions["containerd"]), rounds)
                log("container start, docker {} (trixie)".format(versions["b-trixie"]))
                label = "docker {}".format(versions["b-trixie"])
                rows += docker_start_rows(fleet, "b-trixie", label, rounds, cdi=True, nvidia=bool(nvidia))
                log("container start, docker {} (sid)".format(versions["b-sid"]))
                rows += docker_start_rows(fleet, "b-sid", "docker {}".format(versions["b-sid"]), rounds, cdi=True)
                if nvidia:
                    log("CDI spec generation on b-trixie, ours and nvidia-ctk's")
                    rows += cdi_generate_rows(fleet, "b-trixie", "b-trixie (2 GPUs)", rounds)
                log("container start, podman {}".format(versions["podman"]))
                label = "podman {}".format(versions["podman"])
                rows += podman_start_rows(fleet, "b-trixie", label, rounds, nvidia=bool(nvidia))
            if "profile" in only:
                log("where a GPU start's time goes, docker {} (trixie)".format(versions["b-trixie"]))
                rows += start_profile_rows(fleet, "b-trixie", "docker {}".format(versions["b-trixie"]), rounds)
            if "shim" in only:
                log("shim CPU and memory")
                rows += shim_rows(fleet, "b-bookworm", "bookworm", rounds * 2)
            if "discovery" in only:
                log("discovery through ansible")
                rows += discovery_rows(fleet, "b-bookworm", rounds)
            if "storm" in only:
                per_node = int(os.environ.get("GPUFLEET_BENCH_STORM", "110"))
                rows += storm_rows(fleet, ["b-bookworm", "b-trixie"], per_node, 16)
        finally:
            if os.environ.get("GPUFLEET_BENCH_KEEP") != "1":
                fleet.down()
    if "scan" in only:
        log("pure discovery scan")
        rows += scan_rows(rounds)
    if "cdi" in only:
        log("CDI generation")
        rows += cdi_rows(rounds)
    if "ldcache" in only:
        log("ld.so.cache merge, crafted caches against a real one (no fleet)")
        rows += ldcache_rows(rounds)
    if "dgx" in only:
        log("discovery and CDI spec, 8 GPUs x 7 MIG (no fleet)")
        dgx, dgx_notes = dgx_rows(rounds)
        rows += dgx
        result["notes"] += dgx_notes
    if "fleet" in only:
        nodes = [int(n) for n in os.environ.get("GPUFLEET_BENCH_FLEET_NODES", "1,2,3").split(",") if n.strip()]
        fleet, fleet_notes = fleet_rows(prefix, int(os.environ.get("GPUFLEET_BENCH_FLEET_ROUNDS", "1")), nodes)
        rows += fleet
        result["notes"] += fleet_notes
    if "scale" in only:
        sizes = scale_sizes(os.environ.get("GPUFLEET_BENCH_SCALE_SIZES", "1,24,96"))
        forks = int(os.environ.get("GPUFLEET_BENCH_SCALE_FORKS", "5"))
        poll = os.environ.get("GPUFLEET_BENCH_SCALE_POLL") or None
        if poll is not None:
            poll = float(poll)
            if poll <= 0:
                raise ValueError("GPUFLEET_BENCH_SCALE_POLL: seconds, more than 0, got %r" % poll)
        first_rounds = int(os.environ.get("GPUFLEET_BENCH_SCALE_FIRST_ROUNDS", "1"))
        if first_rounds < 1:
            raise ValueError("GPUFLEET_BENCH_SCALE_FIRST_ROUNDS: 1 or more, got %r" % first_rounds)
        scale, scale_notes, result["scale"] = scale_rows(prefix, sizes, forks, poll=poll, first_rounds=first_rounds)
        rows += scale
        result["notes"] += scale_notes
    if "tasks" in only:
        tasks, tasks_notes = task_cost_rows(prefix, int(os.environ.get("GPUFLEET_BENCH_TASK_HOSTS", "12")))
        rows += tasks
        result["notes"] += tasks_notes
    self_usage = resource.getrusage(resource.RUSAGE_SELF)
    result["notes"].append("bench process CPU %.1f s" % (self_usage.ru_utime + self_usage.ru_stime))
    for row in rows:
        if (row.get("storm") or {}).get("failed_starts"):
            storm = row["storm"]
            result["notes"].append("storm: %d failed starts: %s" % (storm["failed_starts"], storm["failures"][:5]))
        if met(row) is False:
            where = "the runc + mounts/devices and profile rows show where the time goes"
            if row["name"].startswith("scale"):
                where = "the controller-CPU rows and the module executions in the notes show where the time goes"
            if row["name"].startswith("fleet"):
                where = "the module executions per host in the notes show where the time goes"
            if row["name"].startswith("DGX"):
                where = "the scan and spec rows split it; the CPU-time rows are free of the machine's load"
            result["notes"].append(f"target missed: {row['name']} ({where})")
    out = os.path.join(HERE, "results")
    os.makedirs(out, exist_ok=True)
    # one section alone (GPUFLEET_BENCH_ONLY=dgx): its own results file beside the full runs'
    base = os.path.join(out, date + ("-" + next(iter(only)) if len(only) == 1 else ""))
    with open(base + ".json", "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2)
    with open(base + ".md", "w", encoding="utf-8") as f:
        f.write(markdown(result))
    plotter = os.environ.get("GPUFLEET_BENCH_PYTHON", os.path.join(REPO, ".venv-bench", "bin", "python"))
    if os.path.exists(plotter):
        run([plotter, os.path.join(HERE, "plot.py"), base + ".json", base + ".png"])
    else:
        log(f"no {plotter}: no plot (make bench installs it)")
    sys.stdout.write(markdown(result))
    log(f"wrote {base}.{{json,md,png}}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
