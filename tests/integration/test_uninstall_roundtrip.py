# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""site.yml, then playbooks/uninstall.yml, on bookworm, trixie and sid nodes: the files are
as before site.yml.

One fleet of three nodes (Debian's 535 userspace preinstalled, each suite's engines: docker 20.10 and containerd 1.6
on bookworm, docker 26, containerd 1.7 and podman on trixie, docker 28 and containerd 2.1 on sid), one run of each
playbook over all of them (CI time). Before site.yml each node gets what an admin's host has: a ``daemon.json`` with
the admin's own key, an admin's comment and key in containerd's ``config.toml`` (engines restarted), tomlkit (the
controller's pure-Python copy, as python3-tomlkit would be: no Debian mirror is reachable) and the validation image.

Then, in order: a snapshot of every place the roles write (engine configs, CDI spec folders, systemd units, udev
rules, the programs' folders, apt sources and keyrings, ``dpkg -l``: type, mode, link target and sha256 of each
entry); ``site.yml`` without its driver stage (the driver is not uninstalled by default, ``uninstall_driver=false``,
so its stage stays out of the round trip); ``docker run --gpus all`` sees the GPU; ``uninstall.yml --check --diff``
reports changes on every node and alters nothing; ``uninstall.yml`` leaves the snapshot equal to the one before
site.yml with the engines running (the only new files are the timestamped backups ``container_runtime`` keeps of an
engine file it changed, ``runtime_backup``); a second ``uninstall.yml`` changes nothing.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.integration._tomlkit import install_tomlkit, tomlkit_tar

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SITE = REPO / "playbooks" / "site.yml"
UNINSTALL = REPO / "playbooks" / "uninstall.yml"
PREPARE = REPO / "tests" / "sim" / "playbooks" / "prepare.yml"
NODES = {"rm-bookworm": "bookworm", "rm-trixie": "trixie", "rm-sid": "sid"}
FLEET = {
    "nodes": [
        {"name": name, "suite": suite, "driver_state": "loaded", "driver_packages": True, "gpus": 1}
        for name, suite in NODES.items()
    ]
}
IMAGE = "gpufleet-sim/mini:latest"
PLACES = (
    "/etc/docker /etc/containerd /etc/cdi /var/run/cdi /run/cdi /etc/crio /etc/systemd/system /usr/local/lib/systemd "
    "/lib/systemd/system /usr/lib/systemd/system /etc/udev /usr/local/bin /usr/local/sbin /usr/local/lib /etc/gpufleet "
    "/etc/apt/sources.list.d /usr/share/keyrings /etc/apt/keyrings /etc/nvidia-container-runtime /etc/ld.so.conf.d "
    "/etc/modprobe.d /etc/modules-load.d"
)
# type, mode, path, link target, then the content hash of regular files; dpkg's view of every package. Python's own
# bytecode caches (written whenever tomlkit or a program is imported) are not the roles' doing.
SNAPSHOT = rf"""
for place in {PLACES}; do
  [ -e "$place" ] || {{ echo "absent $place"; continue; }}
  find "$place" -name __pycache__ -prune -o -printf '%y %m %p -> %l\n' | while read -r kind mode path rest; do
    if [ "$kind" = f ]; then rest=$(sha256sum < "$path" | cut -c1-64); fi
    echo "$kind $mode $path $rest"
  done
done | sort
dpkg-query -W -f '${{db:Status-Abbrev}} ${{Package}} ${{Version}}\n' | sort
"""
# AnsibleModule.backup_local: <file>.<pid>.<YYYY-MM-DD@HH:MM:SS>~
BACKUP = re.compile(r"^f \d+ /etc/(docker|containerd|crio)/\S+\.\d+\.\d{4}-\d\d-\d\d@\d\d:\d\d:\d\d~ ")
DAEMON_JSON = '{\n  "log-level": "warn"\n}\n'
ADMIN_TOML = "# the admin's own note, kept by gpufleet.nvidia\noom_score = -100\n"
NODE_PREP = f"""
set -eu
printf '%s' '{DAEMON_JSON}' > /etc/docker/daemon.json
{{ printf '%s' "{ADMIN_TOML}"; cat /etc/containerd/config.toml; }} > /etc/containerd/config.toml.new
mv /etc/containerd/config.toml.new /etc/containerd/config.toml
systemctl restart docker containerd
"""


def _prepare_node(node, tar: bytes) -> None:
    install_tomlkit(node, tar)
    node.run(NODE_PREP, check=True, timeout=300)


def _recaps(proc: subprocess.CompletedProcess) -> dict[str, dict[str, int]]:
    found = {
        m.group(1): {"changed": int(m.group(2)), "unreachable": int(m.group(3)), "failed": int(m.group(4))}
        for m in re.finditer(
            r"^(rm-\w+)\s*:\s*ok=\d+\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", proc.stdout, re.M
        )
    }
    assert set(found) == set(NODES), proc.stdout[-4000:] + proc.stderr[-2000:]
    return found


