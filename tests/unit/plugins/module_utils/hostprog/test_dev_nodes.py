# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""gpufleet-nvidia-devices: the driver's nodes from a /proc tree as the kernel writes it, made for real (mknod)
under a temporary dev root."""

import json
import os
import stat

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.hostprog import dev_nodes as _dev_nodes

PROC_DEVICES = """Character devices:
  1 mem
195 nvidia-frontend
195 nvidia
195 nvidiactl
508 nvidia-uvm
511 nvidia-caps

Block devices:
  8 sd
"""
INFORMATION = "Model: \t\t NVIDIA A100-SXM4-40GB\nBus Location: \t 0000:{bus}:00.0\nDevice Minor: \t {minor}\n"
MODULES = (
    "nvidia_uvm 1523712 0 - Live 0x0000000000000000 (POE)\n"
    "nvidia_modeset 1314816 0 - Live 0x0000000000000000 (POE)\n"
    "nvidia 56807424 2 nvidia_uvm,nvidia_modeset, Live 0x0000000000000000 (POE)\n"
)


def write(path, text):
    os.makedirs(os.path.dirname(str(path)), exist_ok=True)
    with open(str(path), "w") as f:
        f.write(text)


@pytest.fixture
def proc(tmp_path):
    proc = tmp_path / "proc"
    write(proc / "devices", PROC_DEVICES)
    write(proc / "modules", MODULES)
    write(
        proc / "driver/nvidia/params",
        "ModifyDeviceFiles: 1\nDeviceFileUID: 0\nDeviceFileGID: 0\nDeviceFileMode: 438\n",
    )
    for bus, minor in (("17", 0), ("37", 1)):
        write(proc / f"driver/nvidia/gpus/0000:{bus}:00.0/information", INFORMATION.format(bus=bus, minor=minor))
    caps = proc / "driver/nvidia/capabilities/mig"
    write(caps / "config", "DeviceFileMinor: 1\nDeviceFileMode: 256\nDeviceFileModify: 1\n")
    write(caps / "monitor", "DeviceFileMinor: 2\nDeviceFileMode: 292\nDeviceFileModify: 1\n")
    return proc


def test_loaded_modules_names_like_the_kernel():
    assert _dev_nodes.loaded_modules(MODULES) == {"nvidia", "nvidia_uvm", "nvidia_modeset"}
    assert _dev_nodes.loaded_modules("nvidia-drm 1 0 - Live\n") == {"nvidia_drm"}


def test_wanted_reads_gpus_majors_modules_and_capabilities(proc):
    loaded, modify, files = _dev_nodes.wanted(str(proc))
    assert loaded and modify
    assert [(f.node.path, f.node.major, f.node.minor, f.mode) for f in files] == [
        ("/dev/nvidia0", 195, 0, 0o666),
        ("/dev/nvidia1", 195, 1, 0o666),
        ("/dev/nvidiactl", 195, 255, 0o666),
        ("/dev/nvidia-modeset", 195, 254, 0o666),
        ("/dev/nvidia-uvm", 508, 0, 0o666),
        ("/dev/nvidia-uvm-tools", 508, 1, 0o666),
        ("/dev/nvidia-caps/nvidia-cap1", 511, 1, 0o400),
        ("/dev/nvidia-caps/nvidia-cap2", 511, 2, 0o444),
    ]


def test_nothing_without_the_driver(tmp_path):
    report = _dev_nodes.apply(str(tmp_path / "proc"), str(tmp_path))
    assert report["loaded"] is False and report["nodes"] == [] and "not loaded" in report["reason"]
    assert not (tmp_path / "dev").exists()


def test_modify_device_files_0_leaves_them_alone(proc, tmp_path):
    write(proc / "driver/nvidia/params", "ModifyDeviceFiles: 0\n")
    report = _dev_nodes.apply(str(proc), str(tmp_path))
    assert report["modify"] is False and report["created"] == [] and "ModifyDeviceFiles" in report["reason"]
    assert not (tmp_path / "dev").exists()


def _rdev(path):
    st = os.lstat(str(path))
    assert stat.S_ISCHR(st.st_mode), path
    return os.major(st.st_rdev), os.minor(st.st_rdev), stat.S_IMODE(st.st_mode)


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
def test_apply_creates_replaces_and_fixes_then_changes_nothing(proc, tmp_path):
    dev = tmp_path / "dev"
    dev.mkdir()
    os.mknod(str(dev / "nvidia0"), 0o600 | stat.S_IFCHR, os.makedev(195, 0))  # right node, wrong mode
    os.mknod(str(dev / "nvidia-uvm"), 0o666 | stat.S_IFCHR, os.makedev(235, 0))  # stale major
    os.symlink("/etc/passwd", str(dev / "nvidia1"))  # a link is never followed: replaced
    dry = _dev_nodes.apply(str(proc), str(tmp_path), dry_run=True)
    assert dry["fixed"] == ["/dev/nvidia0"] and dry["replaced"] == ["/dev/nvidia1", "/dev/nvidia-uvm"]
    assert _rdev(dev / "nvidia-uvm")[0] == 235 and not (dev / "nvidia-caps").exists()

    report = _dev_nodes.apply(str(proc), str(tmp_path))
    assert report["errors"] == []
    assert report["fixed"] == ["/dev/nvidia0"]
    assert report["replaced"] == ["/dev/nvidia1", "/dev/nvidia-uvm"]
    assert report["created"] == [
        "/dev/nvidiactl",
        "/dev/nvidia-modeset",
        "/dev/nvidia-uvm-tools",
        "/dev/nvidia-caps/nvidia-cap1",
        "/dev/nvidia-caps/nvidia-cap2",
    ]
    assert _rdev(dev / "nvidia0") == (195, 0, 0o666)
    assert _rdev(dev / "nvidia1") == (195, 1, 0o666)
    assert _rdev(dev / "nvidiactl") == (195, 255, 0o666)
    assert _rdev(dev / "nvidia-modeset") == (195, 254, 0o666)
    assert _rdev(dev / "nvidia-uvm") == (508, 0, 0o666)
    assert _rdev(dev / "nvidia-uvm-tools") == (508, 1, 0o666)
    assert _rdev(dev / "nvidia-caps/nvidia-cap1") == (511, 1, 0o400)
    assert _rdev(dev / "nvidia-caps/nvidia-cap2") == (511, 2, 0o444)
    assert stat.S_IMODE(os.stat(str(dev / "nvidia-caps")).st_mode) == 0o755
    with open("/etc/passwd") as f:
        assert f.read()  # the link's target was not touched

    again = _dev_nodes.apply(str(proc), str(tmp_path))
    assert again["created"] == again["replaced"] == again["fixed"] == again["errors"] == []


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
def test_main_takes_the_proc_root_from_the_environment(proc, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(_dev_nodes.PROC_ENV, str(proc))
    (tmp_path / "dev").mkdir()
    assert _dev_nodes.main([_dev_nodes.NAME, "--dev-root", str(tmp_path)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert "/dev/nvidia-uvm" in report["created"] and report["loaded"]
    assert _rdev(tmp_path / "dev" / "nvidia-uvm")[:2] == (508, 0)
    assert _dev_nodes.main([_dev_nodes.NAME, "--bogus"]) == 2


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
def test_an_error_names_the_node_and_fails(proc, tmp_path, capsys):
    dev = tmp_path / "dev"
    (dev / "nvidia-uvm").mkdir(parents=True)  # a directory where the node goes: not removed
    assert _dev_nodes.main([_dev_nodes.NAME, "--proc", str(proc), "--dev-root", str(tmp_path)]) == 1
    out, err = capsys.readouterr()
    assert json.loads(out)["errors"] == ["/dev/nvidia-uvm: " + json.loads(out)["errors"][0].split(": ", 1)[1]]
    assert "cannot create /dev/nvidia-uvm:" in err
    assert _rdev(dev / "nvidia-uvm-tools")[:2] == (508, 1)  # the others are made all the same


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
@pytest.mark.parametrize(
    "case",
    [
        # (file under proc, its text, what the line names, the node that is not made)
        ("driver/nvidia/gpus/0000:37:00.0/information", "Device Minor: 99999999999\n", "'99999999999'", "nvidia1"),
        ("driver/nvidia/gpus/0000:37:00.0/information", "Device Minor: 254\n", "'254'", "nvidia1"),
        ("driver/nvidia/gpus/0000:37:00.0/information", "Device Minor: -1\n", "'-1'", "nvidia1"),
        ("driver/nvidia/gpus/0000:37:00.0/information", "Device Minor: 1\u00b2\n", "'1\u00b2'", "nvidia1"),
        ("devices", PROC_DEVICES.replace("508 nvidia-uvm", "99999 nvidia-uvm"), "'99999'", "nvidia-uvm"),
        ("driver/nvidia/capabilities/mig/config", "DeviceFileMinor: 4294967296\n", "'4294967296'",
         "nvidia-caps/nvidia-cap1"),
    ],
)  # fmt: skip
def test_a_malformed_driver_value_is_one_line_and_the_rest_is_made(proc, tmp_path, capsys, case):
    path, text, named, missing = case
    write(proc / path, text)
    (tmp_path / "dev").mkdir()
    assert _dev_nodes.main([_dev_nodes.NAME, "--proc", str(proc), "--dev-root", str(tmp_path)]) == 1
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert len(report["malformed"]) == 1 and report["errors"] == []
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"{proc / path}: " in err and named in err
    made = {p[len("/dev/") :] for p in report["created"]}
    assert missing not in made and not os.path.lexists(str(tmp_path / "dev" / missing))
    assert {"nvidia0", "nvidiactl", "nvidia-caps/nvidia-cap2"} <= made  # everything else is made


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
def test_a_malformed_owner_keeps_the_default_and_says_so(proc, tmp_path, capsys):
    write(
        proc / "driver/nvidia/params", "ModifyDeviceFiles: 1\nDeviceFileUID: 99999999999999999999\nDeviceFileGID: 44\n"
    )
    (tmp_path / "dev").mkdir()
    assert _dev_nodes.main([_dev_nodes.NAME, "--proc", str(proc), "--dev-root", str(tmp_path)]) == 1
    _out, err = capsys.readouterr()
    assert "DeviceFileUID '99999999999999999999' is not a number" in err and err.count("\n") == 1
    st = os.lstat(str(tmp_path / "dev" / "nvidia0"))
    assert (st.st_uid, st.st_gid) == (0, 44)  # nvidia-modprobe's default uid, the params' gid


def test_proc_files_that_are_not_regular_are_never_read(proc, tmp_path):
    os.unlink(str(proc / "devices"))
    os.mkfifo(str(proc / "devices"))  # no writer: a blocking read would hang the boot unit
    problems = []
    loaded, _modify, files = _dev_nodes.wanted(str(proc), problems)
    assert loaded and problems == [f"{proc / 'devices'} is a FIFO, not a regular file: not read"]
    assert "/dev/nvidia-uvm" not in [f.node.path for f in files]
