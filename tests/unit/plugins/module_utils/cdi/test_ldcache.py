# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The ld.so.cache parser against caches written by the real ldconfig, in all three layouts."""

import os
import re
import shutil
import struct
import subprocess

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi.ldcache import (
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
    inner = f"/ld.so.cache.{layout}.{os.getpid()}"
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


# ---------------------------------------------------------------- writing (ldconfig never runs: images could aim it)

import functools  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402

from hypothesis import example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi.ldcache import (  # noqa: E402
    add_entries,
    libcmp,
)
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils.cdi.crafted_ldcache import (  # noqa: E402
    WORST_CASES,
    crafted,
    worst_case,
)

LDCONFIG = "/sbin/ldconfig"
needs_ldconfig = pytest.mark.skipif(
    not (shutil.which("gcc") and os.path.exists(LDCONFIG) and os.geteuid() == 0), reason="needs root, gcc, ldconfig"
)
# Names that exercise _dl_cache_libcmp: numeric runs (9 < 10), prefixes, digits against letters, case.
FIRST = ["libfoo.so.9", "libfoo2.so.1", "libA.so.1", "libz.so.1", "libfoo-1.so.3"]
SECOND = ["libfoo.so.10", "libfoo.so.1", "libfoo.so.1.2", "libfoo10.so.1", "liba.so.1", "libcuda.so.1", "libB.so.0"]


def _read_host_cache():
    with open("/etc/ld.so.cache", "rb") as f:
        return f.read()


def _make_libs(folder, sonames, src):
    for soname in sonames:
        out = folder / (soname + ".0.0")
        subprocess.run(["gcc", "-shared", "-fPIC", f"-Wl,-soname,{soname}", "-o", str(out), str(src)], check=True)


def _ldconfig_cache(root):
    subprocess.run([LDCONFIG, "-r", str(root)], check=True)
    return (root / "etc" / "ld.so.cache").read_bytes()


def _ldconfig_before_after(tmp_path, first, second):
    """glibc's ldconfig over libraries named ``first`` (A), then over ``first`` + ``second`` (B): ``(A, B)``."""
    src = tmp_path / "x.c"
    src.write_text("int x(void) { return 0; }\n")
    root = tmp_path / "root"
    lib = root / "opt" / "lib"
    lib.mkdir(parents=True)
    (root / "etc").mkdir()
    (root / "etc" / "ld.so.conf").write_text("/opt/lib\n")
    _make_libs(lib, first, src)
    before = _ldconfig_cache(root)
    _make_libs(lib, second, src)
    return before, _ldconfig_cache(root)


@needs_ldconfig
def test_added_entries_land_where_glibc_ldconfig_puts_them(tmp_path):
    """Cache A from ldconfig over FIRST; ldconfig over FIRST + SECOND gives B; add_entries(A, SECOND) == B."""
    before, reference = _ldconfig_before_after(tmp_path, FIRST, SECOND)
    ours = add_entries(before, [(name, f"/opt/lib/{name}", "x86_64") for name in SECOND])

    def listing(data):
        return [(e.soname, e.path, e.flags, e.hwcap) for e in parse_ld_so_cache(data)]

    assert listing(ours) == listing(reference)
    path = tmp_path / "ours.cache"
    path.write_bytes(ours)
    glibc = subprocess.run([LDCONFIG, "-p", "-C", str(path)], capture_output=True, text=True, check=True).stdout
    (tmp_path / "ref.cache").write_bytes(reference)
    ref = subprocess.run(
        [LDCONFIG, "-p", "-C", str(tmp_path / "ref.cache")], capture_output=True, text=True, check=True
    )
    ref = ref.stdout
    assert [line for line in glibc.splitlines() if "=>" in line] == [line for line in ref.splitlines() if "=>" in line]


@needs_ldconfig
def test_the_loader_finds_a_library_only_the_written_cache_names(tmp_path):
    """The real dynamic loader, in a private mount namespace with the written cache as /etc/ld.so.cache:
    a library in a folder no default search path covers is found through the cache alone."""
    if not shutil.which("unshare"):
        pytest.skip("no unshare")
    src = tmp_path / "x.c"
    src.write_text("int gpufleet_probe(void) { return 42; }\n")
    folder = tmp_path / "hidden"
    folder.mkdir()
    _make_libs(folder, ["libgpufleetprobe.so.1"], src)
    cache = tmp_path / "ld.so.cache"
    cache.write_bytes(add_entries(_read_host_cache(), [
        ("libgpufleetprobe.so.1", f"{folder}/libgpufleetprobe.so.1.0.0", "x86_64")]))  # fmt: skip
    code = "import ctypes; print(ctypes.CDLL('libgpufleetprobe.so.1').gpufleet_probe(), ctypes.CDLL('libz.so.1'))"
    script = f'mount --bind "{cache}" /etc/ld.so.cache && exec python3 -c "{code}"'
    out = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script], capture_output=True,
                         text=True, check=False, timeout=60)  # fmt: skip
    assert out.returncode == 0 and out.stdout.startswith("42 "), out.stderr  # and the host's own libz still resolves