@pytest.fixture(scope="module")
def roundtrip(sim_fleet_factory, tmp_path_factory):
    start = time.monotonic()
    fleet = sim_fleet_factory(FLEET, name="i20rm")
    nodes = {name: fleet.node(name) for name in NODES}
    tar = tomlkit_tar()
    with ThreadPoolExecutor(len(nodes)) as pool:
        list(pool.map(lambda n: _prepare_node(n, tar), nodes.values()))
    tmp = tmp_path_factory.mktemp("i20rm")
    settings = json.dumps({"report_dir": str(tmp / "report")})

    def snapshot() -> dict[str, list[str]]:
        with ThreadPoolExecutor(len(nodes)) as pool:
            out = dict(zip(nodes, pool.map(lambda n: n.run(SNAPSHOT, check=True, timeout=300).stdout, nodes.values())))
        return {name: text.splitlines() for name, text in out.items()}

    def play(playbook: Path, *args: str) -> subprocess.CompletedProcess:
        cmd = [str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", str(fleet.inventory), "-e", settings, *args]
        env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO / ".cache" / "collections"), ANSIBLE_FORCE_COLOR="0")
        proc = subprocess.run([*cmd, str(playbook)], capture_output=True, text=True, cwd=REPO, env=env, check=False)
        print(f"[i20rm] {playbook.name} {' '.join(args)}: rc={proc.returncode} at {time.monotonic() - start:.0f}s")
        return proc

    runs: dict = {"nodes": nodes}
    prep = play(PREPARE)
    assert prep.returncode == 0, prep.stdout[-4000:]
    runs["before"] = snapshot()
    runs["site"] = play(SITE, "--skip-tags", "driver")
    runs["after_site"] = snapshot()
    runs["gpus"] = {
        name: node.run(f"docker run --rm --network none --gpus all {IMAGE} ls /dev", timeout=180)
        for name, node in nodes.items()
    }
    runs["check"] = play(UNINSTALL, "--check", "--diff")
    runs["after_check"] = snapshot()
    runs["uninstall"] = play(UNINSTALL, "--diff")
    runs["after"] = snapshot()
    runs["engines"] = {
        name: node.run("systemctl is-active docker containerd").stdout.split() for name, node in nodes.items()
    }
    runs["again"] = play(UNINSTALL)
    runs["after_again"] = snapshot()
    return runs


def test_site_yml_converged_and_gpu_containers_work(roundtrip):
    proc = roundtrip["site"]
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    for name, recap in _recaps(proc).items():
        assert recap["failed"] == 0 and recap["changed"] > 0, name
        assert roundtrip["after_site"][name] != roundtrip["before"][name], name
    for name, res in roundtrip["gpus"].items():
        assert res.rc == 0 and "nvidia0" in res.stdout.split(), f"{name}: {res.stdout}{res.stderr}"


def test_uninstall_in_check_mode_reports_changes_and_alters_nothing(roundtrip):
    proc = roundtrip["check"]
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    for name, recap in _recaps(proc).items():
        assert recap["failed"] == 0 and recap["changed"] > 0, name
        assert roundtrip["after_check"][name] == roundtrip["after_site"][name], name
    assert "/etc/docker/daemon.json" in proc.stdout  # the diff names the engine file it would give back


def test_uninstall_gives_back_the_files_as_before_site_yml(roundtrip):
    proc = roundtrip["uninstall"]
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert all(recap["failed"] == 0 for recap in _recaps(proc).values())
    for name in NODES:
        before, after = roundtrip["before"][name], roundtrip["after"][name]
        backups = [line for line in after if BACKUP.match(line)]
        rest = [line for line in after if not BACKUP.match(line)]
        missing, extra = sorted(set(before) - set(rest)), sorted(set(rest) - set(before))
        assert (missing, extra) == ([], []), f"{name}: missing {missing}\nextra {extra}"
        assert backups, f"{name}: container_runtime kept no backup of the engine files it changed"
    for name, node in roundtrip["nodes"].items():
        assert node.run(["cat", "/etc/docker/daemon.json"], check=True).stdout == DAEMON_JSON, name
        assert node.run(["cat", "/etc/containerd/config.toml"], check=True).stdout.startswith(ADMIN_TOML), name
        assert roundtrip["engines"][name] == ["active", "active"], name


def test_a_second_uninstall_changes_nothing(roundtrip):
    proc = roundtrip["again"]
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    for name, recap in _recaps(proc).items():
        assert recap == {"changed": 0, "unreachable": 0, "failed": 0}, name
        assert roundtrip["after_again"][name] == roundtrip["after"][name], name
