# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Parser for glibc's ``/etc/ld.so.cache``, the file the dynamic loader and libnvidia-container read.

Pure standard library, no ansible imports: shared by the modules (on target Pythons 3.8+) and by the
host programs of the native toolkit. Parsing the file directly (instead of ``ldconfig -p``) works on a
mounted host root or a containerized driver root, where ``ldconfig -p`` would read the wrong cache.

Two layouts exist and a file may hold both, old first:

* old (libc5 era): magic ``ld.so-1.7.0``, ``uint32 nlibs``, then ``nlibs`` entries of
  ``{int32 flags, uint32 key, uint32 value}``; string offsets count from the end of the entry table.
* new (``glibc-ld.so.cache1.1``, the only one glibc >= 2.32 writes): a 48-byte header
  ``{magic[17], version[3], uint32 nlibs, uint32 len_strings, uint8 flags, pad[3],
  uint32 extension_offset, uint32 unused[3]}``, then ``nlibs`` entries of
  ``{int32 flags, uint32 key, uint32 value, uint32 osversion, uint64 hwcap}``; string offsets count
  from the start of this header.
"""

from __future__ import annotations

import struct

from ..base.record import record

OLD_MAGIC = b"ld.so-1.7.0"
NEW_MAGIC = b"glibc-ld.so.cache"
NEW_VERSION = b"1.1"

_NEW_HEADER = struct.Struct("<17s3sIIB3xI12x")  # 48 bytes
_NEW_ENTRY = struct.Struct("<iIIIQ")  # 24 bytes
_OLD_ENTRY = struct.Struct("<iII")  # 12 bytes

# ldconfig's flag words: the low byte is the ELF type, the high byte the ABI it needs.
FLAG_TYPE_MASK = 0x00FF
FLAG_ELF_LIBC6 = 0x0003
FLAG_REQUIRED_MASK = 0xFF00
_ARCH_BY_REQUIRED = {
    0x0000: "i386",  # plain libc6 with no ABI bits: 32-bit x86 (and other 32-bit ABIs)
    0x0300: "x86_64",
    0x0800: "x32",
    0x0A00: "aarch64",
    0x0500: "ppc64le",
    0x0900: "armhf",
}

# The cache's own endianness byte (new format, since glibc 2.33).
_ENDIAN_UNSET, _ENDIAN_INVALID, _ENDIAN_LITTLE, _ENDIAN_BIG = 0, 1, 2, 3

LdCacheEntry = record("LdCacheEntry", ("soname", "path", "flags", "arch", "hwcap"))


class LdCacheError(ValueError):
    """The bytes are not an ld.so.cache this parser can read; the message says why."""


def entry_arch(flags: int) -> str:
    """Architecture name for an entry's flag word (``x86_64``, ``i386``, ...; ``other`` if unknown)."""
    if flags & FLAG_TYPE_MASK != FLAG_ELF_LIBC6:
        return "other"
    return _ARCH_BY_REQUIRED.get(flags & FLAG_REQUIRED_MASK, "other")


def _cstring(data: bytes, offset: int, where: str) -> str:
    if offset >= len(data):
        raise LdCacheError(f"string offset {offset} past the end of the cache ({len(data)} bytes) in {where}")
    end = data.find(b"\0", offset)
    if end < 0:
        raise LdCacheError(f"unterminated string at offset {offset} in {where}")
    return data[offset:end].decode("utf-8", "surrogateescape")


def _parse_new(data: bytes, base: int) -> list[LdCacheEntry]:
    if len(data) - base < _NEW_HEADER.size:
        raise LdCacheError(f"truncated new-format header at offset {base}")
    magic, version, nlibs, _len_strings, endian, _ext = _NEW_HEADER.unpack_from(data, base)
    if magic != NEW_MAGIC or version != NEW_VERSION:
        raise LdCacheError(f"unknown new-format magic {magic!r}{version!r} at offset {base}")
    if endian == _ENDIAN_BIG:
        raise LdCacheError("big-endian ld.so.cache is not supported")
    if endian == _ENDIAN_INVALID:
        raise LdCacheError("ld.so.cache marks its own byte order as invalid")
    table = base + _NEW_HEADER.size
    if table + nlibs * _NEW_ENTRY.size > len(data):
        room = (len(data) - table) // _NEW_ENTRY.size
        raise LdCacheError(f"cache claims {nlibs} entries but has room for {room}")
    entries = []
    for i in range(nlibs):
        flags, key, value, _osv, hwcap = _NEW_ENTRY.unpack_from(data, table + i * _NEW_ENTRY.size)
        where = f"entry {i}"
        entries.append(
            LdCacheEntry(
                _cstring(data, base + key, where), _cstring(data, base + value, where), flags, entry_arch(flags), hwcap
            )
        )
    return entries


