# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Crafted images, through real engines, must not make the start path write outside the container, or hang it.

The host's ``ldconfig``, run by the CDI hook or (after the shim's inline path) by runc, runs as root before
``pivot_root`` with the container's procfs mounted at ``<rootfs>/proc``; ``ldconfig -r``'s chroot is no
boundary there, since ``/proc/1/root`` leads back to the host's ``/``. Each attack below is one crafted
image (``_security_images.py`` builds them all INSIDE each node in one pass, from ``gpufleet-sim/mini:latest``;
no registry), aimed at a canary directory on the node (the "host"),
``/var/tmp/gpufleet-canary-<attack>``, through ``/proc/1/root/var/tmp/gpufleet-canary-<attack>``:

1. ``conf-line``, ``conf-include``: that path as a line of ``/etc/ld.so.conf``, or of an included
   ``/etc/ld.so.conf.d`` file;
2. ``libdir``, ``libdir-lib64``: ``/usr/lib/x86_64-linux-gnu`` (or ``/usr/lib64``) a link to it (the image's
   own files moved to ``/var/tmp/gpufleet-canary-<attack>``, where the link leads once the container runs);
3. ``etc-link``: ``/etc`` a link to it (likewise); ``auxcache-link``: ``/var/cache`` a link to it
   (ldconfig's ``/var/cache/ldconfig/aux-cache``);
4. ``cache-link``: ``/etc/ld.so.cache`` a link to the canary's ``victim`` file;
5. ``fifo-conf``, ``fifo-cache``: ``/etc/ld.so.conf`` or ``/etc/ld.so.cache`` a FIFO (no writer);
6. ``env``: ENV ``LD_PRELOAD``, ``PYTHONPATH``, ``PYTHONSTARTUP``, ``PYTHONHOME`` naming a ``.so`` and ``.py``
   files in the image (also through ``/proc/self/cwd``) that write a marker into the canary when a host
   process loads them;
7. ``newline-name``: ``/etc/ld.so.conf.d`` (where only the shim or the hook writes, never the engine) a link to a
   FILE whose name holds a newline followed by a forged runc log line (``_security_images.FORGED``): the shim
   and the hook report that name when the start fails;
8. ``caps-huge``: ENV ``NVIDIA_DRIVER_CAPABILITIES`` of 1 MiB;
9. ``ldcache-digits``, ``ldcache-equal``, ``ldcache-offsets``: an ``/etc/ld.so.cache`` that cost the old merge
   minutes to hours, or that it could not read (an entry ``libcuda.so.<300,000 digits>``; 4,000 value-equal
   zero-padded ``libcuda.so.0...01`` names filling the 8 MiB bound; string offsets outside the file).

Each runs through every engine of the issue, the host programs installed from this working tree exactly as
``test_cdi_e2e.py`` has them (same session fleet, ``e2e_fleet``): docker 20.10 (bookworm, runtime ``nvidia``
= the shim), containerd 1.6 (bookworm) and 2.1 (sid) through ``ctr run --runc-binary <shim>``, docker 26
(trixie) through the shim and through native CDI (``--device nvidia.com/gpu=0``: runc runs our hook from
the spec), docker 28 (sid) through native CDI, and podman 5.4 (trixie) through native CDI (``--device
nvidia.com/gpu=0``: its OCI runtime runs our hook from the spec).

Expected, for every attack and engine: the canary's exact listing (names, types, modes, sizes, mtimes, link
targets, file hashes) is unchanged, nothing else appeared in ``/var/tmp`` and the node's own ld caches are
untouched; the start returns within ``START_TIMEOUT`` seconds. Classes 1, 4, 5 and 6 must also start and
get their GPU (``/dev/nvidia0`` present, ``ldconfig -p`` lists ``libcuda.so.1``): the attack content is simply
ignored. Classes 2 and 3 may fail to start (runc itself may refuse such a root). Class 7 fails to start, and no
line of the engine's output starts with the forged text (every host program writes one line per error). Class 8
returns within ``QUICK`` seconds with no output line longer than ``MAX_ERROR_LINE``; through the shim it fails
naming the variable's size (64 KiB is the rule for every request variable); through CDI nothing of ours reads
the variable (the start may still fail: a 1 MiB environment string is more than ``execve`` takes). Class 9 must
start with its GPU within ``QUICK`` seconds (the hook's own timeout is 10 s): the documented fallback writes the
driver's entries alone when the image's cache cannot be merged. One ordinary GPU command per engine, as users
type it, must pass as well.

All runs happen once, up front, in parallel (a per-node thread per attack, the engines of a node one after
the other, so two runs never share a canary or a FIFO); each test then checks its own run. A hung run is
ended by opening the planted FIFO for writing, then the container is removed.

Run: ``.venv/bin/python -m pytest -q -m integration tests/integration/test_security_e2e.py`` (``-s`` prints one
line per run: rc, seconds, HANG, CANARY-CHANGED). About 30 s for the shared fleet, 15-40 s to build the images,
35-100 s of the 112 runs when nothing hangs (each hanging FIFO attack adds up to ``START_TIMEOUT`` per node).
"""

from __future__ import annotations

import difflib
import json
import os
import secrets
import shlex
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import pytest

from tests.integration import _security_images as crafted
from tests.integration._fleet_e2e import IMAGE, SHIM

pytestmark = [pytest.mark.integration]

START_TIMEOUT = 60  # seconds a start (and the container's short command) may take; a hang is killed then
NAMESPACE = "gpufleet-sec"  # containerd namespace of the crafted images
LIBEXEC = "/usr/local/libexec/gpufleet-sec"
HELPER = LIBEXEC + "/images.py"
CANARY_LIB = LIBEXEC + "/" + crafted.CANARY_LIB
PRELOAD = LIBEXEC + "/gfcanary.so"
END = "---end"  # the script's last line: its absence from an exit-0 run's output means the engine lost output
# The container's ldconfig -p in full, unless a crafted cache merged into it makes the listing a megabyte or more (ctr
# loses the end of such output; the image has no grep, and dash's read takes a syscall per byte): then one line
# saying whether libcuda.so.1 is listed in it.
LISTED = "libcuda.so.1 (libc6,x86-64) => "
SCRIPT = (
    'ls /dev; echo ---; c=$(ldconfig -p); if [ ${#c} -lt 1000000 ]; then echo "$c"; '
    f'else case "$c" in *\'{LISTED}\'*) echo "{LISTED}(in a listing of ${{#c}} characters)";; esac; fi; echo {END}'
)
MUST_START = {1, 4, 5, 6, 9}  # classes whose container must start with its GPU (2 and 3: runc may refuse)
QUICK = 20  # seconds within which classes 8 and 9 return (the old ld.so.cache merge took 47 s to hours)
MAX_ERROR_LINE = 2000  # characters of one line of the engine's output (a 1 MB variable once made a 1.4 MB line)
WORKERS = 8  # runs at once (of 48 tasks; 2 cores: most of a run is waiting on the engines)

PRELOAD_C = r"""
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>
/* Run only if something loads the image's LD_PRELOAD: inside the started container /proc/1/root is the
   container's own root (no such folder there); in a host-side process it is the host's root. */
__attribute__((constructor)) static void gpufleet_canary(void) {
    char comm[64] = "unknown", path[256];
    int fd = open("/proc/self/comm", O_RDONLY);
    if (fd >= 0) {
        ssize_t n = read(fd, comm, sizeof comm - 1);
        comm[n > 0 ? n - 1 : 0] = 0;
        close(fd);
    }
    snprintf(path, sizeof path, "/proc/1/root/var/tmp/gpufleet-canary-env/escaped-preload-%s-%d", comm, (int)getpid());
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd >= 0) {
        static const char msg[] = "loaded by a process that honoured the image's LD_PRELOAD\n";
        if (write(fd, msg, sizeof msg - 1) < 0) {}
        close(fd);
    }
}
"""
CANARY_LIB_C = "int gpufleet_canary_lib(void) { return 17; }\n"


@dataclass(frozen=True)
class Mode:
    """One engine and way of asking for a GPU."""

    node: str
    engine: str  # docker | containerd | podman
    version: str  # expected version prefix
    title: str
    gpu_args: tuple[str, ...] = ()  # one GPU, for the crafted images
    ordinary_args: tuple[str, ...] = ()  # all GPUs, as a user types it

    def argv(self, image: str, name: str, gpu_args: tuple[str, ...], namespace: str) -> list[str]:
        wrap = ["timeout", "-s", "KILL", str(START_TIMEOUT)]  # the client only: the engine goes on
        if self.engine in ("docker", "podman"):
            return [*wrap, self.engine, "run", "--rm", "--name", name, *gpu_args, image, "sh", "-c", SCRIPT]
        # ctr 2.x asks for 1024 CPU shares by default, which the sid node's cgroup cannot give (roles/validate).
        shares = ["--cpu-shares", "0"] if not self.version.startswith("1.") else []
        ref = "docker.io/" + image
        run = ["ctr", "-n", namespace, "run", "--rm", *shares, "--runc-binary", SHIM, *gpu_args]
        return [*wrap, *run, ref, name, "sh", "-c", SCRIPT]


MODES = {
    "docker20.10-shim": Mode(
        "e2e-bookworm",
        "docker",
        "20.10.",
        "docker 20.10 --runtime=nvidia (the shim)",
        ("--network", "none", "--runtime=nvidia", "-e", "NVIDIA_VISIBLE_DEVICES=0"),
        ("--runtime=nvidia", "--gpus", "all"),
    ),
    "containerd1.6-shim": Mode(
        "e2e-bookworm",
        "containerd",
        "1.6.",
        "containerd 1.6 ctr run --runc-binary <shim>",
        ("--env", "NVIDIA_VISIBLE_DEVICES=0"),
        ("--env", "NVIDIA_VISIBLE_DEVICES=all"),
    ),
    "docker26-shim": Mode(
        "e2e-trixie",
        "docker",
        "26.",
        "docker 26 --runtime=nvidia (the shim)",
        ("--network", "none", "--runtime=nvidia", "-e", "NVIDIA_VISIBLE_DEVICES=0"),
        ("--runtime=nvidia", "--gpus", "all"),
    ),
    "docker26-cdi": Mode(
        "e2e-trixie",
        "docker",
        "26.",
        "docker 26 native CDI --device nvidia.com/gpu=0 (runc runs gpufleet-cdi-hook)",
        ("--network", "none", "--device", "nvidia.com/gpu=0"),
        ("--device", "nvidia.com/gpu=all"),
    ),
    "containerd2.1-shim": Mode(
        "e2e-sid",
        "containerd",
        "2.1.",
        "containerd 2.1 ctr run --runc-binary <shim>",
        ("--env", "NVIDIA_VISIBLE_DEVICES=0"),
        ("--env", "NVIDIA_VISIBLE_DEVICES=all"),
    ),
    "docker28-cdi": Mode(
        "e2e-sid",
        "docker",
        "28.",
        "docker 28 native CDI --device nvidia.com/gpu=0 (runc runs gpufleet-cdi-hook)",
        ("--network", "none", "--device", "nvidia.com/gpu=0"),
        ("--device", "nvidia.com/gpu=all"),
    ),
    "podman5.4-cdi": Mode(
        "e2e-trixie",
        "podman",
        "5.4",
        "podman 5.4 native CDI --device nvidia.com/gpu=0 (its OCI runtime runs gpufleet-cdi-hook)",
        ("--network", "none", "--device", "nvidia.com/gpu=0"),
        ("--device", "nvidia.com/gpu=all"),
    ),
}


@dataclass
class Outcome:
    mode: str
    attack: str  # "" for the ordinary command
    argv: list[str]
    name: str = ""
    rc: int | None = None
    stdout: str = ""
    stderr: str = ""
    seconds: float = 0.0
    timed_out: bool = False
    unblocked: list[str] = field(default_factory=list)
    left_behind: str = ""
    before: dict = field(default_factory=dict)
    after: dict = field(default_factory=dict)

    def started_with_gpu(self, gpus: tuple[str, ...] = ("nvidia0",)) -> list[str]:
        """What is wrong with the container's own output (empty: it started and had its GPU and libcuda)."""
        if self.timed_out:
            return [f"did not return within {START_TIMEOUT}s (hang)"]
        if self.rc != 0:
            return [f"did not start or its command failed (rc {self.rc}): {_tail(self.stderr or self.stdout)}"]
        if END not in self.stdout.splitlines():
            return [f"its output ends before the script's last line {END!r} (twice): {_tail(self.stdout, 600)}"]
        devs, _sep, cache = self.stdout.partition("---\n")
        listing = devs.split()
        problems = [f"/dev/{g} missing in the container (/dev: {' '.join(listing)})" for g in gpus if g not in listing]
        if "nvidiactl" not in listing:
            problems.append("/dev/nvidiactl missing in the container")
        if LISTED not in cache:
            problems.append(f"ldconfig -p in the container does not list libcuda.so.1: {_tail(cache, 600)}")
        return problems


