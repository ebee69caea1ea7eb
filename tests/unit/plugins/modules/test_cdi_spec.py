# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""cdi_spec end to end in-process: write, idempotence byte for byte, check mode, diff, absent, mode 0644."""

import json
import os
import stat

import pytest
import yaml

pytestmark = pytest.mark.controller

from ansible.module_utils.testing import patch_module_args  # noqa: E402

from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery import cdi_writer  # noqa: E402
from ansible_collections.gpufleet.nvidia.plugins.modules import cdi_spec  # noqa: E402

GPUS = [{"index": 0, "minor": 0, "uuid": "GPU-11111111-1111-1111-1111-111111111111"}]


def run(args, check=False, diff=False):
    extra = {"_ansible_check_mode": check, "_ansible_diff": diff}
    with patch_module_args({**args, **extra}), pytest.raises(SystemExit) as exit_info:
        cdi_spec.main()
    return exit_info.value.code, run.capsys.readouterr().out


@pytest.fixture
def module_run(capsys, tmp_path, debian_driver_tree):
    run.capsys = capsys
    root, version = debian_driver_tree
    os.symlink(root, str(tmp_path / "drv"))  # the host under root= has its driver at /drv
    base = {
        "root": str(tmp_path),
        "driver_root": "/drv",
        "dev_root": "/nonexistent",
        "gpus": GPUS,
    }

    def call(check=False, diff=False, **args):
        code, out = run({**base, **args}, check=check, diff=diff)
        return code, json.loads(out)

    return call, tmp_path, version


def test_present_writes_then_is_idempotent(module_run):
    call, tmp, version = module_run
    code, result = call()
    assert code == 0 and result["changed"], result
    spec_file = tmp / "etc" / "cdi" / "nvidia.yaml"
    index_file = tmp / "etc" / "gpufleet" / "cdi-nvidia.json"
    first = spec_file.read_bytes()
    assert stat.S_IMODE(os.stat(str(spec_file)).st_mode) == 0o644
    assert stat.S_IMODE(os.stat(str(index_file)).st_mode) == 0o644
    spec = yaml.safe_load(first)
    assert spec["annotations"]["gpufleet.nvidia/driver-version"] == version == result["driver_version"]
    assert result["devices"] == ["0", "GPU-11111111-1111-1111-1111-111111111111", "all"]
    index = json.loads(index_file.read_text())
    assert index["spec"] == "/etc/cdi/nvidia.yaml" and index["driverVersion"] == version
    assert not [n for n in os.listdir(str(spec_file.parent)) if n.startswith(".")]  # no temp file left

    code, result = call()
    assert not result["changed"]
    assert spec_file.read_bytes() == first

    os.chmod(str(spec_file), 0o600)
    assert call()[1]["changed"]
    assert stat.S_IMODE(os.stat(str(spec_file)).st_mode) == 0o644


def test_check_mode_and_diff_write_nothing(module_run):
    call, tmp, _version = module_run
    _code, result = call(check=True, diff=True)
    assert result["changed"]
    assert result["diff"]["before"] == ""
    assert "nvidia.com/gpu" in result["diff"]["after"]
    assert not (tmp / "etc").exists()


def test_diff_shows_a_driver_change(module_run):
    call, _tmp, _version = module_run
    call()
    _code, result = call(diff=True, cuda_version="12.9")
    assert result["changed"]
    assert '"12.2"' in result["diff"]["before"] and '"12.9"' in result["diff"]["after"]


def test_json_format_and_no_index(module_run):
    call, tmp, _version = module_run
    _code, result = call(path="/etc/cdi/nvidia.json", format="json", index_path="")
    assert result["changed"] and result["index_path"] == ""
    spec = json.loads((tmp / "etc" / "cdi" / "nvidia.json").read_text())
    assert spec["kind"] == "nvidia.com/gpu"
    assert not (tmp / "etc" / "gpufleet").exists()


