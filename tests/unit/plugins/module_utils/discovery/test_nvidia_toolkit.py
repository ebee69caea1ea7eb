# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""NVIDIA's container toolkit found on a host (discovery/nvidia_toolkit.py), and the problems of two toolkits on one
host (discovery/problems.py toolkit_problems)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi import spec
from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi.spec import DRIVER_VERSION_ANNOTATION
from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery import nvidia_toolkit as nt
from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery import problems
from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery import toolkit as tk
from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery.discover import discover
from ansible_collections.gpufleet.nvidia.plugins.module_utils.hostprog import install

# As `nvidia-ctk cdi generate` 1.17 writes it (sigs.k8s.io/yaml: list items at their key's column, names last).
NVIDIA_SPEC = """---
cdiVersion: 0.5.0
containerEdits:
  deviceNodes:
  - path: /dev/nvidiactl
  hooks:
  - args:
    - nvidia-cdi-hook
    - update-ldcache
    hookName: createContainer
    path: /usr/bin/nvidia-cdi-hook
devices:
- containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
  name: "0"
- containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
  name: GPU-4f1a9b2c-0000-0000-0000-000000000000
- containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
  name: all
kind: nvidia.com/gpu
"""
DPKG = """Package: docker.io
Status: install ok installed
Version: 26.1.5+dfsg1-9

Package: nvidia-container-toolkit
Status: install ok installed
Version: 1.17.8-1

Package: nvidia-container-toolkit-base
Status: install ok installed
Version: 1.17.8-1

Package: libnvidia-container1
Status: deinstall ok config-files
Version: 1.17.8-1
"""


def write(root: Path, inner: str, text: str = "", mode: int = 0o644) -> None:
    path = root / inner.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


def ours_yaml() -> str:
    document = {
        "cdiVersion": "0.5.0",
        "kind": "nvidia.com/gpu",
        "annotations": {DRIVER_VERSION_ANNOTATION: "535.247.01"},
        "devices": [
            {"name": "0", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}},
            {"name": "all", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}},
        ],
    }
    return spec.render_yaml(document)


def test_spec_summary_reads_nvidia_ctk_yaml_ours_and_json() -> None:
    assert nt.spec_summary(NVIDIA_SPEC, False) == (
        "nvidia.com/gpu",
        ["0", "GPU-4f1a9b2c-0000-0000-0000-000000000000", "all"],
        False,
    )
    assert nt.spec_summary(ours_yaml(), False) == ("nvidia.com/gpu", ["0", "all"], True)
    text = '{"cdiVersion": "0.5.0", "kind": "example.com/x", "devices": [{"name": "a"}, {"name": 1}, 3]}'
    assert nt.spec_summary(text, True) == ("example.com/x", ["a", "1"], False)
    assert nt.spec_summary("{broken", True) == (None, [], False)
    assert nt.spec_summary("[1]", True) == (None, [], False)


def test_packages_and_binary_versions() -> None:
    assert nt.dpkg_packages(DPKG) == {
        "nvidia-container-toolkit": "1.17.8-1",
        "nvidia-container-toolkit-base": "1.17.8-1",
    }
    assert nt.dpkg_packages(None) == {}
    assert nt.binary_version("NVIDIA Container Toolkit CLI version 1.17.8\ncommit: 1b2c3d") == "1.17.8"
    assert nt.binary_version("cli-version: 1.18.0\nlib-version: 1.18.0") == "1.18.0"
    assert nt.binary_version("") is None


def test_the_specs_of_both_directories_in_load_order(tmp_path: Path) -> None:
    write(tmp_path, "/var/run/cdi/nvidia.yaml", NVIDIA_SPEC)
    write(tmp_path, "/etc/cdi/nvidia.yaml", ours_yaml())
    write(tmp_path, "/etc/cdi/nvidia.yaml.gpufleet-disabled", NVIDIA_SPEC)  # not loaded by the engines
    write(tmp_path, "/etc/cdi/other.json", '{"kind": "vendor.com/fpga", "devices": [{"name": "0"}]}')
    specs = nt.cdi_specs(str(tmp_path))
    assert [(s["path"], s["priority"], s["kind"], s["ours"]) for s in specs] == [
        ("/etc/cdi/nvidia.yaml", 0, "nvidia.com/gpu", True),
        ("/etc/cdi/other.json", 0, "vendor.com/fpga", False),
        ("/var/run/cdi/nvidia.yaml", 1, "nvidia.com/gpu", False),
    ]


