# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""IMEX on an NVLink domain of two simulated GPU nodes (bookworm, docker on one, ``nvlink_domain: nvl0``: the stand-in
/proc lists ``nvidia-caps-imex-channels``, major 237), after the toolkit and runtime roles. NVIDIA's nvidia-imex is
not in Debian: a stand-in ``nvidia-imex.service`` records the node list it read at start.

In order, on one fleet: the role in check mode changes nothing and says what it would; site.yml's imex stage
writes the same node list on both members (an admin's other config key kept), makes channel0 and starts the unit; a
second run changes nothing; discovery sees the channel and no problem, then names the extra address of an edited
list; ``imex_mode=dra`` stops, disables and masks the unit; without the package, host mode says what to install
and does the rest; a reboot of one member brings channel0 back through
gpufleet-nvidia-devices.service before docker starts; ``imex_mode=absent`` takes everything off.
"""

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
SITE = REPO / "playbooks" / "site.yml"

# ix-a runs docker, so that the reboot shows channel0 made before an engine starts; ix-b runs none.
# ix-b also stands for a host ready for NVIDIA's DRA driver: sid's containerd 2.1 (CDI on by default) and a driver of
# NVIDIA's 580 branch, which no Debian package has (so the simulated driver comes without Debian's packages). ix-a,
# bookworm's 535 driver and docker only, is not ready.
FLEET = {
    "nodes": [
        {"name": "ix-a", "suite": "bookworm", "driver_state": "loaded", "engines": ["docker"], "gpus": 1,
         "nvlink_domain": "nvl0"},
        {"name": "ix-b", "suite": "sid", "driver_state": "loaded", "engines": ["containerd"], "gpus": 1,
         "nvlink_domain": "nvl0", "driver_version": "580.95.05", "cuda_version": "13.0"},
    ]
}  # fmt: skip
ADDRESSES = {"ix-a": "10.77.0.2", "ix-b": "10.77.0.1"}
NODES_CONFIG = "10.77.0.1\n10.77.0.2\n"
CHANNEL0 = "/dev/nvidia-caps-imex-channels/channel0"
# The nvlink domain's inventory group comes from the fleet; the addresses and the domain list are the site's.
DOMAIN_VARS = {
    "all": {
        "vars": {"imex_domain_groups": ["nvl0"]},
        "hosts": {name: {"imex_address": address} for name, address in ADDRESSES.items()},
    }
}
SETUP = """
- hosts: all
  gather_facts: false
  roles:
    - role: gpufleet.nvidia.toolkit
    - role: gpufleet.nvidia.runtime
      runtime_engines: "{{ ['docker'] if inventory_hostname == 'ix-a' else [] }}"
"""
ROLE = """
- hosts: nvl0
  gather_facts: false
  roles:
    - role: gpufleet.nvidia.imex
"""
FACTS = """
- hosts: nvl0
  gather_facts: false
  tasks:
    - name: Discover (the stand-in /proc, as gpufleet-nvidia-devices reads it)
      gpufleet.nvidia.gpu_facts:
      environment:
        GPUFLEET_NVIDIA_PROC: /run/gpufleet-sim/proc
    - name: Show
      ansible.builtin.debug:
        msg: >-
          {{ {'imex': ansible_facts.nvidia.imex, 'problems': ansible_facts.nvidia.problems,
              'dra': ansible_facts.nvidia.dra} | to_json }}
"""
STAND_IN_UNIT = """[Unit]
Description=Stand-in for NVIDIA's nvidia-imex (test): records the node list it read at start
[Service]
ExecStart=/bin/sh -c 'cp /etc/nvidia-imex/nodes_config.cfg /run/imex-stand-in.txt; exec sleep infinity'
[Install]
WantedBy=multi-user.target
"""


def recap(proc):
    """``{host: {ok, changed, failed, ...}}`` of a run's PLAY RECAP."""
    found = {}
    for host, counts in re.findall(r"^(\S+)\s+:\s+(ok=.*)$", proc.stdout, re.M):
        found[host] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", counts)}
    return found


@pytest.fixture(scope="module")
def ix(sim_fleet_factory, tmp_path_factory):
    start = time.monotonic()
    fleet = sim_fleet_factory(FLEET, name="i43ix")
    work = tmp_path_factory.mktemp("i43ix")
    (work / "domain.yml").write_text(json.dumps(DOMAIN_VARS))
    for name, text in (("setup.yml", SETUP), ("role.yml", ROLE), ("facts.yml", FACTS)):
        (work / name).write_text(text)

    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO / ".cache" / "collections"), ANSIBLE_FORCE_COLOR="0")

    def run(playbook, *args):
        cmd = [
            str(REPO / ".venv" / "bin" / "ansible-playbook"),
            "-i",
            str(fleet.inventory),
            "-i",
            str(work / "domain.yml"),
        ]
        cmd += [*args, str(work / playbook)]
        proc = subprocess.run(cmd, check=False, capture_output=True, text=True, cwd=REPO, env=env)
        print(f"[i43ix] {playbook} {' '.join(args)}: rc={proc.returncode} {time.monotonic() - start:.0f}s")
        return proc

    def facts(name):
        proc = run("facts.yml", "--limit", name)
        assert proc.returncode == 0, proc.stdout[-4000:]
        m = re.search(r'"msg": "(\{\\"imex.*\})"', proc.stdout)
        assert m, proc.stdout[-3000:]
        return json.loads(json.loads(f'"{m.group(1)}"'))

    proc = run("setup.yml")
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
    for name in ADDRESSES:
        node = fleet.node(name)
        node.put("/usr/lib/systemd/system/nvidia-imex.service", STAND_IN_UNIT)
        node.put("/etc/nvidia-imex/config.cfg", "# the admin's\nLOG_LEVEL=2\nSERVER_PORT=1234\n")
        node.run("systemctl daemon-reload", check=True)
    return fleet, run, facts, work


