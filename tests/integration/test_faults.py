# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Faults on real engines: a full disk, a killed module, a node restarted mid-stage, an engine that will
not start with the new configuration, two runs at once. ``make faults`` (inside ``make test``); not in
``make integration`` (marker ``faults``).

One fleet for the whole file: ``f-bookworm`` (docker 20.10 and containerd 1.6, Debian's NVIDIA userspace for the CDI
spec), ``f-trixie`` (containerd 1.7), ``f-sid`` (containerd 2.1). The modules run alone through a short playbook
(``tests/integration/playbooks/container_runtime.yml``, ``cdi_spec.yml`` beside it), as the runtime stage runs them;
the lock runs through ``site.yml`` itself. Every case starts from the admin's own configuration (a key of the admin's
in ``daemon.json``/``config.toml``, the engine restarted on it) and ends with the same checks, one row of the outcome
table each (``tests/output/faults.md``, also printed): the engine answers, its files parse (the old or the new ones,
and it was started after they were written: it runs what is on disk), the admin's keys are there, and a rerun
converges (the first rerun may still finish the job, the one after it changes nothing).

How each fault is made: ``ENOSPC`` by a full tmpfs mounted over the folder written (the config folder, containerd's
``conf.d``, ``/etc/cdi``, ``/etc/gpufleet``); a SIGKILL of the module by a ``systemctl`` wrapper in
``/usr/local/sbin`` (first on the module's path) that pauses at a point (files written, restart not yet asked for;
the restart under way) until the test kills the module's process; a node restart by ``docker restart`` of the node
at the first point; an engine that refuses the new configuration by a unit drop-in whose start command refuses a
configuration that names the test's runtime (containerd starts with any runtime binary: a bad one fails containers,
not the engine, so the failure at start is injected).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.faults]

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOKS = Path(__file__).resolve().parent / "playbooks"
SITE = ROOT / "playbooks" / "site.yml"
FLEET = {
    "nodes": [
        {
            "name": "f-bookworm",
            "suite": "bookworm",
            "driver_packages": True,
            "engines": ["docker", "containerd"],
            "gpus": 1,
        },
        {"name": "f-trixie", "suite": "trixie", "engines": ["containerd"], "gpus": 1},
        {"name": "f-sid", "suite": "sid", "engines": ["containerd"], "gpus": 1},
    ]
}
# (node, engine, version label)
TARGETS = [
    ("f-bookworm", "docker", "docker 20.10"),
    ("f-bookworm", "containerd", "containerd 1.6"),
    ("f-trixie", "containerd", "containerd 1.7"),
    ("f-sid", "containerd", "containerd 2.1"),
]
SHIM = "/usr/local/bin/gpufleet-fault-shim"
SYSTEMCTL_WRAPPER = "/usr/local/sbin/systemctl"
PAUSE = "/run/gpufleet-fault-pause"  # holds the systemctl verb to pause at
PAUSED = "/run/gpufleet-fault-paused"  # the paused module's PID
PENDING = "/run/gpufleet-nvidia/restart-pending"
REFUSE = "/usr/local/sbin/gpufleet-fault-refuse"
TOMLKIT_DEST = "/usr/local/lib/gpufleet-test-python"
ADMIN_DOCKER = '{\n  "labels": ["admin=kept"],\n  "log-level": "warn"\n}\n'
ADMIN_MARK = {"docker": '"admin=kept"', "containerd": "oom_score = -999"}
CONFIG = {"docker": "/etc/docker/daemon.json", "containerd": "/etc/containerd/config.toml"}
DROP_IN = "/etc/containerd/conf.d/99-gpufleet-nvidia.toml"
PROBE = {"docker": "docker info >/dev/null", "containerd": "ctr version >/dev/null"}
ROWS: list[tuple[str, str, dict[str, bool]]] = []
# Waits are bounds, never the expected time: every wait polls and ends as soon as its condition holds. They are
# generous because one ansible-playbook on a loaded 2-core machine (CI, several fleets at once) takes minutes.
RESTART_TIMEOUT = 90  # the module's wait for the engine to answer after a restart (a failing one ends sooner)
WAIT = 600  # the test's wait for a module to reach a point, an engine to come back, a node to boot