def test_conflicts_same_directory_drops_across_directories_shadows() -> None:
    def one(path: str, priority: int, *names: str, kind: str = "nvidia.com/gpu") -> dict:
        return {"path": path, "priority": priority, "kind": kind, "devices": list(names), "ours": False}

    specs = [one("/etc/cdi/a.yaml", 0, "0", "all"), one("/etc/cdi/b.json", 0, "0", "1")]
    assert nt.spec_conflicts(specs) == [
        {"devices": ["nvidia.com/gpu=0"], "paths": ["/etc/cdi/a.yaml", "/etc/cdi/b.json"], "dropped": True}
    ]
    specs = [one("/etc/cdi/a.yaml", 0, "0", "all"), one("/var/run/cdi/nvidia.yaml", 1, "0", "all")]
    assert nt.spec_conflicts(specs) == [
        {
            "devices": ["nvidia.com/gpu=0", "nvidia.com/gpu=all"],
            "paths": ["/etc/cdi/a.yaml", "/var/run/cdi/nvidia.yaml"],
            "dropped": False,
        }
    ]
    assert nt.spec_conflicts([one("/etc/cdi/a.yaml", 0, "0"), one("/etc/cdi/b.yaml", 0, "0", kind="x.com/y")]) == []
    assert nt.spec_conflicts([one("/etc/cdi/a.yaml", 0, "0"), {**one("/etc/cdi/b.yaml", 0, "0"), "kind": None}]) == []


def test_units_found_enabled_and_masked(tmp_path: Path) -> None:
    assert nt.units(str(tmp_path)) == {}
    write(tmp_path, "/usr/lib/systemd/system/nvidia-cdi-refresh.service", "[Service]\n")
    write(tmp_path, "/usr/lib/systemd/system/nvidia-cdi-refresh.path", "[Path]\n")
    wants = tmp_path / "etc/systemd/system/multi-user.target.wants"
    wants.mkdir(parents=True)
    os.symlink("/usr/lib/systemd/system/nvidia-cdi-refresh.path", wants / "nvidia-cdi-refresh.path")
    os.symlink("/dev/null", tmp_path / "etc/systemd/system/nvidia-cdi-refresh.service")
    assert nt.units(str(tmp_path)) == {
        "nvidia-cdi-refresh.service": {
            "path": "/usr/lib/systemd/system/nvidia-cdi-refresh.service",
            "enabled": False,
            "masked": True,
        },
        "nvidia-cdi-refresh.path": {
            "path": "/usr/lib/systemd/system/nvidia-cdi-refresh.path",
            "enabled": True,
            "masked": False,
        },
    }


def test_repositories_are_the_sources_that_name_nvidias_toolkit(tmp_path: Path) -> None:
    """NVIDIA's install guide's list (apt) and repo (dnf) files, a deb822 file, and what is not one."""
    assert nt.repositories(str(tmp_path)) == []
    guide = "deb [signed-by=/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg] "
    guide += "https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH) /\n"
    write(tmp_path, "/etc/apt/sources.list.d/nvidia-container-toolkit.list", guide)
    write(
        tmp_path, "/etc/apt/sources.list.d/mirror.sources", "URIs: https://mirror.example/nvidia-container-toolkit/\n"
    )
    write(tmp_path, "/etc/apt/sources.list.d/debian.sources", "URIs: http://deb.debian.org/debian\n")
    write(tmp_path, "/etc/apt/sources.list.d/nvidia-container-toolkit.list.save", guide)  # not a source apt reads
    write(tmp_path, "/etc/yum.repos.d/nvidia-container-toolkit.repo", "[nvidia-container-toolkit]\n")
    (tmp_path / "etc/yum.repos.d/folder.repo").mkdir()
    assert nt.repositories(str(tmp_path)) == [
        "/etc/apt/sources.list.d/mirror.sources",
        "/etc/apt/sources.list.d/nvidia-container-toolkit.list",
        "/etc/yum.repos.d/nvidia-container-toolkit.repo",
    ]
    assert nt.nvidia_toolkit(str(tmp_path))["repositories"] == nt.repositories(str(tmp_path))


