# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The driver role's apt plan (Ubuntu) run by a real apt 2.6 / dpkg against local repositories built here with
stand-in .debs carrying Canonical's and NVIDIA's names, versions and dependencies (no fleet: one throwaway container
of a simulated node's image per distribution shape, its os-release replaced by Ubuntu's, its Debian sources removed).

Ubuntu 22.04, Canonical's archive (SOURCES["ubuntu"], SOURCES["ubuntu-eol"] of driver_plan.py): the -server
branch 580 (``nvidia-headless-no-dkms-580-server-open``, ``nvidia-utils-580-server``, their libraries at the same
version), the per-kernel precompiled module ``linux-modules-nvidia-580-server-open-<kernel>`` and its flavour
metapackage ``linux-modules-nvidia-580-server-open-generic``; branch 550 as Canonical leaves an ended branch:
transitional packages at a 580 version depending on the 580 ones. An ``ubuntu-drivers`` stand-in does what
``ubuntu-drivers install --gpgpu nvidia:<b>-server`` does per Canonical's Ubuntu Server guide (the headless server
driver and the flavour metapackage of the running kernel's flavour). An "updates" repository, added later, brings a
new kernel's module (and the flavour metapackage pointing to it) and a newer 580 driver.

Ubuntu 24.04, NVIDIA's CUDA repository for branch 595 (SOURCES["guide"], 'Ubuntu 590 and later packages'):
unversioned ``libnvidia-compute``, ``nvidia-utils``, ``nvidia-dkms-open``, ``nvidia-open``, ``cuda-drivers``,
Fabric Manager, at 595 and 610, and ``nvidia-driver-pinning-<b>`` shipping an apt preferences file that pins the
NVIDIA packages to ``<b>.*``; a list file as NVIDIA's ``cuda-keyring`` writes it is already present.

What runs for real: apt's resolution, the plan's install, ``apt-mark hold``, ``apt-get upgrade --with-new-pkgs``
(what ``apt upgrade`` does), purge of the plan's removal list, ``apt-get update`` with two entries for one URL.
Controls: the same upgrade without the holds moves the driver (so the hold assertion can fail); without the
pinning package apt picks the newest branch; the per-kernel module package alone does not follow a kernel update.