def wait_for(what: str, condition, timeout: float = WAIT, every: float = 0.5):
    """Poll ``condition()`` until it returns something true (returned), or fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not within {timeout:.0f}s")
        time.sleep(every)


def wait_engine(node, engine, timeout: float = WAIT) -> bool:
    """Whether the engine answers within ``timeout`` (polled; a restart asked for before a kill goes on)."""
    try:
        wait_for(
            f"{node.name}: {engine} answering",
            lambda: node.run(f"systemctl is-active -q {engine} && {PROBE[engine]}").rc == 0,
            timeout,
            1,
        )
    except AssertionError:
        return False
    return True


def admin_containerd(version: str) -> str:
    config_version = 3 if version.endswith("2.1") else 2
    return f"# the admin's own file: kept\nversion = {config_version}\noom_score = -999\n"


def _env() -> dict[str, str]:
    return dict(
        os.environ,
        ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".cache" / "collections"),
        ANSIBLE_FORCE_COLOR="0",
        ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
    )


def _playbook_cmd(fleet, playbook, host, extra):
    return [
        str(ROOT / ".venv" / "bin" / "ansible-playbook"),
        "-i",
        str(fleet.inventory),
        "--limit",
        host,
        "-e",
        json.dumps(extra),
        str(playbook),
    ]


def run_module(fleet, host, engine, **args):
    """container_runtime on one host: its result (a failed result is data)."""
    args = {"engine": engine, "path": SHIM, "restart": True, "restart_timeout": RESTART_TIMEOUT, **args}
    cmd = _playbook_cmd(fleet, PLAYBOOKS / "container_runtime.yml", host, {"runtime_args": args})
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, cwd=ROOT, env=_env())
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"][host]


def run_cdi(fleet, host):
    cmd = _playbook_cmd(fleet, PLAYBOOKS / "cdi_spec.yml", host, {})
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, cwd=ROOT, env=_env())
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"][host]


def files_of(engine):
    return [CONFIG[engine]] + ([DROP_IN] if engine == "containerd" else [])


def reset(node, engine, version):
    """The admin's configuration only, the engine restarted on it, no fault left in place."""
    unit = engine
    admin = ADMIN_DOCKER if engine == "docker" else admin_containerd(version)
    node.run(
        f"umount -q {DROP_IN.rsplit('/', 1)[0]} 2>/dev/null; umount -q {CONFIG[engine].rsplit('/', 1)[0]} 2>/dev/null; "
        f"rm -rf {PAUSE} {PAUSED} {PENDING} {SYSTEMCTL_WRAPPER} /run/systemd/system/{unit}.service.d "
        f"{DROP_IN} && systemctl daemon-reload",
        check=True,
    )
    node.put(CONFIG[engine], admin)
    node.run(f"systemctl reset-failed {unit}; systemctl restart {unit} && {PROBE[engine]}", check=True, timeout=120)


def check(node, engine, version, unchanged=None):
    """engine up, its files parse and were read by the running engine, the admin's keys kept. ``unchanged``: the
    main file's text the engine was started with; when the file still has it (a rollback rewrote the same bytes),
    the engine runs what is on disk whatever the file's time."""
    up = node.run(f"systemctl is-active {engine} && {PROBE[engine]}").rc == 0
    if engine == "docker":
        valid = node.run(f"python3 -c 'import json,sys; json.load(open(sys.argv[1]))' {CONFIG['docker']}").rc == 0
    else:
        valid = node.run("containerd config dump >/dev/null").rc == 0
    # the running engine started after its files were last written: it runs what is on disk
    started = node.run(f'date -d "$(systemctl show -p ActiveEnterTimestamp --value {engine})" +%s').stdout.strip()
    newest = node.run(f"stat -c %Y {' '.join(files_of(engine))} 2>/dev/null | sort -n | tail -1").stdout.strip()
    runs_disk = bool(started and newest) and int(started) >= int(newest)
    text = node.run(f"cat {CONFIG[engine]}").stdout
    if unchanged is not None and text == unchanged and node.run(f"test -e {DROP_IN}").rc != 0:
        runs_disk = True
    kept = ADMIN_MARK[engine] in text
    if engine == "containerd":
        kept = kept and "# the admin's own file: kept" in node.run(f"cat {CONFIG[engine]}").stdout
    return {"engine up": up, "config valid": valid and runs_disk, "nothing lost": kept}