def test_readding_real_entries_keeps_the_order():
    """Every entry of this machine's cache (written by glibc's ldconfig) re-added with a new path replaces
    itself in place: our insertion point is glibc's for every real library name."""
    data = _read_host_cache()
    real = parse_ld_so_cache(data)
    again = parse_ld_so_cache(add_entries(data, [(e.soname, "/new" + e.path, e.arch) for e in real if e.hwcap == 0]))
    assert [(e.soname, e.flags) for e in again] == [(e.soname, e.flags) for e in real]
    assert all(e.path.startswith("/new") for e in again if e.hwcap == 0)


def test_adds_to_nothing_and_to_old_layouts():
    one = add_entries(b"", [("libcuda.so.1", "/x/libcuda.so.1", "x86_64"), ("libcuda.so.1", "/y/libcuda.so.1", "i386")])
    assert [(e.soname, e.arch) for e in parse_ld_so_cache(one)] == [
        ("libcuda.so.1", "x86_64"),
        ("libcuda.so.1", "i386"),
    ]
    with pytest.raises(LdCacheError):
        add_entries(b"junk" * 10, [("libcuda.so.1", "/x", "x86_64")])
    with pytest.raises(LdCacheError):
        add_entries(b"\0" * ((8 << 20) + 1), [])
    with pytest.raises(LdCacheError, match="cannot add"):
        add_entries(b"", [("libcuda.so.1", "/x", "mips")])


@pytest.mark.parametrize(("a", "b"), [("libfoo.so.9", "libfoo.so.10"), ("libA.so", "liba.so"), ("lib.so", "lib.so.1"),
                                      ("libx", "libx\xe9"), ("lib1a", "libb")])  # fmt: skip
def test_libcmp_is_glibcs(a, b):
    x, y = a.encode("latin-1"), b.encode("latin-1")
    assert libcmp(x, x) == 0
    assert (libcmp(x, y) < 0) == (libcmp(y, x) > 0)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=2048), st.integers(0, 4096), st.binary(max_size=64))
def test_any_bytes_are_a_cache_or_an_ldcache_error(junk, at, patch):
    """Fuzz: a real cache with bytes overwritten, or random bytes: a cache or LdCacheError, nothing else."""
    real = bytearray(_read_host_cache()[:8192])
    real[at : at + len(patch)] = patch
    for data in (bytes(real), junk, b"glibc-ld.so.cache1.1" + junk):
        try:
            out = add_entries(data, [("libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so.1", "x86_64")])
        except LdCacheError:
            continue
        assert any(e.soname == "libcuda.so.1" for e in parse_ld_so_cache(out))


