# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Path resolution inside a root never leaves it, whatever links the root holds."""

import os

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.base.pathsafe import (
    PathEscapeError,
    host_path,
    resolve_host_path,
    resolve_in_root,
)


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "root"
    (root / "usr/lib/x86_64-linux-gnu/nvidia/current").mkdir(parents=True)
    (root / "usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so.535.1").write_text("elf")
    (root / "etc/alternatives").mkdir(parents=True)
    os.symlink("/usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so.535.1", root / "etc/alternatives/libcuda")
    os.symlink("/etc/alternatives/libcuda", root / "usr/lib/x86_64-linux-gnu/libcuda.so.1")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside/secret").write_text("host")
    return root


def test_absolute_links_are_followed_inside_the_root(tree):
    assert resolve_in_root(str(tree), "/usr/lib/x86_64-linux-gnu/libcuda.so.1") == (
        "/usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so.535.1"
    )


def test_dotdot_stops_at_the_root(tree):
    assert resolve_in_root(str(tree), "/../../../etc/alternatives") == "/etc/alternatives"
    os.symlink("../../../../../../outside/secret", tree / "usr/lib/escape")
    assert resolve_in_root(str(tree), "/usr/lib/escape") == "/outside/secret"
    assert resolve_host_path(str(tree), "/usr/lib/escape") == str(tree / "outside/secret")
    assert not os.path.exists(resolve_host_path(str(tree), "/usr/lib/escape"))


def test_absolute_link_to_a_host_path_stays_in_the_root(tree):
    # CVE-2024-0132's shape: an image plants lib -> /, hoping a write lands on the host.
    os.symlink(str(tree.parent / "outside"), tree / "usr/lib/hostdir")
    resolved = resolve_in_root(str(tree), "/usr/lib/hostdir/secret")
    assert resolved == str(tree.parent / "outside/secret")  # the same path, but under the root
    assert resolve_host_path(str(tree), "/usr/lib/hostdir/secret").startswith(str(tree) + "/")


def test_missing_components_are_kept(tree):
    assert (
        resolve_in_root(str(tree), "/usr/lib/x86_64-linux-gnu/new/file.so") == "/usr/lib/x86_64-linux-gnu/new/file.so"
    )


def test_link_loop_is_an_error(tree):
    os.symlink("b", tree / "a")
    os.symlink("a", tree / "b")
    with pytest.raises(PathEscapeError, match="too many levels"):
        resolve_in_root(str(tree), "/a")


def test_file_used_as_directory_is_an_error(tree):
    with pytest.raises(PathEscapeError, match="not a directory"):
        resolve_in_root(str(tree), "/usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so.535.1/x")


def test_host_path_of_root_itself(tree):
    assert host_path(str(tree), "/") == str(tree)
    assert resolve_in_root(str(tree), "/") == "/"
