# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""A node that runs NVIDIA's container toolkit: adopted as it is, then taken over by ``site.yml`` (issue 20).

One trixie node (docker 26 with CDI, containerd 1.7, podman 5.4, Debian's driver userspace preinstalled: the node
image of the converged fleet; one GPU) is prepared as a host NVIDIA's install guide left: NVIDIA's four packages
(the stand-ins of ``tests/sim/apt_repo.py``, 1.17.8-1, installed with dpkg from the signed stand-in repository;
their postinst writes ``config.toml`` as NVIDIA's does), ``/etc/docker/daemon.json`` as ``nvidia-ctk runtime
configure --runtime=docker --cdi.enabled`` writes it, NVIDIA's CDI spec as ``nvidia-ctk cdi generate`` writes it
both where the install guide puts it (``/etc/cdi/nvidia.yaml``) and where the refresh unit of toolkit 1.18 does
(``/var/run/cdi/nvidia.yaml``), and NVIDIA's ``nvidia-cdi-refresh`` units, enabled (their text from
NVIDIA/nvidia-container-toolkit ``deployments/systemd/``, commits 044b670d and 347d5efd). The stand-ins cannot
generate a spec, so the spec lists the node's device nodes itself, in ``nvidia-ctk``'s layout.

Then, in order: ``gpu_facts`` sees NVIDIA's toolkit and the two specs (``cdi_spec_shadowed``), and a CDI device runs
through docker and podman; the toolkit role with defaults adopts NVIDIA's toolkit (provider ``nvidia``, no package
or repository change); ``site.yml --diff`` with ``toolkit_nvidia_state=absent`` takes the node over (NVIDIA's
packages purged, its refresh units masked, both of its specs moved aside, as the diff says); after it one spec per
kind is left, ``gpu_facts`` reports no toolkit problem, and ``docker --gpus all``, ``docker --device
nvidia.com/gpu=0`` and ``podman --device nvidia.com/gpu=all`` run.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

from tests.sim import apt_repo

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "playbooks" / "site.yml"
PREPARE = ROOT / "tests" / "sim" / "playbooks" / "prepare.yml"
TOOLKIT = ROOT / "tests" / "integration" / "playbooks" / "toolkit_nvidia.yml"
NODE = "adopt-trixie"
FLEET = {
    "nodes": [
        {
            "name": NODE,
            "suite": "trixie",
            "driver_state": "loaded",
            "driver_packages": True,
            "gpus": 1,
        }
    ]
}
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
    cmd = [str(ROOT / ".venv" / "bin" / "ansible-playbook"), "-i", str(fleet.inventory), *args, str(playbook)]
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".cache" / "collections"), ANSIBLE_FORCE_COLOR="0")
    return subprocess.run(cmd, check=False, capture_output=True, text=True, cwd=ROOT, env=env)


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
def runs(sim_fleet_factory, tmp_path_factory):
    if not shutil.which("gpg") or not shutil.which("dpkg-deb"):
        pytest.skip("needs gpg and dpkg-deb here to build the signed stand-in repository")
    work = tmp_path_factory.mktemp("nvidia-adopt")
    repo = apt_repo.build(work / "mirror", versions=(OLD,))
    fleet = sim_fleet_factory(FLEET, name="i20adopt")
    node = fleet.node(NODE)
    timings = {}
    start = time.monotonic()
    debs = {f"debs/{deb.name}": deb.read_bytes() for deb in sorted(repo.deb_dir.glob("*.deb"))}
    node.put("/tmp/nvidia.tar", _tar(debs))
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
    out: dict = {"node": node, "before": _gpu_facts(fleet), "runs_before": _runs(node)}
    out["packages_before"] = node.run(
        "dpkg-query -W -f='${Package} ${Version}\\n' " + " ".join(apt_repo.PACKAGES)
    ).stdout
    timings["prepare"] = time.monotonic() - start

    start = time.monotonic()
    out["adopt"] = _playbook(fleet, TOOLKIT)
    out["packages_adopted"] = node.run(
        "dpkg-query -W -f='${Package} ${Version}\\n' " + " ".join(apt_repo.PACKAGES)
    ).stdout
    out["sources_adopted"] = node.run("ls /etc/apt/sources.list.d/").stdout.split()
    timings["adopt"] = time.monotonic() - start

    start = time.monotonic()
    report = work / "report"
    out["site"] = _playbook(fleet, SITE, "--diff", "-e", "toolkit_nvidia_state=absent", "-e", f"report_dir={report}")
    timings["site"] = time.monotonic() - start
    out["after"] = _gpu_facts(fleet)
    out["runs_after"] = _runs(node)
    gpus = node.run(["docker", "run", "--rm", "--network", "none", "--gpus", "all", IMAGE, "ls", "/dev"], timeout=180)
    out["gpus_all"] = (gpus.rc, gpus.stdout.split(), gpus.stderr[-500:])
    out["units"] = {unit: node.run(["systemctl", "is-enabled", unit]).stdout.strip() for unit in UNITS}
    out["disabled"] = node.run("ls /etc/cdi /var/run/cdi").stdout
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
    for path in ("/etc/cdi/nvidia.yaml", "/var/run/cdi/nvidia.yaml"):
        assert f"{path}.gpufleet-disabled (moved aside" in proc.stdout, proc.stdout[-6000:]
    assert runs["units"] == dict.fromkeys(UNITS, "masked")
    assert "nvidia.yaml.gpufleet-disabled" in runs["disabled"]


def test_after_one_spec_per_kind_and_no_toolkit_problem(runs):
    after = runs["after"]
    specs = [(s["path"], s["ours"]) for s in after["nvidia_toolkit"]["cdi_specs"] if s["kind"] == "nvidia.com/gpu"]
    assert specs == [("/etc/cdi/nvidia.yaml", True)]
    assert after["nvidia_toolkit"]["packages"] == {}  # toolkit_nvidia_state=absent purged them
    assert _cdi_problems(after) == []
    assert after["toolkit"]["provider"] == "native"


def test_after_gpu_containers_run_on_docker_and_podman(runs):
    for engine, (rc, dev) in runs["runs_after"].items():
        assert rc == 0 and "nvidia0" in dev and "nvidiactl" in dev, (engine, dev)
    rc, dev, err = runs["gpus_all"]
    assert rc == 0 and "nvidia0" in dev, err
