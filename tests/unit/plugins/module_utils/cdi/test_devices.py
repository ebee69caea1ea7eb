# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Device-node rules: majors, minors, /proc parsing and the node scan."""

import os
import stat

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi.devices import (
    DeviceFile,
    DeviceNode,
    char_link,
    control_nodes,
    gpu_minor_of,
    gpu_node,
    node_fingerprint,
    parse_capability_minor,
    parse_device_file_params,
    parse_mig_minors,
    parse_proc_devices,
    scan_device_nodes,
    wanted_device_files,
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


# /proc/driver/nvidia/params (excerpt) with the admin's NVreg_DeviceFileGID=44 NVreg_DeviceFileMode=0660.
PARAMS = """ResmanDebugLevel: 4294967295
ModifyDeviceFiles: 1
DeviceFileUID: 0
DeviceFileGID: 44
DeviceFileMode: 432
InitializeSystemMemoryAllocations: 1
RegistryDwords: ""
"""
# /proc/driver/nvidia/capabilities/mig/config and .../monitor (NVIDIA's MIG user guide, "Device Nodes").
CAP_CONFIG = "DeviceFileMinor: 1\nDeviceFileMode: 256\nDeviceFileModify: 1\n"
CAP_MONITOR = "DeviceFileMinor: 2\nDeviceFileMode: 292\nDeviceFileModify: 1\n"


def test_device_file_params_default_to_nvidia_modprobe_s():
    assert parse_device_file_params(None) == {"uid": 0, "gid": 0, "mode": 0o666, "modify": True}
    assert parse_device_file_params(PARAMS) == {"uid": 0, "gid": 44, "mode": 0o660, "modify": True}
    assert parse_device_file_params("ModifyDeviceFiles: 0\n")["modify"] is False
    assert parse_device_file_params(CAP_CONFIG) == {"uid": 0, "gid": 0, "mode": 0o400, "modify": True}
    assert parse_capability_minor(CAP_MONITOR) == 2 and parse_capability_minor("DeviceFileMode: 1\n") is None


def test_wanted_device_files_follow_the_driver():
    majors = parse_proc_devices(PROC_DEVICES)["character"]
    caps = [(2, parse_device_file_params(CAP_MONITOR)), (1, parse_device_file_params(CAP_CONFIG))]
    files = wanted_device_files([1, 0], majors, True, parse_device_file_params(PARAMS), caps)
    assert files == [
        DeviceFile(DeviceNode("/dev/nvidia0", 195, 0), 0, 44, 0o660),
        DeviceFile(DeviceNode("/dev/nvidia1", 195, 1), 0, 44, 0o660),
        DeviceFile(DeviceNode("/dev/nvidiactl", 195, 255), 0, 44, 0o660),
        DeviceFile(DeviceNode("/dev/nvidia-modeset", 195, 254), 0, 44, 0o660),
        # nvidia-modprobe makes the uvm pair without the driver's params: root, 0666
        DeviceFile(DeviceNode("/dev/nvidia-uvm", 508, 0), 0, 0, 0o666),
        DeviceFile(DeviceNode("/dev/nvidia-uvm-tools", 508, 1), 0, 0, 0o666),
        DeviceFile(DeviceNode("/dev/nvidia-caps/nvidia-cap1", 511, 1), 0, 0, 0o400),
        DeviceFile(DeviceNode("/dev/nvidia-caps/nvidia-cap2", 511, 2), 0, 0, 0o444),
    ]
    # no uvm major (module not loaded), no modeset, no caps major: only the GPU and control nodes
    bare = wanted_device_files([0], {"nvidia": 195}, False, None, caps)
    assert [f.node.path for f in bare] == ["/dev/nvidia0", "/dev/nvidiactl"]


def test_node_fingerprint_is_stable_and_sees_every_change():
    a = [DeviceNode("/dev/nvidia0", 195, 0), DeviceNode("/dev/nvidiactl", 195, 255)]
    assert node_fingerprint(a) == node_fingerprint(list(reversed(a)))
    assert len(node_fingerprint(a)) == 16
    assert node_fingerprint(a) != node_fingerprint([*a, DeviceNode("/dev/nvidia-uvm", 235, 0)])
    assert node_fingerprint(a) != node_fingerprint([a[0], DeviceNode("/dev/nvidiactl", 195, 254)])
    assert node_fingerprint(a) != node_fingerprint(a[:1])
