# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""A node that runs NVIDIA's container toolkit: taken over by ``site.yml``, given back by ``uninstall.yml`` as NVIDIA
left it, then taken over for good.

The trixie node of the shared ``nvidia_fleet`` (``_fleet_nvidia.py``: docker 26 with CDI, containerd 1.7, podman 5.4,
Debian's driver userspace preinstalled, one GPU) is prepared as a host NVIDIA's install guide left: NVIDIA's four
packages (the stand-ins of ``tests/sim/apt_repo.py``, 1.17.8-1, installed with dpkg from the shared signed stand-in
repository; their postinst writes ``config.toml`` as NVIDIA's does), ``/etc/docker/daemon.json`` as ``nvidia-ctk
runtime configure --runtime=docker --cdi.enabled`` writes it, NVIDIA's CDI spec as ``nvidia-ctk cdi generate`` writes
it both where the install guide puts it (``/etc/cdi/nvidia.yaml``) and where the refresh unit of toolkit 1.18 does
(``/var/run/cdi/nvidia.yaml``), and NVIDIA's ``nvidia-cdi-refresh`` units, enabled (their text from
NVIDIA/nvidia-container-toolkit ``deployments/systemd/``, commits 044b670d and 347d5efd). The stand-ins cannot
generate a spec, so the spec lists the node's device nodes itself, in ``nvidia-ctk``'s layout.

Then, in order: ``gpu_facts`` sees NVIDIA's toolkit and the two specs (``cdi_spec_shadowed``), and a CDI device runs
through docker and podman; a snapshot of what NVIDIA left (the engines' and CDI folders, systemd's units folders with
their mask links and ``*.wants``, the units' ``systemctl is-enabled``, the programs, ``config.toml``, ``dpkg``);
the toolkit role with defaults adopts NVIDIA's toolkit (provider ``nvidia``, no package or repository change);
``site.yml --diff`` with ``toolkit_provider=native`` (the stand-ins run no container, so the native toolkit does;
NVIDIA's packages stay) takes the node over (its refresh units masked, both of its specs moved aside, as the diff
says, docker's ``nvidia`` runtime replaced), and GPU containers run; ``uninstall.yml --check --diff`` changes nothing;
``uninstall.yml`` gives the snapshot back exactly (docker's ``daemon.json`` to NVIDIA's bytes, the specs to their
names, the units unmasked) and a CDI device runs through docker and podman again with NVIDIA's spec. (Taking a node
over for good, ``toolkit_nvidia_state=absent``, purges NVIDIA's packages: ``test_toolkit_nvidia_provider.py`` runs
that removal.)
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

from tests.integration import _fleet_nvidia, _host_state
from tests.sim import apt_repo

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "playbooks" / "site.yml"
UNINSTALL = ROOT / "playbooks" / "uninstall.yml"
TOOLKIT = ROOT / "tests" / "integration" / "playbooks" / "toolkit_nvidia.yml"
PREPARE = ROOT / "tests" / "sim" / "playbooks" / "prepare.yml"
NODE = _fleet_nvidia.TRIXIE
# Where NVIDIA's toolkit and this collection put things (the programs, units, configs, specs): the round trip gives
# each back as it was. /var/lib/gpufleet-nvidia keeps the one marker of docker's values given back (takeover.py).
PLACES = (
    "/etc/docker",
    "/etc/containerd",
    "/etc/cdi",
    "/var/run/cdi",
    "/etc/systemd/system",
    "/usr/lib/systemd/system/nvidia-cdi-refresh.service",
    "/usr/lib/systemd/system/nvidia-cdi-refresh.path",
    "/usr/bin/nvidia-ctk",
    "/usr/bin/nvidia-container-runtime",
    "/usr/bin/nvidia-container-runtime-hook",
    "/usr/bin/nvidia-cdi-hook",
    "/usr/bin/nvidia-container-cli",
    "/usr/local/bin",
    "/usr/local/lib",
    "/etc/gpufleet",
    "/etc/nvidia-container-runtime",
    "/etc/apt/sources.list.d",
)
# AnsibleModule.backup_local: <file>.<pid>.<YYYY-MM-DD@HH:MM:SS>~ (as test_uninstall_roundtrip.py)
BACKUP = re.compile(r"^f \d+ /etc/(docker|containerd|crio)/\S+\.\d+\.\d{4}-\d\d-\d\d@\d\d:\d\d:\d\d~ ")
IMAGE = "gpufleet-sim/mini:latest"
OLD = apt_repo.VERSIONS[0]
# `nvidia-ctk runtime configure --runtime=docker --cdi.enabled` (1.17): the runtime by name, found on PATH.
DAEMON_JSON = """{
    "features": {
        "cdi": true
    },
    "runtimes": {
        "nvidia": {
            "args": [],
            "path": "nvidia-container-runtime"
        }
    }
}
"""
# `nvidia-ctk cdi generate` 1.17's layout (sigs.k8s.io/yaml: list items at their key's column, keys sorted).
NVIDIA_SPEC = """---
cdiVersion: 0.5.0
containerEdits:
  deviceNodes:
  - path: /dev/nvidiactl
devices:
- containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
  name: "0"
- containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
  name: all
kind: nvidia.com/gpu
"""
UNITS = {
    "nvidia-cdi-refresh.service": """[Unit]
Description=Refresh NVIDIA CDI specification file
ConditionPathExists=|/usr/bin/nvidia-smi
ConditionPathExists=|/usr/sbin/nvidia-smi
ConditionPathExists=/usr/bin/nvidia-ctk
After=multi-user.target

[Service]
Type=oneshot
Environment=NVIDIA_CTK_CDI_OUTPUT_FILE_PATH=/var/run/cdi/nvidia.yaml
EnvironmentFile=-/etc/nvidia-container-toolkit/nvidia-cdi-refresh.env
ExecCondition=/usr/bin/grep -qE '/(nvidia|nvidia-current)\\\\.ko' /lib/modules/%v/modules.dep
ExecStart=/usr/bin/nvidia-ctk cdi generate
RemainAfterExit=yes

[Install]
WantedBy=multi-user.target
""",
    "nvidia-cdi-refresh.path": """[Unit]
Description=Trigger CDI refresh on NVIDIA driver install / uninstall events

[Path]
PathChanged=/lib/modules/%v/modules.dep
PathChanged=/lib/modules/%v/modules.dep.bin

[Install]
WantedBy=multi-user.target
""",
}


def _tar(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _playbook(fleet, playbook: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [str(ROOT / ".venv" / "bin" / "ansible-playbook"), "-i", str(fleet.inventory), "--limit", NODE, *args]
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".cache" / "collections"), ANSIBLE_FORCE_COLOR="0")
    return subprocess.run([*cmd, str(playbook)], check=False, capture_output=True, text=True, cwd=ROOT, env=env)


def _snapshot(node) -> list[str]:
    """``_host_state.contents`` of ``PLACES``, and each unit's ``systemctl is-enabled``."""
    states = [f"unit {u} {node.run(['systemctl', 'is-enabled', u]).stdout.strip()}" for u in sorted(UNITS)]
    return _host_state.contents(node, PLACES) + states


def _gpu_facts(fleet) -> dict:
    cmd = [str(ROOT / ".venv" / "bin" / "ansible"), "-i", str(fleet.inventory), NODE, "-m", "gpufleet.nvidia.gpu_facts"]
    env = dict(
        os.environ,
        ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".cache" / "collections"),
        ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
        ANSIBLE_STDOUT_CALLBACK="json",
    )
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, cwd=ROOT, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    result = json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"][NODE]
    return result["ansible_facts"]["nvidia"]


def _runs(node) -> dict[str, object]:
    """A CDI device through docker and podman: ``{command: (rc, /dev of the container or the error)}``."""
    found = {}
    for argv in (
        ["docker", "run", "--rm", "--network", "none", "--device", "nvidia.com/gpu=0", IMAGE, "ls", "/dev"],
        ["podman", "run", "--rm", "--network", "none", "--device", "nvidia.com/gpu=all", IMAGE, "ls", "/dev"],
    ):
        res = node.run(argv, timeout=180)
        found[argv[0]] = (res.rc, sorted(res.stdout.split()) if res.rc == 0 else res.stderr[-500:])
    return found


def _cdi_problems(facts: dict) -> list[str]:
    codes = ("cdi_spec_conflict", "cdi_spec_shadowed", "nvidia_program_shadowed", "runtime_program_missing")
    return [p["code"] for p in facts["problems"] if p["code"] in codes]


@pytest.fixture(scope="module")
def runs(nvidia_fleet, tmp_path_factory):
    fleet = nvidia_fleet
    node = fleet.node(NODE)
    work = tmp_path_factory.mktemp("nvidia-adopt")
    timings = {}
    start = time.monotonic()
    debs = {f"debs/{deb.name}": deb.read_bytes() for deb in _fleet_nvidia.debs(fleet.repo, OLD)}
    assert len(debs) == len(apt_repo.PACKAGES), debs.keys()
    node.put("/tmp/nvidia.tar", _tar(debs))
    _fleet_nvidia.install_tomlkit(node)  # site.yml's driver stage stays out of the round trip: no apt index refresh
    for unit, text in UNITS.items():
        node.put(f"/usr/lib/systemd/system/{unit}", text)
    node.put("/etc/docker/daemon.json", DAEMON_JSON)
    node.put("/etc/cdi/nvidia.yaml", NVIDIA_SPEC)
    node.put("/var/run/cdi/nvidia.yaml", NVIDIA_SPEC)
    node.run(
        "set -e; mkdir -p /tmp/nvidia && tar -C /tmp/nvidia -xf /tmp/nvidia.tar && dpkg -i /tmp/nvidia/debs/*.deb && "
        "systemctl daemon-reload && systemctl enable nvidia-cdi-refresh.path nvidia-cdi-refresh.service && "
        "systemctl restart docker",
        check=True,
    )
    proc = _playbook(fleet, PREPARE)
    assert proc.returncode == 0, proc.stdout[-3000:]
    query = "dpkg-query -W -f='${Package} ${Version}\\n' " + " ".join(apt_repo.PACKAGES)
    out: dict = {"node": node, "before": _gpu_facts(fleet), "runs_before": _runs(node)}
    out["packages_before"] = node.run(query).stdout
    out["nvidia_left"] = _snapshot(node)
    timings["prepare"] = time.monotonic() - start

    start = time.monotonic()
    out["adopt"] = _playbook(fleet, TOOLKIT)
    out["packages_adopted"] = node.run(query).stdout
    out["sources_adopted"] = node.run("ls /etc/apt/sources.list.d/").stdout.split()
    timings["adopt"] = time.monotonic() - start

    # The stand-ins' runtime and hook run no container (tests/sim/apt_repo.py), so the round trip's site.yml brings the
    # native toolkit next to NVIDIA's packages (toolkit_provider=native: they stay) and validates every engine.
    report = work / "report"
    start = time.monotonic()
    args = ("--diff", "--skip-tags", "driver", "-e", "toolkit_provider=native", "-e", f"report_dir={report}")
    out["site"] = _playbook(fleet, SITE, *args)
    timings["site"] = time.monotonic() - start
    out["packages_site"] = node.run(query).stdout
    out["adopted"] = _gpu_facts(fleet)
    out["runs_adopted"] = _runs(node)
    gpus = node.run(["docker", "run", "--rm", "--network", "none", "--gpus", "all", IMAGE, "ls", "/dev"], timeout=180)
    out["gpus_all"] = (gpus.rc, gpus.stdout.split(), gpus.stderr[-500:])
    out["units"] = {unit: node.run(["systemctl", "is-enabled", unit]).stdout.strip() for unit in UNITS}
    out["disabled"] = node.run("ls /etc/cdi /var/run/cdi").stdout
    out["record"] = node.run(["cat", "/var/lib/gpufleet-nvidia/takeover.json"]).stdout
    out["taken_over"] = _snapshot(node)

    start = time.monotonic()
    out["check"] = _playbook(fleet, UNINSTALL, "--check", "--diff")
    out["after_check"] = _snapshot(node)
    out["uninstall"] = _playbook(fleet, UNINSTALL, "--diff")
    timings["uninstall"] = time.monotonic() - start
    out["given_back"] = _snapshot(node)
    out["given_back_facts"] = _gpu_facts(fleet)
    out["runs_given_back"] = _runs(node)

    print("nvidia adoption (s):", {k: round(v) for k, v in timings.items()})
    return out


def test_before_gpu_facts_sees_nvidias_toolkit_and_the_two_specs(runs):
    toolkit = runs["before"]["nvidia_toolkit"]
    assert toolkit["installed"] and toolkit["packages"] == dict.fromkeys(apt_repo.PACKAGES, OLD)
    assert toolkit["binaries"]["/usr/bin/nvidia-ctk"]["version"] == OLD.split("-")[0]
    assert toolkit["config_path"] == "/etc/nvidia-container-runtime/config.toml"
    assert sorted(toolkit["units"]) == sorted(UNITS) and toolkit["units"]["nvidia-cdi-refresh.path"]["enabled"]
    specs = [(s["path"], s["kind"], s["devices"], s["ours"]) for s in toolkit["cdi_specs"]]
    assert specs == [
        ("/etc/cdi/nvidia.yaml", "nvidia.com/gpu", ["0", "all"], False),
        ("/var/run/cdi/nvidia.yaml", "nvidia.com/gpu", ["0", "all"], False),
    ]
    assert _cdi_problems(runs["before"]) == ["cdi_spec_shadowed"]
    assert runs["before"]["engines"]["docker"]["runtime_paths"] == {"nvidia": "nvidia-container-runtime"}


def test_before_a_cdi_device_runs_through_docker_and_podman(runs):
    for engine, (rc, dev) in runs["runs_before"].items():
        assert rc == 0 and "nvidia0" in dev and "nvidiactl" in dev, (engine, dev)


def test_auto_adopts_nvidias_toolkit_as_it_is(runs):
    proc = runs["adopt"]
    assert proc.returncode == 0, proc.stdout[-4000:]
    m = re.search(r'"msg": "(\{\\"gpufleet_toolkit.*\})"', proc.stdout)
    assert m, proc.stdout[-3000:]
    fact = json.loads(json.loads(f'"{m.group(1)}"'))["gpufleet_toolkit"]
    assert fact["provider"] == "nvidia" and fact["version"] == OLD
    assert runs["packages_adopted"] == runs["packages_before"]  # no package moved, no hold set
    assert not [f for f in runs["sources_adopted"] if "nvidia" in f]  # no repository added


def test_site_takes_the_node_over_and_says_what_it_moved_aside(runs):
    proc = runs["site"]
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert runs["packages_site"] == runs["packages_before"]  # NVIDIA's packages stay with toolkit_provider=native
    for path in ("/etc/cdi/nvidia.yaml", "/var/run/cdi/nvidia.yaml"):
        assert f"{path}.gpufleet-disabled (moved aside" in proc.stdout, proc.stdout[-6000:]
    assert runs["units"] == dict.fromkeys(UNITS, "masked")
    assert "nvidia.yaml.gpufleet-disabled" in runs["disabled"]
    record = json.loads(runs["record"])  # what uninstall.yml gives back
    assert sorted(s["path"] for s in record["specs"]) == ["/etc/cdi/nvidia.yaml", "/var/run/cdi/nvidia.yaml"]
    assert record["units"] == {
        "nvidia-cdi-refresh.path": {"active": False, "enabled": True, "masked": False},
        "nvidia-cdi-refresh.service": {"active": False, "enabled": True, "masked": False},
    }
    assert record["engines"]["/etc/docker/daemon.json"] == {
        "runtime": {"args": [], "path": "nvidia-container-runtime"},
        "default-runtime": None,
        "cdi": True,
    }


def test_after_site_one_spec_per_kind_and_gpu_containers_run(runs):
    adopted = runs["adopted"]
    specs = [(s["path"], s["ours"]) for s in adopted["nvidia_toolkit"]["cdi_specs"]]
    assert specs == [("/etc/cdi/nvidia.yaml", True)]
    # no two specs for one device, no runtime gone; nvidia_program_shadowed may stay (NVIDIA's packages are there)
    assert [c for c in _cdi_problems(adopted) if c != "nvidia_program_shadowed"] == []
    assert adopted["toolkit"]["provider"] == "native"
    for engine, (rc, dev) in runs["runs_adopted"].items():
        assert rc == 0 and "nvidia0" in dev and "nvidiactl" in dev, (engine, dev)
    rc, dev, err = runs["gpus_all"]
    assert rc == 0 and "nvidia0" in dev, err


def test_uninstall_in_check_mode_changes_nothing(runs):
    proc = runs["check"]
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert "nvidia.yaml.gpufleet-disabled" in proc.stdout and "systemctl unmask" in proc.stdout, proc.stdout[-6000:]
    found = _host_state.changes(dict.fromkeys(runs["taken_over"]), dict.fromkeys(runs["after_check"]))
    assert found == [], found


def test_uninstall_gives_the_node_back_as_nvidia_left_it(runs):
    proc = runs["uninstall"]
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    # the timestamped backups container_runtime keeps of an engine file it changed (runtime_backup) are the only new
    after = [line for line in runs["given_back"] if not BACKUP.match(line)]
    found = _host_state.changes(dict.fromkeys(runs["nvidia_left"]), dict.fromkeys(after))
    assert found == [], "\n".join(found)
    assert len(after) < len(runs["given_back"])  # docker's daemon.json was changed, so it has one
    facts = runs["given_back_facts"]  # as gpu_facts saw the node before site.yml
    assert facts["nvidia_toolkit"]["cdi_specs"] == runs["before"]["nvidia_toolkit"]["cdi_specs"]
    assert facts["nvidia_toolkit"]["units"] == runs["before"]["nvidia_toolkit"]["units"]
    assert _cdi_problems(facts) == ["cdi_spec_shadowed"]


def test_after_uninstall_a_cdi_device_runs_again_with_nvidias_spec(runs):
    for engine, (rc, dev) in runs["runs_given_back"].items():
        assert rc == 0 and "nvidia0" in dev and "nvidiactl" in dev, (engine, dev)
