# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The driver role's EL plan run by a real dnf (4.14, Debian's) against local repositories built here with stand-in
RPMs carrying NVIDIA's names, epoch, versions and dependencies, and a modulemd with NVIDIA's streams (
``open-dkms``, ``<branch>-open``, ``latest-dkms``, ``<branch>-dkms``; NVIDIA/yum-packaging-dkms-nvidia README, Driver
Installation Guide 620 'Kernel Modules'). ``dkms`` lives in a separate "EPEL" repository.

Everything runs in a throwaway container of a simulated node's image (Debian bookworm) with ``dnf``, ``rpm``,
``createrepo-c`` and ``dnf-plugins-core`` installed from Debian's archive, in a ``--installroot``: no fleet.

What it shows, for the commands the plan gives: the stream the old role enabled (``latest-open``) does not exist;
the plan's stream enables and its packages resolve inside it at the branch asked; without EPEL the DKMS module
package does not resolve; NVIDIA's ``*nvidia*<version>*`` versionlock keeps every driver package (libnvidia-ml,
nvidia-kmod-common included) through ``dnf upgrade``, where the same install in a second root with no lock is moved
to the newer version by the same ``dnf upgrade`` (the control: the lock is what holds); RHEL 10's shape (no
streams) stays on its branch by the ``*nvidia*<branch>*`` lock while a newer branch is offered; the plan's removal
list leaves no driver package; RHEL 10.1 under Secure Boot installs Red Hat's ``kmod-nvidia`` from a stand-in of
RHEL's extensions repository with no EPEL and no dkms, and not without that repository (a name-only stand-in: the
real package's dependencies are not known here).

