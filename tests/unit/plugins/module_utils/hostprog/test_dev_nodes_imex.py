# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""gpufleet-nvidia-devices on an NVLink domain member: the IMEX channel nodes the imex role's record asks for, with
the major of nvidia-caps-imex-channels, made for real (mknod) under a temporary root."""

import json
import os
import stat

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.hostprog import dev_nodes as _dev_nodes

PROC_DEVICES = "Character devices:\n195 nvidia-frontend\n508 nvidia-uvm\n{imex}\nBlock devices:\n  8 sd\n"


def write(path, text):
    os.makedirs(os.path.dirname(str(path)), exist_ok=True)
    with open(str(path), "w") as f:
        f.write(text)


@pytest.fixture
def tree(tmp_path):
    proc = tmp_path / "proc"
    write(proc / "devices", PROC_DEVICES.format(imex="237 nvidia-caps-imex-channels"))
    write(proc / "modules", "nvidia 1 0 - Live 0x0\n")
    write(proc / "driver/nvidia/params", "ModifyDeviceFiles: 1\nDeviceFileMode: 432\n")
    write(
        tmp_path / "etc/gpufleet/imex.json", json.dumps({"domain": "nvl0", "members": ["10.0.0.1"], "channels": [0, 3]})
    )
    (tmp_path / "dev").mkdir()
    return tmp_path


def test_channel_files_need_the_major():
    assert _dev_nodes.imex_channel_files([0], {"nvidia-uvm": 508}) == []
    files = _dev_nodes.imex_channel_files([2, 0, 0], {"nvidia-caps-imex-channels": 237})
    assert [(f.node.path, f.node.major, f.node.minor, f.mode) for f in files] == [
        ("/dev/nvidia-caps-imex-channels/channel0", 237, 0, 0o666),
        ("/dev/nvidia-caps-imex-channels/channel2", 237, 2, 0o666),
    ]


def test_dry_run_lists_the_channels_of_the_record(tree):
    report = _dev_nodes.apply(str(tree / "proc"), str(tree), dry_run=True)
    assert "/dev/nvidia-caps-imex-channels/channel0" in report["created"]
    assert "/dev/nvidia-caps-imex-channels/channel3" in report["created"]
    assert not (tree / "dev/nvidia-caps-imex-channels").exists()


def test_no_record_no_channels(tree):
    os.unlink(str(tree / "etc/gpufleet/imex.json"))
    report = _dev_nodes.apply(str(tree / "proc"), str(tree), dry_run=True)
    assert not [n for n in report["nodes"] if "imex" in n]


def test_a_broken_record_is_malformed_and_the_rest_made(tree):
    write(tree / "etc/gpufleet/imex.json", "{not json")
    report = _dev_nodes.apply(str(tree / "proc"), str(tree), dry_run=True)
    assert report["malformed"] and "imex.json" in report["malformed"][0]
    assert "/dev/nvidiactl" in report["nodes"]


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
def test_channels_made_with_mode_0666_then_nothing_to_do(tree):
    report = _dev_nodes.apply(str(tree / "proc"), str(tree))
    assert report["errors"] == []
    st = os.lstat(str(tree / "dev/nvidia-caps-imex-channels/channel3"))
    assert stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(237, 3) and stat.S_IMODE(st.st_mode) == 0o666
    assert stat.S_IMODE(os.stat(str(tree / "dev/nvidia-caps-imex-channels")).st_mode) == 0o755
    # /dev/nvidiactl takes the driver's DeviceFileMode (0660), the channels keep 0666
    assert stat.S_IMODE(os.lstat(str(tree / "dev/nvidiactl")).st_mode) == 0o660
    again = _dev_nodes.apply(str(tree / "proc"), str(tree))
    assert again["created"] == again["replaced"] == again["fixed"] == []
