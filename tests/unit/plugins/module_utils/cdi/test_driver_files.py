# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The capability -> driver-file rules, on the real Debian 535 tree and on crafted ones."""

import functools
import os
import shutil
import subprocess

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.base.pathsafe import resolve_in_root
from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi.driver_files import (
    CAPABILITIES,
    CapabilityError,
    find_driver_files,
    library_capability,
    parse_capabilities,
    select_libraries,
    version_of,
)
from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi.ldcache import LdCacheEntry


@pytest.mark.parametrize(
    "value, expected",
    [
        (None, ("utility", "compute")),
        ("", ("utility", "compute")),
        ("  ", ("utility", "compute")),
        ("all", CAPABILITIES),
        ("compute", ("compute",)),
        ("compute,utility", ("utility", "compute")),
        (" utility , compute ", ("utility", "compute")),
        ("video", ("compute", "video")),
        ("display", ("graphics", "display")),
        ("utility,all", CAPABILITIES),
        (["graphics", "utility"], ("utility", "graphics")),
    ],
)
def test_parse_capabilities(value, expected):
    assert parse_capabilities(value) == expected


def test_unknown_capability_is_an_error_naming_it():
    with pytest.raises(CapabilityError, match=r"'gpu'.*valid: utility, compute"):
        parse_capabilities("compute,gpu")


def test_library_prefixes_do_not_bleed():
    assert library_capability("libcuda.so.1") == "compute"
    assert library_capability("libcudadebugger.so.1") == "compute"
    assert library_capability("libnvidia-pkcs11-openssl3.so.535.1") == "compute"
    assert library_capability("libnvidia-ml.so.1") == "utility"
    assert library_capability("libnvidia-encode.so.1") == "video"
    assert library_capability("libGLX_nvidia.so.0") == "graphics"
    assert library_capability("libGLX_mesa.so.0") is None
    assert library_capability("libcudart.so.12") is None  # CUDA toolkit, not the driver


def test_version_of():
    assert version_of("libcuda.so.535.261.03") == "535.261.03"
    assert version_of("libnvidia-ml.so.1") is None
    assert version_of("libcuda.so.570.86") == "570.86"


def test_stale_library_from_an_older_driver_is_not_selected():
    entries = [
        LdCacheEntry("libcuda.so.1", "/usr/lib/libcuda.so.1", 0x0303, "x86_64", 0),
        LdCacheEntry("libnvidia-ml.so.1", "/usr/lib/libnvidia-ml.so.1", 0x0303, "x86_64", 0),
    ]
    real = {
        "/usr/lib/libcuda.so.1": "/usr/lib/libcuda.so.535.1.2",
        "/usr/lib/libnvidia-ml.so.1": "/usr/lib/libnvidia-ml.so.525.9.9",
    }
    chosen = select_libraries(entries, "utility,compute", "535.1.2", real.get)
    assert [f.resolved for f in chosen] == ["/usr/lib/libcuda.so.535.1.2"]


def test_compat32_adds_i386_copies_only_when_asked():
    entries = [
        LdCacheEntry("libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so.1", 0x0303, "x86_64", 0),
        LdCacheEntry("libcuda.so.1", "/usr/lib/i386-linux-gnu/libcuda.so.1", 0x0003, "i386", 0),
    ]

    def resolve(path):
        return path.replace(".so.1", ".so.535.1.2")

    assert [f.arch for f in select_libraries(entries, "compute", "535.1.2", resolve)] == ["x86_64"]
    assert [f.arch for f in select_libraries(entries, "compute,compat32", "535.1.2", resolve)] == ["x86_64", "i386"]


def test_debian_tree_default_capabilities(debian_driver_tree):
    root, version = debian_driver_tree
    found_version, files = find_driver_files(root)
    assert found_version == version
    libraries = {f.name: f for f in files if f.kind == "library"}
    # Debian's layout: the cache names the alternatives link, the real file is under nvidia/current.
    cuda = libraries["libcuda.so.1"]
    assert cuda.path == "/usr/lib/x86_64-linux-gnu/libcuda.so.1"
    assert cuda.resolved == f"/usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so.{version}"
    assert {"libcuda.so.1", "libnvidia-ml.so.1", "libnvidia-ptxjitcompiler.so.1", "libnvidia-nvvm.so.4"} <= set(
        libraries
    )
    assert {f.capability for f in files if f.kind == "library"} == {"utility", "compute"}
    assert all(os.path.isfile(root + f.resolved) for f in files)
    assert all(f.resolved.endswith(version) for f in files if f.kind == "library")
    binaries = {f.name: f.resolved for f in files if f.kind == "binary"}
    assert binaries["nvidia-smi"] == "/usr/lib/nvidia/current/nvidia-smi"
    assert "nvidia-cuda-mps-control" in binaries
    firmware = [f.name for f in files if f.kind == "firmware"]
    assert firmware and all(n.startswith("gsp") for n in firmware)


def test_debian_tree_graphics_and_video(debian_driver_tree):
    root, version = debian_driver_tree
    _found, files = find_driver_files(root, "graphics,video", version)
    names = {f.name for f in files if f.kind == "library"}
    assert {"libGLX_nvidia.so.0", "libEGL_nvidia.so.0", f"libnvidia-eglcore.so.{version}"} <= names
    assert {"libnvcuvid.so.1", "libnvidia-encode.so.1"} <= names
    assert "libcuda.so.1" in names  # video implies compute
    assert "libnvidia-ml.so.1" not in names  # utility was not asked for
    configs = {f.path for f in files if f.kind == "config"}
    assert any("egl_vendor.d/10_nvidia.json" in p for p in configs)


