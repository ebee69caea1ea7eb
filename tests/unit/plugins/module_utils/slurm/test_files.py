# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""slurm/files.py, the slurm_gres module's work: gres.conf and the node line from slurmd -C, cgroup.conf's one key,
the nodes fragment merged by node name; check mode, diff, a second run, backups of an admin's files."""

from __future__ import annotations

import os

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.base.runner import Failure
from ansible_collections.gpufleet.nvidia.plugins.module_utils.slurm import files

HW = "NodeName=gpu-a CPUs=8 Boards=1 SocketsPerBoard=1 CoresPerSocket=8 ThreadsPerCore=1 RealMemory=32000\nUpTime=1\n"
GPUS = [{"index": 0, "minor": 0, "name": "NVIDIA A100-SXM4-40GB"}, {"index": 1, "minor": 1, "name": "NVIDIA L4"}]


class FakeHost:
    def __init__(self, check=False, diff=True, slurmd="/usr/sbin/slurmd", hw=HW, rc=0):
        self.check_mode, self.diff, self.slurmd, self.hw, self.rc = check, diff, slurmd, hw, rc
        self.calls = []

    def get_bin_path(self, name):
        return self.slurmd if name == "slurmd" else None

    def run_command(self, argv):
        self.calls.append(argv)
        return self.rc, self.hw, "boom" if self.rc else ""

    def warn(self, msg):
        raise AssertionError(msg)


def request(tmp_path, **kw):
    params = {
        "gpus": GPUS,
        "node_name": "",
        "gres_conf": str(tmp_path / "gres.conf"),
        "cgroup_conf": str(tmp_path / "cgroup.conf"),
        "constrain_devices": False,
        "nodes_conf": str(tmp_path / "nodes.conf"),
        "nodes": None,
        "backup": True,
    }
    params.update(kw)
    return files.GresRequest.from_params(params)


def test_gres_conf_and_node_line_then_no_change(tmp_path):
    host = FakeHost()
    out = files.write_gres(request(tmp_path), host)
    assert host.calls == [["/usr/sbin/slurmd", "-C"]]
    assert out.changed and out.files == [str(tmp_path / "gres.conf")]
    assert (tmp_path / "gres.conf").read_text().splitlines()[1:] == [
        "AutoDetect=off",
        "Name=gpu Type=a100-sxm4-40gb File=/dev/nvidia0",
        "Name=gpu Type=l4 File=/dev/nvidia1",
    ]
    assert out.node_line == (
        "NodeName=gpu-a CPUs=8 Boards=1 SocketsPerBoard=1 CoresPerSocket=8 ThreadsPerCore=1 RealMemory=32000 "
        "Gres=gpu:a100-sxm4-40gb:1,gpu:l4:1"
    )
    assert out.diff[0]["before"] == "" and "File=/dev/nvidia1" in out.diff[0]["after"]
    again = files.write_gres(request(tmp_path), FakeHost())
    assert not again.changed and again.files == [] and again.backup_files == []


def test_check_mode_writes_nothing_and_says_what(tmp_path):
    out = files.write_gres(request(tmp_path, constrain_devices=True, nodes=["NodeName=x CPUs=1"]), FakeHost(check=True))
    assert out.changed and len(out.files) == 3
    assert not any(os.path.exists(p) for p in out.files)


def test_node_name_given_replaces_slurmd_s(tmp_path):
    out = files.write_gres(request(tmp_path, node_name="rack7-gpu1", gpus=[]), FakeHost())
    assert out.node_line.startswith("NodeName=rack7-gpu1 CPUs=8 ") and "Gres=" not in out.node_line


def test_admin_gres_conf_backed_up_ours_not(tmp_path):
    (tmp_path / "gres.conf").write_text("AutoDetect=nvml\n")
    out = files.write_gres(request(tmp_path), FakeHost())
    assert len(out.backup_files) == 1
    with open(out.backup_files[0], encoding="utf-8") as f:
        assert f.read() == "AutoDetect=nvml\n"
    out = files.write_gres(request(tmp_path, gpus=GPUS[:1]), FakeHost())
    assert out.changed and out.backup_files == []


def test_cgroup_conf_keeps_the_admins_lines(tmp_path):
    (tmp_path / "cgroup.conf").write_text("# site\nConstrainCores=yes\nconstraindevices=no\nConstrainDevices=no\n")
    out = files.write_gres(request(tmp_path, constrain_devices=True), FakeHost())
    assert (tmp_path / "cgroup.conf").read_text() == "# site\nConstrainCores=yes\nConstrainDevices=yes\n"
    assert len(out.backup_files) == 1
    assert not files.write_gres(request(tmp_path, constrain_devices=True), FakeHost()).changed


def test_nodes_fragment_merges_by_name(tmp_path):
    (tmp_path / "nodes.conf").write_text(files.HEADER + "NodeName=b CPUs=2 Gres=gpu:l4:1\nNodeName=a CPUs=1\n")
    out = files.write_gres(request(tmp_path, gpus=None, nodes=["NodeName=a CPUs=4 Gres=gpu:t4:2"]), FakeHost())
    assert (tmp_path / "nodes.conf").read_text().splitlines()[1:] == [
        "NodeName=a CPUs=4 Gres=gpu:t4:2",
        "NodeName=b CPUs=2 Gres=gpu:l4:1",
    ]
    assert out.files == [str(tmp_path / "nodes.conf")] and out.backup_files == []


def test_no_slurmd_writes_no_gres_but_the_fragment(tmp_path):
    out = files.write_gres(request(tmp_path, nodes=["NodeName=a CPUs=1"]), FakeHost(slurmd=None))
    assert out.slurmd is False and out.node_line is None
    assert out.files == [str(tmp_path / "nodes.conf")]


@pytest.mark.parametrize(
    ("host", "words"),
    [
        (FakeHost(rc=1), "-C failed (rc 1): boom"),
        (FakeHost(hw="slurmd: error: x\n"), "printed no NodeName line"),
    ],
)
def test_failures_name_the_command(tmp_path, host, words):
    with pytest.raises(Failure, match="slurm_gres: .*" + words.replace("(", r"\(").replace(")", r"\)")):
        files.write_gres(request(tmp_path), host)


def test_a_gpu_slurm_cannot_be_told_of_is_refused(tmp_path):
    with pytest.raises(Failure, match=r"GPU 0000:17:00\.0 has no minor number"):
        files.write_gres(request(tmp_path, gpus=[{"pci_bus_id": "0000:17:00.0"}]), FakeHost())