def _old_layout(data: bytes) -> tuple[int, int, int]:
    """``(nlibs, start of the strings, offset of an embedded new-format cache or -1)`` of a cache that starts
    with the old magic: glibc < 2.32 (and ``ldconfig -c compat``) puts the new header right after the old
    table, 8-byte aligned."""
    if len(data) < 16:
        raise LdCacheError("truncated old-format header")
    nlibs = struct.unpack_from("<I", data, 12)[0]
    strings = 16 + nlibs * _OLD_ENTRY.size
    if strings > len(data):
        raise LdCacheError(f"old-format cache claims {nlibs} entries, more than the file holds")
    return nlibs, strings, data.find(NEW_MAGIC, strings - (strings % 8))


def _parse_old(data: bytes, nlibs: int, strings: int) -> list[LdCacheEntry]:
    entries = []
    for i in range(nlibs):
        flags, key, value = _OLD_ENTRY.unpack_from(data, 16 + i * _OLD_ENTRY.size)
        where = f"old entry {i}"
        entries.append(
            LdCacheEntry(
                _cstring(data, strings + key, where),
                _cstring(data, strings + value, where),
                flags,
                entry_arch(flags),
                0,
            )
        )
    return entries


def parse_ld_so_cache(data: bytes) -> list[LdCacheEntry]:
    """Return the cache's entries (``LdCacheEntry``) in file order, which is the loader's search order.

    When the file carries both layouts, the new one wins (it is what glibc reads); raises
    ``LdCacheError`` for anything else.
    """
    if data.startswith(NEW_MAGIC):
        return _parse_new(data, 0)
    if data.startswith(OLD_MAGIC):
        nlibs, strings, new_at = _old_layout(data)
        if new_at >= 0:
            return _parse_new(data, new_at)
        return _parse_old(data, nlibs, strings)
    raise LdCacheError(f"not an ld.so.cache (magic {data[:20]!r})")


def read_ld_so_cache(path: str) -> list[LdCacheEntry]:
    """Read and parse the cache file at ``path`` (a path on this machine, already root-prefixed)."""
    with open(path, "rb") as f:
        return parse_ld_so_cache(f.read())


# --------------------------------------------------------------------------------------------------
# Writing: the container's cache with the driver libraries added, without running ldconfig.
#
# The loader binary-searches the new-format table, so entries must stay in ldconfig's order
# (glibc elf/cache.c ``compare``): library names descending by ``_dl_cache_libcmp`` (digit runs compare
# as numbers, other bytes as signed chars), then flags descending, then glibc-hwcaps entries first, then
# the most specific hwcap, then osversion descending. New entries (hwcap 0, osversion 0, no hwcaps
# subdirectory) go where ldconfig's ``add_to_cache`` would insert them: before the first entry that
# sorts after them. The image's own entries, its string table and its extension directory (generator,
# glibc-hwcaps subdirectories) are kept byte for byte; only their offsets move by the size the entry
# table grew. Checked against glibc's own ``ldconfig -p`` and loader in the tests.

EXTENSION_MAGIC = 0xEAA42174
HWCAP_EXTENSION = 1 << 62
ENDIAN_LITTLE = _ENDIAN_LITTLE
MAX_CACHE_BYTES = 8 << 20  # the biggest real caches are a few hundred KiB
FLAGS_BY_ARCH = {arch: FLAG_ELF_LIBC6 | required for required, arch in _ARCH_BY_REQUIRED.items()}
_EXT_HEADER = struct.Struct("<II")
_EXT_SECTION = struct.Struct("<IIII")


def _signed(byte: int) -> int:
    return byte - 256 if byte > 127 else byte


def libcmp(p1: bytes, p2: bytes) -> int:
    """glibc's ``_dl_cache_libcmp`` on two byte strings: <0, 0 or >0."""
    i = j = 0
    n1, n2 = len(p1), len(p2)
    while i < n1:
        c1 = p1[i]
        c2 = p2[j] if j < n2 else 0
        if 48 <= c1 <= 57:
            if not 48 <= c2 <= 57:
                return 1
            v1 = v2 = 0
            while i < n1 and 48 <= p1[i] <= 57:
                v1 = v1 * 10 + p1[i] - 48
                i += 1
            while j < n2 and 48 <= p2[j] <= 57:
                v2 = v2 * 10 + p2[j] - 48
                j += 1
            if v1 != v2:
                return -1 if v1 < v2 else 1
        elif 48 <= c2 <= 57:
            return -1
        elif c1 != c2:
            return _signed(c1) - _signed(c2)
        else:
            i += 1
            j += 1
    return -_signed(p2[j]) if j < n2 else 0


