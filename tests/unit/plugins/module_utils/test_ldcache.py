"""The ld.so.cache parser against caches written by the real ldconfig, in all three layouts."""

import os
import re
import shutil
import struct
import subprocess

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils._ldcache import (
    LdCacheError,
    entry_arch,
    parse_ld_so_cache,
    read_ld_so_cache,
)

LDCONFIG = shutil.which("ldconfig") or "/sbin/ldconfig"
needs_ldconfig = pytest.mark.skipif(not os.path.exists(LDCONFIG), reason="glibc's ldconfig is not installed")

_ARCH_WORDS = {"libc6,x86-64": "x86_64", "libc6": "i386", "libc6,AArch64": "aarch64", "libc6,x32": "x32"}


def ldconfig_p(cache):
    """What glibc's own reader says is in ``cache``: [(soname, arch, path)]."""
    out = subprocess.run([LDCONFIG, "-p", "-C", cache], check=True, capture_output=True, text=True).stdout
    rows = []
    for line in out.splitlines()[1:]:
        m = re.match(r"\s+(\S+) \(([^)]*)\) => (\S+)", line)
        if m:
            soname, words, path = m.groups()
            words = re.sub(r", hwcap: .*", "", words)
            rows.append((soname, _ARCH_WORDS.get(words, "other"), path))
    return rows


@needs_ldconfig
@pytest.mark.parametrize("layout", ["new", "old", "compat"])
def test_matches_glibc_reader_on_debian_driver_tree(debian_driver_tree, layout):
    root, _version = debian_driver_tree
    # ldconfig -r chroots, so -C names a file inside the tree; it is removed again.
    inner = "/ld.so.cache.%s.%s" % (layout, os.getpid())
    cache_in_root = root + inner
    try:
        subprocess.run([LDCONFIG, "-r", root, "-C", inner, "-c", layout], check=True)
        entries = read_ld_so_cache(cache_in_root)
        expected = ldconfig_p(cache_in_root)
    finally:
        os.unlink(cache_in_root)
    assert [(e.soname, e.arch, e.path) for e in entries] == expected
    assert any(e.soname == "libcuda.so.1" and e.arch == "x86_64" for e in entries)


@needs_ldconfig
def test_matches_glibc_reader_on_this_machines_cache():
    entries = read_ld_so_cache("/etc/ld.so.cache")
    assert len(entries) > 20
    assert [(e.soname, e.arch, e.path) for e in entries] == ldconfig_p("/etc/ld.so.cache")


def test_entry_arch_words():
    assert entry_arch(0x0303) == "x86_64"
    assert entry_arch(0x0003) == "i386"
    assert entry_arch(0x0A03) == "aarch64"
    assert entry_arch(0x0001) == "other"  # libc5-era ELF


def _new_cache(entries, endian=2):
    strings = b""
    offsets = []
    header_size = 48 + 24 * len(entries)
    for soname, path in entries:
        offsets.append((header_size + len(strings), header_size + len(strings) + len(soname) + 1))
        strings += soname.encode() + b"\0" + path.encode() + b"\0"
    data = struct.pack("<17s3sIIB3xI12x", b"glibc-ld.so.cache", b"1.1", len(entries), len(strings), endian, 0)
    for key, value in offsets:
        data += struct.pack("<iIIIQ", 0x0303, key, value, 0, 0)
    return data + strings


def test_synthetic_new_cache_round_trip():
    entries = parse_ld_so_cache(
        _new_cache([("libcuda.so.1", "/usr/lib/libcuda.so.1"), ("libz.so.1", "/lib/libz.so.1")])
    )
    assert [(e.soname, e.path, e.arch) for e in entries] == [
        ("libcuda.so.1", "/usr/lib/libcuda.so.1", "x86_64"),
        ("libz.so.1", "/lib/libz.so.1", "x86_64"),
    ]


@pytest.mark.parametrize(
    "data, message",
    [
        (b"", "not an ld.so.cache"),
        (b"ELF\x7f garbage here", "not an ld.so.cache"),
        (b"glibc-ld.so.cache1.1\x05\x00", "truncated"),
        (b"glibc-ld.so.cache1.0" + b"\0" * 40, "unknown new-format magic"),
    ],
)
def test_rejects_what_is_not_a_cache(data, message):
    with pytest.raises(LdCacheError, match=message):
        parse_ld_so_cache(data)


def test_rejects_entry_count_past_the_end():
    data = bytearray(_new_cache([("libz.so.1", "/lib/libz.so.1")]))
    struct.pack_into("<I", data, 20, 1000)
    with pytest.raises(LdCacheError, match="claims 1000 entries"):
        parse_ld_so_cache(bytes(data))


def test_rejects_big_endian_cache():
    with pytest.raises(LdCacheError, match="big-endian"):
        parse_ld_so_cache(_new_cache([("libz.so.1", "/lib/libz.so.1")], endian=3))


def test_rejects_string_offset_out_of_range():
    data = bytearray(_new_cache([("libz.so.1", "/lib/libz.so.1")]))
    struct.pack_into("<I", data, 48 + 8, 10_000)  # value offset of entry 0
    with pytest.raises(LdCacheError, match="past the end"):
        parse_ld_so_cache(bytes(data))
