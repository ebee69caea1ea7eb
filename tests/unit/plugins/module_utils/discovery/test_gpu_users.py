# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""gpu_users over fake /proc trees: fd links to NVIDIA devices, cgroup paths of each engine (v1 and v2), shims,
races (a process gone, an fd closed, EACCES), bounds, and the host that is itself a container."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery import gpu_users as gu

ID = "0123456789abcdef" * 4
ID2 = "fedcba9876543210" * 4
UID = "8d4c3f12-0a6b-4c55-9d2e-7f3a1b2c4d5e"


def add_proc(  # noqa: PLR0917 - a fixture builder, read positionally in every test
    root: Path,
    pid: int,
    comm: str = "sleep",
    fds: dict[int, str] | None = None,
    cgroup: str = "0::/user.slice/session-1.scope\n",
    ppid: int = 1,
    cmdline: list[str] | None = None,
) -> Path:
    base = root / "proc" / str(pid)
    (base / "fd").mkdir(parents=True)
    (base / "stat").write_text(f"{pid} ({comm}) S {ppid} {pid} {pid} 0 -1 4194304 0 0 0 0\n")
    (base / "cgroup").write_text(cgroup)
    (base / "cmdline").write_text("\0".join(cmdline or [comm]) + "\0")
    for fd, target in (fds or {}).items():
        os.symlink(target, base / "fd" / str(fd))
    return base


@pytest.fixture
def host(tmp_path: Path) -> Path:
    add_proc(tmp_path, 1, "systemd", {0: "/dev/null", 3: "socket:[123]"}, "0::/init.scope\n", ppid=0)
    return tmp_path


def test_no_users_on_a_quiet_host(host: Path) -> None:
    add_proc(host, 200, "bash", {0: "/dev/pts/0", 1: "/dev/pts/0", 255: "/home/u/.bashrc"})
    result = gu.gpu_users(str(host))
    assert result == {"processes": [], "scanned": 2, "unreadable": 0, "truncated": False}


def test_a_bare_host_process(host: Path) -> None:
    add_proc(host, 300, "python3", {3: "/dev/nvidiactl", 4: "/dev/nvidia0", 5: "/dev/nvidia0", 6: "/dev/nvidia-uvm"})
    [user] = gu.gpu_users(str(host))["processes"]
    assert user == {
        "pid": 300,
        "command": "python3",
        "devices": ["/dev/nvidia-uvm", "/dev/nvidia0", "/dev/nvidiactl"],
        "container": None,
    }


def test_mig_caps_and_modeset_count_other_devices_not(host: Path) -> None:
    add_proc(host, 10, "a", {3: "/dev/nvidia-caps/nvidia-cap21"})
    add_proc(host, 11, "b", {3: "/dev/nvme0n1", 4: "/dev/dri/card0", 5: "/tmp/dev/nvidia0"})
    add_proc(host, 12, "c", {3: "/dev/nvidia0 (deleted)"})
    users = gu.gpu_users(str(host))["processes"]
    assert [(u["pid"], u["devices"]) for u in users] == [(10, ["/dev/nvidia-caps/nvidia-cap21"])]