def test_absent_removes_both(module_run):
    call, tmp, _version = module_run
    call()
    _code, result = call(state="absent", check=True)
    assert result["changed"] and (tmp / "etc" / "cdi" / "nvidia.yaml").exists()
    _code, result = call(state="absent", diff=True)
    assert result["changed"] and "nvidia.com/gpu" in result["diff"]["before"]
    assert not (tmp / "etc" / "cdi" / "nvidia.yaml").exists()
    assert not (tmp / "etc" / "gpufleet" / "cdi-nvidia.json").exists()
    assert not call(state="absent")[1]["changed"]


def test_unknown_capability_fails(module_run):
    call, _tmp, _version = module_run
    code, result = call(capabilities=["compute", "gpu"])
    assert code == 1 and result["failed"]
    assert "unknown driver capability 'gpu'" in result["msg"]


def test_no_gpu_fails_with_a_reason(module_run):
    call, _tmp, _version = module_run
    code, result = call(gpus=None)
    assert code == 1 and "no GPU found under /nonexistent/dev" in result["msg"]


def test_cdi_version_auto_follows_the_engines_found(module_run):
    """Debian 12's podman 4.3.1 on the host: cdiVersion 0.5.0 (its CDI library reads no newer); none found: 0.6.0."""
    call, tmp, version = module_run
    code, result = call()
    assert code == 0 and result["cdi_version"] == "0.6.0"
    assert result["cdi_version_reason"] == "auto: every engine found reads it"
    (tmp / "usr" / "bin").mkdir(parents=True)
    podman = tmp / "usr" / "bin" / "podman"
    podman.write_text("#!/bin/sh\n")
    podman.chmod(0o755)
    (tmp / "var" / "lib" / "dpkg").mkdir(parents=True)
    (tmp / "var" / "lib" / "dpkg" / "status").write_text(
        "Package: podman\nStatus: install ok installed\nVersion: 4.3.1+ds1-8+deb12u1\n\n"
    )
    code, result = call()
    assert code == 0 and result["changed"] and result["cdi_version"] == "0.5.0", result
    assert "podman 4.3.1" in result["cdi_version_reason"]
    text = (tmp / "etc" / "cdi" / "nvidia.yaml").read_text()
    spec = yaml.safe_load(text)
    assert spec["cdiVersion"] == "0.5.0" and "annotations" not in spec
    assert f"# gpufleet.nvidia/driver-version: {version}" in text
    assert not call()[1]["changed"]
    code, result = call(cdi_version="0.6.0")
    assert result["changed"] and result["cdi_version_reason"] == "given"
    assert yaml.safe_load((tmp / "etc" / "cdi" / "nvidia.yaml").read_text())["annotations"]


def test_a_full_disk_at_the_index_names_the_index_and_leaves_it_whole(module_run, monkeypatch):
    """ENOSPC raised by write() carries no file name: the message names the file being written (the index here,
    after the spec went through), and the index keeps its old bytes; the next run writes it."""
    call, tmp, _version = module_run
    index_file = tmp / "etc" / "gpufleet" / "cdi-nvidia.json"
    index_file.parent.mkdir(parents=True)
    index_file.write_text("{}\n")
    real = cdi_writer.write_file

    def full_disk(path, text, *args, **kwargs):
        if path == str(index_file):
            raise OSError(28, "No space left on device")
        return real(path, text, *args, **kwargs)

    monkeypatch.setattr(cdi_writer, "write_file", full_disk)
    code, result = call()
    assert code == 1 and result["msg"] == "cannot write /etc/gpufleet/cdi-nvidia.json: No space left on device"
    assert index_file.read_text() == "{}\n"
    monkeypatch.setattr(cdi_writer, "write_file", real)
    assert call()[1]["changed"]
    assert json.loads(index_file.read_text())["spec"] == "/etc/cdi/nvidia.yaml"
    assert not call()[1]["changed"]


