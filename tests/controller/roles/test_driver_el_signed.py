# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The driver role's signed EL module sources (roles/driver/tasks/el_signed.yml) on localhost, with the plan
``driver_plan`` makes for a RHEL 10.1-shaped and an EL 9-shaped host under Secure Boot. Stand-ins on PATH record
what they are given: ``dnf`` answers ``repolist --enabled`` from a state file, ``subscription-manager repos
--enable=...`` adds to it (as RHSM enables a repository), ``mokutil`` is test_driver_mok's (enrolment state in
files); NVIDIA's key comes from a file:// mirror laid out as NVIDIA's repository directories.

What only a real host shows: RHSM, Red Hat's extensions repository and its kmod-nvidia, NVIDIA's real key and
MokManager; the package installation itself (ansible.builtin.dnf) is in redhat.yml, not here.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import yaml

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.driver_plan import plan
from ansible_collections.gpufleet.nvidia.tests.controller.playbook import run_playbook
from ansible_collections.gpufleet.nvidia.tests.controller.roles.test_driver_mok import MOKUTIL, PASSWORD, enrol

TASKS = Path(__file__).resolve().parents[3] / "roles" / "driver" / "tasks"
ROLE = TASKS.parent
A100 = {"pci_devices": [{"is_gpu": True, "device_id": "0x20b0"}], "gpus": []}
V100 = {"pci_devices": [{"is_gpu": True, "device_id": "0x1db4"}], "gpus": []}
DNF = """#!/bin/sh
echo "dnf $*" >> {state}/calls
[ "$*" = "-q repolist --enabled" ] || {{ echo "unexpected dnf $*" >&2; exit 2; }}
echo "repo id   repo name"
echo
cat {state}/repos 2>/dev/null || true
"""
RHSM = """#!/bin/sh
echo "subscription-manager $*" >> {state}/calls
[ "$1" = repos ] || exit 2
shift
for a in "$@"; do echo "${{a#--enable=}}   enabled by the stand-in" >> {state}/repos; done
"""
PLAY = """
- name: Signed EL module
  hosts: all
  gather_facts: false
  vars_files: [{defaults}, {vars}]
  tasks:
    - name: The driver role's signed EL module tasks
      ansible.builtin.include_tasks: {tasks}/el_signed.yml
"""


def el_plan(release: str, nvidia: dict, mirror: str = "", **settings: object) -> dict:
    facts = {
        "distribution": "RedHat",
        "distribution_major_version": release.split(".", maxsplit=1)[0],
        "distribution_version": release,
        "kernel": "6.12.0-124.8.1.el10_1.x86_64" if release.startswith("10") else "5.14.0-570.17.1.el9_6.x86_64",
        "architecture": "x86_64",
    }
    return plan(facts, {"source": "cuda", "secure_boot": True, "mirror_url": mirror, **settings}, nvidia)


