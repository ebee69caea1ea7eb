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


def test_a_linked_dev_char_is_refused_and_nothing_is_written(dev_root, tmp_path, capsys):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(str(elsewhere), str(dev_root / "dev" / "char"))
    code = _dev_char.main(["gpufleet-dev-char-links", "--dev-root", str(dev_root)])
    out, err = capsys.readouterr()
    assert code == 1 and os.listdir(str(elsewhere)) == []  # nothing written through the link
    assert json.loads(out)["links"] == 0 and err.count("\n") == 1
    assert f"{dev_root / 'dev' / 'char'} is a symbolic link" in err and "refusing it" in err
    assert os.readlink(str(dev_root / "dev" / "char")) == str(elsewhere)  # left as it is
    assert _dev_char.apply(str(dev_root), dry_run=True)["errors"]  # the dry run says so too


def test_a_dev_char_that_is_a_file_is_refused(dev_root):
    (dev_root / "dev" / "char").write_text("not a folder")
    report = _dev_char.apply(str(dev_root))
    assert report["links"] == 0 and "is not a directory" in report["errors"][0]


def test_links_are_made_through_a_descriptor_of_the_real_folder(dev_root, monkeypatch):
    """/dev/char swapped for a link after the check: the writes still land in the folder that was opened."""
    real_open = _dev_char.open_char_dir
    elsewhere = dev_root / "elsewhere"
    elsewhere.mkdir()

    def open_then_swap(char_dir, create):
        fd = real_open(char_dir, create)
        if fd is not None:
            os.rename(char_dir, char_dir + ".real")
            os.symlink(str(elsewhere), char_dir)
        return fd

    (dev_root / "dev" / "char").mkdir()
    monkeypatch.setattr(_dev_char, "open_char_dir", open_then_swap)
    report = _dev_char.apply(str(dev_root))
    assert report["links"] == 4 and os.listdir(str(elsewhere)) == []
    assert len(os.listdir(str(dev_root / "dev" / "char.real"))) == 4