def converge(fleet, node, engine, version):
    """A rerun (it may finish a pending restart), then one that changes nothing; the runtime is registered."""
    first = run_module(fleet, node.name, engine)
    if first.get("failed"):
        return False, first
    second = run_module(fleet, node.name, engine)
    registered = SHIM in node.run(f"cat {' '.join(files_of(engine))} 2>/dev/null").stdout
    state = check(node, engine, version)
    return (not second.get("failed") and not second["changed"] and registered and all(state.values())), second


def record(fault, label, outcome, converged):
    ROWS.append((fault, label, {**outcome, "rerun converged": converged}))
    bad = [k for k, v in {**outcome, "rerun converged": converged}.items() if not v]
    return bad


def _parallel(fn, items):
    with ThreadPoolExecutor(max_workers=len(items)) as pool:
        return list(pool.map(fn, items))


@pytest.fixture(scope="module")
def fleet(sim_fleet_factory):
    import io
    import tarfile

    import tomlkit

    made = sim_fleet_factory(FLEET, name="faults")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        source = os.path.dirname(tomlkit.__file__)
        tar.add(source, arcname="tomlkit", filter=lambda t: None if "__pycache__" in t.name else t)
    archive = buf.getvalue()

    def prepare(node):
        node.put(SHIM, '#!/bin/sh\nexec runc "$@"\n', 0o755)
        node.put("/tmp/gpufleet-tomlkit.tar", archive)
        node.run(
            f"mkdir -p {TOMLKIT_DEST} && tar -C {TOMLKIT_DEST} -xf /tmp/gpufleet-tomlkit.tar && "
            f"echo {TOMLKIT_DEST} > "
            '"$(python3 -c "import sysconfig; print(sysconfig.get_paths()[\'purelib\'])")/gpufleet-test.pth"',
            check=True,
        )

    _parallel(prepare, [made.node(n["name"]) for n in FLEET["nodes"]])
    yield made
    table = [
        "| fault | engine | engine up | config valid | nothing lost | rerun converged |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for fault, label, cells in ROWS:
        marks = " | ".join(
            "yes" if cells[k] else "**NO**" for k in ("engine up", "config valid", "nothing lost", "rerun converged")
        )
        table.append(f"| {fault} | {label} | {marks} |")
    out = ROOT / "tests" / "output" / "faults.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(table) + "\n")
    print("\n" + "\n".join(table))


def _by_node(fn):
    """Run fn(target) for every target, the nodes in parallel, the targets of one node one after another."""
    nodes = {}
    for target in TARGETS:
        nodes.setdefault(target[0], []).append(target)
    failures = []
    for result in _parallel(lambda ts: [fn(t) for t in ts], list(nodes.values())):
        for bad in result:
            failures += bad
    assert not failures, "\n".join(failures)


def _tmpfs_full(node, folder, size="64k"):
    """A full tmpfs over ``folder`` carrying the folder's files (the filler is left, to be removed)."""
    node.run(
        f"mkdir -p {folder} /tmp/fault-copy && rm -rf /tmp/fault-copy/* && cp -a {folder}/. /tmp/fault-copy/ && "
        f"mount -t tmpfs -o size={size} fault {folder} && cp -a /tmp/fault-copy/. {folder}/ && "
        f"(dd if=/dev/zero of={folder}/.fill bs=4k 2>/dev/null || true) && sync",
        check=True,
    )


def test_enospc_on_the_engine_files(fleet):
    def case(target):
        host, engine, label = target
        node = fleet.node(host)
        # docker: its one file; containerd: the drop-in's folder full, so the main file (its imports line), written
        # first, has to be put back; on bookworm also the main file's folder for containerd 1.6
        folders = {"docker": ["/etc/docker"], "containerd": ["/etc/containerd/conf.d"]}[engine]
        if label == "containerd 1.6":
            folders = ["/etc/containerd", *folders]
        bad = []
        for folder in folders:
            reset(node, engine, label)
            before = node.run(f"cat {CONFIG[engine]}").stdout
            if folder.endswith("conf.d"):
                _tmpfs_full(node, folder, size="4k")
            else:
                _tmpfs_full(node, folder)
            r = run_module(fleet, host, engine)
            failed_right = (
                bool(r.get("failed")) and "No space left on device" in r.get("msg", "") and folder in r["msg"]
            )
            same = node.run(f"cat {CONFIG[engine]}").stdout == before and node.run(f"test -e {DROP_IN}").rc != 0
            leftovers = node.run(f"ls -a {' '.join(folders)} 2>/dev/null | grep gpufleet-").stdout.strip()
            outcome = check(node, engine, label, unchanged=before)
            outcome["config valid"] = outcome["config valid"] and same and not leftovers
            node.run(f"rm -f {folder}/.fill")
            converged, last = converge(fleet, node, engine, label)
            bad += [
                f"{label} ENOSPC in {folder}: {b}: {r.get('msg')} / {last}"
                for b in record(f"ENOSPC in {folder}", label, outcome, converged and failed_right)
            ]
            reset(node, engine, label)
        return bad

    _by_node(case)


def test_enospc_on_the_cdi_spec_and_index(fleet):
    node = fleet.node("f-bookworm")
    bad = []
    for folder, name in (("/etc/cdi", "/etc/cdi/nvidia.yaml"), ("/etc/gpufleet", "/etc/gpufleet/cdi-nvidia.json")):
        node.run("rm -f /etc/cdi/nvidia.yaml /etc/gpufleet/cdi-nvidia.json", check=True)
        _tmpfs_full(node, folder, size="4k")
        r = run_cdi(fleet, "f-bookworm")
        failed_right = bool(r.get("failed")) and r.get("msg") == f"cannot write {name}: No space left on device"
        absent = node.run(f"test -e {name}").rc != 0
        leftovers = node.run("ls -a /etc/cdi /etc/gpufleet | grep gpufleet-").stdout.strip()
        node.run(f"rm -f {folder}/.fill")
        first, second = run_cdi(fleet, "f-bookworm"), run_cdi(fleet, "f-bookworm")
        index = node.run('python3 -c \'import json; print(json.load(open("/etc/gpufleet/cdi-nvidia.json"))["spec"])\'')
        converged = (
            first.get("changed") and not second.get("changed") and index.stdout.strip() == "/etc/cdi/nvidia.yaml"
        )
        outcome = {
            "engine up": node.run("systemctl is-active docker containerd").rc == 0,
            "config valid": absent and not leftovers,
            "nothing lost": True,
        }
        bad += [
            f"ENOSPC {name}: {b}: {r}"
            for b in record(f"ENOSPC at {name}", "CDI spec / index", outcome, bool(converged and failed_right))
        ]
        node.run(f"umount {folder}", check=True)
    assert not bad, "\n".join(bad)


WRAPPER_SCRIPT = f"""#!/bin/sh
# test-only: pause when asked to, at the systemctl verb named in {PAUSE}, until the test kills the module
if [ -e {PAUSE} ] && [ "$1" = "$(cat {PAUSE})" ]; then
  rm -f {PAUSE}
  if [ "$1" = restart ]; then /usr/bin/systemctl restart --no-block "$2"; fi
  echo $PPID > {PAUSED}
  sleep 600
fi
exec /usr/bin/systemctl "$@"
"""


def _start_paused(fleet, node, engine, verb):
    """Start the module with a pause at ``verb``; -> (the ansible-playbook process, the module's PID)."""
    node.put(SYSTEMCTL_WRAPPER, WRAPPER_SCRIPT, 0o755)
    node.put(PAUSE, verb)
    args = {"engine": engine, "path": SHIM, "restart": True, "restart_timeout": RESTART_TIMEOUT}
    cmd = _playbook_cmd(fleet, PLAYBOOKS / "container_runtime.yml", node.name, {"runtime_args": args})
    proc = subprocess.Popen(cmd, cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def paused():
        if proc.poll() is not None:  # the run ended without reaching the point: say why at once
            out, err = proc.communicate()
            raise AssertionError(f"{node.name}: the run ended before systemctl {verb}: {out[-3000:]}{err[-2000:]}")
        return node.run(f"cat {PAUSED} 2>/dev/null").stdout.strip()

    try:
        return proc, wait_for(f"{node.name}: the module reaching systemctl {verb}", paused)
    except AssertionError:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        raise


POINTS = {"reset-failed": "after the write, before the restart", "restart": "during the restart"}


@pytest.mark.parametrize("verb", ["reset-failed", "restart"], ids=["after-write", "during-restart"])
def test_sigkill_of_the_module(fleet, verb):
    def case(target):
        host, engine, label = target
        node = fleet.node(host)
        reset(node, engine, label)
        proc, pid = _start_paused(fleet, node, engine, verb)
        # the wrapper's pause ends too (pkill -x: not this shell, whose command line names it)
        node.run(f"rm -f {SYSTEMCTL_WRAPPER}; kill -KILL {pid}; pkill -KILL -x sleep; true")
        proc.communicate(timeout=WAIT)
        if verb == "restart":
            wait_engine(node, engine)  # the restart asked for before the kill goes on: polled, bounded
        # what a SIGKILL inside the atomic write (between the temporary file and the rename) leaves next to each
        # file, named after the killed module's PID, and an admin's file of a like name that must stay
        leftovers = [_temporary_of(path, pid) for path in files_of(engine)]
        lookalike = f"{CONFIG[engine]}.gpufleet-admin-notes"
        node.run(
            f"for f in {' '.join(leftovers)}; do mkdir -p $(dirname $f); echo half > $f; done; echo mine > {lookalike}",
            check=True,
        )
        outcome = check(node, engine, label)
        if verb == "reset-failed":
            # the files are the new ones and the engine still runs the old: the rerun must restart it
            outcome["config valid"] = (
                node.run(f"containerd config dump >/dev/null || true; test -e {PENDING}/{engine}").rc == 0
            )
        converged, last = converge(fleet, node, engine, label)
        swept = node.run(f"ls -d {' '.join(leftovers)} 2>/dev/null").stdout.strip() == ""
        outcome["nothing lost"] = outcome["nothing lost"] and node.run(f"cat {lookalike}").stdout == "mine\n"
        node.run(f"rm -f {lookalike}")
        converged = converged and swept
        bad = [
            f"{label} SIGKILL at {verb}: {b}: swept {swept}: {last}"
            for b in record(
                f"SIGKILL of the module {POINTS[verb]}",
                label,
                outcome,
                converged,
            )
        ]
        reset(node, engine, label)
        return bad

    _by_node(case)


def _temporary_of(path: str, pid: str) -> str:
    folder, name = path.rsplit("/", 1)
    return f"{folder}/.{name}.gpufleet-{pid}-0badc0de"


def test_node_restarted_in_the_middle_of_the_runtime_stage(fleet):
    """The module paused after its write (before the restart) when the node restarts: the engine boots on the files
    on disk, the restart-pending mark (under /run, a tmpfs) is gone, and the rerun changes nothing. f-bookworm's two
    engines one after the other (each restart of the node restarts both)."""

    def case(target):
        host, engine, label = target
        node = fleet.node(host)
        reset(node, engine, label)
        proc, _pid = _start_paused(fleet, node, engine, "reset-failed")
        subprocess.run(["docker", "restart", "-t", "5", node.container], check=True, capture_output=True, timeout=WAIT)
        proc.communicate(timeout=WAIT)
        node.wait_booted(timeout=WAIT)
        node.run(f"rm -f {SYSTEMCTL_WRAPPER}")
        wait_engine(node, engine)
        outcome = check(node, engine, label)  # booted on the files on disk (the new ones)
        outcome["config valid"] = outcome["config valid"] and node.run(f"test -e {PENDING}/{engine}").rc != 0
        rerun = run_module(fleet, host, engine)
        registered = SHIM in node.run(f"cat {' '.join(files_of(engine))} 2>/dev/null").stdout
        converged = not rerun.get("failed") and not rerun["changed"] and registered
        bad = [
            f"{label} node restart: {b}: {rerun}" for b in record("node restarted mid-stage", label, outcome, converged)
        ]
        reset(node, engine, label)
        return bad

    _by_node(case)


def test_engine_refuses_the_new_configuration_rolled_back(fleet):
    def case(target):
        host, engine, label = target
        node = fleet.node(host)
        reset(node, engine, label)
        before = node.run(f"cat {CONFIG[engine]}").stdout
        exec_start = node.run(f"systemctl show -p ExecStart --value {engine}").stdout
        argv = exec_start.split("argv[]=", 1)[1].split(" ;", 1)[0].strip()
        folder = CONFIG[engine].rsplit("/", 1)[0]
        node.put(
            REFUSE,
            f"#!/bin/sh\nif grep -rqs {SHIM} {folder}; then\n"
            f'  echo "gpufleet fault: refusing {folder}" >&2; exit 1\nfi\nexec "$@"\n',
            0o755,
        )
        node.put(
            f"/run/systemd/system/{engine}.service.d/fault.conf", f"[Service]\nExecStart=\nExecStart={REFUSE} {argv}\n"
        )
        node.run("systemctl daemon-reload", check=True)
        r = run_module(fleet, host, engine, restart_timeout=30)
        rolled_back = (
            bool(r.get("failed")) and r.get("rolled_back") and r.get("engine_back") and "refusing" in r.get("msg", "")
        )
        outcome = check(node, engine, label, unchanged=before)
        outcome["config valid"] = outcome["config valid"] and node.run(f"cat {CONFIG[engine]}").stdout == before
        node.run(f"rm -rf /run/systemd/system/{engine}.service.d && systemctl daemon-reload", check=True)
        converged, last = converge(fleet, node, engine, label)
        bad = [
            f"{label} refused: {b}: {r.get('msg')} / {last}"
            for b in record("engine refuses the new config (rollback)", label, outcome, bool(converged and rolled_back))
        ]
        reset(node, engine, label)
        return bad

    _by_node(case)


def test_two_site_runs_at_once_are_serialised_by_the_host_lock(fleet):
    """A run holds f-trixie's lock (the module, as site.yml's discover play takes it); a site.yml started meanwhile
    waits its gpufleet_lock_timeout, then fails that host's `lock` stage naming the holder; one started with a longer
    timeout gets the lock when the first run releases it, and releases it at its end."""
    node = fleet.node("f-trixie")
    env = dict(_env(), ANSIBLE_STDOUT_CALLBACK="default")
    holder = subprocess.run(
        [
            str(ROOT / ".venv" / "bin" / "ansible"),
            "-i",
            str(fleet.inventory),
            "f-trixie",
            "-m",
            "gpufleet.nvidia.host_lock",
            "-a",
            "owner=first-run",
        ],
        check=False,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
    )
    assert holder.returncode == 0, holder.stdout + holder.stderr
    pid = json.loads(node.run("cat /run/gpufleet-nvidia/site.lock").stdout)["pid"]
    site = [
        str(ROOT / ".venv" / "bin" / "ansible-playbook"),
        "-i",
        str(fleet.inventory),
        "--limit",
        "f-trixie",
        "--tags",
        "discover",
        "-e",
        f"report_dir={ROOT / 'tests' / 'output' / 'faults-report'}",
    ]
    refused = subprocess.run(
        [*site, "-e", "gpufleet_lock_timeout=3", str(SITE)],
        check=False,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
    )
    out = refused.stdout + refused.stderr
    assert refused.returncode != 0 and "/run/gpufleet-nvidia/site.lock" in out and f"holder PID {pid}" in out, out[
        -4000:
    ]
    assert "'first-run'" in out and f"kill {pid}" in out
    waiting = subprocess.Popen(
        [*site, "-e", "gpufleet_lock_timeout=120", str(SITE)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
        env=env,
    )
    time.sleep(8)
    assert waiting.poll() is None, "the second run did not wait for the lock"
    node.run(f"kill {pid}", check=True)  # the first run ends (what its release does)
    out, _err = waiting.communicate(timeout=300)
    assert waiting.returncode == 0, out[-4000:]
    # released at the end of the run: the lock is free
    free = node.run(
        "python3 -c 'import fcntl; "
        'fcntl.flock(open("/run/gpufleet-nvidia/site.lock"), fcntl.LOCK_EX | fcntl.LOCK_NB)\''
    )
    record(
        "two site.yml runs at once (host lock)",
        "f-trixie",
        {"engine up": node.run("systemctl is-active containerd").rc == 0, "config valid": True, "nothing lost": True},
        free.rc == 0,
    )
    assert free.rc == 0, free


SLOW = "/tmp/gpufleet-fault-slow"
POSTINST_SLOW = f"""#!/bin/sh
# a package whose configuration takes long enough to be killed in the middle (while {SLOW} exists)
if [ -e {SLOW} ]; then sleep 600; fi
"""


def test_sigkill_of_dpkg_then_the_driver_role_recovers(fleet):
    """dpkg killed (SIGKILL) while it configures a package (its postinst) leaves its journal: apt refuses every
    install until ``dpkg --configure -a``. The driver role's apt path finishes it first (``apt_prepare``), then
    changes nothing. A small local package stands in for the driver's (no package repository is reachable from the
    fleet)."""
    node = fleet.node("f-bookworm")
    node.put(
        "/tmp/fault-deb/DEBIAN/control",
        "Package: gpufleet-fault\nVersion: 1.0\nArchitecture: all\n"
        "Maintainer: tests <tests@example.invalid>\nDescription: fault injection\n",
    )
    node.put("/tmp/fault-deb/DEBIAN/postinst", POSTINST_SLOW, 0o755)
    node.put(SLOW, "")
    node.run("dpkg-deb -b /tmp/fault-deb /tmp/gpufleet-fault.deb >/dev/null", check=True)
    node.run("(setsid dpkg -i /tmp/gpufleet-fault.deb >/dev/null 2>&1 &)", check=True)
    wait_for("dpkg running the package's postinst", lambda: node.run("pgrep -x sleep").rc == 0)
    node.run(f"pkill -KILL -x dpkg; pkill -KILL -x sleep; rm -f {SLOW}; true")
    interrupted = node.run("apt-get check")
    was_interrupted = interrupted.rc != 0 and "dpkg --configure -a" in interrupted.stdout + interrupted.stderr
    cmd = _playbook_cmd(fleet, PLAYBOOKS / "dpkg_recover.yml", "f-bookworm", {})
    first = subprocess.run(cmd, check=False, capture_output=True, text=True, cwd=ROOT, env=_env())
    second = subprocess.run(cmd, check=False, capture_output=True, text=True, cwd=ROOT, env=_env())
    stats = [json.loads(p.stdout)["stats"]["f-bookworm"] if p.returncode == 0 else {} for p in (first, second)]
    # apt no longer refuses, and the package dpkg was configuring when killed is configured now
    status = node.run("dpkg-query -W -f '${Status}' gpufleet-fault").stdout.strip()
    healthy = node.run('apt-get check && test -z "$(dpkg --audit)"').rc == 0 and status == "install ok installed"
    node.run("dpkg --purge gpufleet-fault >/dev/null 2>&1; rm -rf /tmp/fault-deb /tmp/gpufleet-fault.deb")
    converged = bool(stats[0].get("changed")) and stats[1].get("changed") == 0 and healthy
    kept = node.run("dpkg-query -W -f '${Status}\\n' docker.io containerd | grep -vc 'install ok installed'").stdout
    bad = record(
        "SIGKILL of dpkg mid-configure, then the driver role",
        "apt/dpkg (bookworm)",
        {
            "engine up": node.run("systemctl is-active docker containerd").rc == 0,
            "config valid": healthy,  # apt-get check passes, dpkg --audit finds nothing
            "nothing lost": kept.strip() == "0",  # the packages installed before are still installed
        },
        converged,
    )
    assert was_interrupted, f"the kill did not leave dpkg interrupted: {interrupted}"
    assert not bad, (bad, first.stdout[-2000:], second.stdout[-2000:])