def test_nvidia_toolkit_on_a_tree_and_with_run_command(tmp_path: Path) -> None:
    empty = nt.nvidia_toolkit(str(tmp_path))
    assert empty == {
        "installed": False,
        "packages": {},
        "binaries": {},
        "config_path": None,
        "cdi_specs": [],
        "units": {},
        "repositories": [],
    }
    write(tmp_path, "/var/lib/dpkg/status", DPKG)
    for path in nt.BINARIES:
        write(tmp_path, path, "#!/bin/sh\n", 0o755)
    write(tmp_path, nt.CONFIG, "[nvidia-container-cli]\n")
    found = nt.nvidia_toolkit(str(tmp_path), lambda argv: (0, "version 9.9.9", ""))
    assert found["installed"] and found["packages"]["nvidia-container-toolkit"] == "1.17.8-1"
    # versions only from programs run on "/": a tree's programs are not run
    assert found["binaries"] == {path: {"version": None} for path in nt.BINARIES}
    assert found["config_path"] == nt.CONFIG


def test_binaries_run_on_the_host_root(monkeypatch) -> None:
    calls = []

    def run(argv):
        calls.append(argv)
        return (0, "NVIDIA Container Runtime version 1.18.0\n", "") if argv[1] == "--version" else (1, "", "")

    real_isfile, real_access = os.path.isfile, os.access
    monkeypatch.setattr(nt.os.path, "isfile", lambda p: p == "/usr/bin/nvidia-container-runtime" or real_isfile(p))
    monkeypatch.setattr(nt.os, "access", lambda p, m: p == "/usr/bin/nvidia-container-runtime" or real_access(p, m))
    found = nt.nvidia_toolkit("/", run)
    assert found["binaries"]["/usr/bin/nvidia-container-runtime"] == {"version": "1.18.0"}
    assert ["/usr/bin/nvidia-container-runtime", "--version"] in calls


def _facts(**extra) -> dict:
    return {
        "driver": {"installed_version": None, "loaded_version": None, "loaded": False},
        "pci_gpu_count": 0,
        "gpu_count": 0,
        "gpus": [],
        "device_nodes": [],
        **extra,
    }


def _codes(found: list[dict]) -> list[str]:
    return [p["code"] for p in found]


def test_two_specs_in_one_directory_are_a_conflict_with_the_fix(tmp_path: Path) -> None:
    write(tmp_path, "/etc/cdi/nvidia.yaml", ours_yaml())
    write(tmp_path, "/etc/cdi/nvidia-ctk.yaml", NVIDIA_SPEC)
    facts = _facts(nvidia_toolkit={"cdi_specs": nt.cdi_specs(str(tmp_path))})
    found = problems.toolkit_problems(facts, str(tmp_path))
    assert _codes(found) == ["cdi_spec_conflict"]
    assert "/etc/cdi/nvidia-ctk.yaml and /etc/cdi/nvidia.yaml" in found[0]["message"]
    assert "nvidia.com/gpu=0, nvidia.com/gpu=all" in found[0]["message"]
    assert "gpufleet.nvidia.runtime" in found[0]["fix"] and "mask" not in found[0]["fix"]


def test_nvidias_run_spec_shadows_ours_and_the_fix_masks_its_refresh(tmp_path: Path) -> None:
    write(tmp_path, "/etc/cdi/nvidia.yaml", ours_yaml())
    write(tmp_path, "/var/run/cdi/nvidia.yaml", NVIDIA_SPEC)
    facts = _facts(nvidia_toolkit={"cdi_specs": nt.cdi_specs(str(tmp_path))})
    found = problems.check(facts, str(tmp_path), nouveau_loaded=False, secure_boot=None, nvidia_taint=None)
    assert _codes(found) == ["cdi_spec_shadowed"]
    assert "the engines use /var/run/cdi/nvidia.yaml" in found[0]["message"]
    assert "systemctl mask --now nvidia-cdi-refresh.path nvidia-cdi-refresh.service" in found[0]["fix"]


def test_our_hook_shadowing_nvidias_on_path(tmp_path: Path) -> None:
    for name in ("nvidia-container-runtime-hook", "gpufleet-container-runtime"):
        text = install.launcher(name, "/usr/local/lib", "/usr/bin/python3", "/usr/bin/runc")
        write(tmp_path, f"/usr/local/bin/{name}", text, 0o755)
    assert tk.shadowed(str(tmp_path)) == []
    write(tmp_path, "/usr/bin/nvidia-container-runtime-hook", "\x7fELF", 0o755)
    pairs = tk.shadowed(str(tmp_path))
    assert pairs == [("/usr/local/bin/nvidia-container-runtime-hook", "/usr/bin/nvidia-container-runtime-hook")]
    found = problems.toolkit_problems(_facts(), str(tmp_path), pairs)
    assert _codes(found) == ["nvidia_program_shadowed"]
    assert "remove /usr/local/bin/nvidia-container-runtime-hook" in found[0]["fix"]
    assert tk.shadowed(str(tmp_path), "/usr/bin") == []


