# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The CDI spec and the shim's index on a host whose device files are not open to everyone: owner, group
and mode on the GPU nodes and ``additionalGids`` in the spec only at cdiVersion 0.7.0, always in the index, nothing
at all with the driver's defaults."""

from __future__ import annotations

import json
import os

import pytest
import yaml

from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi.driver_files import DriverFile
from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi.spec import build_spec, gather, render, render_yaml

SCHEMA = os.path.join(os.path.dirname(__file__), "fixtures", "cdi-spec.schema.json")
GPUS = [{"index": 0, "minor": 0, "uuid": "GPU-11111111-1111-1111-1111-111111111111"}, {"index": 1, "minor": 3}]
FILES = [DriverFile("library", "compute", "libcuda.so.1", "/l/libcuda.so.1", "/l/libcuda.so.535.1", "x86_64")]
CONTROL = ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"]
HARDENED = {"uid": 0, "gid": 44, "mode": 0o660, "modify": True, "source": "modprobe.d"}
OWNER = {"fileMode": 0o660, "uid": 0, "gid": 44}


def build(version, device_files):
    return build_spec(GPUS, FILES, CONTROL, "535.1", cdi_version=version, device_files=device_files)


def validate(spec):
    jsonschema = pytest.importorskip("jsonschema")
    with open(SCHEMA, encoding="utf-8") as f:
        jsonschema.validate(spec, json.load(f))


def nodes(edits):
    return {n["path"]: n for n in edits.get("deviceNodes") or ()}


@pytest.mark.parametrize("version", ["0.5.0", "0.6.0", "0.7.0"])
def test_default_device_files_change_nothing(version):
    """A host with the driver's defaults (0666) gets the bytes it always had, whatever the version."""
    for files in (None, {"uid": 0, "gid": 0, "mode": 0o666}, {"uid": 0, "gid": 44, "mode": 0o666}):
        spec, index = build(version, files)
        assert (spec, index) == build(version, None)
        assert "additionalGids" not in json.dumps(index) and "fileMode" not in json.dumps(spec)


def test_at_0_7_the_spec_carries_owner_mode_and_group():
    spec, index = build("0.7.0", HARDENED)
    validate(spec)
    assert spec["cdiVersion"] == "0.7.0"
    assert spec["containerEdits"]["additionalGids"] == [44]
    control = nodes(spec["containerEdits"])
    for path in ("/dev/nvidiactl", "/dev/nvidia-modeset"):
        assert {k: control[path][k] for k in OWNER} == OWNER
    for path in ("/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"):  # nvidia-modprobe: always root:root 0666
        assert control[path] == {"path": path}
    for device in spec["devices"]:
        for node in device["containerEdits"]["deviceNodes"]:
            assert {k: node[k] for k in OWNER} == OWNER, device
    assert index["containerEdits"] == spec["containerEdits"]
    assert index["devices"] == {d["name"]: d["containerEdits"] for d in spec["devices"]}
    text = render_yaml(spec)
    assert yaml.safe_load(text) == spec
    assert "additionalGids:\n    - 44\n" in text and "fileMode: 432\n" in text


@pytest.mark.parametrize("version", ["0.5.0", "0.6.0"])
def test_below_0_7_the_spec_is_as_before_and_the_index_carries_them(version):
    """The fallback: an engine on the host reads no 0.7.0; the spec's nodes stay as the engines knew them (the engine
    gives them mode 0666 and the container's user), the shim's index still follows the host."""
    spec, index = build(version, HARDENED)
    assert (spec, render(spec)) == (build(version, None)[0], render(build(version, None)[0]))
    assert "additionalGids" not in json.dumps(spec)
    assert index["containerEdits"]["additionalGids"] == [44]
    assert {k: nodes(index["containerEdits"])["/dev/nvidiactl"][k] for k in OWNER} == OWNER
    assert {k: nodes(index["devices"]["1"])["/dev/nvidia3"][k] for k in OWNER} == OWNER
    assert nodes(index["containerEdits"])["/dev/nvidia-uvm"] == {"path": "/dev/nvidia-uvm"}


def test_mode_without_a_group_carries_the_mode_but_no_group():
    """0600 root:root (no group to give): the nodes follow the host, nobody is added to a group (NVIDIA's rule)."""
    spec, index = build("0.7.0", {"uid": 0, "gid": 0, "mode": 0o600})
    assert "additionalGids" not in spec["containerEdits"] and "additionalGids" not in index["containerEdits"]
    assert nodes(spec["containerEdits"])["/dev/nvidiactl"]["fileMode"] == 0o600


def test_gather_reads_the_device_file_parameters(tmp_path, debian_driver_tree):
    driver, _version = debian_driver_tree
    os.symlink(driver, str(tmp_path / "drv"))
    (tmp_path / "etc" / "modprobe.d").mkdir(parents=True)
    (tmp_path / "etc" / "modprobe.d" / "nvidia-hardening.conf").write_text(
        "options nvidia NVreg_DeviceFileGID=44 NVreg_DeviceFileMode=0660\n"
    )
    _found, kwargs = gather(str(tmp_path), "/drv", "/nonexistent", gpus=GPUS)
    assert kwargs["device_files"] == HARDENED
    spec, _index = build_spec(**dict(kwargs, cdi_version="0.7.0"))
    assert spec["containerEdits"]["additionalGids"] == [44]