_SONAMES = st.from_regex(r"lib[a-zA-Z0-9_+-]{0,6}(\.so(\.[0-9]{1,3}){0,3})?", fullmatch=True)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(_SONAMES, st.sampled_from(["x86_64", "i386"])), max_size=12), st.booleans())
@example([("lib0", "x86_64"), ("lib00", "x86_64")], False)  # found: added again, lib0 was listed twice
def test_generated_entries_are_added_in_glibcs_order_once(names, empty):
    """Any library names added to this machine's cache (or to none): each is listed with its path and arch, the whole
    list stays in glibc's order (library names descending by ``_dl_cache_libcmp``), the entries that were there
    keep their order, and adding the same entries again gives the same listing. (Not the same bytes: the strings
    of a replaced entry stay in the string table, so a container restarted N times carries N copies of our paths'
    strings; nothing reads them.)"""
    base = b"" if empty else _read_host_cache()
    entries = [(name, f"/opt/gen/{arch}/{name}", arch) for name, arch in names]
    out = add_entries(base, entries)
    listed = parse_ld_so_cache(out)
    for name, path, arch in entries:
        assert any(e.soname == name and e.path == path and e.arch == arch for e in listed), (name, arch)
    order = [e.soname.encode("latin-1") for e in listed]
    assert all(libcmp(a, b) >= 0 for a, b in zip(order, order[1:]))
    replaced = set(names)
    kept = [(e.soname, e.path) for e in (parse_ld_so_cache(base) if base else []) if (e.soname, e.arch) not in replaced]
    assert [(e.soname, e.path) for e in listed if (e.soname, e.path) in set(kept)] == kept
    again = add_entries(out, entries)
    assert [(e.soname, e.path, e.flags) for e in parse_ld_so_cache(again)] == [
        (e.soname, e.path, e.flags) for e in listed
    ]
    assert len(again) - len(out) <= sum(len(n) + len(p) + 2 for n, p, _a in entries)


# ------------------------------------------------- crafted caches: the image writes them, the merge must stay linear

LIBCUDA = [("libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so.1", "x86_64")]


@pytest.mark.parametrize("shape", sorted(WORST_CASES))
def test_worst_case_shapes_merge_or_fall_back(shape):
    """Each shape the bench times (``make bench``, section ldcache): the driver's libcuda in the result."""
    _merged_or_fallback(worst_case(shape))


def _merged_or_fallback(data):
    """What the hook does: the merge, or the driver's entries alone when the image's cache cannot be read."""
    try:
        out = add_entries(data, LIBCUDA)
    except LdCacheError:
        out = add_entries(b"", LIBCUDA)
    assert [e.path for e in parse_ld_so_cache(out) if e.soname == "libcuda.so.1"] == [LIBCUDA[0][1]]
    return out


def test_a_name_longer_than_a_path_is_the_fallback():
    """libcuda.so.<300,000 digits> (47 s in the old merge): no real cache holds a name past PATH_MAX."""
    with pytest.raises(LdCacheError, match="more than 4096 bytes"):
        add_entries(crafted([b"libcuda.so." + b"7" * 300_000, b"libc.so.6"]), LIBCUDA)


def test_value_equal_names_up_to_the_name_bound_are_merged_once():
    """Names equal by value but not by bytes (libcuda.so.0…01), as many as fit 8 MiB at the longest name a cache
    may hold: each is read once, the exact one is replaced, the others are kept in their place."""
    names = [b"libcuda.so." + b"0" * (4000 - i) + b"1" for i in range(2000)] + [b"libcuda.so.1"]
    data = crafted(names)
    assert len(data) < 8 << 20
    out = parse_ld_so_cache(add_entries(data, LIBCUDA))
    assert len(out) == len(names)
    assert [e.path for e in out if e.soname == "libcuda.so.1"] == [LIBCUDA[0][1]]
    assert [e.soname.encode() for e in out if e.soname != "libcuda.so.1"] == names[:-1]


@pytest.mark.parametrize("offset", [0xFFFFFFF0, 0xFFFFFFFF, 10, 1 << 31])
def test_string_offsets_outside_the_string_table_are_the_fallback(offset):
    """Offsets past the file, or into the header and entry table, would be moved out of range (a struct.error:
    "internal error") or onto other bytes when the table grows."""
    data = crafted([b"libz.so.1", b"libc.so.6"], key_offsets=[offset, offset])
    with pytest.raises(LdCacheError, match="outside the string table"):
        add_entries(data, LIBCUDA)
    _merged_or_fallback(data)