def _output_problems(mode_name: str, klass: int, out: Outcome) -> list[str]:
    """What is wrong with the engine's own output for classes 7, 8 and 9 (the start's error lines, its time)."""
    problems = []
    lines = (out.stdout + "\n" + out.stderr).splitlines()
    if klass == 7:
        forged = [line for line in lines if line.lstrip().startswith(crafted.FORGED.split()[0])]
        if forged:
            problems.append(f"FORGED LINE: an error message split at the image's newline: {forged[0][:300]!r}")
        if out.rc == 0:
            problems.append("the container started although the driver's folder list could not be written")
        elif "gf-lib\\n" + crafted.FORGED.split()[0] not in out.stderr and not (
            # crun names the failed hook but does not pass its stderr on: the hook's one line is checked in unit tests
            MODES[mode_name].engine == "podman" and "gpufleet-cdi-hook" in out.stderr
        ):
            problems.append("the error does not name the image's file (escaped): not the path under test")
    if klass == 8:
        long_lines = [len(line) for line in lines if len(line) > MAX_ERROR_LINE]
        if long_lines:
            problems.append(f"an output line of {max(long_lines)} characters (at most {MAX_ERROR_LINE})")
        reason = "NVIDIA_DRIVER_CAPABILITIES is longer than 65536 bytes"
        if "shim" in mode_name and (out.rc == 0 or reason not in out.stderr):
            problems.append(f"through the shim the start must fail naming the size rule ({reason!r})")
    if klass in (8, 9) and not out.timed_out and out.seconds > QUICK:
        problems.append(f"took {out.seconds:.1f}s (at most {QUICK}s)")
    return problems


