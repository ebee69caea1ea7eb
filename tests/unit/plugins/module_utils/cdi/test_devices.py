# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Device-node rules: majors, minors, /proc parsing and the node scan."""

import os
import stat

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi.devices import (
    DeviceNode,
    char_link,
    control_nodes,
    gpu_minor_of,
    gpu_node,
    parse_mig_minors,
    parse_proc_devices,
    scan_device_nodes,
)

# /proc/devices of a host with the driver loaded (uvm took 508, caps 511), as the kernel prints it.
PROC_DEVICES = """Character devices:
  1 mem
  4 /dev/vc/0
  4 tty
195 nvidia-frontend
195 nvidia
195 nvidiactl
195 nvidia-modeset
226 drm
508 nvidia-uvm
510 nvidia-nvlink
511 nvidia-caps

Block devices:
  7 loop
  8 sd
259 blkext
"""


def test_parse_proc_devices():
    devices = parse_proc_devices(PROC_DEVICES)
    assert devices["character"]["nvidia-uvm"] == 508
    assert devices["character"]["nvidia-caps"] == 511
    assert devices["character"]["nvidia"] == 195
    assert devices["block"]["sd"] == 8
    assert "sd" not in devices["character"]


def test_control_nodes_follow_the_dynamic_uvm_major():
    nodes = control_nodes(parse_proc_devices(PROC_DEVICES)["character"])
    assert nodes == [
        DeviceNode("/dev/nvidiactl", 195, 255),
        DeviceNode("/dev/nvidia-uvm", 508, 0),
        DeviceNode("/dev/nvidia-uvm-tools", 508, 1),
        DeviceNode("/dev/nvidia-modeset", 195, 254),
    ]


def test_control_nodes_without_uvm_module():
    assert [n.path for n in control_nodes({}, modeset=False)] == ["/dev/nvidiactl"]


def test_gpu_nodes():
    assert gpu_node(3) == DeviceNode("/dev/nvidia3", 195, 3)
    assert gpu_minor_of("/dev/nvidia12") == 12
    assert gpu_minor_of("/dev/nvidiactl") is None
    assert gpu_minor_of("/dev/nvidia-uvm") is None
    assert char_link(gpu_node(1)) == "/dev/char/195:1"


def test_parse_mig_minors():
    text = "config 1\nmonitor 2\ngpu0/gi0/access 3\ngpu0/gi1/ci0/access 21\n"
    minors = parse_mig_minors(text)
    assert minors["gpu0/gi1/ci0/access"] == 21
    assert minors["config"] == 1


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
def test_scan_device_nodes_reads_real_character_devices(tmp_path):
    dev = tmp_path / "dev"
    (dev / "nvidia-caps").mkdir(parents=True)
    for name, major, minor in [
        ("nvidia0", 195, 0),
        ("nvidia10", 195, 10),
        ("nvidia2", 195, 2),
        ("nvidiactl", 195, 255),
        ("nvidia-uvm", 508, 0),
        ("nvidia-caps/nvidia-cap1", 511, 1),
    ]:
        os.mknod(dev / name, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
    (dev / "nvidia-notadevice").write_text("")
    (dev / "null-ish").write_text("")
    nodes = scan_device_nodes(str(dev))
    assert [n.path for n in nodes] == [
        "/dev/nvidia0",
        "/dev/nvidia2",
        "/dev/nvidia10",
        "/dev/nvidia-caps/nvidia-cap1",
        "/dev/nvidia-uvm",
        "/dev/nvidiactl",
    ]
    assert DeviceNode("/dev/nvidia-uvm", 508, 0) in nodes


def test_scan_device_nodes_without_dev(tmp_path):
    assert scan_device_nodes(str(tmp_path / "nope")) == []