def test_an_engine_registering_a_runtime_whose_program_is_gone(tmp_path: Path) -> None:
    write(tmp_path, "/usr/bin/runc", "", 0o755)
    engines = {
        "docker": {
            "config_path": "/etc/docker/daemon.json",
            "default_runtime": "nvidia",
            "runtime_paths": {"nvidia": "/usr/bin/nvidia-container-runtime", "plain": "runc"},
        },
        "containerd": {"config_path": "/etc/containerd/config.toml", "runtime_paths": {"nvidia": "/usr/bin/runc"}},
    }
    found = problems.toolkit_problems(_facts(engines=engines), str(tmp_path))
    assert _codes(found) == ["runtime_program_missing"]
    assert "docker's configuration (/etc/docker/daemon.json) registers runtime 'nvidia'" in found[0]["message"]
    assert "its default runtime" in found[0]["message"]


def test_discover_publishes_nvidia_toolkit_and_its_problems(tmp_path: Path) -> None:
    write(tmp_path, "/var/lib/dpkg/status", DPKG)
    write(tmp_path, "/usr/bin/nvidia-container-runtime", "#!/bin/sh\n", 0o755)
    write(tmp_path, "/etc/cdi/nvidia.yaml", ours_yaml())
    write(tmp_path, "/etc/cdi/nvidia.json", '{"kind": "nvidia.com/gpu", "devices": [{"name": "all"}]}')
    facts = discover(root=str(tmp_path), sources=["sysfs"])
    assert facts["nvidia_toolkit"]["installed"] is True
    assert [s["path"] for s in facts["nvidia_toolkit"]["cdi_specs"]] == ["/etc/cdi/nvidia.json", "/etc/cdi/nvidia.yaml"]
    assert "cdi_spec_conflict" in _codes(facts["problems"])


def test_specs_to_disable_and_their_backup_names(tmp_path: Path) -> None:
    write(tmp_path, "/etc/cdi/nvidia.yaml", ours_yaml())
    write(tmp_path, "/var/run/cdi/nvidia.yaml", NVIDIA_SPEC)
    write(tmp_path, "/etc/cdi/other.json", '{"kind": "vendor.com/fpga", "devices": [{"name": "0"}]}')
    write(tmp_path, "/etc/cdi/mig.json", '{"kind": "nvidia.com/gpu", "devices": [{"name": "0:1"}]}')
    specs = nt.cdi_specs(str(tmp_path))
    moved = nt.specs_to_disable(specs, "/etc/cdi/nvidia.yaml", "nvidia.com/gpu", ["0", "all"])
    assert [s["path"] for s in moved] == ["/var/run/cdi/nvidia.yaml"]
    # NVIDIA's spec where ours goes (nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml): kept as a backup
    write(tmp_path, "/etc/cdi/nvidia.yaml", NVIDIA_SPEC)
    moved = nt.specs_to_disable(nt.cdi_specs(str(tmp_path)), "/etc/cdi/nvidia.yaml", "nvidia.com/gpu", ["0"])
    assert [s["path"] for s in moved] == ["/etc/cdi/nvidia.yaml", "/var/run/cdi/nvidia.yaml"]
    assert nt.disabled_path("/etc/cdi/a.yaml", lambda p: False, "1") == "/etc/cdi/a.yaml.gpufleet-disabled"
    assert (
        nt.disabled_path("/etc/cdi/a.yaml", lambda p: True, "20261123") == "/etc/cdi/a.yaml.20261123.gpufleet-disabled"
    )