@pytest.mark.parametrize(
    ("cgroup", "engine", "cid", "pod"),
    [
        # docker, systemd cgroup driver (v2) and cgroupfs (v1 and v2)
        (f"0::/system.slice/docker-{ID}.scope\n", "docker", ID, None),
        (f"12:devices:/docker/{ID}\n11:memory:/docker/{ID}\n1:name=systemd:/docker/{ID}\n", "docker", ID, None),
        (f"0::/docker/{ID}\n", "docker", ID, None),
        # containerd CRI, systemd driver (v2) and cgroupfs (v1)
        (
            "0::/kubepods.slice/kubepods-besteffort.slice/"
            f"kubepods-besteffort-pod{UID.replace('-', '_')}.slice/cri-containerd-{ID}.scope\n",
            "containerd",
            ID,
            UID,
        ),
        (f"4:pids:/kubepods/burstable/pod{UID}/{ID}\n", "kubernetes", ID, UID),
        # CRI-O
        (
            f"0::/kubepods.slice/kubepods-pod{UID.replace('-', '_')}.slice/crio-{ID}.scope\n",
            "crio",
            ID,
            UID,
        ),
        (f"7:cpu,cpuacct:/kubepods/pod{UID}/crio-{ID}\n", "crio", ID, UID),
        # podman: rootful systemd, rootless, cgroupfs, split (the process in a child cgroup)
        (f"0::/machine.slice/libpod-{ID}.scope\n", "podman", ID, None),
        (
            f"0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}.scope\n",
            "podman",
            ID,
            None,
        ),
        (f"0::/libpod_parent/libpod-{ID}\n", "podman", ID, None),
        (f"0::/machine.slice/libpod-{ID}.scope/container\n", "podman", ID, None),
        # docker in docker: the innermost engine
        (f"0::/system.slice/docker-{ID2}.scope/docker/{ID}\n", "docker", ID, None),
    ],
)
def test_container_of_each_engine(host: Path, cgroup: str, engine: str, cid: str, pod: str | None) -> None:
    add_proc(host, 400, "sleep", {3: "/dev/nvidia0"}, cgroup)
    [user] = gu.gpu_users(str(host))["processes"]
    assert user["container"] == {"engine": engine, "id": cid, "pod_uid": pod, "namespace": None}


def test_crio_conmon_is_no_container() -> None:
    assert gu.container_of(gu.parse_cgroup(f"0::/system.slice/crio-conmon-{ID}.scope\n")) is None


def test_a_ctr_container_is_found_by_its_shim(host: Path) -> None:
    shim = ["/usr/bin/containerd-shim-runc-v2", "-namespace", "default", "-id", "gpu1", "-address", "/run/c.sock"]
    add_proc(host, 500, "containerd-shim", cmdline=shim)
    add_proc(host, 501, "sh", ppid=500, cgroup="0::/default/gpu1\n")
    add_proc(host, 502, "sleep", {3: "/dev/nvidia0"}, "0::/default/gpu1\n", ppid=501)
    [user] = gu.gpu_users(str(host))["processes"]
    assert user["container"] == {"engine": "containerd", "id": "gpu1", "pod_uid": None, "namespace": "default"}


def test_a_kubepods_cgroupfs_container_takes_its_engine_from_the_shim(host: Path) -> None:
    shim = ["/usr/bin/containerd-shim-runc-v2", "-namespace", "k8s.io", "-id", ID2]
    add_proc(host, 600, "containerd-shim", cmdline=shim)
    add_proc(host, 601, "python", {3: "/dev/nvidia1"}, f"4:pids:/kubepods/besteffort/pod{UID}/{ID}\n", ppid=600)
    [user] = gu.gpu_users(str(host))["processes"]
    assert user["container"] == {"engine": "containerd", "id": ID, "pod_uid": UID, "namespace": "k8s.io"}


def test_the_host_being_a_container_is_not_a_container_of_its_processes(tmp_path: Path) -> None:
    outer = f"/system.slice/docker-{ID2}.scope"
    add_proc(tmp_path, 1, "systemd", cgroup=f"0::{outer}/init.scope\n", ppid=0)
    add_proc(tmp_path, 20, "bare", {3: "/dev/nvidia0"}, f"0::{outer}/system.slice/ssh.service\n")
    add_proc(tmp_path, 21, "inner", {3: "/dev/nvidia0"}, f"0::{outer}/system.slice/docker-{ID}.scope\n")
    users = gu.gpu_users(str(tmp_path))["processes"]
    assert [(u["pid"], u["container"] and u["container"]["id"]) for u in users] == [(20, None), (21, ID)]