What the stand-ins cannot show: the packages are empty (no DKMS build, no module, no kernel-devel-matched
resolution against a real kernel), they are unsigned (``gpgcheck`` off: NVIDIA's key D42D0685 is not exercised),
the repositories are file:// (no mirror, no subscription-manager, no real CRB), RHEL's own platform module defaults
are absent, and Ansible's dnf and dnf_versionlock modules are not in the loop (the commands are dnf's own, the ones
the role's tasks wrap).
"""

from __future__ import annotations

import json
import shlex
import subprocess

import pytest

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.driver_plan import plan
from tests.sim.images import ensure_images

pytestmark = pytest.mark.integration

BOOKWORM_NOENGINE = ("bookworm", (), False)  # suite, engines, driver packages (tests/sim/images.py)
EPOCH = 3
OLD_580, NEW_580, V595 = "580.95.05", "580.105.08", "595.71.05"
OPEN_SET = [
    "nvidia-driver-cuda",
    "nvidia-driver-cuda-libs",
    "nvidia-persistenced",
    "nvidia-kmod-common",
    "libnvidia-ml",
    "kmod-nvidia-open-dkms",
    "nvidia-open",
    "nvidia-fabricmanager",
    "libnvidia-nscq",
]
PROPRIETARY_SET = [n for n in OPEN_SET if n not in ("kmod-nvidia-open-dkms", "nvidia-open")] + [
    "kmod-nvidia-latest-dkms",
    "cuda-drivers",
]
# NVIDIA's dependency chain, reduced to what decides resolution (=: the same version).
REQUIRES = {
    "nvidia-driver-cuda": ["nvidia-driver-cuda-libs", "nvidia-persistenced", "nvidia-kmod-common", "libnvidia-ml"],
    "kmod-nvidia-open-dkms": ["nvidia-kmod-common"],
    "kmod-nvidia-latest-dkms": ["nvidia-kmod-common"],
    "nvidia-open": ["nvidia-driver-cuda", "kmod-nvidia-open-dkms"],
    "cuda-drivers": ["nvidia-driver-cuda", "kmod-nvidia-latest-dkms"],
    "nvidia-fabricmanager": ["libnvidia-nscq"],
}
EL9 = {
    "distribution": "Rocky",
    "distribution_major_version": "9",
    "kernel": "5.14.0-427.el9.x86_64",
    "architecture": "x86_64",
}
EL10 = {
    "distribution": "Rocky",
    "distribution_major_version": "10",
    "kernel": "6.12.0-55.el10.x86_64",
    "architecture": "x86_64",
}
# RHEL 10.1 under Secure Boot: Red Hat's signed kmod-nvidia from RHEL's extensions repository
# (plugin_utils/driver_plan_el.py, SOURCES["rhel-extensions"]); its stand-in needs no dkms.
RHEL101 = {
    "distribution": "RedHat",
    "distribution_major_version": "10",
    "distribution_version": "10.1",
    "kernel": "6.12.0-124.8.1.el10_1.x86_64",
    "architecture": "x86_64",
}
RHEL_EXTENSIONS = "rhel-10-for-x86_64-extensions-rpms"
NVSWITCH_HOPPER = {
    "pci_devices": [
        {"is_gpu": True, "device_id": "0x2330", "class": "0x030200"},
        {"is_gpu": False, "device_id": "0x22a3", "class": "0x068000"},
    ]
}


def node_image() -> str:
    """The bookworm node image without engines and without Debian's NVIDIA userspace, built here when missing (the
    fleets build it too, but this test must not depend on running after one of them: a fresh CI machine)."""
    return ensure_images([BOOKWORM_NOENGINE])[BOOKWORM_NOENGINE]


def spec(name: str, version: str, requires: list[str]) -> str:
    lines = [
        f"Name: {name}",
        f"Version: {version}",
        "Release: 1.el9",
        f"Epoch: {EPOCH if name != 'dkms' else 0}",
        "Summary: stand-in",
        "License: MIT",
        "BuildArch: noarch",
    ]
    lines += [f"Requires: {r} = {EPOCH}:{version}-1.el9" for r in requires]
    if name.startswith("kmod-nvidia") and name.endswith("-dkms"):
        lines.append("Requires: dkms")
    return "\n".join([*lines, "%description", "stand-in", "%files", ""])


def modulemd(stream: str, sets: list[tuple[list[str], str]]) -> str:
    rpms = [f"      - {n}-{EPOCH}:{v}-1.el9.noarch" for names, v in sets for n in names]
    return "\n".join(
        [
            "---",
            "document: modulemd",
            "version: 2",
            "data:",
            "  name: nvidia-driver",
            f"  stream: {json.dumps(stream)}",
            "  version: 1",
            "  context: 00000000",
            "  arch: noarch",
            "  summary: stand-in",
            "  description: stand-in",
            "  license:",
            "    module: [MIT]",
            "  profiles:",
            "    default:",
            "      rpms: [nvidia-driver-cuda]",
            "  artifacts:",
            "    rpms:",
            *rpms,
            "...",
        ]
    )


def build_script() -> str:
    """Shell that builds the three repositories under /repo: cuda (modular, EL 8/9), cuda10 (no modules), epel."""
    packages = [(n, v) for v in (OLD_580, NEW_580) for n in sorted(set(OPEN_SET) | set(PROPRIETARY_SET))]
    packages += [(n, V595) for n in OPEN_SET]
    out = ["set -e", f"mkdir -p /build/SPECS /repo/cuda /repo/cuda10 /repo/epel /repo/{RHEL_EXTENSIONS}"]
    for name, version in [*packages, ("dkms", "3.1.4"), ("kmod-nvidia", OLD_580)]:
        body = spec(name, version, REQUIRES.get(name, []) if name != "dkms" else [])
        out.append(f"printf '%s' {shlex.quote(body)} > /build/SPECS/{name}-{version}.spec")
        out.append(
            f"rpmbuild -bb --quiet --define '_topdir /build' --define '_rpmdir /build/RPMS' "
            f"/build/SPECS/{name}-{version}.spec >/dev/null"
        )
    out += [
        "cp /build/RPMS/noarch/dkms-*.rpm /repo/epel/",
        f"mv /build/RPMS/noarch/kmod-nvidia-{OLD_580}-*.rpm /repo/{RHEL_EXTENSIONS}/",
        "cp $(ls /build/RPMS/noarch/*.rpm | grep -v /dkms-) /repo/cuda/",
        "cp /repo/cuda/*.rpm /repo/cuda10/",
        f"for r in epel cuda10 cuda {RHEL_EXTENSIONS}; do createrepo_c -q /repo/$r >/dev/null; done",
    ]
    streams = {
        "580-open": [(OPEN_SET, OLD_580), (OPEN_SET, NEW_580)],
        "580-dkms": [(PROPRIETARY_SET, OLD_580), (PROPRIETARY_SET, NEW_580)],
        "595-open": [(OPEN_SET, V595)],
        "open-dkms": [(OPEN_SET, OLD_580), (OPEN_SET, NEW_580), (OPEN_SET, V595)],
        "latest-dkms": [(PROPRIETARY_SET, OLD_580), (PROPRIETARY_SET, NEW_580)],
    }
    docs = "\n".join(modulemd(s, sets) for s, sets in streams.items())
    out.append(f"printf '%s\\n' {shlex.quote(docs)} > /build/modules.yaml")
    out.append("modifyrepo_c --mdtype=modules /build/modules.yaml /repo/cuda/repodata")
    return "\n".join(out)


def dnf(root: str, *repos: str) -> str:
    args = [
        "dnf",
        "-y",
        "-q",
        f"--installroot={root}",
        "--releasever=9",
        "--setopt=reposdir=/dev/null",
        "--setopt=module_platform_id=platform:el9",
        "--setopt=install_weak_deps=False",
        "--nogpgcheck",
        "--setopt=pluginconfpath=/etc/dnf/plugins",
    ]
    args += [f"--repofrompath={r},file:///repo/{r}" for r in repos]
    return " ".join(args)


def step(label: str, command: str) -> str:
    return f"( {command} ) >/tmp/{label}.out 2>&1; echo \"STEP {label} rc=$?\"; sed 's/^/  | /' /tmp/{label}.out"


def installed(root: str, label: str) -> str:
    query = f"rpm --root {root} -qa --qf '%{{NAME}}=%{{VERSION}} '"
    return f"echo \"RPMS {label} $({query} | tr ' ' '\\n' | sort | tr '\\n' ' ')\""


def test_el_plan_runs_under_a_real_dnf_against_nvidia_shaped_repositories():
    image = node_image()
    el9 = plan(EL9, {"source": "cuda", "version": OLD_580}, NVSWITCH_HOPPER)
    el10 = plan(EL10, {"source": "cuda", "branch": "580"}, {"gpus": [{"architecture": "Ampere"}]})
    assert el9["dnf_module_stream"] == "nvidia-driver:580-open" and el10["dnf_module_stream"] is None
    want9 = el9["packages"] + el9["module_packages"] + el9["fabricmanager"]
    want10 = el10["packages"] + el10["module_packages"]
    ampere = {"gpus": [{"architecture": "Ampere"}]}
    rh = plan(RHEL101, {"source": "cuda", "version": OLD_580, "secure_boot": True}, ampere)
    assert rh["rhsm_repos"] == [RHEL_EXTENSIONS] and rh["el_repos"] is None and rh["headers"] == []
    want_rh = rh["packages"] + rh["module_packages"]
    r9, r10, rc9, r101 = "/root9", "/root10", "/root9c", "/root101"
    lock = "/etc/dnf/plugins/versionlock.list"
    script = [
        "set -u",
        "export DEBIAN_FRONTEND=noninteractive",
        "apt-get update -qq >/dev/null 2>&1",
        "apt-get install -y -qq --no-install-recommends dnf rpm createrepo-c dnf-plugins-core >/dev/null 2>&1"
        " || { echo 'STEP apt rc=1'; exit 0; }",
        "( " + build_script() + " ) || { echo 'STEP build rc=1'; exit 0; }",
        "echo 'STEP build rc=0'",
        "mkdir -p /etc/dnf/plugins && printf '[main]\\nenabled=1\\nlocklist=%s\\n' " + lock + " >"
        " /etc/dnf/plugins/versionlock.conf && : > " + lock,
        # EL 9: the old role's stream, then the plan's
        step("old_stream", f"{dnf(r9, 'cuda', 'epel')} module enable nvidia-driver:latest-open"),
        step("no_stream_install", f"{dnf(r9, 'cuda', 'epel')} install nvidia-driver-cuda"),
        step("stream", f"{dnf(r9, 'cuda', 'epel')} module enable {el9['dnf_module_stream']}"),
        step("without_epel", f"{dnf(r9, 'cuda')} install {' '.join(want9)}"),
        step("install", f"{dnf(r9, 'cuda', 'epel')} install {' '.join(want9)}"),
        installed(r9, "install"),
        # control: the same install in a second root, upgraded with no lock, moves to NEW_580
        step("control_stream", f"{dnf(rc9, 'cuda', 'epel')} module enable {el9['dnf_module_stream']}"),
        step("control_install", f"{dnf(rc9, 'cuda', 'epel')} install {' '.join(want9)}"),
        step("control_upgrade", f"{dnf(rc9, 'cuda', 'epel')} upgrade"),
        installed(rc9, "control"),
        step("lock", f"{dnf(r9, 'cuda', 'epel')} versionlock add {shlex.quote(el9['hold'][0])}"),
        step("upgrade", f"{dnf(r9, 'cuda', 'epel')} upgrade"),
        installed(r9, "upgrade"),
        step("remove", f"{dnf(r9, 'cuda', 'epel')} remove {' '.join(shlex.quote(p) for p in el9['remove'])}"),
        installed(r9, "remove"),
        # RHEL 10's shape: no streams, the branch held by the lock while 595 is offered
        f": > {lock}",
        step("install10", f"{dnf(r10, 'cuda10', 'epel')} install {' '.join(want10)} nvidia-driver-cuda-{OLD_580}"),
        step("lock10", f"{dnf(r10, 'cuda10', 'epel')} versionlock add {shlex.quote(el10['hold'][0])}"),
        step("upgrade10", f"{dnf(r10, 'cuda10', 'epel')} upgrade"),
        installed(r10, "upgrade10"),
        # RHEL 10.1 with Secure Boot: Red Hat's kmod-nvidia resolves from the extensions repository, without EPEL
        step("rh_without_extensions", f"{dnf(r101, 'cuda10')} install {' '.join(want_rh)}"),
        step("rh_install", f"{dnf(r101, 'cuda10', RHEL_EXTENSIONS)} install {' '.join(want_rh)}"),
        installed(r101, "rh_install"),
    ]
    res = subprocess.run(
        ["docker", "run", "--rm", "--entrypoint", "bash", image, "-c", "\n".join(script)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    out = res.stdout + res.stderr
    rc = {m.split()[1]: m.split()[2] for m in out.splitlines() if m.startswith("STEP ")}
    rpms = {
        line.split()[1]: dict(p.split("=") for p in line.split()[2:])
        for line in out.splitlines()
        if line.startswith("RPMS ")
    }
    assert rc.get("build") == "rc=0", out[-4000:]
    assert rc["old_stream"] != "rc=0", out  # nvidia-driver:latest-open never existed
    assert rc["no_stream_install"] != "rc=0", out  # modular packages stay hidden until a stream is enabled
    assert rc["stream"] == "rc=0", out
    assert rc["without_epel"] != "rc=0", out  # kmod-nvidia-open-dkms needs dkms, from EPEL
    assert rc["install"] == "rc=0", out
    for name in want9:
        assert rpms["install"][name.rsplit(f"-{OLD_580}", 1)[0]] == OLD_580, rpms["install"]
    # control: without the lock the same upgrade moves every driver package to NEW_580 (so the lock is what holds)
    assert rc["control_install"] == "rc=0" and rc["control_upgrade"] == "rc=0", out
    assert {v for n, v in rpms["control"].items() if n != "dkms"} == {NEW_580}, rpms["control"]
    assert rc["lock"] == "rc=0" and rc["upgrade"] == "rc=0", out
    # NEW_580 is in the stream; the lock keeps every package of the driver at OLD_580
    assert {n: v for n, v in rpms["upgrade"].items() if n != "dkms"} == {
        n: OLD_580 for n in rpms["install"] if n != "dkms"
    }, out
    assert "libnvidia-ml" in rpms["upgrade"] and "nvidia-kmod-common" in rpms["upgrade"]
    assert rc["remove"] == "rc=0", out
    assert not [n for n in rpms["remove"] if "nvidia" in n], rpms["remove"]
    assert rc["install10"] == "rc=0" and rc["lock10"] == "rc=0" and rc["upgrade10"] == "rc=0", out
    assert {rpms["upgrade10"][n] for n in rpms["upgrade10"] if "nvidia" in n} == {OLD_580}, out
    assert rc["rh_without_extensions"] != "rc=0", out  # kmod-nvidia is Red Hat's, not in NVIDIA's repository
    assert rc["rh_install"] == "rc=0", out
    assert rpms["rh_install"]["kmod-nvidia"] == OLD_580 and rpms["rh_install"]["nvidia-driver-cuda"] == OLD_580
    assert "dkms" not in rpms["rh_install"] and not [n for n in rpms["rh_install"] if n.endswith("-dkms")], out