def _tail(text: str, n: int = 1500) -> str:
    text = text.strip()
    return text if len(text) <= n else "..." + text[-n:]


def _slug(name: str) -> str:
    return name.replace(".", "")


def _diff(before: dict, after: dict) -> list[str]:
    lines = []
    for key in sorted(set(before) | set(after)):
        if key not in before:
            lines.append(f"+ {key}: {json.dumps(after[key], sort_keys=True)}")
        elif key not in after:
            lines.append(f"- {key}: {json.dumps(before[key], sort_keys=True)}")
        elif before[key] != after[key]:
            changed = {
                k: f"{before[key].get(k)} -> {after[key].get(k)}"
                for k in sorted(set(before[key]) | set(after[key]))
                if before[key].get(k) != after[key].get(k)
            }
            lines.append(f"~ {key}: {changed}")
    return lines


def _helper(node, *args: str, timeout: float = 120) -> str:
    return node.run(["python3", HELPER, *args], check=True, timeout=timeout).stdout


def _cleanup(node, mode: Mode, name: str, namespace: str, timed_out: bool) -> str:
    """Remove the container whatever state it is in; -> what is left behind ('' when nothing)."""
    if mode.engine in ("docker", "podman"):
        node.run(["timeout", "30", mode.engine, "rm", "-f", name], timeout=60)
        left = node.run([mode.engine, "ps", "-aq", "--filter", f"name=^{name}$"], timeout=60).stdout.strip()
        return f"{mode.engine} container {name} {left}" if left else ""
    ctr = ["timeout", "30", "ctr", "-n", namespace]
    node.run([*ctr, "task", "rm", "-f", name], timeout=60)
    node.run([*ctr, "containers", "rm", name], timeout=60)
    if timed_out:  # a ctr killed during create leaves its shim behind: end it, found by its unique id
        pids = node.run(["pgrep", "-f", f"containerd-shim-runc-v2 .*-id {name} "], timeout=30).stdout.split()
        if pids:
            node.run(["kill", *pids], timeout=30)
    left = node.run([*ctr, "containers", "ls", "-q"], timeout=60).stdout.split()
    return f"containerd container {name}" if name in left else ""