What the stand-ins cannot show: the packages are empty (no module is built or loaded, no DKMS, no initramfs, no
kernel is installed: ``linux-image-*`` and ``linux-headers-*`` are empty stand-ins), the repositories are
unsigned file:// ones (``trusted=yes``: NVIDIA's key 3bf863cc and Canonical's archive keys are not exercised),
the contents of NVIDIA's real pinning preferences file are approximated (pin ``<b>.*`` for every package whose name
has ``nvidia`` or ``cuda-drivers``), the real precompiled module's exact-version dependency on the driver's
``nvidia-kernel-common`` is reduced to ``>=``, and Ansible's apt, dpkg_selections and deb822_repository modules are
not in the loop in the first three tests: the commands are apt's own, the ones the role's tasks
(roles/driver/tasks/apt.yml, apt_cuda_repo.yml) wrap; the cuda-keyring detection is apt_cuda_repo.yml's ``find``
pattern applied with grep (the image has no python3-debian for deb822_repository, so apt_cuda_repo.yml does not run).
The last test runs roles/driver/tasks/apt.yml itself through Ansible (community.docker connection) for the Ubuntu
22.04 archive plan: install, holds, a second run with nothing changed, removal.
"""

from __future__ import annotations

import hashlib
import re
import shlex
import subprocess
import uuid
from pathlib import Path

import pytest
import yaml

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.driver_plan import PlanError, plan
from ansible_collections.gpufleet.nvidia.tests.controller.playbook import run_playbook
from tests.sim.images import ensure_images

pytestmark = pytest.mark.integration

BOOKWORM_NOENGINE = ("bookworm", (), False)  # suite, engines, driver packages (tests/sim/images.py)
ARCH = "amd64"
K_OLD, K_NEW = "5.15.0-125-generic", "5.15.0-126-generic"
U_OLD, U_NEW = "580.95.05-0ubuntu0.22.04.1", "580.105.08-0ubuntu0.22.04.1"
C595, C595_NEW, C610 = "595.71.05-1", "595.82.02-1", "610.43.02-1"
A100 = {"gpus": [{"architecture": "Ampere"}]}
HOPPER_NVSWITCH = {
    "pci_devices": [
        {"is_gpu": True, "device_id": "0x2330", "class": "0x030200"},
        {"is_gpu": False, "device_id": "0x22a3", "class": "0x068000"},
    ]
}
CUDA_LIST = "/etc/apt/sources.list.d/cuda-ubuntu2404-x86_64.list"


def node_image() -> str:
    """The bookworm node image without engines and without Debian's NVIDIA userspace, built here when missing (the
    fleets build it too, but this test must not depend on running after one of them: a fresh CI machine)."""
    return ensure_images([BOOKWORM_NOENGINE])[BOOKWORM_NOENGINE]


def deb(out: Path, name: str, version: str, depends: str = "", files: dict[str, str] | None = None) -> None:
    tree = out.parent / "tree" / f"{name}_{version}"
    (tree / "DEBIAN").mkdir(parents=True)
    control = [f"Package: {name}", f"Version: {version}", f"Architecture: {ARCH}", "Maintainer: tests <t@t.invalid>"]
    if depends:
        control.append(f"Depends: {depends}")
    control.append(f"Description: {name} (gpufleet.nvidia test stand-in)")
    (tree / "DEBIAN" / "control").write_text("\n".join(control) + "\n")
    for path, content in (files or {}).items():
        (tree / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        (tree / path.lstrip("/")).write_text(content)
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(tree), str(out / f"{name}_{version}_{ARCH}.deb")],
        check=True,
        capture_output=True,
    )


def index(repo: Path) -> None:
    """A flat repository's Packages (what dpkg-scanpackages writes, from dpkg-deb's fields)."""
    stanzas = []
    for path in sorted(repo.glob("*.deb")):
        fields = subprocess.run(["dpkg-deb", "--field", str(path)], capture_output=True, text=True, check=True).stdout
        data = path.read_bytes()
        stanzas.append(
            f"{fields.rstrip()}\nFilename: ./{path.name}\nSize: {len(data)}\n"
            f"SHA256: {hashlib.sha256(data).hexdigest()}\n"
        )
    (repo / "Packages").write_text("\n".join(stanzas))


def ubuntu_archive(root: Path) -> None:
    """Canonical's shape: /repo/jammy (the release) and /repo/jammy-updates (added later)."""
    for suite, kernel, driver in (("jammy", K_OLD, U_OLD), ("jammy-updates", K_NEW, U_NEW)):
        out = root / suite
        kver = kernel.rsplit("-", 1)[0].replace("-", ".")  # 5.15.0.125: the flavour metapackage's version
        deb(out, f"linux-image-{kernel}", kver)
        deb(out, f"linux-headers-{kernel}", kver)
        deb(out, "linux-image-generic", kver, f"linux-image-{kernel}")
        for o in ("", "-open"):
            deb(
                out,
                f"linux-modules-nvidia-580-server{o}-{kernel}",
                kver,
                f"linux-image-{kernel}, nvidia-kernel-common-580-server (>= 580.95.05)",
            )
            meta = f"linux-modules-nvidia-580-server{o}-generic"
            deb(out, meta, kver, f"linux-modules-nvidia-580-server{o}-{kernel}")
        same = f"(= {driver})"
        deb(out, "nvidia-kernel-common-580-server", driver)
        deb(out, "libnvidia-compute-580-server", driver)
        deb(out, "nvidia-utils-580-server", driver, f"libnvidia-compute-580-server {same}")
        deb(out, "nvidia-dkms-580-server-open", driver, f"nvidia-kernel-common-580-server {same}, dkms")
        for o in ("", "-open"):
            deb(
                out,
                f"nvidia-headless-no-dkms-580-server{o}",
                driver,
                f"nvidia-kernel-common-580-server {same}, libnvidia-compute-580-server {same}",
            )
            # 550 ended: Canonical's transitional packages, at a 580 version, depending on the 580 ones
            deb(out, f"nvidia-headless-no-dkms-550-server{o}", driver, f"nvidia-headless-no-dkms-580-server{o}")
        deb(out, "nvidia-utils-550-server", driver, "nvidia-utils-580-server")
        deb(out, "nvidia-fabricmanager-580", driver, f"libnvidia-nscq-580 {same}")
        deb(out, "libnvidia-nscq-580", driver)
        if suite == "jammy":
            deb(out, "dkms", "2.8.7-2ubuntu2")
        index(out)


