# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""detect_container on fake host roots: each mark a container manager leaves, in the order they are trusted."""

from __future__ import annotations

from pathlib import Path

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery.container import detect_container
from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery.discover import is_gpu_node


def write(root: Path, inner: str, text: str = "") -> None:
    path = root / inner.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_a_plain_host_is_not_a_container(tmp_path: Path) -> None:
    write(tmp_path, "/proc/1/cgroup", "0::/init.scope\n")
    write(tmp_path, "/proc/1/environ", "HOME=/\0TERM=linux\0")
    assert detect_container(str(tmp_path)) is None


def test_an_empty_root_is_not_a_container(tmp_path: Path) -> None:
    assert detect_container(str(tmp_path)) is None


@pytest.mark.parametrize(
    ("inner", "text", "expected"),
    [
        ("/run/systemd/container", "systemd-nspawn\n", "systemd-nspawn"),
        ("/run/host/container-manager", "podman\n", "podman"),
        ("/proc/1/environ", "HOME=/\0container=lxc\0", "lxc"),
        ("/.dockerenv", "", "docker"),
        ("/run/.containerenv", "", "podman"),
        ("/proc/1/cgroup", "12:cpu:/docker/0123abcd\n", "docker"),
        ("/proc/1/cgroup", "4:memory:/lxc/web\n", "lxc"),
        ("/proc/1/cgroup", "3:pids:/kubepods/burstable/pod1/abc\n", "containerd"),
    ],
)
def test_each_mark(tmp_path: Path, inner: str, text: str, expected: str) -> None:
    write(tmp_path, inner, text)
    assert detect_container(str(tmp_path)) == expected


def test_openvz_needs_vz_without_bc(tmp_path: Path) -> None:
    (tmp_path / "proc" / "vz").mkdir(parents=True)
    assert detect_container(str(tmp_path)) == "openvz"
    (tmp_path / "proc" / "bc").mkdir()
    assert detect_container(str(tmp_path)) is None  # the OpenVZ host itself


def test_systemd_answer_wins_over_docker_marks(tmp_path: Path) -> None:
    write(tmp_path, "/.dockerenv")
    write(tmp_path, "/run/systemd/container", "docker\n")
    write(tmp_path, "/proc/1/environ", "container=podman\0")
    assert detect_container(str(tmp_path)) == "docker"


@pytest.mark.parametrize(("count", "expected"), [(0, False), (None, False), ("0", False), (1, True), ("2", True)])
def test_is_gpu_node(count: object, expected: bool) -> None:
    assert is_gpu_node(count) is expected