def test_check_mode_says_what_it_would_and_changes_nothing(ix):
    fleet, run, _facts, _work = ix
    proc = run("role.yml", "--check", "--diff")
    assert proc.returncode == 0, proc.stdout[-5000:]
    assert "+10.77.0.1" in proc.stdout and "+SERVER_PORT=50000" in proc.stdout, proc.stdout[-5000:]
    assert all(recap(proc)[name]["changed"] > 0 for name in ADDRESSES), recap(proc)
    node = fleet.node("ix-a")
    assert node.run("test -e /etc/nvidia-imex/nodes_config.cfg").rc == 1
    assert node.run(f"test -e {CHANNEL0}").rc == 1
    assert node.run("systemctl is-active nvidia-imex").stdout.strip() == "inactive"


def test_the_stage_writes_the_domain_makes_channel0_and_starts_the_unit(ix):
    fleet, run, _facts, work = ix
    proc = run(SITE, "--tags", "imex", "-e", f"report_dir={work / 'report'}")
    assert proc.returncode == 0, proc.stdout[-5000:]
    assert "TASK [gpufleet.nvidia.imex" in proc.stdout
    for name in ADDRESSES:
        node = fleet.node(name)
        assert node.run("cat /etc/nvidia-imex/nodes_config.cfg", check=True).stdout == NODES_CONFIG
        config = node.run("cat /etc/nvidia-imex/config.cfg", check=True).stdout
        assert "LOG_LEVEL=2\n" in config and "# the admin's\n" in config, config
        assert "SERVER_PORT=50000\n" in config and "SERVER_PORT=1234" not in config, config
        assert "IMEX_NODE_CONFIG_FILE=/etc/nvidia-imex/nodes_config.cfg\n" in config
        assert "IMEX_WAIT_FOR_QUORUM=RECOVERY\n" in config
        assert node.run(f"stat -c '%F %t:%T %a' {CHANNEL0}", check=True).stdout.strip() == (
            "character special file ed:0 666"  # 237:0 in hex
        )
        assert node.run("systemctl is-active nvidia-imex").stdout.strip() == "active"
        assert node.run("systemctl is-enabled nvidia-imex").stdout.strip() == "enabled"
        assert node.run("cat /run/imex-stand-in.txt", check=True).stdout == NODES_CONFIG
        record = json.loads(node.run("cat /etc/gpufleet/imex.json", check=True).stdout)
        assert (record["domain"], record["members"], record["channels"]) == ("nvl0", ["10.77.0.1", "10.77.0.2"], [0])


def test_a_second_run_changes_nothing(ix):
    _fleet, run, _facts, _work = ix
    proc = run("role.yml")
    assert proc.returncode == 0, proc.stdout[-5000:]
    assert all(recap(proc)[name]["changed"] == 0 for name in ADDRESSES), proc.stdout[-5000:]


def test_discovery_sees_the_channel_then_names_an_extra_address(ix):
    fleet, run, facts, _work = ix
    found = facts("ix-a")
    imex = found["imex"]
    assert (imex["present"], imex["major"], imex["channels"]) == (True, 237, [0])
    assert imex["nodes_config"] == ["10.77.0.1", "10.77.0.2"] and imex["domain"] == "nvl0"
    assert imex["service"] == {"unit": "nvidia-imex.service", "installed": True, "active": True, "enabled": True,
                               "masked": False}  # fmt: skip
    assert not [p for p in found["problems"] if p["code"].startswith("imex_")], found["problems"]
    fleet.node("ix-a").run("echo 10.77.0.9 >> /etc/nvidia-imex/nodes_config.cfg", check=True)
    problems = {p["code"]: p for p in facts("ix-a")["problems"]}
    assert "extra 10.77.0.9" in problems["imex_nodes_config_mismatch"]["message"], problems
    proc = run("role.yml", "--limit", "ix-a")  # puts the list right and restarts nvidia-imex on it
    assert proc.returncode == 0 and recap(proc)["ix-a"]["changed"] > 0, proc.stdout[-4000:]
    assert fleet.node("ix-a").run("cat /run/imex-stand-in.txt", check=True).stdout == NODES_CONFIG


