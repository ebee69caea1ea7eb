# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The driver's device-file parameters (NVreg_DeviceFileUID/GID/Mode) from /proc or modprobe.d, and the group a
container's process needs."""

from __future__ import annotations

import os

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi.devices import (
    DEFAULT_FILE_PARAMS,
    additional_gids,
    modprobe_files,
    params_from_modprobe,
    parse_kernel_uint,
    parse_modprobe_options,
    read_device_file_params,
    world_accessible,
)

HARDENED = "options nvidia NVreg_DeviceFileGID=44 NVreg_DeviceFileMode=0660\n"


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0660", 0o660),  # a leading 0 is octal (kstrtouint base 0)
        ("432", 432),
        ("0x1b0", 0o660),
        ("0X1B0", 0o660),
        ("0", 0),
        (" 44 ", 44),
        ("08", None),  # not octal
        ("", None),
        ("-1", None),
        ("1_0", None),  # Python's int() would take it, the kernel does not
        ("0xzz", None),
        ("4294967296", None),  # past uint
    ],
)
def test_kernel_uint(text, value):
    assert parse_kernel_uint(text) == value


def test_modprobe_options_of_the_nvidia_module_only_last_value_wins():
    texts = [
        "# hardening\noptions nvidia NVreg_DeviceFileGID=27 NVreg_DeviceFileMode=0660\n"
        "options nvidia_uvm uvm_perf_prefetch_enable=0\noptions nvidia-drm modeset=1\n",
        "options nvidia \\\n  NVreg_DeviceFileGID=44 # video\nblacklist nouveau\n",
    ]
    assert parse_modprobe_options(texts) == {"NVreg_DeviceFileGID": "44", "NVreg_DeviceFileMode": "0660"}
    assert parse_modprobe_options(texts, "nvidia_drm") == {"modeset": "1"}


def test_params_from_modprobe():
    assert params_from_modprobe([HARDENED]) == {"uid": 0, "gid": 44, "mode": 0o660, "modify": True}
    assert params_from_modprobe(["options nvidia NVreg_DeviceFileMode=432 NVreg_ModifyDeviceFiles=0"]) == {
        **DEFAULT_FILE_PARAMS,
        "mode": 0o660,
        "modify": False,
    }
    # malformed values keep the defaults; a mode keeps its permission bits only
    assert params_from_modprobe(["options nvidia NVreg_DeviceFileGID=video NVreg_DeviceFileMode=0100660"]) == {
        **DEFAULT_FILE_PARAMS,
        "mode": 0o660,
    }
    assert params_from_modprobe([]) == DEFAULT_FILE_PARAMS


def test_modprobe_files_in_modprobe_order_an_earlier_directory_hides_a_name(tmp_path):
    for directory, name, text in (
        ("etc/modprobe.d", "nvidia.conf", HARDENED),
        ("lib/modprobe.d", "nvidia.conf", "options nvidia NVreg_DeviceFileGID=1\n"),
        ("usr/lib/modprobe.d", "50-nvidia.conf", "options nvidia NVreg_DeviceFileMode=0600\n"),
        ("run/modprobe.d", "zz.conf", "options nvidia NVreg_DeviceFileUID=7\n"),
        ("etc/modprobe.d", "notes.txt", "options nvidia NVreg_DeviceFileGID=2\n"),
    ):
        (tmp_path / directory).mkdir(parents=True, exist_ok=True)
        (tmp_path / directory / name).write_text(text)
    files = modprobe_files(str(tmp_path))
    assert files == [
        str(tmp_path / "usr/lib/modprobe.d/50-nvidia.conf"),
        str(tmp_path / "etc/modprobe.d/nvidia.conf"),
        str(tmp_path / "run/modprobe.d/zz.conf"),
    ]
    # 50-nvidia.conf sorts first, so the later nvidia.conf's mode wins
    assert read_device_file_params(str(tmp_path)) == {
        "uid": 7,
        "gid": 44,
        "mode": 0o660,
        "modify": True,
        "source": "modprobe.d",
    }


def test_the_loaded_driver_wins_over_modprobe_d(tmp_path):
    (tmp_path / "etc/modprobe.d").mkdir(parents=True)
    (tmp_path / "etc/modprobe.d/nvidia.conf").write_text(HARDENED)
    (tmp_path / "proc/driver/nvidia").mkdir(parents=True)
    (tmp_path / "proc/driver/nvidia/params").write_text(
        "ResmanDebugLevel: 4294967295\nModifyDeviceFiles: 1\nDeviceFileUID: 0\nDeviceFileGID: 27\nDeviceFileMode: 416\n"
    )
    assert read_device_file_params(str(tmp_path)) == {
        "uid": 0,
        "gid": 27,
        "mode": 0o640,
        "modify": True,
        "source": "/proc/driver/nvidia/params",
    }
    # a stand-in /proc (the simulated node's GPUFLEET_NVIDIA_PROC)
    other = tmp_path / "standin"
    (other / "driver/nvidia").mkdir(parents=True)
    (other / "driver/nvidia/params").write_text("DeviceFileGID: 5\nDeviceFileMode: 432\n")
    assert read_device_file_params(str(tmp_path), str(other))["gid"] == 5


def test_nothing_anywhere_is_the_default(tmp_path):
    assert read_device_file_params(str(tmp_path)) == dict(DEFAULT_FILE_PARAMS, source="default")


@pytest.mark.parametrize(
    ("params", "gids"),
    [
        # NVIDIA's getAdditionalGIDs (internal/edits/device.go): no GID or GID 0 -> none; world read-write -> none
        ({"gid": 44, "mode": 0o660}, [44]),
        ({"gid": 44, "mode": 0o664}, [44]),  # readable, not writable by others
        ({"gid": 44, "mode": 0o662}, [44]),
        ({"gid": 44, "mode": 0o666}, []),
        ({"gid": 44, "mode": 0o777}, []),
        ({"gid": 0, "mode": 0o660}, []),
        ({"uid": 1000, "gid": 0, "mode": 0o600}, []),
        (None, []),
    ],
)
def test_additional_gids_follow_nvidias_rule(params, gids):
    assert additional_gids(params) == gids


def test_world_accessible():
    assert world_accessible(0o666) and world_accessible(0o606)
    assert not world_accessible(0o660) and not world_accessible(0o664) and not world_accessible(0o662)


def test_a_fifo_at_params_or_in_modprobe_d_is_skipped_never_read(tmp_path):
    """A FIFO (no writer) at the params file or among modprobe.d's files would block a plain open: both are passed
    over through the bounded reader, and the regular files still decide."""
    (tmp_path / "etc/modprobe.d").mkdir(parents=True)
    (tmp_path / "proc/driver/nvidia").mkdir(parents=True)
    os.mkfifo(str(tmp_path / "proc/driver/nvidia/params"))
    os.mkfifo(str(tmp_path / "etc/modprobe.d/a-fifo.conf"))
    (tmp_path / "etc/modprobe.d/nvidia.conf").write_text(HARDENED)
    params = read_device_file_params(str(tmp_path))
    assert (params["gid"], params["mode"], params["source"]) == (44, 0o660, "modprobe.d")
