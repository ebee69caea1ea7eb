# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""/dev/char links of the NVIDIA device nodes: the plan (pure), then real nodes (mknod) under a temporary root."""

import json
import os
import stat

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi.devices import DeviceNode
from ansible_collections.gpufleet.nvidia.plugins.module_utils.hostprog import dev_char as _dev_char

NODES = [
    DeviceNode("/dev/nvidia0", 195, 0),
    DeviceNode("/dev/nvidiactl", 195, 255),
    DeviceNode("/dev/nvidia-uvm", 235, 0),
]


def test_link_target_is_relative_to_dev_char():
    assert _dev_char.link_target("/dev/nvidia0") == "../nvidia0"
    assert _dev_char.link_target("/dev/nvidia-caps/nvidia-cap1") == "../nvidia-caps/nvidia-cap1"


def test_plan_creates_keeps_replaces_and_refuses():
    existing = {"/dev/char/195:255": "../nvidiactl", "/dev/char/235:0": "../sda", "/dev/char/195:0": None}
    assert _dev_char.plan(NODES, existing) == [
        ("conflict", "/dev/char/195:0", "../nvidia0"),
        ("ok", "/dev/char/195:255", "../nvidiactl"),
        ("replace", "/dev/char/235:0", "../nvidia-uvm"),
    ]
    # an absolute link to the node (what some tools write) is as good as ours
    assert _dev_char.plan(NODES[:1], {"/dev/char/195:0": "/dev/nvidia0"})[0][0] == "ok"
    assert [a[0] for a in _dev_char.plan(NODES, {})] == ["create"] * 3


@pytest.fixture
def dev_root(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mknod needs root")
    dev = tmp_path / "dev"
    (dev / "nvidia-caps").mkdir(parents=True)
    for name, major, minor in (
        ("nvidia0", 195, 0),
        ("nvidia1", 195, 1),
        ("nvidiactl", 195, 255),
        ("nvidia-caps/nvidia-cap1", 236, 1),
    ):
        os.mknod(str(dev / name), 0o666 | stat.S_IFCHR, os.makedev(major, minor))
    (dev / "nvidia-not-a-device").write_text("")
    return tmp_path


def test_apply_creates_the_links_then_changes_nothing(dev_root):
    report = _dev_char.apply(str(dev_root))
    assert report["links"] == 4 and not report["conflicts"] and not report["errors"]
    assert sorted(report["created"]) == ["/dev/char/195:0", "/dev/char/195:1", "/dev/char/195:255", "/dev/char/236:1"]
    char = dev_root / "dev" / "char"
    assert os.readlink(str(char / "236:1")) == "../nvidia-caps/nvidia-cap1"
    assert os.path.samefile(str(char / "195:1"), str(dev_root / "dev" / "nvidia1"))  # resolves to the node
    again = _dev_char.apply(str(dev_root))
    assert again["links"] == 4 and again["created"] == [] and again["replaced"] == []
    assert [n for n in os.listdir(str(char)) if "gpufleet" in n] == []  # no temporary link left


def test_apply_replaces_a_wrong_link_and_leaves_a_file_alone(dev_root, capsys):
    char = dev_root / "dev" / "char"
    char.mkdir()
    os.symlink("../sda", str(char / "195:0"))
    (char / "195:1").write_text("admin's")
    code = _dev_char.main(["gpufleet-dev-char-links", "--dev-root", str(dev_root)])
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert code == 1 and report["replaced"] == ["/dev/char/195:0"] and report["conflicts"] == ["/dev/char/195:1"]
    assert "195:1 exists and is not a link" in err
    assert os.readlink(str(char / "195:0")) == "../nvidia0"
    assert (char / "195:1").read_text() == "admin's"


def test_dry_run_writes_nothing(dev_root, capsys):
    assert _dev_char.main(["x", "--dry-run", f"--dev-root={dev_root}"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert len(report["created"]) == 4 and not (dev_root / "dev" / "char").exists()


def test_no_nodes_is_nothing_to_do(tmp_path):
    assert _dev_char.apply(str(tmp_path)) == {"links": 0, "created": [], "replaced": [], "conflicts": [], "errors": []}


def test_unknown_argument(capsys):
    assert _dev_char.main(["gpufleet-dev-char-links", "--all"]) == 2
    assert "unknown argument '--all'" in capsys.readouterr().err