def cuda_repo(root: Path) -> None:
    """NVIDIA's CUDA repository shape from 590 (/repo/cuda/ubuntu2404/x86_64, flat) and a later update (-new)."""
    for sub, versions in (("x86_64", (C595, C610)), ("x86_64-new", (C595_NEW,))):
        out = root / "cuda" / "ubuntu2404" / sub
        for v in versions:
            same = f"(= {v})"
            branch = v.split(".", maxsplit=1)[0]
            deb(
                out,
                f"nvidia-driver-pinning-{branch}",
                v,
                files={
                    f"/etc/apt/preferences.d/nvidia-driver-pinning-{branch}": (
                        f"Package: *nvidia* cuda-drivers*\nPin: version {branch}.*\nPin-Priority: 1000\n"
                    )
                },
            )
            deb(out, "libnvidia-compute", v)
            deb(out, "nvidia-utils", v, f"libnvidia-compute {same}")
            deb(out, "nvidia-dkms-open", v, "dkms")
            deb(out, "nvidia-open", v, f"libnvidia-compute {same}, nvidia-utils {same}, nvidia-dkms-open {same}")
            deb(out, "cuda-drivers", v, f"libnvidia-compute {same}, nvidia-utils {same}")
            deb(out, "libnvidia-nscq", v)
            deb(out, "nvidia-fabricmanager", v, f"libnvidia-nscq {same}")
        if sub == "x86_64":
            deb(out, "dkms", "3.0.11-1ubuntu13")
            deb(out, "linux-headers-6.8.0-45-generic", "6.8.0.45")
        index(out)


OS_RELEASE = {
    "22": 'NAME="Ubuntu"\nVERSION_ID="22.04"\nID=ubuntu\nID_LIKE=debian\nVERSION_CODENAME=jammy\n',
    "24": 'NAME="Ubuntu"\nVERSION_ID="24.04"\nID=ubuntu\nID_LIKE=debian\nVERSION_CODENAME=noble\n',
}

# Canonical's Ubuntu Server guide: "sudo ubuntu-drivers install --gpgpu nvidia:<branch>-server" installs the headless
# server driver and the precompiled module's flavour metapackage for the running kernel (open for Turing and newer).
UBUNTU_DRIVERS = r"""#!/bin/sh
# stand-in of ubuntu-drivers (gpufleet.nvidia tests): install --gpgpu nvidia:<branch>-server[-open]
set -e
[ "$1" = install ] && [ "$2" = --gpgpu ] || { echo "stand-in: only 'install --gpgpu nvidia:<b>-server'" >&2; exit 2; }
spec=${3#nvidia:}; branch=${spec%%-*}; open=-open
case "$spec" in *-server) ;; *) echo "stand-in: -server branches only" >&2; exit 2;; esac
kernel=$(cat /etc/gpufleet-uname-r); flavour=${kernel#*-*-}
exec apt-get install -y -q --no-install-recommends nvidia-headless-no-dkms-$branch-server$open \
  nvidia-utils-$branch-server linux-modules-nvidia-$branch-server$open-$flavour
"""