def _start(node, mode_name: str, attack: str) -> Outcome:
    """Run the container (``attack`` '' = the ordinary image and command); no cleanup yet."""
    mode = MODES[mode_name]

    def argv(name: str) -> list[str]:
        if attack:
            return mode.argv(crafted.image(attack), name, mode.gpu_args, NAMESPACE)
        return mode.argv(IMAGE, name, mode.ordinary_args, "default")

    name = f"gfsec-{attack or 'ordinary'}-{_slug(mode_name)}-{secrets.token_hex(3)}"
    out = Outcome(mode_name, attack, argv(name), name=name)
    start = time.monotonic()
    try:
        res = node.run(out.argv, timeout=START_TIMEOUT + 30)
        if res.rc == 0 and END not in res.stdout.splitlines():
            # The engine's client can lose the end of a short-lived --rm container's output while it exits 0: docker
            # once gave no output at all, containerd 1.6's ctr once dropped everything after `ls /dev` (both in CI
            # runs on a loaded machine; the same cases passed every time right after). The script's last line tells
            # a lost tail from a short listing, so run it once more: a container whose own output is wrong fails the
            # same way twice, and the canary snapshot is taken after both runs.
            print(
                f"[security-e2e] {mode_name} {attack or '(ordinary)'}: rc 0 but no {END!r} line (output lost); "
                f"run again; stdout was {res.stdout[-200:]!r}",
                file=sys.stderr,
            )
            out.name = f"{name}-again"
            out.argv = argv(out.name)
            res = node.run(out.argv, timeout=START_TIMEOUT + 30)
        out.rc, out.stdout, out.stderr = res.rc, res.stdout, res.stderr
    except subprocess.TimeoutExpired:
        out.rc = None
    out.seconds = time.monotonic() - start
    out.timed_out = out.rc is None or (out.rc == 137 and out.seconds >= START_TIMEOUT - 1)
    return out