def test_debian_tree_without_the_asked_version_injects_no_library(debian_driver_tree):
    root, _version = debian_driver_tree
    _found, files = find_driver_files(root, "all", "999.99.99")
    assert [f for f in files if f.kind in ("library", "firmware")] == []


def test_link_pointing_out_of_the_driver_root_is_resolved_inside_it(debian_driver_tree, tmp_path):
    root, version = debian_driver_tree
    # A driver root whose alternatives link points at an absolute path: it must mean the driver
    # root's /usr/lib..., never this machine's.
    copy = tmp_path / "driver"
    shutil.copytree(root + "/etc", str(copy / "etc"), symlinks=True)
    lib = copy / "usr/lib/x86_64-linux-gnu/nvidia/current"
    lib.mkdir(parents=True)
    (lib / ("libcuda.so." + version)).write_bytes(b"")
    resolve = functools.partial(resolve_in_root, str(copy))
    assert resolve("/etc/alternatives/libcuda.so.1-x86_64-linux-gnu") == (
        "/usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so.1"
    )


@pytest.mark.skipif(shutil.which("ldconfig") is None and not os.path.exists("/sbin/ldconfig"), reason="no ldconfig")
def test_containerized_driver_root_layout(tmp_path):
    """A driver root like the GPU Operator's /run/nvidia/driver: real ldconfig, plain .so files."""
    root = tmp_path / "run/nvidia/driver"
    libdir = root / "usr/lib/x86_64-linux-gnu"
    libdir.mkdir(parents=True)
    src = tmp_path / "empty.c"
    src.write_text("int gpufleet_marker(void) { return 1; }\n")
    for soname, real in [("libcuda.so.1", "libcuda.so.570.86.15"), ("libnvidia-ml.so.1", "libnvidia-ml.so.570.86.15")]:
        subprocess.run(
            ["gcc", "-shared", "-fPIC", "-Wl,-soname," + soname, "-o", str(libdir / real), str(src)], check=True
        )
    (root / "etc").mkdir()
    (root / "etc/ld.so.conf").write_text("/usr/lib/x86_64-linux-gnu\n")
    subprocess.run(["ldconfig", "-r", str(root)], check=True)
    version, files = find_driver_files(str(root))
    assert version == "570.86.15"
    assert sorted(f.resolved for f in files) == [
        "/usr/lib/x86_64-linux-gnu/libcuda.so.570.86.15",
        "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.570.86.15",
    ]


def test_debian_nvml_outside_the_cache_is_still_found(debian_driver_tree, tmp_path):
    """On an installed Debian 535 host libnvidia-ml.so.1 is only in nvidia/current, not in the
    ld.so.cache (seen on the simulated nodes): find_driver_files must still mount it (utility)."""
    root, version = debian_driver_tree
    copy = str(tmp_path / "root")
    subprocess.run(["cp", "-al", root, copy], check=True)
    os.unlink(copy + "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1")
    subprocess.run(["ldconfig", "-r", copy], check=True)
    found, files = find_driver_files(copy, "utility")
    assert found == version
    nvml = [f for f in files if f.name == "libnvidia-ml.so.1"]
    assert [f.resolved for f in nvml] == [f"/usr/lib/x86_64-linux-gnu/nvidia/current/libnvidia-ml.so.{version}"]


def test_library_only_in_debians_private_folder_is_found(tmp_path):
    # Debian keeps libnvidia-ml.so.1 in nvidia/current; its public name is an alternatives link that
    # can be missing (seen on the simulated bookworm node with Debian's 535 packages): not in the cache.
    root = tmp_path / "root"
    private = root / "usr/lib/x86_64-linux-gnu/nvidia/current"
    private.mkdir(parents=True)
    for name in ("libcuda.so", "libnvidia-ml.so", "libnvidia-cfg.so"):
        (private / (name + ".535.1.2")).write_bytes(b"\x7fELF")
        os.symlink(name + ".535.1.2", str(private / (name + ".1")))
    (private / "libnvidia-ml.so.470.1.1").write_bytes(b"\x7fELF")  # stale: no soname link, never taken
    os.symlink("libnvidia-ml.so.1", str(private / "libnvidia-ml.so"))  # dev link: not a soname
    public = "/usr/lib/x86_64-linux-gnu/libcuda.so.1"
    os.symlink("nvidia/current/libcuda.so.1", str(root / public.lstrip("/")))
    entries = [LdCacheEntry("libcuda.so.1", public, 0x0303, "x86_64", 0)]
    version, files = find_driver_files(str(root), "utility,compute", entries=entries)
    assert version == "535.1.2"
    libraries = {f.name: f for f in files if f.kind == "library"}
    assert libraries["libcuda.so.1"].path == public  # the cache's own entry wins
    assert libraries["libnvidia-ml.so.1"].path == "/usr/lib/x86_64-linux-gnu/nvidia/current/libnvidia-ml.so.1"
    assert libraries["libnvidia-ml.so.1"].resolved.endswith("/nvidia/current/libnvidia-ml.so.535.1.2")
    assert "libnvidia-cfg.so.1" in libraries and "libnvidia-ml.so" not in libraries
    assert len(libraries) == 3