def step(label: str, command: str) -> str:
    return f"( {command} ) >/tmp/{label}.out 2>&1; echo \"STEP {label} rc=$?\"; sed 's/^/  | /' /tmp/{label}.out"


def installed(label: str) -> str:
    query = "dpkg-query -W -f '${db:Status-Abbrev}${Package}=${Version}\\n' | sed -nE 's/^[ih]i +//p'"
    return f"echo \"DEBS {label} $({query} | grep -E '^([^=]*nvidia|cuda|linux-)' | tr '\\n' ' ')\""


def apt_get(*args: str) -> str:
    return "apt-get -y -q --no-install-recommends -o Dpkg::Options::=--force-confnew " + " ".join(args)


def held_upgrade_and_control(hold: list[str], source: str) -> list[str]:
    """Hold ``hold``, add the apt source line ``source`` (newer packages), upgrade; then the control: without the
    holds the same upgrade. Steps ``hold``, ``update2``, ``upgrade`` (and what it left, ``upgrade``), ``unhold``,
    ``upgrade_unheld`` (and ``unheld``)."""
    return [
        step("hold", "apt-mark hold " + " ".join(hold)),
        f"echo {shlex.quote(source)} > /etc/apt/sources.list.d/newer.list",
        step("update2", "apt-get update -q"),
        step("upgrade", apt_get("--with-new-pkgs upgrade")),
        installed("upgrade"),
        step("unhold", "apt-mark unhold " + " ".join(hold)),
        step("upgrade_unheld", apt_get("--with-new-pkgs upgrade")),
        installed("unheld"),
    ]


def names(specs: list[str]) -> list[str]:
    return [s.split("=", 1)[0] for s in specs]