def _finish(node, outs: list[Outcome], attack: str) -> None:
    """After the runs of ``outs`` returned: end what hangs on the attack's FIFO, remove the containers."""
    if attack and any(o.timed_out for o in outs):
        unblocked = []
        for _attempt in range(5):  # a hung start: let its reader of the planted FIFO go on, so it can be removed
            opened = json.loads(_helper(node, "unblock", attack))
            unblocked += opened
            if not opened:
                break
            time.sleep(1)
        for o in outs:
            o.unblocked = unblocked if o.timed_out else []
    for o in outs:
        namespace = NAMESPACE if attack else "default"
        o.left_behind = _cleanup(node, MODES[o.mode], o.name, namespace, o.timed_out)


def _run_attack(node, modes: list[str], attack: str) -> list[Outcome]:
    """Every engine of ``node`` against one crafted image.

    The canary attacks run one engine after the other, each between a reset of the canary and a snapshot.
    The FIFO attacks name no canary and may hang for ``START_TIMEOUT``: their engines run at once (the
    FIFO is opened for writing only after all of them returned, so no run ends another's wait), between
    one reset and one snapshot.
    """
    if not attack:
        outs = [_start(node, m, "") for m in modes]
        _finish(node, outs, "")
        return outs
    if attack not in crafted.FIFOS:
        outs = []
        for mode_name in modes:
            before = json.loads(_helper(node, "reset", attack, "--canary-lib", CANARY_LIB))
            out = _start(node, mode_name, attack)
            _finish(node, [out], attack)
            out.before, out.after = before, json.loads(_helper(node, "snapshot", attack))
            outs.append(out)
        return outs
    before = json.loads(_helper(node, "reset", attack, "--canary-lib", CANARY_LIB))
    with ThreadPoolExecutor(len(modes)) as pool:
        outs = list(pool.map(lambda m: _start(node, m, attack), modes))
    _finish(node, outs, attack)
    after = json.loads(_helper(node, "snapshot", attack))
    for out in outs:
        out.before, out.after = before, after
    return outs


