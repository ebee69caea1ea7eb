# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The shim's edit on a host whose device files are not open to everyone: the nodes get the host's group
and mode from the index, owned by the container's user (an exec'd process, started from the engine's own copy of the
spec, never has the group), and the edits' ``additionalGids`` join ``process.user.additionalGids``."""

from __future__ import annotations

import copy

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi.driver_files import DriverFile
from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi.spec import build_spec
from ansible_collections.gpufleet.nvidia.plugins.module_utils.hostprog.oci_config import RequestError, check_config
from ansible_collections.gpufleet.nvidia.plugins.module_utils.hostprog.oci_edits import apply_edits, inject

NODES = {"/dev/nvidia0": (195, 0), "/dev/nvidiactl": (195, 255), "/dev/nvidia-uvm": (507, 0)}
FILES = [DriverFile("library", "compute", "libcuda.so.1", "/l/libcuda.so.1", "/l/libcuda.so.535.1", "x86_64")]


def fake_stat(path):
    return NODES[path]


def index_for(device_files, version="0.6.0"):
    """The index the cdi_spec module writes for one GPU on a host with these device-file parameters."""
    _spec, index = build_spec(
        [{"index": 0, "minor": 0}],
        FILES,
        ["/dev/nvidiactl", "/dev/nvidia-uvm"],
        "535.1",
        cdi_version=version,
        device_files=device_files,
    )
    return index


def config(user=None):
    doc = {"process": {"env": ["PATH=/usr/bin:/bin", "NVIDIA_VISIBLE_DEVICES=all"]}, "root": {"path": "rootfs"}}
    if user is not None:
        doc["process"]["user"] = user
    return doc


def devices(doc):
    return {d["path"]: (d["fileMode"], d["uid"], d["gid"]) for d in doc["linux"]["devices"]}


@pytest.mark.parametrize("version", ["0.5.0", "0.6.0", "0.7.0"])
def test_group_and_mode_from_the_index_whatever_the_spec_version(version):
    doc = config({"uid": 1000, "gid": 1000})
    assert inject(doc, index_for({"uid": 0, "gid": 44, "mode": 0o660}, version), stat_node=fake_stat)
    assert devices(doc) == {
        "/dev/nvidiactl": (0o660, 1000, 44),
        "/dev/nvidia-uvm": (0o666, 0, 0),  # nvidia-modprobe: always 0666
        "/dev/nvidia0": (0o660, 1000, 44),
    }
    assert doc["process"]["user"] == {"uid": 1000, "gid": 1000, "additionalGids": [44]}


def test_default_device_files_are_0666_root_and_no_group():
    doc = config({"uid": 1000, "gid": 1000})
    inject(doc, index_for(None), stat_node=fake_stat)
    assert set(devices(doc).values()) == {(0o666, 0, 0)}
    assert doc["process"]["user"] == {"uid": 1000, "gid": 1000}


def test_groups_the_engine_set_are_kept_and_nothing_is_doubled():
    doc = config({"uid": 1000, "gid": 1000, "additionalGids": [1000, 44, 27]})
    index = index_for({"uid": 0, "gid": 44, "mode": 0o660})
    inject(doc, index, stat_node=fake_stat)
    assert doc["process"]["user"]["additionalGids"] == [1000, 44, 27]
    once = copy.deepcopy(doc)
    inject(doc, index, stat_node=fake_stat)  # twice, or after a CDI-aware engine applied the spec: no change
    assert doc == once


def test_a_config_without_a_user_gets_root_with_the_group():
    """No user in config.json (runc's default is root): the index's owner, root."""
    doc = config()
    inject(doc, index_for({"uid": 0, "gid": 44, "mode": 0o660}), stat_node=fake_stat)
    assert doc["process"]["user"] == {"uid": 0, "gid": 0, "additionalGids": [44]}
    assert devices(doc)["/dev/nvidiactl"] == (0o660, 0, 44)


def test_malformed_owner_or_groups_in_edits_fall_back_to_the_old_node():
    doc = config({"uid": 5, "gid": 5})
    edits = [
        {
            "deviceNodes": [{"path": "/dev/nvidiactl", "fileMode": "0660", "uid": 0, "gid": 44}],
            "additionalGids": [0, -1, True, "44", 1 << 32],
        }
    ]
    apply_edits(doc, edits, (), stat_node=fake_stat)
    assert devices(doc) == {"/dev/nvidiactl": (0o666, 0, 0)}
    assert "additionalGids" not in doc["process"]["user"]


def test_a_mistyped_additional_gids_is_one_line():
    with pytest.raises(RequestError, match=r"process\.user\.additionalGids holds an element that is not an integer"):
        check_config({"process": {"user": {"uid": 0, "gid": 0, "additionalGids": ["44"]}}})
    with pytest.raises(RequestError, match=r"process\.user is not an object"):
        check_config({"process": {"user": []}})