NVIDIA_SPEC = """---
cdiVersion: 0.5.0
devices:
- containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
  name: "0"
- containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
  name: all
kind: nvidia.com/gpu
"""


def test_another_spec_for_our_devices_is_moved_aside_once(module_run):
    call, tmp, _version = module_run
    run_dir, etc_dir = tmp / "var" / "run" / "cdi", tmp / "etc" / "cdi"
    run_dir.mkdir(parents=True)
    etc_dir.mkdir(parents=True)
    (run_dir / "nvidia.yaml").write_text(NVIDIA_SPEC)  # NVIDIA's refresh unit's spec
    (etc_dir / "nvidia.yaml").write_text(NVIDIA_SPEC)  # nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml
    (etc_dir / "fpga.json").write_text('{"kind": "vendor.com/fpga", "devices": [{"name": "0"}]}')

    _code, result = call(check=True, diff=True)
    assert result["changed"] and [d["path"] for d in result["disabled"]] == [
        "/etc/cdi/nvidia.yaml",
        "/var/run/cdi/nvidia.yaml",
    ]
    assert (run_dir / "nvidia.yaml").read_text() == NVIDIA_SPEC == (etc_dir / "nvidia.yaml").read_text()  # check mode
    assert [d["after_header"] for d in result["diff"][1:]] == [
        "/etc/cdi/nvidia.yaml.gpufleet-disabled",
        "/var/run/cdi/nvidia.yaml.gpufleet-disabled",
    ]

    _code, result = call(diff=True)
    assert result["changed"] and result["disabled"][1] == {
        "path": "/var/run/cdi/nvidia.yaml",
        "backup": "/var/run/cdi/nvidia.yaml.gpufleet-disabled",
        "devices": ["0", "all"],
    }
    assert sorted(os.listdir(str(run_dir))) == ["nvidia.yaml.gpufleet-disabled"]
    assert (run_dir / "nvidia.yaml.gpufleet-disabled").read_text() == NVIDIA_SPEC
    assert (etc_dir / "nvidia.yaml.gpufleet-disabled").read_text() == NVIDIA_SPEC
    assert "gpufleet.nvidia/driver-version" in (etc_dir / "nvidia.yaml").read_text()
    assert (etc_dir / "fpga.json").exists()  # another kind stays

    _code, result = call(diff=True)
    assert not result["changed"] and result["disabled"] == [] and isinstance(result["diff"], dict)

    (run_dir / "nvidia.yaml").write_text(NVIDIA_SPEC)  # written again: the first backup name is taken
    _code, result = call()
    assert result["disabled"][0]["backup"].startswith("/var/run/cdi/nvidia.yaml.2")
    assert len(os.listdir(str(run_dir))) == 2 and not (run_dir / "nvidia.yaml").exists()


def test_disable_others_false_keeps_them(module_run):
    call, tmp, _version = module_run
    (tmp / "var" / "run" / "cdi").mkdir(parents=True)
    (tmp / "var" / "run" / "cdi" / "nvidia.yaml").write_text(NVIDIA_SPEC)
    _code, result = call(disable_others=False)
    assert result["disabled"] == [] and (tmp / "var" / "run" / "cdi" / "nvidia.yaml").exists()


def test_a_temporary_left_by_a_killed_write_is_removed_by_the_next_run(module_run):
    """A SIGKILL between the write and the rename leaves ``.nvidia.yaml.gpufleet-<pid>-<hex>``: removed by the next
    run (its writer is gone), which then changes nothing; an admin's look-alike stays."""
    import subprocess
    import sys

    call, tmp, _version = module_run
    assert call()[1]["changed"]
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    spec_dir, index_dir = tmp / "etc" / "cdi", tmp / "etc" / "gpufleet"
    leftovers = [
        spec_dir / f".nvidia.yaml.gpufleet-{gone.pid}-0badc0de",
        index_dir / f".cdi-nvidia.json.gpufleet-{gone.pid}-12345678",
    ]
    for path in leftovers:
        path.write_text("half")
    admin = spec_dir / ".nvidia.yaml.gpufleet-old"
    admin.write_text("mine\n")
    code, result = call(check=True)
    assert result["changed"] and all(p.exists() for p in leftovers)
    code, result = call()
    assert code == 0 and result["changed"]
    assert sorted(result["removed_temporary_files"]) == sorted(str(p) for p in leftovers)
    assert not any(p.exists() for p in leftovers) and admin.read_text() == "mine\n"
    assert not call()[1]["changed"]


