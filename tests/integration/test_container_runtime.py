# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""gpufleet.nvidia.container_runtime against the real engines of the simulated fleet, through ansible.

The session fleet's three nodes carry every engine version the collection supports from Debian:
gpu-bookworm docker 20.10 / containerd 1.6, gpu-trixie docker 26 / containerd 1.7, cpu-sid docker 28 /
containerd 2.1. Each test runs the module on all three at once (one ansible-playbook run per step) and
checks every node, then gives each node its original files back and restarts what it changed: other tests
of the session use these nodes.

tomlkit (needed on the target for containerd) is not in the node images: the controller's copy (pure
Python) is put on the nodes for this module and removed afterwards, as a user would install python3-tomlkit.
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
import tarfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

PLAYBOOK = Path(__file__).resolve().parent / "playbooks" / "container_runtime.yml"
# host -> (docker version prefix, containerd version prefix, config version of `containerd config default`)
HOSTS = {"gpu-bookworm": ("20.10.", "1.6.", 2), "gpu-trixie": ("26.", "1.7.", 2), "cpu-sid": ("28.", "2.1.", 3)}
SHIM = "/usr/local/bin/gpufleet-test-shim"
SHIM_LOG = "/var/log/gpufleet-test-shim.log"
# The registered "runtime": logs its argv, then hands over to runc (what an OCI shim does).
SHIM_SCRIPT = f'#!/bin/sh\necho "$*" >> {SHIM_LOG}\nexec runc "$@"\n'
DAEMON_JSON = "/etc/docker/daemon.json"
CONTAINERD_TOML = "/etc/containerd/config.toml"
DROP_IN = "/etc/containerd/conf.d/99-gpufleet-nvidia.toml"
DOCKER_UNIT_DROP_IN = "/run/systemd/system/docker.service.d/gpufleet-test-flags.conf"
WRAPPER = "/usr/local/sbin/gpufleet-test-dockerd"
TOMLKIT_DEST = "/usr/local/lib/gpufleet-test-python"
# our own restarts clear systemd's start limit first: this test restarts docker more often than it allows
RESTART_DOCKER = "systemctl daemon-reload && systemctl reset-failed docker && systemctl restart docker"


def _parallel(fn, names):
    with ThreadPoolExecutor(max_workers=len(names)) as pool:
        return dict(zip(names, pool.map(fn, names)))


def read_bytes(node, path):
    """The file's bytes, or None when it does not exist."""
    res = node.run(f"test -e {path} && base64 -w0 {path}")
    return base64.b64decode(res.stdout) if res.rc == 0 else None


def restore(node, path, original):
    if original is None:
        node.run(f"rm -f {path}", check=True)
    else:
        node.put(path, original)


