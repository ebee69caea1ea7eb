# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Device nodes at boot: gpufleet-nvidia-devices.service on one simulated GPU node (bookworm, docker
20.10 through the runtime shim, Debian's real 535 userspace, 2 GPUs), installed by the toolkit and runtime roles.

One fleet for every case, in order: the roles install and start the unit and the nodes and spec are complete, validate
passes; ``/dev/nvidia-uvm*`` and ``/dev/nvidia1`` removed and the spec refreshed without them: ``gpu_facts`` reports
``uvm_device_missing`` and ``cdi_spec_uvm_missing`` and validate fails docker on the missing uvm node; the unit
restarted: the nodes are back with their numbers, the refresh renders the spec again because the node set changed,
the problems are gone and validate passes; the node rebooted with the simulation making no device node at boot: the
unit makes every one before docker starts (there is no kernel module: ``modprobe`` fails and is logged, the nodes
come from the node's stand-in for ``/proc``, ``tests/sim/README.md``).
"""

import json
import re
import subprocess

import pytest

pytestmark = pytest.mark.integration

FLEET = {
    "nodes": [
        {
            "name": "dn-bookworm",
            "suite": "bookworm",
            "driver_state": "loaded",
            "driver_packages": True,
            "engines": ["docker"],
            "gpus": 2,
        }
    ]
}
UVM_MAJOR = 235  # tests/sim/model.py UVM_MAJOR: what the node's stand-in /proc/devices gives nvidia-uvm
SETUP = """
- hosts: all
  gather_facts: false
  roles:
    - role: gpufleet.nvidia.toolkit
    - role: gpufleet.nvidia.runtime
      runtime_engines: [docker]  # containerd (docker.io's dependency) would need tomlkit, which no mirror here has
"""
CHECK = """
- hosts: all
  gather_facts: false
  tasks:
    - name: Validate (refreshes gpu_facts first)
      ansible.builtin.include_role:
        name: gpufleet.nvidia.validate
      vars:
        validate_fail_on_error: false
        validate_engines: [docker]
    - name: Show
      ansible.builtin.debug:
        msg: "{{ {'problems': ansible_facts.nvidia.problems, 'uvm_loaded': ansible_facts.nvidia.driver.uvm_loaded,
                  'validate': gpufleet_validate} | to_json }}"
"""
NODES = {
    "/dev/nvidia0": (195, 0),
    "/dev/nvidia1": (195, 1),
    "/dev/nvidiactl": (195, 255),
    "/dev/nvidia-modeset": (195, 254),
    "/dev/nvidia-uvm": (UVM_MAJOR, 0),
    "/dev/nvidia-uvm-tools": (UVM_MAJOR, 1),
}


@pytest.fixture(scope="module")
def dn(sim_fleet_factory, ansible_playbook, tmp_path_factory):
    fleet = sim_fleet_factory(FLEET, name="i14dn")
    node = fleet.node("dn-bookworm")
    node.run("gpufleet-sim-mini-image", check=True, timeout=300)
    work = tmp_path_factory.mktemp("i14dn")
    (work / "setup.yml").write_text(SETUP)
    (work / "check.yml").write_text(CHECK)
    proc = ansible_playbook(work / "setup.yml", inventory=fleet.inventory)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]

    def check():
        proc = ansible_playbook(work / "check.yml", inventory=fleet.inventory)
        assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
        m = re.search(r'"msg": "(\{\\"problems.*\})"', proc.stdout)
        assert m, proc.stdout[-3000:]
        return json.loads(json.loads(f'"{m.group(1)}"'))

    return node, check


def nodes(node):
    """``{path: (major, minor)}`` of the NVIDIA character devices in the node."""
    out = node.run("stat -c '%n %F %t %T' /dev/nvidia* 2>/dev/null", check=False).stdout
    found = {}
    for line in out.splitlines():
        path, rest = line.split(" ", 1)
        if rest.startswith("character special file"):
            major, minor = rest.rsplit(" ", 2)[1:]
            found[path] = (int(major, 16), int(minor, 16))
    return found


def unit_reports(node, unit, *args):
    """The JSON reports the unit's program printed (not those of its ExecStartPost, gpufleet-dev-char-links)."""
    log = node.run(["journalctl", *args, "-u", unit, "-o", "cat", "--no-pager"], check=True).stdout
    reports = [json.loads(x) for x in log.splitlines() if x.startswith("{")]
    key = "loaded" if unit == "gpufleet-nvidia-devices" else "stamp"
    return [r for r in reports if key in r]


