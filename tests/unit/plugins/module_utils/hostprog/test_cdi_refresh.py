# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""gpufleet-cdi-refresh: the decision, and a real refresh over Debian's 535 userspace."""

import json
import os
import stat

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi.generate import spec_node_stamp, spec_stamp
from ansible_collections.gpufleet.nvidia.plugins.module_utils.hostprog import cdi_refresh as _cdi_refresh

GPUS = [{"index": 0, "minor": 0, "uuid": "GPU-11111111-1111-1111-1111-111111111111"}]


@pytest.mark.parametrize(
    ("stamp", "installed", "force", "wanted", "reason"),
    [
        ("535.261.03", "535.261.03", False, False, "matches"),
        ("535.261.03", "550.163.01", False, True, "made for driver 535.261.03, installed is 550.163.01"),
        (None, "535.261.03", False, True, "no spec"),
        ("535.261.03", "535.261.03", True, True, "forced"),
        ("535.261.03", None, True, False, "no NVIDIA driver userspace"),
    ],
)
def test_needs_refresh(stamp, installed, force, wanted, reason):
    got, why = _cdi_refresh.needs_refresh(stamp, installed, force)
    assert got is wanted and reason in why


@pytest.mark.parametrize(
    ("nodes_stamp", "nodes", "wanted", "reason"),
    [
        ("aaaa", "aaaa", False, "matches"),
        ("aaaa", "bbbb", True, "device nodes changed since the spec was made (aaaa -> bbbb)"),
        (None, "bbbb", True, "does not record the device nodes"),
        ("aaaa", None, False, "matches"),  # not compared
    ],
)
def test_needs_refresh_when_the_device_nodes_change(nodes_stamp, nodes, wanted, reason):
    got, why = _cdi_refresh.needs_refresh("535.261.03", "535.261.03", False, nodes_stamp, nodes)
    assert got is wanted and reason in why
    # A driver change is still the first reason given.
    assert "made for driver" in _cdi_refresh.needs_refresh("530.1", "535.261.03", False, nodes_stamp, nodes)[1]


@pytest.fixture
def host(tmp_path, debian_driver_tree):
    root, version = debian_driver_tree
    os.symlink(root, str(tmp_path / "drv"))
    options = {"root": str(tmp_path), "driver_root": "/drv", "dev_root": "/nonexistent", "gpus": GPUS}
    return tmp_path, options, version


def test_refresh_writes_a_missing_spec_then_leaves_it(host):
    tmp, options, version = host
    first = _cdi_refresh.refresh(options)
    assert first["changed"] and first["stamp"] is None and first["installed"] == version
    spec = tmp / "etc" / "cdi" / "nvidia.yaml"
    assert spec_stamp(spec.read_text()) == version
    assert json.loads((tmp / "etc" / "gpufleet" / "cdi-nvidia.json").read_text())["driverVersion"] == version
    assert _cdi_refresh.refresh(options)["changed"] is False


def test_refresh_replaces_a_stale_spec_and_dry_run_does_not(host):
    tmp, options, version = host
    spec = tmp / "etc" / "cdi" / "nvidia.yaml"
    _cdi_refresh.refresh(options)
    good = spec.read_text()
    spec.write_text(good.replace(version, "530.30.02"))
    dry = _cdi_refresh.refresh(options, dry_run=True)
    assert dry["changed"] and dry["stamp"] == "530.30.02" and "530.30.02" in spec.read_text()
    assert _cdi_refresh.refresh(options)["changed"]
    assert spec.read_text() == good  # the same bytes cdi_spec renders for this host


def test_main_reads_the_config_and_reports(host, capsys):
    tmp, options, version = host
    config = tmp / "refresh.json"
    config.write_text(json.dumps(options))
    assert _cdi_refresh.main(["gpufleet-cdi-refresh", "--config", str(config)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report == {**report, "changed": True, "installed": version, "path": "/etc/cdi/nvidia.yaml"}


def test_main_fails_in_one_line(tmp_path, capsys):
    config = tmp_path / "refresh.json"
    config.write_text("[1]")
    assert _cdi_refresh.main(["gpufleet-cdi-refresh", "--config", str(config)]) == 1
    assert capsys.readouterr().err.strip().endswith("not a JSON object")
    assert _cdi_refresh.main(["gpufleet-cdi-refresh", "--bogus"]) == 1


def _mknod(dev, name, major, minor):
    os.makedirs(os.path.dirname(str(dev / name)), exist_ok=True)
    os.mknod(str(dev / name), 0o666 | stat.S_IFCHR, os.makedev(major, minor))


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
def test_refresh_renders_again_when_the_device_nodes_change(host):
    """A spec written before nvidia-uvm was loaded lacks the uvm nodes; once they exist the refresh renders it
    again (same driver), and leaves it alone after; a node that goes away is a change too."""
    tmp, options, version = host
    dev = tmp / "devroot" / "dev"
    _mknod(dev, "nvidia0", 195, 0)
    _mknod(dev, "nvidiactl", 195, 255)
    options = dict(options, dev_root="/devroot")
    spec = tmp / "etc" / "cdi" / "nvidia.yaml"
    first = _cdi_refresh.refresh(options)
    assert first["changed"] and "/dev/nvidia-uvm" not in spec.read_text()
    assert spec_node_stamp(spec.read_text()) == first["nodes"]
    assert _cdi_refresh.refresh(options)["changed"] is False

    _mknod(dev, "nvidia-uvm", 235, 0)
    _mknod(dev, "nvidia-uvm-tools", 235, 1)
    second = _cdi_refresh.refresh(options)
    assert second["changed"] and "device nodes changed" in second["reason"] and second["installed"] == version
    assert 'hostPath: "/devroot/dev/nvidia-uvm"' in spec.read_text()
    assert 'hostPath: "/devroot/dev/nvidia-uvm-tools"' in spec.read_text()
    assert spec_node_stamp(spec.read_text()) == second["nodes"] != first["nodes"]
    assert _cdi_refresh.refresh(options)["changed"] is False

    os.unlink(str(dev / "nvidia-uvm-tools"))
    third = _cdi_refresh.refresh(options, dry_run=True)
    assert third["changed"] and third["nodes_stamp"] == second["nodes"] != third["nodes"]


def test_refresh_renders_a_spec_without_a_node_stamp_once(host):
    tmp, options, _version = host
    spec = tmp / "etc" / "cdi" / "nvidia.yaml"
    _cdi_refresh.refresh(options)
    good = spec.read_text()
    spec.write_text("".join(line for line in good.splitlines(True) if "gpufleet.nvidia/device-nodes" not in line))
    again = _cdi_refresh.refresh(options)
    assert again["changed"] and "does not record the device nodes" in again["reason"]
    assert spec.read_text() == good