# ``RPM_QUERY`` (``rpm -q --qf '%{NAME} %{VERSION}-%{RELEASE}\\n' <NVIDIA's four>``) as rpm 4.18.0 (Debian 12's
# ``rpm`` package) answered it on 2026-11-23, over a database (``rpm --dbpath DB -i --justdb``) of stand-in packages
# built with rpmbuild under NVIDIA's names and versions: ``RPM_LIVE`` below makes such a database again where rpmbuild
# is installed. Exit status: the number of packages not installed.
RPM_THREE_OF_FOUR = (
    1,
    "nvidia-container-toolkit 1.17.8-1\n"
    "nvidia-container-toolkit-base 1.17.8-1\n"
    "package libnvidia-container-tools is not installed\n"
    "libnvidia-container1 1.17.8-1\n",
)
RPM_TWO_MISSING = (
    2,
    "nvidia-container-toolkit 1.17.8-1\n"
    "nvidia-container-toolkit-base 1.17.8-1\n"
    "package libnvidia-container-tools is not installed\n"
    "package libnvidia-container1 is not installed\n",
)
RPM_NONE = (4, "".join(f"package {name} is not installed\n" for name in nt.PACKAGES))
# libnvidia-container1 installed twice (a second version with rpm -i --force; a second architecture lists the same way)
RPM_TWICE = (
    0,
    "nvidia-container-toolkit 1.18.0-1\n"
    "nvidia-container-toolkit-base 1.18.0-1\n"
    "libnvidia-container-tools 1.18.0-1\n"
    "libnvidia-container1 1.17.8-1\n"
    "libnvidia-container1 1.18.0-1\n",
)


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (RPM_THREE_OF_FOUR, {n: "1.17.8-1" for n in nt.PACKAGES if n != "libnvidia-container-tools"}),
        (RPM_TWO_MISSING, {"nvidia-container-toolkit": "1.17.8-1", "nvidia-container-toolkit-base": "1.17.8-1"}),
        (RPM_NONE, {}),
        (RPM_TWICE, dict.fromkeys(nt.PACKAGES, "1.18.0-1")),
        ((255, "error: cannot open Packages database in /var/lib/rpm\n"), {}),
    ],
    ids=["three-of-four", "two-missing", "none", "installed-twice", "no-database"],
)
def test_rpm_packages_from_rpms_own_answers(answer, expected) -> None:
    rc, out = answer
    assert nt.rpm_packages(out, rc) == expected


def test_the_rpm_path_of_the_fact_on_an_rpm_host(monkeypatch) -> None:
    """No dpkg status file, ``/usr/bin/rpm`` there: the fact runs ``RPM_QUERY`` and takes two packages of four
    (exit status 2) as an answer."""
    real_read, real_access = nt.read_text, os.access
    monkeypatch.setattr(nt, "read_text", lambda p, **kw: None if p == "/var/lib/dpkg/status" else real_read(p, **kw))
    monkeypatch.setattr(nt.os, "access", lambda p, m: p == "/usr/bin/rpm" or real_access(p, m))
    calls = []

    def run(argv):
        calls.append(argv)
        return (RPM_TWO_MISSING[0], RPM_TWO_MISSING[1], "") if argv[0] == "/usr/bin/rpm" else (1, "", "")

    found = nt.nvidia_toolkit("/", run)
    assert calls[0] == ["/usr/bin/rpm", "-q", "--qf", "%{NAME} %{VERSION}-%{RELEASE}\\n", *nt.PACKAGES]
    assert found["packages"] == {"nvidia-container-toolkit": "1.17.8-1", "nvidia-container-toolkit-base": "1.17.8-1"}
    assert found["installed"]


RPM_LIVE = shutil.which("rpm") and shutil.which("rpmbuild")


@pytest.mark.skipif(not RPM_LIVE, reason="needs rpm and rpmbuild (Debian's rpm package) to build a database")
def test_rpm_packages_against_a_real_rpm_database(tmp_path: Path) -> None:
    """The captured answers above, made again: stand-in packages in a private database, ``RPM_QUERY`` against it."""
    for name, version in (("nvidia-container-toolkit", "1.17.8"), ("libnvidia-container1", "1.17.8")):
        spec = tmp_path / f"{name}.spec"
        spec.write_text(
            f"Name: {name}\nVersion: {version}\nRelease: 1\nSummary: stand-in\nLicense: Apache-2.0\n"
            "BuildArch: noarch\n%description\nstand-in\n%files\n"
        )
        subprocess.run(
            ["rpmbuild", "--define", f"_topdir {tmp_path / 'top'}", "-bb", str(spec)], check=True, capture_output=True
        )
    db = str(tmp_path / "db")
    subprocess.run(["rpm", "--dbpath", db, "--initdb"], check=True, capture_output=True)
    rpms = [str(p) for p in (tmp_path / "top").rglob("*.rpm")]
    subprocess.run(["rpm", "--dbpath", db, "-i", "--justdb", "--nodeps", *rpms], check=True, capture_output=True)
    query = ["rpm", "--dbpath", db, *nt.RPM_QUERY[1:]]
    proc = subprocess.run(query, check=False, capture_output=True, text=True)
    assert proc.returncode == 2, proc
    assert "package libnvidia-container-tools is not installed" in proc.stdout
    assert nt.rpm_packages(proc.stdout, proc.returncode) == {
        "nvidia-container-toolkit": "1.17.8-1",
        "libnvidia-container1": "1.17.8-1",
    }