def test_dra_readiness_verdict(ix):
    """gpu_facts' DRA verdict on each member: ix-b has all the DRA driver expects of the host (its IMEX channel and a
    driver for ComputeDomains included); ix-a is not ready, each failing check with its fix."""
    _fleet, _run, facts, _work = ix
    ready = facts("ix-b")["dra"]
    assert ready["ready"] is True and ready["release"] == "v0.4.1", ready
    assert [c["name"] for c in ready["checks"]] == [
        "driver", "cdi_spec", "runtime_cdi", "imex_channels", "driver_compute_domains"
    ]  # fmt: skip
    not_ready = facts("ix-a")["dra"]
    failing = {c["name"]: c for c in not_ready["checks"] if not c["ok"]}
    assert not_ready["ready"] is False and set(failing) == {"driver", "runtime_cdi", "driver_compute_domains"}, failing
    assert (
        failing["driver"]["found"] == "driver 535.261.03 loaded" and "driver_branch: '580'" in failing["driver"]["fix"]
    )
    # docker.io brings bookworm's containerd 1.6 along, which has no CDI
    assert failing["runtime_cdi"]["found"].startswith("containerd 1.6"), failing["runtime_cdi"]
    assert "upgrade containerd to 1.7 or later" in failing["runtime_cdi"]["fix"]


def test_dra_mode_masks_the_unit(ix):
    fleet, run, facts, _work = ix
    proc = run("role.yml", "-e", "imex_mode=dra")
    assert proc.returncode == 0, proc.stdout[-5000:]
    for name in ADDRESSES:
        node = fleet.node(name)
        assert node.run("systemctl is-enabled nvidia-imex").stdout.strip() == "masked"
        assert node.run("systemctl is-active nvidia-imex").stdout.strip() == "inactive"
    again = run("role.yml", "-e", "imex_mode=dra")
    assert all(recap(again)[name]["changed"] == 0 for name in ADDRESSES), again.stdout[-5000:]
    found = facts("ix-b")
    assert found["imex"]["service"]["masked"] is True and found["imex"]["mode"] == "dra"
    assert not [p for p in found["problems"] if p["code"].startswith("imex_")], found["problems"]


def test_host_mode_without_the_package_says_what_to_install(ix):
    fleet, run, _facts, _work = ix
    node = fleet.node("ix-b")
    node.run("rm /usr/lib/systemd/system/nvidia-imex.service && systemctl daemon-reload", check=True)
    proc = run("role.yml", "--limit", "ix-b")  # masked by the dra run before: unmasked, then the message
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert "nvidia-imex.service is not installed: install NVIDIA's nvidia-imex package" in proc.stdout, proc.stdout
    assert node.run("systemctl show -p LoadState --value nvidia-imex").stdout.strip() == "not-found"
    assert node.run("cat /etc/nvidia-imex/nodes_config.cfg", check=True).stdout == NODES_CONFIG
    assert json.loads(node.run("cat /etc/gpufleet/imex.json", check=True).stdout)["mode"] == "host"


def test_a_reboot_makes_channel0_again(ix):
    fleet, _run, _facts, _work = ix
    node = fleet.node("ix-a")
    subprocess.run(["docker", "restart", node.container], check=True, capture_output=True, timeout=120)
    node.wait_booted()
    assert node.run(f"stat -c '%F %t:%T %a' {CHANNEL0}", check=True).stdout.strip() == "character special file ed:0 666"
    log = node.run("journalctl -b -u gpufleet-nvidia-devices -o cat --no-pager", check=True).stdout
    reports = [json.loads(x) for x in log.splitlines() if x.startswith("{") and '"loaded"' in x]
    assert reports and CHANNEL0 in reports[-1]["created"], log
    times = {
        unit: int(node.run(f"systemctl show -p {prop} --value {unit}", check=True).stdout.strip())
        for unit, prop in (
            ("gpufleet-nvidia-devices", "ExecMainExitTimestampMonotonic"),
            ("docker", "ExecMainStartTimestampMonotonic"),
        )
    }
    assert 0 < times["gpufleet-nvidia-devices"] < times["docker"], times
    assert node.run("systemctl is-enabled nvidia-imex").stdout.strip() == "masked"


def test_absent_takes_it_off(ix):
    fleet, run, _facts, _work = ix
    proc = run("role.yml", "-e", "imex_mode=absent")
    assert proc.returncode == 0, proc.stdout[-5000:]
    for name in ADDRESSES:
        node = fleet.node(name)
        for path in ("/etc/nvidia-imex/nodes_config.cfg", "/etc/gpufleet/imex.json", CHANNEL0):
            assert node.run(f"test -e {path}").rc == 1, path
        config = node.run("cat /etc/nvidia-imex/config.cfg", check=True).stdout
        assert "LOG_LEVEL=2" in config and "SERVER_PORT" not in config, config
        assert node.run("systemctl is-enabled nvidia-imex").stdout.strip() != "masked"
    again = run("role.yml", "-e", "imex_mode=absent")
    assert all(recap(again)[name]["changed"] == 0 for name in ADDRESSES), again.stdout[-5000:]