def _installed(tmp, **packages):
    """Engines under the root as discovery finds them: a binary in /usr/bin and the package in dpkg's status."""
    (tmp / "usr" / "bin").mkdir(parents=True, exist_ok=True)
    (tmp / "var" / "lib" / "dpkg").mkdir(parents=True, exist_ok=True)
    status = ""
    for binary, (package, version) in packages.items():
        path = tmp / "usr" / "bin" / binary
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)
        status += f"Package: {package}\nStatus: install ok installed\nVersion: {version}\n\n"
    (tmp / "var" / "lib" / "dpkg" / "status").write_text(status)


def test_device_files_for_a_group_ask_for_0_7_with_additional_gids(module_run):
    """options nvidia NVreg_DeviceFileGID=44 NVreg_DeviceFileMode=0660: with podman 5.4 the spec is 0.7.0
    with the group; with Debian 12's podman 4.3 it stays 0.5.0 as before and the reason says what is missing."""
    call, tmp, _version = module_run
    (tmp / "etc" / "modprobe.d").mkdir(parents=True)
    (tmp / "etc" / "modprobe.d" / "nvidia.conf").write_text(
        "options nvidia NVreg_DeviceFileGID=44 NVreg_DeviceFileMode=0660\n"
    )
    _installed(tmp, podman=("podman", "5.4.2+ds1-2"))
    code, result = call()
    assert code == 0 and result["cdi_version"] == "0.7.0", result
    assert result["device_files"] == {
        "uid": 0,
        "gid": 44,
        "mode": "0660",
        "source": "modprobe.d",
        "additional_gids": [44],
    }
    assert "mode 0660 for group 44 (modprobe.d)" in result["cdi_version_reason"]
    spec = yaml.safe_load((tmp / "etc" / "cdi" / "nvidia.yaml").read_text())
    assert spec["cdiVersion"] == "0.7.0" and spec["containerEdits"]["additionalGids"] == [44]
    ctl = next(n for n in spec["containerEdits"]["deviceNodes"] if n["path"] == "/dev/nvidiactl")
    assert (ctl["fileMode"], ctl["uid"], ctl["gid"]) == (0o660, 0, 44)
    assert not call()[1]["changed"]

    _installed(tmp, podman=("podman", "4.3.1+ds1-8+deb12u1"))
    code, result = call()
    assert code == 0 and result["changed"] and result["cdi_version"] == "0.5.0", result
    assert "podman 4.3.1 reads cdiVersion 0.5.0 at most" in result["cdi_version_reason"]
    assert "not the host's group and mode" in result["cdi_version_reason"]
    text = (tmp / "etc" / "cdi" / "nvidia.yaml").read_text()
    assert "additionalGids" not in text and "fileMode" not in text
    index = json.loads((tmp / "etc" / "gpufleet" / "cdi-nvidia.json").read_text())
    assert index["containerEdits"]["additionalGids"] == [44]


def test_default_device_files_keep_0_6(module_run):
    call, tmp, _version = module_run
    _installed(tmp, docker=("docker.io", "28.5.2+dfsg4-5"))
    code, result = call()
    assert code == 0 and result["cdi_version"] == "0.6.0"
    assert result["device_files"]["additional_gids"] == [] and result["device_files"]["source"] == "default"