def run(tmp_path: Path, driver_plan: dict, sb: str = "SecureBoot enabled", **variables: object) -> tuple[int, str]:
    state, bin_dir = tmp_path / "state", tmp_path / "bin"
    state.mkdir(exist_ok=True)
    bin_dir.mkdir(exist_ok=True)
    for name, body in (("mokutil", MOKUTIL), ("dnf", DNF), ("subscription-manager", RHSM)):
        (bin_dir / name).write_text(body.format(state=state))
        (bin_dir / name).chmod(0o755)
    inventory = {
        "all": {"hosts": {"el-host": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}
    }
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
    play = PLAY.format(defaults=ROLE / "defaults" / "main.yml", vars=ROLE / "vars" / "main.yml", tasks=TASKS)
    (tmp_path / "play.yml").write_text(play)
    extra = {"driver_mok_dir": str(tmp_path / "mok"), "driver_plan": driver_plan, "__driver_sb": {"stdout": sb}}
    (tmp_path / "extra.yml").write_text(yaml.safe_dump({**extra, **variables}))
    res = run_playbook(
        "-i", tmp_path / "inventory.yml", "-e", f"@{tmp_path / 'extra.yml'}", tmp_path / "play.yml",
        PATH=f"{bin_dir}:/usr/bin:/bin",
    )  # fmt: skip
    return res.returncode, res.stdout + res.stderr


def calls(tmp_path: Path, program: str) -> list[str]:
    path = tmp_path / "state" / "calls"
    return [c for c in (path.read_text().splitlines() if path.exists() else []) if c.split()[0] == program]


def nvidia_mirror(tmp_path: Path) -> tuple[str, bytes]:
    """A file:// mirror with NVIDIA's rhel9 x86_64 directory holding a stand-in of NVIDIA's DER certificate."""
    key = tmp_path / "mirror" / "rhel9" / "x86_64" / "NVIDIA2019-public_key.der"
    key.parent.mkdir(parents=True)
    key.write_bytes(b"\x30\x82stand-in NVIDIA2019 certificate")
    return f"file://{tmp_path / 'mirror'}/", key.read_bytes()


def test_rhel_10_1_enables_red_hats_extensions_repository_once_and_enrols_nothing(tmp_path: Path) -> None:
    p = el_plan("10.1", A100)
    assert p["module_source"] == "redhat"
    rc, out = run(tmp_path, p)
    assert rc == 0, out
    assert calls(tmp_path, "subscription-manager") == [
        "subscription-manager repos --enable=rhel-10-for-x86_64-extensions-rpms"
    ]
    assert calls(tmp_path, "mokutil") == [] and not (tmp_path / "mok").exists()  # Red Hat's key is in the kernel

    rc, out = run(tmp_path, p)  # enabled now: a second run changes nothing
    assert rc == 0 and "changed=0" in out, out
    assert len(calls(tmp_path, "subscription-manager")) == 1 and len(calls(tmp_path, "dnf")) == 2


def test_el_9_precompiled_stages_nvidias_key_until_enrolled(tmp_path: Path) -> None:
    mirror, der = nvidia_mirror(tmp_path)
    p = el_plan("9.6", V100, mirror, branch="580")
    assert p["module_source"] == "precompiled"
    pin = {"driver_el_nvidia_key_sha256": hashlib.sha256(der).hexdigest().upper()}
    rc, out = run(tmp_path, p, driver_mok_password=PASSWORD, **pin)
    assert rc == 0, out
    key = tmp_path / "mok" / "NVIDIA2019-public_key.der"
    assert key.read_bytes() == der  # fetched from the mirror's rhel9/x86_64 directory
    assert "NVIDIA's key" in out and "enrolment pending at next boot (console needed)" in out and PASSWORD not in out
    staged = (tmp_path / "state" / "calls").read_text().splitlines()
    assert [c for c in staged if c.startswith("--import")] == [f"--import {key} --hash-file {tmp_path}/mok/import.hash"]
    assert not (tmp_path / "mok" / "import.hash").exists() and calls(tmp_path, "subscription-manager") == []

    rc, out = run(tmp_path, p, driver_mok_password=PASSWORD, **pin)  # pending: not imported again, still said
    assert rc == 0 and "changed=0" in out and "enrolment pending at next boot" in out, out
    assert len([c for c in (tmp_path / "state" / "calls").read_text().splitlines() if c.startswith("--import")]) == 1

    enrol(tmp_path)
    rc, out = run(tmp_path, p, **pin)  # enrolled: no password needed, nothing pending
    assert rc == 0 and "changed=0" in out and "enrolment pending" not in out, out


def test_nvidias_key_from_a_mirror_needs_a_pinned_checksum_that_matches(tmp_path: Path) -> None:
    mirror, der = nvidia_mirror(tmp_path)
    p = el_plan("9.6", V100, mirror, branch="580")
    rc, out = run(tmp_path, p, driver_mok_password=PASSWORD)
    assert rc != 0 and "driver_el_nvidia_key_sha256 is empty" in out and mirror in out, out
    assert not (tmp_path / "mok" / "NVIDIA2019-public_key.der").exists() and not list(calls(tmp_path, "--import"))
    other = hashlib.sha256(der + b"x").hexdigest()
    rc, out = run(tmp_path, p, driver_mok_password=PASSWORD, driver_el_nvidia_key_sha256=other)
    assert rc != 0 and "checksum" in out.lower(), out
    assert not (tmp_path / "mok" / "NVIDIA2019-public_key.der").exists() and not list(calls(tmp_path, "--import"))


def test_el_9_precompiled_without_a_password_stops_naming_the_fix(tmp_path: Path) -> None:
    mirror, der = nvidia_mirror(tmp_path)
    pin = {"driver_el_nvidia_key_sha256": hashlib.sha256(der).hexdigest()}
    rc, out = run(tmp_path, el_plan("9.6", V100, mirror, branch="580"), **pin)
    assert rc != 0 and "set driver_mok_password" in out and "driver_el_module_source=dkms" in out, out
    assert not list(calls(tmp_path, "--import"))


def test_precompiled_asked_for_without_secure_boot_enrols_no_key(tmp_path: Path) -> None:
    mirror = nvidia_mirror(tmp_path)[0]
    p = el_plan("9.6", V100, mirror, branch="580", secure_boot=False, el_module_source="precompiled")
    rc, out = run(tmp_path, p, sb="SecureBoot disabled")
    assert rc == 0, out
    assert not (tmp_path / "mok").exists() and not (tmp_path / "state" / "calls").exists()