def run(image: str, repo: Path, script: list[str]) -> tuple[str, dict[str, str], dict[str, dict[str, str]]]:
    res = subprocess.run(
        ["docker", "run", "--rm", "-v", f"{repo}:/repo:ro", "--entrypoint", "bash", image, "-c", "\n".join(script)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    out = res.stdout + res.stderr
    rc = {m.split()[1]: m.split()[2] for m in out.splitlines() if m.startswith("STEP ")}
    debs = {
        line.split()[1]: dict(p.split("=", 1) for p in line.split()[2:])
        for line in out.splitlines()
        if line.startswith("DEBS ")
    }
    return out, rc, debs


def prologue(major: str, sources: list[str]) -> list[str]:
    lines = [
        "set -u",
        "export DEBIAN_FRONTEND=noninteractive",
        "rm -f /etc/apt/sources.list /etc/apt/sources.list.d/* /var/lib/apt/lists/*_Packages",
        f"printf '%s' {shlex.quote(OS_RELEASE[major])} > /usr/lib/os-release",
    ]
    for i, line in enumerate(sources):
        lines.append(f"echo {shlex.quote(line)} > /etc/apt/sources.list.d/s{i}.list")
    return lines


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("apt") / "repo"
    ubuntu_archive(root)
    cuda_repo(root)
    return root


def test_ubuntu_2204_archive_plan_under_a_real_apt(repo):
    image = node_image()
    facts = {"distribution": "Ubuntu", "distribution_major_version": "22", "kernel": K_OLD, "architecture": "x86_64"}
    p = plan(facts, {"branch": "580"}, HOPPER_NVSWITCH)
    pinned = plan(facts, {"version": U_OLD.split("-", maxsplit=1)[0]}, A100)
    with pytest.raises(PlanError, match="set driver_branch=580"):
        plan(facts, {"branch": "550"}, A100)
    want = p["packages"] + p["module_packages"] + p["fabricmanager"]
    updates = "deb [trusted=yes] file:/repo/jammy-updates ./"
    script = [
        *prologue("22", ["deb [trusted=yes] file:/repo/jammy ./"]),
        f"echo {K_OLD} > /etc/gpufleet-uname-r",
        f"printf '%s' {shlex.quote(UBUNTU_DRIVERS)} > /usr/local/bin/ubuntu-drivers",
        "chmod 755 /usr/local/bin/ubuntu-drivers",
        step("update", "apt-get update -q"),
        # what 550 resolves to: Canonical's transitional package brings 580; a 550 version does not exist
        step("sim550", apt_get("-s install nvidia-headless-no-dkms-550-server-open")),
        step("pin550", apt_get("-s install 'nvidia-utils-550-server=550.*'")),
        step("pin580", apt_get("-s install", *(shlex.quote(s) for s in pinned["packages"]))),
        # Canonical's route, then removed again
        step("ubuntu_drivers", "ubuntu-drivers install --gpgpu nvidia:580-server"),
        installed("ubuntu_drivers"),
        step("purge_ud", apt_get("purge --autoremove 'nvidia-*' 'libnvidia-*' 'linux-modules-nvidia-*'")),
        installed("purged_ud"),
        # the plan: install, hold, a kernel update with a newer driver in the branch
        step("install", apt_get("install", *want)),
        installed("install"),
        # ... and the control: without the holds the same upgrade moves the driver
        *held_upgrade_and_control(p["hold"], updates),
        step("remove", apt_get("purge --autoremove", *(shlex.quote(r) for r in p["remove"] + p["fabricmanager"]))),
        installed("remove"),
    ]
    out, rc, debs = run(image, repo, script)
    assert rc.get("update") == "rc=0", out[-4000:]
    # 550 names install 580 (so the plan refuses 550 rather than report 550 and install 580)
    assert rc["sim550"] == "rc=0" and "Inst nvidia-headless-no-dkms-580-server-open (580." in out, out
    assert rc["pin550"] != "rc=0", out
    assert rc["pin580"] == "rc=0", out
    assert re.search(r"Inst nvidia-utils-580-server \(580\.95\.05", out), out
    # ubuntu-drivers' set is the plan's (the plan adds the running kernel's module package explicitly)
    assert rc["ubuntu_drivers"] == "rc=0", out
    ud = set(debs["ubuntu_drivers"])
    assert not [n for n in debs["purged_ud"] if "nvidia" in n], debs["purged_ud"]
    assert rc["install"] == "rc=0", out
    mine = set(debs["install"])
    assert ud <= mine and mine - ud == {"nvidia-fabricmanager-580", "libnvidia-nscq-580"}, (ud, mine)
    assert debs["install"]["nvidia-utils-580-server"] == U_OLD
    # held: the driver stays at U_OLD; the flavour metapackage (never held) brings the new kernel's module
    assert rc["hold"] == "rc=0" and rc["upgrade"] == "rc=0", out
    assert debs["upgrade"]["nvidia-utils-580-server"] == U_OLD, debs["upgrade"]
    assert debs["upgrade"]["nvidia-headless-no-dkms-580-server-open"] == U_OLD
    assert debs["upgrade"]["nvidia-fabricmanager-580"] == debs["upgrade"]["libnvidia-nscq-580"] == U_OLD
    assert f"linux-modules-nvidia-580-server-open-{K_NEW}" in debs["upgrade"], debs["upgrade"]
    # control: unheld, the same upgrade moves the driver to U_NEW
    assert rc["upgrade_unheld"] == "rc=0", out
    assert debs["unheld"]["nvidia-utils-580-server"] == U_NEW, debs["unheld"]
    assert rc["remove"] == "rc=0", out
    assert not [n for n in debs["remove"] if "nvidia" in n], debs["remove"]


def test_ubuntu_2204_per_kernel_module_alone_misses_the_next_kernel(repo):
    """Control for item 4: the old role's per-kernel package alone, the same kernel update: no module for it."""
    image = node_image()
    script = [
        *prologue("22", ["deb [trusted=yes] file:/repo/jammy ./"]),
        step("update", "apt-get update -q"),
        step("install", apt_get(f"install linux-image-generic linux-modules-nvidia-580-server-open-{K_OLD}")),
        "echo 'deb [trusted=yes] file:/repo/jammy-updates ./' > /etc/apt/sources.list.d/updates.list",
        step("update2", "apt-get update -q"),
        step("upgrade", apt_get("--with-new-pkgs upgrade")),
        installed("upgrade"),
    ]
    out, rc, debs = run(image, repo, script)
    assert rc.get("upgrade") == "rc=0", out[-4000:]
    assert f"linux-image-{K_NEW}" in debs["upgrade"], debs["upgrade"]  # the new kernel arrives
    assert f"linux-modules-nvidia-580-server-open-{K_NEW}" not in debs["upgrade"], debs["upgrade"]  # its module not


def test_ubuntu_2404_cuda_repository_595_pinning_package_under_a_real_apt(repo):
    image = node_image()
    facts = {
        "distribution": "Ubuntu",
        "distribution_major_version": "24",
        "kernel": "6.8.0-45-generic",
        "architecture": "x86_64",
    }
    p = plan(facts, {"source": "cuda", "branch": "595", "mirror_url": "file:///repo/cuda"}, HOPPER_NVSWITCH)
    url = p["repository"]["url"]
    assert url == "file:///repo/cuda/ubuntu2404/x86_64/" and p["pinning"] == ["nvidia-driver-pinning-595"]
    want = p["packages"] + p["module_packages"] + p["fabricmanager"]
    # cuda-keyring's list file (NVIDIA's shape), and the entry a role would add with its own key: one URL, two keys
    keyring = f"deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg trusted=yes] {url} /"
    second = f"Types: deb\nURIs: {url}\nSuites: /\nSigned-By: /etc/apt/keyrings/cuda-ubuntu2404.asc\nTrusted: yes\n"
    # apt_cuda_repo.yml's find: a list file naming the URL (scheme stripped), other than the role's own
    pattern = re.escape(re.sub(r"^https?://", "", url).rstrip("/"))
    script = [
        *prologue("24", []),
        f"echo {shlex.quote(keyring)} > {CUDA_LIST}",
        "mkdir -p /etc/apt/keyrings /usr/share/keyrings",
        "touch /usr/share/keyrings/cuda-archive-keyring.gpg /etc/apt/keyrings/cuda-ubuntu2404.asc",
        f"printf '%s' {shlex.quote(second)} > /etc/apt/sources.list.d/cuda-ubuntu2404.sources",
        step("two_entries", "apt-get update -q"),
        step("found", f"grep -lE {shlex.quote(pattern)} /etc/apt/sources.list.d/*.list"),
        "rm /etc/apt/sources.list.d/cuda-ubuntu2404.sources",  # the role writes none when it found cuda-keyring's
        step("update", "apt-get update -q"),
        # control: without the pinning package apt takes the newest branch
        step("unpinned", apt_get("-s install nvidia-open")),
        step("pinning", apt_get("install", *p["pinning"])),
        step("install", apt_get("install", *want, *p["headers"])),
        installed("install"),
        *held_upgrade_and_control(p["hold"], f"deb [trusted=yes] {url.rstrip('/')}-new/ /"),
        step(
            "remove",
            apt_get("purge --autoremove", *(shlex.quote(r) for r in p["remove"] + p["pinning"] + p["fabricmanager"])),
        ),
        installed("remove"),
    ]
    out, rc, debs = run(image, repo, script)
    assert rc.get("two_entries") not in (None, "rc=0"), out[-4000:]
    assert "Conflicting values set for option Signed-By" in out, out
    assert rc["found"] == "rc=0" and CUDA_LIST in out, out
    assert rc["update"] == "rc=0", out
    assert rc["unpinned"] == "rc=0" and "Inst nvidia-open (610." in out, out
    assert rc["pinning"] == "rc=0" and rc["install"] == "rc=0", out
    driver = {n: v for n, v in debs["install"].items() if not n.startswith(("nvidia-driver-pinning", "linux-"))}
    assert set(names(want)) <= set(driver) and set(driver.values()) == {C595}, debs["install"]
    assert rc["hold"] == "rc=0" and rc["upgrade"] == "rc=0", out
    assert {debs["upgrade"][n] for n in driver} == {C595}, debs["upgrade"]
    # control: unheld, the upgrade moves inside the pinned branch (595.82), never to 610
    assert rc["upgrade_unheld"] == "rc=0", out
    assert {debs["unheld"][n] for n in driver} == {C595_NEW}, debs["unheld"]
    assert rc["remove"] == "rc=0", out
    assert not [n for n in debs["remove"] if "nvidia" in n or "cuda" in n], debs["remove"]


ROLE_PLAY = """
- hosts: all
  gather_facts: false
  vars_files:
    - "{role}/vars/main.yml"  # the role's inputs converted once, as entering the role loads them
  handlers:
    - name: Driver changed (the role's handlers are not part of this run)
      ansible.builtin.debug:
        msg: driver changed
      listen: gpufleet driver changed
  tasks:
    - name: The driver role's apt task file
      ansible.builtin.include_tasks: "{role}/tasks/apt.yml"
"""


def test_ubuntu_2204_the_roles_apt_task_file_via_ansible(repo, tmp_path):
    """roles/driver/tasks/apt.yml itself (Ansible's apt, dpkg_selections, the GPU-in-use gate through gpu_facts)
    against a container of the node image made Ubuntu 22.04-shaped: install and hold the plan, a second run changes
    nothing, ``driver_state: absent`` removes every driver package."""
    image = node_image()
    facts = {"distribution": "Ubuntu", "distribution_major_version": "22", "kernel": K_OLD, "architecture": "x86_64"}
    p = plan(facts, {"branch": "580"}, HOPPER_NVSWITCH)
    name = f"gf-i23-apt-{uuid.uuid4().hex[:8]}"
    subprocess.run(
        ["docker", "run", "-d", "--name", name, "-v", f"{repo}:/repo:ro", "--entrypoint", "sleep", image, "infinity"],
        check=True,
        capture_output=True,
    )
    try:
        setup = prologue("22", ["deb [trusted=yes] file:/repo/jammy ./"])
        subprocess.run(["docker", "exec", name, "bash", "-c", "\n".join(setup)], check=True, capture_output=True)
        inventory = {
            "all": {
                "hosts": {
                    name: {
                        "ansible_connection": "community.docker.docker",
                        "ansible_python_interpreter": "/usr/bin/python3",
                    }
                },
                "vars": {
                    "driver_plan": p,
                    "driver_hold": True,
                    "driver_drain": False,
                    "driver_drain_ignore": [],
                    "driver_drain_timeout": 60,
                    "driver_drain_delay": 2,
                    "driver_apt_cache_valid_time": 3600,
                },
            }
        }
        (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
        role = Path(__file__).resolve().parents[2] / "roles" / "driver"
        (tmp_path / "play.yml").write_text(ROLE_PLAY.format(role=role))

        def play(state: str) -> str:
            res = run_playbook("-i", tmp_path / "inventory.yml", tmp_path / "play.yml", "-e", f"driver_state={state}")
            out = res.stdout + res.stderr
            assert res.returncode == 0, out[-6000:]
            return out

        def dpkg() -> dict[str, str]:
            query = "dpkg-query -W -f '${db:Status-Abbrev}${Package}\\n' | grep -E '^[ih]i.*nvidia'"
            res = subprocess.run(
                ["docker", "exec", name, "bash", "-c", query], capture_output=True, text=True, check=False
            )
            return {line[3:].strip(): line[:2] for line in res.stdout.splitlines()}

        play("present")
        installed = dpkg()
        assert set(names(p["packages"] + p["module_packages"] + p["fabricmanager"])) <= set(installed), installed
        assert {n for n, s in installed.items() if s == "hi"} == set(p["hold"]), installed
        again = play("present")
        assert re.search(r"changed=0\s", again.split("PLAY RECAP")[1]), again[-3000:]
        play("absent")
        assert dpkg() == {}, dpkg()
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)