@pytest.fixture(scope="module")
def suite(e2e_fleet, tmp_path_factory):
    """Build the crafted images on every node, run everything once (in parallel), clean up at the end."""
    work = tmp_path_factory.mktemp("security-e2e")
    (work / "preload.c").write_text(PRELOAD_C)
    (work / "lib.c").write_text(CANARY_LIB_C)
    cc = ["gcc", "-shared", "-fPIC", "-O2"]
    subprocess.run([*cc, "-o", str(work / "gfcanary.so"), str(work / "preload.c")], check=True)
    soname = "-Wl,-soname," + crafted.CANARY_LIB.rsplit(".", 1)[0]
    subprocess.run([*cc, soname, "-o", str(work / crafted.CANARY_LIB), str(work / "lib.c")], check=True)
    with open(crafted.__file__, encoding="utf-8") as f:
        helper = f.read()
    nodes = sorted({m.node for m in MODES.values()})
    timings = {}

    def prepare(node_name: str) -> dict[str, str]:
        node = e2e_fleet.node(node_name)
        node.run(["mkdir", "-p", LIBEXEC], check=True)
        node.put(HELPER, helper)
        node.put(PRELOAD, (work / "gfcanary.so").read_bytes(), 0o755)
        node.put(CANARY_LIB, (work / crafted.CANARY_LIB).read_bytes())
        ctr = any(m.node == node_name and m.engine == "containerd" for m in MODES.values())
        podman = any(m.node == node_name and m.engine == "podman" for m in MODES.values())
        args = ["build", "--preload", PRELOAD, "--canary-lib", CANARY_LIB] + (["--ctr", NAMESPACE] if ctr else [])
        args += ["--podman"] if podman else []
        _helper(node, *args, timeout=600)
        versions = {}
        for name, mode in MODES.items():
            if mode.node == node_name:
                cmd = {
                    "docker": "docker version --format '{{.Server.Version}}'",
                    "podman": "podman version --format '{{.Client.Version}}'",
                }.get(mode.engine, "ctr version")
                text = node.run(cmd, check=True, timeout=60).stdout
                versions[name] = text.split("Server:")[-1] if mode.engine == "containerd" else text.strip()
        return versions

    start = time.monotonic()
    versions = {}
    with ThreadPoolExecutor(len(nodes)) as pool:
        for found in pool.map(prepare, nodes):
            versions.update(found)
    timings["build"] = time.monotonic() - start

    # One task per (node, attack) (see _run_attack); the hang-prone FIFO attacks first, so that their
    # waits overlap the rest.
    tasks = []
    for node_name in nodes:
        modes = [m for m, mode in MODES.items() if mode.node == node_name]
        tasks += [(node_name, modes, attack) for attack in [*crafted.ATTACKS, ""]]
    tasks.sort(key=lambda t: (t[2] not in crafted.FIFOS, t[2], t[0]))

    def run_task(task) -> list[Outcome]:
        node_name, modes, attack = task
        return _run_attack(e2e_fleet.node(node_name), modes, attack)

    start = time.monotonic()
    outcomes = {}
    with ThreadPoolExecutor(WORKERS) as pool:
        for results in pool.map(run_task, tasks):
            for o in results:
                outcomes[(o.mode, o.attack)] = o
    timings["runs"] = time.monotonic() - start
    print(
        f"[security-e2e] images built in {timings['build']:.0f}s, {len(outcomes)} runs in {timings['runs']:.0f}s",
        file=sys.stderr,
    )
    for (mode_name, attack), o in sorted(outcomes.items()):
        changed = o.before.get("canary") != o.after.get("canary")
        print(
            f"[security-e2e] {mode_name:20} {attack or '(ordinary)':14} rc={o.rc} {o.seconds:5.1f}s"
            + (" HANG" if o.timed_out else "")
            + (" CANARY-CHANGED" if changed else ""),
            file=sys.stderr,
        )
    try:
        yield {"outcomes": outcomes, "versions": versions, "timings": timings}
    finally:
        if os.environ.get("GPUFLEET_SIM_KEEP") != "1":
            for node_name in nodes:
                node = e2e_fleet.node(node_name)
                node.run(["python3", HELPER, "clean", "--ctr", NAMESPACE, "--podman"], timeout=300)