def codes(result):
    return [p["code"] for p in result["problems"]]


def spec_nodes(node):
    return set(re.findall(r'- path: "(/dev/nvidia[^"]*)"', node.run("cat /etc/cdi/nvidia.yaml", check=True).stdout))


def test_the_roles_install_and_start_the_unit(dn):
    node, check = dn
    assert node.run("systemctl is-enabled gpufleet-nvidia-devices").stdout.strip() == "enabled"
    assert node.run("systemctl is-active gpufleet-nvidia-devices").stdout.strip() == "active"
    unit = node.run("systemctl cat gpufleet-nvidia-devices", check=True).stdout
    assert "ExecStartPre=-/sbin/modprobe nvidia-uvm" in unit and "Before=gpufleet-cdi-refresh.service" in unit
    assert nodes(node) == NODES
    assert {"/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia0", "/dev/nvidia1"} <= spec_nodes(node)
    result = check()
    assert result["uvm_loaded"] is True and codes(result) == [], result["problems"]
    assert result["validate"]["passed"], result["validate"]["message"]


def test_missing_uvm_is_reported_then_the_unit_and_the_refresh_put_it_back(dn):
    node, check = dn
    node.run("rm /dev/nvidia-uvm /dev/nvidia-uvm-tools /dev/nvidia1", check=True)
    # The state of a host that booted without them: the boot-time refresh renders a spec without them.
    node.run("systemctl restart gpufleet-cdi-refresh", check=True)
    assert "/dev/nvidia-uvm" not in spec_nodes(node) and "/dev/nvidia1" not in spec_nodes(node)
    before = check()
    assert {"uvm_device_missing", "cdi_spec_uvm_missing"} <= set(codes(before)), before["problems"]
    assert before["validate"]["passed"] is False and before["validate"]["failed_engines"] == ["docker"]
    assert "not visible: /dev/nvidia-uvm" in before["validate"]["engines"]["docker"]["message"]

    node.run("systemctl restart gpufleet-nvidia-devices", check=True)
    assert nodes(node) == NODES
    made = unit_reports(node, "gpufleet-nvidia-devices")[-1]
    assert sorted(made["created"]) == ["/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia1"], made
    assert node.run(["readlink", f"/dev/char/{UVM_MAJOR}:0"]).stdout.strip() == "../nvidia-uvm"  # ExecStartPost

    node.run("systemctl restart gpufleet-cdi-refresh", check=True)
    refresh = unit_reports(node, "gpufleet-cdi-refresh")[-1]
    assert refresh["changed"] and "device nodes changed" in refresh["reason"], refresh
    assert {"/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia1"} <= spec_nodes(node)
    after = check()
    assert codes(after) == [], after["problems"]
    assert after["validate"]["passed"], after["validate"]["message"]


def test_a_boot_without_device_nodes_gets_them_before_docker(dn):
    node, check = dn
    node.run(
        "python3 -c \"import json; p='/etc/gpufleet-sim/gpus.json'; c=json.load(open(p)); "
        "c['device_nodes_at_boot']=False; json.dump(c, open(p, 'w'))\"",
        check=True,
    )
    subprocess.run(["docker", "restart", node.container], check=True, capture_output=True, timeout=120)
    state = node.wait_booted()
    reports = unit_reports(node, "gpufleet-nvidia-devices", "-b")
    assert reports and sorted(reports[-1]["created"]) == sorted(NODES), (reports, state)
    assert nodes(node) == NODES
    times = {
        unit: int(node.run(f"systemctl show -p {prop} --value {unit}", check=True).stdout.strip())
        for unit, prop in (
            ("gpufleet-nvidia-devices", "ExecMainExitTimestampMonotonic"),
            ("gpufleet-cdi-refresh", "ExecMainStartTimestampMonotonic"),
            ("docker", "ExecMainStartTimestampMonotonic"),
        )
    }
    assert 0 < times["gpufleet-nvidia-devices"] < times["gpufleet-cdi-refresh"] < times["docker"], times
    assert {"/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia0", "/dev/nvidia1"} <= spec_nodes(node)
    after = check()
    assert codes(after) == [] and after["validate"]["passed"], (after["problems"], after["validate"]["message"])