def run_module(ansible_playbook, **args):
    """The module's result per host (all HOSTS in one ansible-playbook run)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ANSIBLE_STDOUT_CALLBACK", "ansible.posix.json")
        proc = ansible_playbook(PLAYBOOK, "-e", json.dumps({"runtime_args": args}), limit=",".join(HOSTS))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    hosts = json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]
    assert sorted(hosts) == sorted(HOSTS), hosts
    return hosts


def _check_all(failures):
    assert not failures, "\n".join(failures)


@pytest.fixture(scope="module")
def nodes(sim_node):
    """The three nodes with the test shim and tomlkit in place (removed again at the end)."""
    import tomlkit

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        source = os.path.dirname(tomlkit.__file__)
        tar.add(source, arcname="tomlkit", filter=lambda t: None if "__pycache__" in t.name else t)
    archive = buf.getvalue()
    found = {name: sim_node(name) for name in HOSTS}

    def prepare(name):
        node = found[name]
        node.put(SHIM, SHIM_SCRIPT, 0o755)
        node.put("/tmp/gpufleet-tomlkit.tar", archive)
        # a .pth file in the system site dir puts the copy on python3's path (as an installed package would be)
        node.run(
            f"mkdir -p {TOMLKIT_DEST} && tar -C {TOMLKIT_DEST} -xf /tmp/gpufleet-tomlkit.tar && "
            f"rm /tmp/gpufleet-tomlkit.tar && echo {TOMLKIT_DEST} > "
            '"$(python3 -c "import sysconfig; print(sysconfig.get_paths()[\'purelib\'])")/gpufleet-test.pth" && '
            'python3 -c "import tomlkit"',
            check=True,
        )

    _parallel(prepare, list(HOSTS))
    yield found

    def clean(name):
        found[name].run(
            f"rm -rf {SHIM} {SHIM_LOG} {TOMLKIT_DEST} "
            '"$(python3 -c "import sysconfig; print(sysconfig.get_paths()[\'purelib\'])")/gpufleet-test.pth"',
            check=True,
        )

    _parallel(clean, list(HOSTS))


def docker_runtimes(node):
    res = node.run("docker info --format '{{json .Runtimes}}'")
    return json.loads(res.stdout) if res.rc == 0 else None


def test_docker_register_run_rollback_absent(nodes, ansible_playbook):
    originals = {name: read_bytes(node, DAEMON_JSON) for name, node in nodes.items()}
    failures = []
    try:
        # register, restart: docker info lists the runtime with our binary
        results = run_module(ansible_playbook, engine="docker", path=SHIM, restart=True)
        written = {}
        for name, r in results.items():
            node = nodes[name]
            if not (r.get("changed") and r.get("restarted") and r["engine_version"].startswith(HOSTS[name][0])):
                failures.append(f"{name}: register: {r}")
                continue
            runtimes = docker_runtimes(node)
            if not runtimes or runtimes.get("nvidia", {}).get("path") != SHIM:
                failures.append(f"{name}: docker info does not list nvidia -> {SHIM}: {runtimes}")
            written[name] = read_bytes(node, DAEMON_JSON)
        _check_all(failures)

        # a second run changes nothing, byte for byte
        results = run_module(ansible_playbook, engine="docker", path=SHIM, restart=True)
        for name, r in results.items():
            if r.get("changed") or r.get("restarted") or read_bytes(nodes[name], DAEMON_JSON) != written[name]:
                failures.append(f"{name}: second run not idempotent: {r}")
        _check_all(failures)

        # docker run --runtime=nvidia reaches the registered binary
        def nested(name):
            node = nodes[name]
            node.run(f"rm -f {SHIM_LOG} /tmp/gpufleet-cid", check=True)
            node.run("gpufleet-sim-mini-image gpufleet-sim/mini:latest", check=True, timeout=300)
            res = node.run(
                "docker run --rm --cidfile /tmp/gpufleet-cid --network none --runtime=nvidia "
                "gpufleet-sim/mini:latest echo through-the-runtime"
            )
            cid = node.run("cat /tmp/gpufleet-cid").stdout.strip()
            log = node.run(f"cat {SHIM_LOG}").stdout
            return res, cid, log

        for name, (res, cid, log) in _parallel(nested, list(nodes)).items():
            if res.rc != 0 or "through-the-runtime" not in res.stdout:
                failures.append(f"{name}: docker run --runtime=nvidia failed: {res}")
            elif not cid or not re.search(rf"\bcreate\b.*{cid}", log):
                failures.append(f"{name}: the shim did not see `create` of {cid!r}: {log!r}")
        _check_all(failures)

        # a name dockerd keeps for itself: refused before anything is written (dockerd would not start)
        results = run_module(ansible_playbook, engine="docker", name="runc", path=SHIM, restart=True)
        for name, r in results.items():
            if not r.get("failed") or "reserved" not in r.get("msg", "") or r.get("restarted"):
                failures.append(f"{name}: name=runc not refused up front: {r}")
            elif read_bytes(nodes[name], DAEMON_JSON) != written[name]:
                failures.append(f"{name}: name=runc touched {DAEMON_JSON}")
        _check_all(failures)

        # the unit passes --default-runtime as a flag (as admins do in DOCKER_OPTS); set_as_default writes
        # default-runtime into daemon.json, which every dockerd refuses at start ("specified both as a flag and in the
        # configuration file"), and `dockerd --validate` cannot know about the flag: the module reads the unit and
        # fails before writing, naming the drop-in, the flag and the fix
        def add_flag(name):
            nodes[name].run(f"mkdir -p {DOCKER_UNIT_DROP_IN.rsplit('/', 1)[0]}", check=True)
            nodes[name].put(DOCKER_UNIT_DROP_IN, "[Service]\nEnvironment=DOCKER_OPTS=--default-runtime=runc\n")
            nodes[name].run(RESTART_DOCKER, check=True)

        _parallel(add_flag, list(nodes))
        results = run_module(
            ansible_playbook, engine="docker", path=SHIM, set_as_default=True, restart=True, restart_timeout=30
        )
        for name, r in results.items():
            msg = r.get("msg", "")
            if not r.get("failed") or r.get("restarted") or r.get("rolled_back"):
                failures.append(f"{name}: the unit's flag was not refused up front: {r}")
            elif not (
                DOCKER_UNIT_DROP_IN in msg and "'--default-runtime runc'" in msg and "remove --default-runtime" in msg
            ):
                failures.append(f"{name}: the failure does not name the drop-in, the flag and the fix: {msg}")
            if read_bytes(nodes[name], DAEMON_JSON) != written[name]:
                failures.append(f"{name}: {DAEMON_JSON} was touched")
        _check_all(failures)

        # rollback: the same flag where no unit file shows it (a wrapper script in ExecStart): written, the restart
        # fails, the previous file comes back and docker answers again with the engine's own error in the failure
        def add_wrapper(name):
            node = nodes[name]
            node.put(WRAPPER, '#!/bin/sh\nexec "$(command -v dockerd)" --default-runtime=runc "$@"\n', 0o755)
            node.put(DOCKER_UNIT_DROP_IN, "[Service]\n")
            node.run(
                f"grep -h '^ExecStart=.' /lib/systemd/system/docker.service | tail -1 "
                f"| sed 's#^ExecStart=[^ ]*#ExecStart={WRAPPER}#' | (echo ExecStart=; cat) >> {DOCKER_UNIT_DROP_IN} "
                f"&& {RESTART_DOCKER}",
                check=True,
            )

        _parallel(add_wrapper, list(nodes))
        results = run_module(
            ansible_playbook, engine="docker", path=SHIM, set_as_default=True, restart=True, restart_timeout=30
        )
        for name, r in results.items():
            node = nodes[name]
            msg = r.get("msg", "")
            if not (r.get("failed") and r.get("rolled_back") and r.get("engine_back")):
                failures.append(f"{name}: rollback did not run: {r}")
            elif "specified both as a flag and in the configuration file" not in msg:
                failures.append(f"{name}: the engine's own error is missing from the failure: {msg}")
            if read_bytes(node, DAEMON_JSON) != written[name]:
                failures.append(f"{name}: {DAEMON_JSON} not restored byte for byte")
            if not docker_runtimes(node):
                failures.append(f"{name}: docker does not answer after the rollback")
        _check_all(failures)

        def drop_flag(name):
            unit_dir = DOCKER_UNIT_DROP_IN.rsplit("/", 1)[0]
            nodes[name].run(
                f"rm -rf {unit_dir} {WRAPPER} && {RESTART_DOCKER}",
                check=True,
            )

        _parallel(drop_flag, list(nodes))

        # absent after present: the original file (here: none) and a running engine without the runtime
        results = run_module(ansible_playbook, engine="docker", path=SHIM, state="absent", restart=True)
        for name, r in results.items():
            node = nodes[name]
            if not (r.get("changed") and r.get("restarted")):
                failures.append(f"{name}: absent: {r}")
            if read_bytes(node, DAEMON_JSON) != originals[name]:
                failures.append(f"{name}: absent did not give back the original {DAEMON_JSON}")
            runtimes = docker_runtimes(node)
            if runtimes is None or "nvidia" in runtimes:
                failures.append(f"{name}: after absent docker info says {runtimes}")
        _check_all(failures)
    finally:

        def put_back(name):
            node = nodes[name]
            node.run(
                f"rm -rf {DOCKER_UNIT_DROP_IN.rsplit('/', 1)[0]} {WRAPPER} /tmp/gpufleet-cid && systemctl daemon-reload"
            )
            if read_bytes(node, DAEMON_JSON) != originals[name]:
                restore(node, DAEMON_JSON, originals[name])
                node.run("systemctl reset-failed docker; systemctl restart docker")

        _parallel(put_back, list(nodes))


def _section(dump, table):
    """The lines of one table of a `containerd config dump` (up to the next table header)."""
    m = re.search(rf"^\s*\[{re.escape(table)}\]\n(.*?)(?=^\s*\[|\Z)", dump, re.M | re.S)
    return m.group(1) if m else None


def test_containerd_register_dump_idempotent_absent(nodes, ansible_playbook):
    originals = {name: read_bytes(node, CONTAINERD_TOML) for name, node in nodes.items()}
    had_conf_d = {name: node.run("test -d /etc/containerd/conf.d").rc == 0 for name, node in nodes.items()}
    failures = []
    try:
        # what admins start from (the Kubernetes docs' recipe): the engine's own default config with the
        # systemd cgroup driver; version 2 on 1.6/1.7, version 3 on 2.1
        def admin_config(name):
            node = nodes[name]
            node.run(
                "containerd config default | sed 's/SystemdCgroup = false/SystemdCgroup = true/' > /tmp/ctd.toml && "
                f"mv /tmp/ctd.toml {CONTAINERD_TOML} && systemctl restart containerd && ctr version >/dev/null",
                check=True,
            )
            return read_bytes(node, CONTAINERD_TOML)

        admin = _parallel(admin_config, list(nodes))
        for name, text in admin.items():
            assert b"SystemdCgroup = true" in text, f"{name}: containerd config default has no SystemdCgroup"

        results = run_module(ansible_playbook, engine="containerd", path=SHIM, restart=True)
        written = {}
        for name, r in results.items():
            node = nodes[name]
            _docker, ctd_version, config_version = HOSTS[name]
            if not (r.get("changed") and r.get("restarted") and r["engine_version"].startswith(ctd_version)):
                failures.append(f"{name}: register: {r}")
                continue
            if r.get("config_version") != config_version:
                failures.append(f"{name}: config_version {r.get('config_version')}, expected {config_version}")
            cri = "io.containerd.grpc.v1.cri" if config_version == 2 else "io.containerd.cri.v1.runtime"
            dump = node.run("containerd config dump", check=True).stdout.replace("'", '"')
            options = _section(dump, f'plugins."{cri}".containerd.runtimes.nvidia.options')
            runtime = _section(dump, f'plugins."{cri}".containerd.runtimes.nvidia')
            if options is None or runtime is None:
                failures.append(f"{name}: config dump has no runtimes.nvidia under {cri}")
                continue
            if f'BinaryName = "{SHIM}"' not in options:
                failures.append(f"{name}: config dump: BinaryName is not {SHIM}: {options}")
            if "SystemdCgroup = true" not in options:
                failures.append(f"{name}: config dump: SystemdCgroup of runc not carried over: {options}")
            if 'runtime_type = "io.containerd.runc.v2"' not in runtime:
                failures.append(f"{name}: config dump: runtime_type: {runtime}")
            if node.run("ctr version").rc != 0:
                failures.append(f"{name}: containerd does not answer after the restart")
            written[name] = (read_bytes(node, CONTAINERD_TOML), read_bytes(node, DROP_IN))
        _check_all(failures)

        results = run_module(ansible_playbook, engine="containerd", path=SHIM, restart=True)
        for name, r in results.items():
            now = (read_bytes(nodes[name], CONTAINERD_TOML), read_bytes(nodes[name], DROP_IN))
            if r.get("changed") or r.get("restarted") or now != written[name]:
                failures.append(f"{name}: second run not idempotent: {r}")
        _check_all(failures)

        results = run_module(ansible_playbook, engine="containerd", path=SHIM, state="absent", restart=True)
        for name, r in results.items():
            node = nodes[name]
            if not (r.get("changed") and r.get("restarted")):
                failures.append(f"{name}: absent: {r}")
            if read_bytes(node, CONTAINERD_TOML) != admin[name] or read_bytes(node, DROP_IN) is not None:
                failures.append(f"{name}: absent did not give back the admin's config.toml and remove the drop-in")
            if node.run("ctr version").rc != 0 or "runtimes.nvidia" in node.run("containerd config dump").stdout:
                failures.append(f"{name}: containerd after absent: not answering or still has nvidia")
        _check_all(failures)
    finally:

        def put_back(name):
            node = nodes[name]
            restore(node, CONTAINERD_TOML, originals[name])
            node.run(f"rm -f {DROP_IN}")
            if not had_conf_d[name]:
                node.run("rmdir /etc/containerd/conf.d")
            node.run("systemctl reset-failed containerd; systemctl restart containerd && ctr version", check=True)

        _parallel(put_back, list(nodes))