def test_a_command_with_parentheses_and_spaces(host: Path) -> None:
    add_proc(host, 700, "x) (y z", {3: "/dev/nvidia0"})
    assert gu.gpu_users(str(host))["processes"][0]["command"] == "x) (y z"


def test_vanished_and_unreadable_processes_are_skipped(host: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    add_proc(host, 800, "gone", {3: "/dev/nvidia0"})
    add_proc(host, 801, "secret", {3: "/dev/nvidia0"})
    add_proc(host, 802, "closing", {3: "/dev/nvidia0", 4: "/dev/nvidiactl"})
    add_proc(host, 803, "ok", {3: "/dev/nvidia0"})
    real_scandir, real_readlink = os.scandir, os.readlink

    def scandir(path: str):
        if f"{os.sep}800{os.sep}" in path:
            raise FileNotFoundError(path)
        if f"{os.sep}801{os.sep}" in path:
            raise PermissionError(13, "Permission denied", path)
        return real_scandir(path)

    def readlink(path: str) -> str:
        if path.endswith(f"{os.sep}802{os.sep}fd{os.sep}3"):
            raise FileNotFoundError(path)  # closed between the listing and the read
        return real_readlink(path)

    monkeypatch.setattr(gu.os, "scandir", scandir)
    monkeypatch.setattr(gu.os, "readlink", readlink)
    result = gu.gpu_users(str(host))
    found = [(u["pid"], u["devices"]) for u in result["processes"]]
    assert found == [(802, ["/dev/nvidiactl"]), (803, ["/dev/nvidia0"])]
    assert result["unreadable"] == 1
    assert result["truncated"] is False


def test_a_process_whose_stat_is_gone_still_counts(host: Path) -> None:
    add_proc(host, 900, "x", {3: "/dev/nvidia0"})
    (host / "proc" / "900" / "stat").unlink()
    (host / "proc" / "900" / "cgroup").unlink()
    assert gu.gpu_users(str(host))["processes"] == [
        {"pid": 900, "command": None, "devices": ["/dev/nvidia0"], "container": None}
    ]


def test_a_linked_fd_dir_is_not_followed(host: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    os.symlink("/dev/nvidia0", elsewhere / "3")
    base = host / "proc" / "1000"
    base.mkdir(parents=True)
    os.symlink(elsewhere, base / "fd")
    assert gu.gpu_users(str(host))["processes"] == []


def test_bounds(host: Path) -> None:
    for pid in range(100, 110):
        add_proc(host, pid, "w", {3: "/dev/nvidia0", 4: "/dev/null"})
    assert len(gu.gpu_users(str(host))["processes"]) == 10
    few_pids = gu.gpu_users(str(host), max_pids=4)
    assert (len(few_pids["processes"]), few_pids["truncated"]) == (3, True)  # pid 1 and 100-102
    few_users = gu.gpu_users(str(host), max_users=2)
    assert (len(few_users["processes"]), few_users["truncated"]) == (2, True)
    few_fds = gu.gpu_users(str(host), max_fds=2 + 2 * 3)  # pid 1's two, then three processes' two
    assert (len(few_fds["processes"]), few_fds["truncated"]) == (3, True)


def test_the_caller_is_left_out_and_no_proc_is_empty(host: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    add_proc(host, 1100, "ansible", {3: "/dev/nvidiactl"})
    assert gu.gpu_users(str(host), exclude_pids=(1100,))["processes"] == []
    empty = tmp_path_factory.mktemp("empty")
    assert gu.gpu_users(str(empty)) == {"processes": [], "scanned": 0, "unreadable": 0, "truncated": False}


def test_this_machine_answers() -> None:
    """The real /proc of the test machine: every process is read or counted as unreadable, nothing raises."""
    result = gu.gpu_users("/", exclude_pids=(os.getpid(),))
    assert result["scanned"] > 0
    assert all(u["devices"] and all(d.startswith("/dev/nvidia") for d in u["devices"]) for u in result["processes"])