def test_engine_versions(suite):
    """The matrix the issue asks for: docker 20.10, 26 (and 28), containerd 1.6 and 2.1, podman 5.4."""
    for name, mode in MODES.items():
        assert mode.version in suite["versions"][name], (
            f"{name} on {mode.node}: expected {mode.engine} {mode.version}*, got {suite['versions'][name]!r}"
        )


@pytest.mark.parametrize("mode_name", list(MODES))
def test_ordinary_gpu_container(suite, mode_name):
    """The command a user types, with the ordinary image: it starts and has every GPU and libcuda."""
    out = suite["outcomes"][(mode_name, "")]
    problems = out.started_with_gpu(("nvidia0", "nvidia1"))
    assert not problems, (
        f"{MODES[mode_name].title} on {MODES[mode_name].node}, ordinary GPU container:\n  - "
        + "\n  - ".join(problems)
        + f"\n  command: {shlex.join(out.argv)} ({out.seconds:.1f}s)"
    )


@pytest.mark.parametrize(
    ("mode_name", "attack"),
    [(m, a) for m in MODES for a in crafted.ATTACKS],
    ids=[f"{m}-{a}" for m in MODES for a in crafted.ATTACKS],
)
def test_crafted_image(suite, mode_name, attack):
    mode = MODES[mode_name]
    klass, what = crafted.ATTACKS[attack]
    out = suite["outcomes"][(mode_name, attack)]
    canary = crafted.canary(attack)
    problems = []
    escaped = _diff(out.before.get("canary", {}), out.after.get("canary", {}))
    if escaped:
        problems.append(f"ESCAPE: the canary {canary} on the host changed:\n      " + "\n      ".join(escaped))
    host = _diff(out.before.get("host", {}), out.after.get("host", {}))
    if host:
        problems.append("ESCAPE: the host's own ld caches changed:\n      " + "\n      ".join(host))
    if out.before.get("var_tmp") != out.after.get("var_tmp"):
        delta = difflib.ndiff(out.before.get("var_tmp", []), out.after.get("var_tmp", []))
        problems.append("files appeared or went in the host's /var/tmp: " + " ".join(d for d in delta if d[0] in "+-"))
    if out.timed_out:
        problems.append(
            f"HANG: the start did not return within {START_TIMEOUT}s (killed; "
            f"FIFOs opened to end it: {out.unblocked or 'none'})"
        )
    elif klass in MUST_START:
        problems += [f"the attack content was not ignored: {p}" for p in out.started_with_gpu()]
    problems += _output_problems(mode_name, klass, out)
    if out.left_behind:
        problems.append(f"left behind after cleanup: {out.left_behind}")
    assert not problems, (
        f"{mode.title} on {mode.node}, class {klass} '{attack}' ({what}):\n  - "
        + "\n  - ".join(problems)
        + f"\n  command: {shlex.join(out.argv)} (rc {out.rc}, {out.seconds:.1f}s)"
        + (f"\n  stderr: {_tail(out.stderr, 800)}" if out.stderr.strip() else "")
    )