def _new_part(data: bytes) -> tuple[bytes, bool]:
    """``(bytes of a new-format cache, keep_extension)`` for whatever the image holds (may be empty)."""
    if not data:
        return _NEW_HEADER.pack(NEW_MAGIC, NEW_VERSION, 0, 0, _ENDIAN_LITTLE, 0), False
    if data.startswith(NEW_MAGIC):
        return data, True
    if not data.startswith(OLD_MAGIC):
        raise LdCacheError(f"not an ld.so.cache (magic {data[:20]!r})")
    nlibs, strings, new_at = _old_layout(data)
    if new_at >= 0:
        # Combined layout (glibc < 2.32, or ldconfig -c compat): the new part is self-contained, except that
        # an extension directory counts from the file's start; drop it rather than guess (only -c compat
        # writes one there), with the entries that point into it.
        return data[new_at:], False
    # Old layout only: the same entries in the new layout (string offsets re-based on the new header).
    table = _NEW_HEADER.size + nlibs * _NEW_ENTRY.size
    records = bytearray()
    for i in range(nlibs):
        flags, key, value = _OLD_ENTRY.unpack_from(data, 16 + i * _OLD_ENTRY.size)
        records += _NEW_ENTRY.pack(flags, key + table, value + table, 0, 0)
    head = _NEW_HEADER.pack(NEW_MAGIC, NEW_VERSION, nlibs, len(data) - strings, _ENDIAN_LITTLE, 0)
    return head + bytes(records) + data[strings:], False


