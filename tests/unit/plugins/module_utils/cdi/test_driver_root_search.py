# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""A driver root without an ld.so.cache of its own: its library directories are searched, as NVIDIA's locator does.

The real host this came from keeps its driver in a read-only tree at /usr/local/nvidia (``lib64``, ``bin``), GKE's
layout; ``cdi_spec: driver_root: /usr/local/nvidia`` refused it ("cannot read the driver root's ld.so.cache").
Here Debian's real 535 userspace is laid out that way (every library file and soname link in ``lib64``, the binaries
in ``bin``, no cache) and must give the same driver files as the tree with its cache.
"""

import os
import shutil

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.base.pathsafe import host_path
from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi.driver_files import (
    SEARCH_LIBDIRS,
    elf_arch,
    find_driver_files,
    read_driver_cache,
)
from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi.spec import gather


def _gke_layout(debian_root, target):
    """The Debian tree's x86_64 driver files copied into ``target`` as lib64/ and bin/, without an ld.so.cache."""
    version, files = find_driver_files(debian_root, "all")
    for f in files:
        if f.kind == "library" and f.arch == "x86_64":
            os.makedirs(target / "lib64", exist_ok=True)
            real = os.path.basename(f.resolved)
            if not (target / "lib64" / real).exists():
                shutil.copy2(host_path(debian_root, f.resolved), target / "lib64" / real)
            if not os.path.lexists(target / "lib64" / f.name):
                os.symlink(real, target / "lib64" / f.name)
        elif f.kind == "binary":
            os.makedirs(target / "bin", exist_ok=True)
            shutil.copy2(host_path(debian_root, f.resolved), target / "bin" / f.name)
    return version, files


def _shape(files):
    return sorted(
        (f.kind, f.capability, f.name, os.path.basename(f.resolved))
        for f in files
        if f.kind in ("library", "binary") and f.arch in ("x86_64", None)
    )


def test_a_driver_root_without_a_cache_gives_the_same_driver_files(debian_driver_tree, tmp_path):
    debian_root, debian_version = debian_driver_tree
    root = tmp_path / "usr-local-nvidia"
    version, files = _gke_layout(debian_root, root)
    assert not (root / "etc/ld.so.cache").exists()
    found_version, found = find_driver_files(str(root), "all")
    assert found_version == version == debian_version
    assert _shape(found) == _shape(files)
    assert {f.path.rsplit("/", 1)[0] for f in found if f.kind == "library"} == {"/lib64"}
    assert {f.path.rsplit("/", 1)[0] for f in found if f.kind == "binary"} == {"/bin"}


def test_cdi_spec_gathers_from_such_a_root(debian_driver_tree, tmp_path):
    debian_root, _version = debian_driver_tree
    root = tmp_path / "usr-local-nvidia"
    version, _files = _gke_layout(debian_root, root)
    found, kwargs = gather(driver_root=str(root), dev_root="/nonexistent-dev-root", gpus=[{"index": 0, "minor": 0}])
    assert found == version
    mounts = {os.path.basename(f.resolved) for f in kwargs["files"] if f.kind == "library"}
    assert f"libcuda.so.{version}" in mounts and f"libnvidia-ml.so.{version}" in mounts


def test_the_search_takes_the_first_directory_and_skips_what_is_not_a_library(debian_driver_tree, tmp_path):
    debian_root, _version = debian_driver_tree
    _version, files = find_driver_files(debian_root, "utility")
    nvml = next(f for f in files if f.name == "libnvidia-ml.so.1")
    real = os.path.basename(nvml.resolved)
    for libdir in ("usr/lib64", "lib64"):  # both searched; /usr/lib64 comes first in NVIDIA's order
        (tmp_path / libdir).mkdir(parents=True)
        shutil.copy2(host_path(debian_root, nvml.resolved), tmp_path / libdir / real)
        os.symlink(real, tmp_path / libdir / "libnvidia-ml.so.1")
    (tmp_path / "lib64" / "libnotelf.so.1").write_text("not an ELF file\n")
    entries = read_driver_cache(str(tmp_path))
    assert [(e.soname, e.path, e.arch) for e in entries] == [
        ("libnvidia-ml.so.1", "/usr/lib64/libnvidia-ml.so.1", "x86_64"),  # the link first, then its file
        (real, "/usr/lib64/" + real, "x86_64"),
    ]
    assert SEARCH_LIBDIRS.index("/usr/lib64") < SEARCH_LIBDIRS.index("/lib64")


def test_elf_arch_reads_the_header(debian_driver_tree, tmp_path):
    debian_root, _version = debian_driver_tree
    _version, files = find_driver_files(debian_root, "compute")
    assert {elf_arch(host_path(debian_root, f.resolved)) for f in files if f.kind == "library"} == {"x86_64"}
    aarch64 = b"\x7fELF\x02\x01" + bytes(12) + (0xB7).to_bytes(2, "little")
    (tmp_path / "aarch64").write_bytes(aarch64)
    assert elf_arch(str(tmp_path / "aarch64")) == "aarch64"
    (tmp_path / "big-endian").write_bytes(b"\x7fELF\x02\x02" + bytes(12) + (0xB7).to_bytes(2, "little"))
    (tmp_path / "short").write_bytes(b"\x7fELF")
    for name in ("big-endian", "short", "missing"):
        assert elf_arch(str(tmp_path / name)) is None, name


def test_a_cache_that_exists_but_cannot_be_read_is_still_an_error(tmp_path):
    (tmp_path / "etc/ld.so.cache").mkdir(parents=True)  # a directory where the cache should be
    with pytest.raises(ValueError, match=r"etc/ld\.so\.cache is a directory, not a regular file"):
        gather(driver_root=str(tmp_path))