def test_old_layout_offsets_outside_the_file_are_the_fallback():
    old = struct.pack("<11s1xI", b"ld.so-1.7.0", 1) + struct.pack("<iII", 0x0303, 0xFFFFFFF0, 0) + b"libz.so.1\0"
    with pytest.raises(LdCacheError, match="old-format entry"):
        add_entries(old, LIBCUDA)


def test_glibc_hwcaps_offsets_outside_the_file_are_the_fallback():
    """An extension directory whose glibc-hwcaps section lists a string offset near 2**32."""
    base = bytearray(crafted([b"libz.so.1"]))
    ext_at = (len(base) + 3) & ~3
    base += b"\0" * (ext_at - len(base))
    section_at = ext_at + 8 + 16
    base += struct.pack("<II", 0xEAA42174, 1) + struct.pack("<IIII", 1, 0, section_at, 4)
    base += struct.pack("<I", 0xFFFFFFF8)
    struct.pack_into("<I", base, 32, ext_at)  # extension_offset
    with pytest.raises(LdCacheError, match="glibc-hwcaps"):
        add_entries(bytes(base), LIBCUDA)


def test_libcmp_wraps_digit_runs_at_32_bits_as_glibc_does():
    """glibc adds up a digit run in an int: 4294967297 is 1 to it, and only the last 32 digits of a run count."""
    assert libcmp(b"libw.so.4294967297", b"libw.so.2") < 0
    assert libcmp(b"libw.so.4294967297", b"libw.so.1") == 0
    assert libcmp(b"libw.so." + b"9" * 100_000 + b"0" * 32, b"libw.so.0") == 0
    assert libcmp(b"libw.so.2147483648", b"libw.so.2147483647") > 0  # INT_MIN - INT_MAX wraps to 1
    assert libcmp(b"libw.so.9", b"libw.so.10") < 0


@needs_ldconfig
def test_names_with_huge_numbers_land_where_glibc_ldconfig_puts_them(tmp_path):
    """Digit runs past 2**31 and 2**32: ldconfig sorts them with the same wrapping comparison the merge uses."""
    first = ["libw.so.2", "libw.so.3000000000", "libw.so.7"]
    second = ["libw.so.4294967297", "libw.so.2147483648", "libw.so." + "9" * 40, "libw.so.5"]
    before, reference = _ldconfig_before_after(tmp_path, first, second)
    ours = add_entries(before, [(name, f"/opt/lib/{name}", "x86_64") for name in second])
    assert [(e.soname, e.path) for e in parse_ld_so_cache(ours)] == [
        (e.soname, e.path) for e in parse_ld_so_cache(reference)
    ]


_DIGIT_RUNS = st.text("0123456789", min_size=1, max_size=40)
_CRAFTED_NAMES = st.one_of(
    _SONAMES.map(str.encode),
    _DIGIT_RUNS.map(lambda d: b"libcuda.so." + d.encode()),  # value-equal spellings of libcuda's numbers
    st.integers(4000, 5000).map(lambda n: b"libcuda.so." + b"0" * n + b"1"),  # around the name bound
    st.binary(min_size=1, max_size=30).map(lambda b: b.replace(b"\0", b"")).filter(bool),
)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(_CRAFTED_NAMES, max_size=40),
    st.booleans(),
    st.lists(st.tuples(st.integers(0, 200), st.sampled_from([0, 10, 0x7FFFFFFF, 0xFFFFFFF0, 0xFFFFFFFF])), max_size=3),
)
def test_crafted_caches_merge_or_fall_back(names, sort, corrupt):
    """Fuzz: crafted names (value-equal digit runs, names around the bound, any bytes), in ldconfig's order or
    not, some string offsets overwritten: the merge lists the driver's libcuda once, or raises LdCacheError and
    the fallback does; never another exception."""
    if sort:
        names = sorted(names, key=functools.cmp_to_key(libcmp), reverse=True)
    data = bytearray(crafted(names))
    for index, offset in corrupt:
        if index < len(names):
            struct.pack_into("<I", data, 48 + 24 * index + 4 + 4 * (offset & 1), offset)
    _merged_or_fallback(bytes(data))