def add_entries(data: bytes | bytearray, libraries: list[tuple[str, str, str]]) -> bytes:
    """The bytes of an ld.so.cache: the cache ``data`` (the image's; ``b""`` for none) with ``libraries``
    added, each ``(soname, path, arch)`` (text). An entry of the image with the same soname and arch is
    replaced (the container asked for the host's driver). Raises ``LdCacheError`` for a cache that cannot
    be read; linear in the size of ``data``."""
    if len(data) > MAX_CACHE_BYTES:
        raise LdCacheError(f"ld.so.cache is larger than {MAX_CACHE_BYTES} bytes")
    part, keep_extension = _new_part(bytes(data))
    if len(part) < _NEW_HEADER.size:
        raise LdCacheError("truncated new-format header")
    magic, version, nlibs, len_strings, endian, ext_offset = _NEW_HEADER.unpack_from(part, 0)
    if magic != NEW_MAGIC or version != NEW_VERSION:
        raise LdCacheError(f"unknown new-format magic {magic!r}{version!r}")
    if endian in (_ENDIAN_INVALID, _ENDIAN_BIG):
        raise LdCacheError("ld.so.cache is not a little-endian cache")
    table_end = _NEW_HEADER.size + nlibs * _NEW_ENTRY.size
    if table_end > len(part):
        raise LdCacheError(f"cache claims {nlibs} entries but has room for {(len(part) - 48) // 24}")
    table = part[_NEW_HEADER.size : table_end]
    tail = bytearray(part[table_end:])
    sections: list[tuple[int, int, int, int]] = []
    if keep_extension and ext_offset:
        sections = _extension_sections(part, ext_offset)
    else:
        ext_offset = 0

    def name_at(index: int) -> bytes:
        offset = struct.unpack_from("<I", table, index * _NEW_ENTRY.size + 4)[0]
        end = part.find(b"\0", offset)
        if offset >= len(part) or end < 0:
            raise LdCacheError(f"entry {index}: string offset {offset} outside the cache")
        return part[offset:end]

    def flags_at(index: int) -> int:
        return struct.unpack_from("<i", table, index * _NEW_ENTRY.size)[0]

    def before(new_name: bytes, new_flags: int, index: int) -> bool:
        """glibc's ``compare(entry, new) > 0``: the new entry goes before ``entry``."""
        order = libcmp(new_name, name_at(index))
        return order > 0 or (order == 0 and flags_at(index) < new_flags)

    dropped: set[int] = set()
    if not sections:  # entries that point into an extension directory that is not kept
        dropped.update(i for i in range(nlibs) if struct.unpack_from("<Q", table, i * 24 + 16)[0] & HWCAP_EXTENSION)
    additions: list[tuple[int, bytes, int, bytes]] = []
    for soname, path, arch in libraries:
        name, flags = soname.encode("utf-8", "surrogateescape"), FLAGS_BY_ARCH.get(arch)
        if flags is None or b"\0" in name or "\0" in path:
            raise LdCacheError(f"cannot add {soname!r} ({arch}) to ld.so.cache")
        lo, hi = 0, nlibs
        while lo < hi:
            mid = (lo + hi) // 2
            if before(name, flags, mid):
                hi = mid
            else:
                lo = mid + 1
        # The same name sorts just before the insertion point, among the names libcmp finds equal to it (digit runs
        # compare by value: lib0 and lib00 are equal), which may come between (found by the property tests).
        probe = lo - 1
        while probe >= 0 and libcmp(name_at(probe), name) == 0:
            if flags_at(probe) == flags and name_at(probe) == name:
                dropped.add(probe)
            probe -= 1
        additions.append((lo, name, flags, path.encode("utf-8", "surrogateescape")))

    # Our entries among themselves: the order ldconfig gives equal-hwcap entries.
    additions.sort(key=lambda a: (a[0], _DescendingName(a[1]), -a[2]))
    count = nlibs - len(dropped) + len(additions)
    shift = (count - nlibs) * _NEW_ENTRY.size
    new_strings = bytearray()
    strings_at = table_end + shift + len(tail)
    out_table = bytearray()
    cursor = 0
    for position, name, flags, path in [*additions, (nlibs, None, None, None)]:
        for index in range(cursor, position):
            if index in dropped:
                continue
            flags_i, key, value, osversion, hwcap = _NEW_ENTRY.unpack_from(table, index * _NEW_ENTRY.size)
            out_table += _NEW_ENTRY.pack(flags_i, key + shift, value + shift, osversion, hwcap)
        cursor = max(cursor, position)
        if name is None:
            break
        key = strings_at + len(new_strings)
        new_strings += name + b"\0"
        value = strings_at + len(new_strings)
        new_strings += path + b"\0"
        out_table += _NEW_ENTRY.pack(flags, key, value, 0, 0)
    for tag, _flags, offset, size in sections:
        if tag == 1:  # glibc-hwcaps: an array of string offsets, rebased
            for at in range(offset - table_end, offset - table_end + size, 4):
                struct.pack_into("<I", tail, at, struct.unpack_from("<I", tail, at)[0] + shift)
    if sections:
        at = ext_offset - table_end
        struct.pack_into("<II", tail, at, EXTENSION_MAGIC, len(sections))
        for i, (tag, flags, offset, size) in enumerate(sections):
            _EXT_SECTION.pack_into(tail, at + 8 + i * 16, tag, flags, offset + shift, size)
        ext_offset += shift
    header = _NEW_HEADER.pack(NEW_MAGIC, NEW_VERSION, count, len_strings + len(new_strings), _ENDIAN_LITTLE, ext_offset)
    return header + bytes(out_table) + bytes(tail) + bytes(new_strings)


def _extension_sections(part: bytes, offset: int) -> list[tuple[int, int, int, int]]:
    """The image's extension directory as ``[(tag, flags, offset, size)]``; every section must lie in the file."""
    if offset % 4 or offset + _EXT_HEADER.size > len(part):
        raise LdCacheError(f"extension directory at {offset} outside the cache")
    magic, count = _EXT_HEADER.unpack_from(part, offset)
    if magic != EXTENSION_MAGIC or count > 64 or offset + 8 + count * 16 > len(part):
        raise LdCacheError(f"malformed extension directory at {offset}")
    sections = [_EXT_SECTION.unpack_from(part, offset + 8 + i * 16) for i in range(count)]
    table_end = _NEW_HEADER.size + struct.unpack_from("<I", part, 20)[0] * _NEW_ENTRY.size
    for tag, _flags, start, size in sections:
        if start < table_end or start + size > len(part) or (tag == 1 and (start % 4 or size % 4)):
            raise LdCacheError(f"extension section {tag} at {start}+{size} outside the cache")
    return sections


class _DescendingName:
    """Sort key: library names in the cache's order (descending ``libcmp``)."""

    __slots__ = ("name",)

    def __init__(self, name: bytes) -> None:
        self.name = name

    def __lt__(self, other: _DescendingName) -> bool:
        return libcmp(self.name, other.name) > 0

    def __eq__(self, other: _DescendingName) -> bool:  # type: ignore[override]
        return libcmp(self.name, other.name) == 0

    __hash__ = None
