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

# ldconfig names each entry after the soname link it makes in the library's folder (a file name, at most
# NAME_MAX, 255 bytes) and points it at a path: PATH_MAX (4096) bounds every string of a real cache.
MAX_STRING_BYTES = 4096

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
    end = data.find(b"\0", offset, offset + MAX_STRING_BYTES + 1)
    if end < 0:
        raise LdCacheError(
            f"a string of more than {MAX_STRING_BYTES} bytes, or unterminated, at offset {offset} in {where}"
        )
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
    """Read and parse the cache file at ``path`` (a path on this machine, already root-prefixed): only a regular
    file (no link, FIFO or device: ``base.fileio.read_regular``, opened ``O_NONBLOCK``) of at most
    ``MAX_CACHE_BYTES``; anything else is a ``FileLimitError`` (a ``ValueError``), never a hang."""
    from ..base.fileio import read_regular  # noqa: PLC0415

    return parse_ld_so_cache(read_regular(path, MAX_CACHE_BYTES, path, follow=False))


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
#
# The image writes the cache, so every step is linear in its size, whatever its contents: the entry table is
# unpacked and rebased as lists of words, each of the image's names is looked at once (at most MAX_STRING_BYTES of it),
# the binary search compares our own short names with names of that bound, and digit runs compare in time
# linear in their length. A cache that breaks a rule glibc's ldconfig never breaks (a string offset outside
# the string table, a name longer than a file name can be, a section outside the file) is an LdCacheError,
# and the caller writes the driver's entries alone.

EXTENSION_MAGIC = 0xEAA42174
HWCAP_EXTENSION = 1 << 62
ENDIAN_LITTLE = _ENDIAN_LITTLE
MAX_CACHE_BYTES = 8 << 20  # the biggest real caches are a few hundred KiB
FLAGS_BY_ARCH = {arch: FLAG_ELF_LIBC6 | required for required, arch in _ARCH_BY_REQUIRED.items()}
_EXT_HEADER = struct.Struct("<II")
_EXT_SECTION = struct.Struct("<IIII")
_WORDS = _NEW_ENTRY.size // 4  # an entry as uint32 words: flags, key, value, osversion, hwcap low, hwcap high


def _signed(byte: int) -> int:
    return byte - 256 if byte > 127 else byte


def _int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


def _digits_end(text: bytes, at: int, size: int) -> int:
    while at < size and 48 <= text[at] <= 57:
        at += 1
    return at


def libcmp(p1: bytes, p2: bytes) -> int:
    """glibc's ``_dl_cache_libcmp`` on two byte strings: <0, 0 or >0, in time linear in their lengths.

    glibc accumulates a digit run in an ``int`` (``val = val * 10 + digit``), which wraps at 32 bits: the
    value is the run's number modulo 2**32, which only its last 32 digits decide (10**32 is a multiple of
    2**32), and a difference of two values is taken in an ``int`` too. Below 2**31, every real version
    number, that is the plain numeric order; above it, it is the order the loader and ldconfig use.
    """
    i = j = 0
    n1, n2 = len(p1), len(p2)
    while i < n1:
        c1 = p1[i]
        c2 = p2[j] if j < n2 else 0
        if 48 <= c1 <= 57:
            if not 48 <= c2 <= 57:
                return 1
            e1, e2 = _digits_end(p1, i, n1), _digits_end(p2, j, n2)
            v1 = _int32(int(p1[max(i, e1 - 32) : e1]))
            v2 = _int32(int(p2[max(j, e2 - 32) : e2]))
            if v1 != v2:
                return _int32(v1 - v2)
            i, j = e1, e2
        elif 48 <= c2 <= 57:
            return -1
        elif c1 != c2:
            return _signed(c1) - _signed(c2)
        else:
            i += 1
            j += 1
    return -_signed(p2[j]) if j < n2 else 0


# (``struct`` rather than ``array``: this runs in every GPU container start, and ``array`` costs 3 ms to import.)
def _words(data: bytes, start: int, count: int) -> list[int]:
    """``count`` little-endian uint32 words of ``data`` from ``start``."""
    return list(struct.unpack_from(f"<{count}I", data, start))


def _le_bytes(words: list[int]) -> bytes:
    return struct.pack(f"<{len(words)}I", *words)


def _check_offsets(offsets: list[int], low: int, high: int, what: str) -> None:
    """Every offset in ``[low, high)``, or LdCacheError (C-speed ``min``/``max`` over the list)."""
    if offsets and (min(offsets) < low or max(offsets) >= high):
        bad = next(o for o in offsets if not low <= o < high)
        raise LdCacheError(f"{what}: string offset {bad} outside the string table ({low}..{high})")


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
    old = _words(data, 16, nlibs * 3)  # flags, key, value
    for column in (1, 2):
        _check_offsets(old[column::3], 0, len(data) - strings, "old-format entry")
    table = _NEW_HEADER.size + nlibs * _NEW_ENTRY.size
    new = [0] * (nlibs * _WORDS)
    new[0::_WORDS] = old[0::3]
    new[1::_WORDS] = [key + table for key in old[1::3]]
    new[2::_WORDS] = [value + table for value in old[2::3]]
    head = _NEW_HEADER.pack(NEW_MAGIC, NEW_VERSION, nlibs, len(data) - strings, _ENDIAN_LITTLE, 0)
    return head + _le_bytes(new) + data[strings:], False


def _names(part: bytes, keys: list[int]) -> list[bytes]:
    """Each entry's library name, read once per distinct offset and at most ``MAX_STRING_BYTES`` of it."""
    seen: dict[int, bytes] = {}
    names = []
    for index, key in enumerate(keys):
        name = seen.get(key)
        if name is None:
            end = part.find(b"\0", key, key + MAX_STRING_BYTES + 1)
            if end < 0:
                raise LdCacheError(f"entry {index}: a name of more than {MAX_STRING_BYTES} bytes, or no end")
            name = seen[key] = part[key:end]
        names.append(name)
    return names


def add_entries(data: bytes | bytearray, libraries: list[tuple[str, str, str]]) -> bytes:
    """The bytes of an ld.so.cache: the cache ``data`` (the image's; ``b""`` for none) with ``libraries``
    added, each ``(soname, path, arch)`` (text). An entry of the image with the same soname and arch is
    replaced (the container asked for the host's driver). Raises ``LdCacheError`` for a cache that cannot
    be read; linear in the size of ``data``."""
    if len(data) > MAX_CACHE_BYTES:
        raise LdCacheError(f"ld.so.cache is larger than {MAX_CACHE_BYTES} bytes")
    part, keep_extension = _new_part(bytes(data))
    nlibs, len_strings, ext_offset, table_end = _read_header(part)
    words = _words(part, _NEW_HEADER.size, nlibs * _WORDS)
    for column in (1, 2):
        _check_offsets(words[column::_WORDS], table_end, len(part), "entry")
    names = _names(part, words[1::_WORDS])
    flags = [_int32(word) for word in words[0::_WORDS]]
    tail = bytearray(part[table_end:])
    sections: list[tuple[int, int, int, int]] = []
    if keep_extension and ext_offset:
        sections = _extension_sections(part, ext_offset)
    else:
        ext_offset = 0
    additions = _placements(libraries, names, flags)
    # The image's entries for the same library and arch, wherever they are (digit runs compare by value, so
    # lib0 and lib00 are one name to libcmp and may sit in either order: found by the property tests), and
    # entries that point into an extension directory that is not kept.
    replaced = {(name, arch_flags) for _position, name, arch_flags, _path in additions}
    dropped = {i for i, name in enumerate(names) if (name, flags[i]) in replaced}
    if not sections:
        dropped.update(i for i, high in enumerate(words[5::_WORDS]) if high & (HWCAP_EXTENSION >> 32))

    count = nlibs - len(dropped) + len(additions)
    shift = (count - nlibs) * _NEW_ENTRY.size
    kept = list(words)
    if shift:
        for column in (1, 2):
            kept[column::_WORDS] = [offset + shift for offset in words[column::_WORDS]]
    out_table, new_strings = _merged_table(_le_bytes(kept), additions, dropped, table_end + shift + len(tail))
    if sections:
        ext_offset = _rebase_extension(
            tail, sections, ext_offset=ext_offset, table_end=table_end, size=len(part), shift=shift
        )
    header = _NEW_HEADER.pack(NEW_MAGIC, NEW_VERSION, count, len_strings + len(new_strings), _ENDIAN_LITTLE, ext_offset)
    return header + bytes(out_table) + bytes(tail) + bytes(new_strings)


def _read_header(part: bytes) -> tuple[int, int, int, int]:
    """``(nlibs, len_strings, extension offset, end of the entry table)`` of a new-format cache, checked."""
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
    return nlibs, len_strings, ext_offset, table_end


def _placements(
    libraries: list[tuple[str, str, str]], names: list[bytes], flags: list[int]
) -> list[tuple[int, bytes, int, bytes]]:
    """Each library as ``(position, name, flags, path)``: the index of the image's entry it goes before (glibc's
    binary search with its ``compare``), in the order ldconfig gives entries of equal hwcap."""

    def before(new_name: bytes, new_flags: int, index: int) -> bool:
        """glibc's ``compare(entry, new) > 0``: the new entry goes before ``entry``."""
        order = libcmp(new_name, names[index])
        return order > 0 or (order == 0 and flags[index] < new_flags)

    additions: list[tuple[int, bytes, int, bytes]] = []
    for soname, path, arch in libraries:
        name, arch_flags = soname.encode("utf-8", "surrogateescape"), FLAGS_BY_ARCH.get(arch)
        if arch_flags is None or b"\0" in name or "\0" in path or not 0 < len(name) <= MAX_STRING_BYTES:
            raise LdCacheError(f"cannot add {soname!r} ({arch}) to ld.so.cache")
        lo, hi = 0, len(names)
        while lo < hi:
            mid = (lo + hi) // 2
            if before(name, arch_flags, mid):
                hi = mid
            else:
                lo = mid + 1
        additions.append((lo, name, arch_flags, path.encode("utf-8", "surrogateescape")))
    additions.sort(key=lambda a: (a[0], _DescendingName(a[1]), -a[2]))
    return additions


def _merged_table(
    kept_bytes: bytes, additions: list[tuple[int, bytes, int, bytes]], dropped: set[int], strings_at: int
) -> tuple[bytearray, bytearray]:
    """The entry table and the new strings: the table walked once, each addition written before the entry at its
    position and its strings appended at ``strings_at``, each dropped entry skipped."""
    new_strings = bytearray()
    out_table = bytearray()
    cursor = 0
    events = sorted([(position, 0, rank) for rank, (position, *_rest) in enumerate(additions)] + [
        (index, 1, 0) for index in dropped
    ])  # fmt: skip
    for index, is_drop, rank in events:
        if index > cursor:
            out_table += kept_bytes[cursor * _NEW_ENTRY.size : index * _NEW_ENTRY.size]
            cursor = index
        if is_drop:
            cursor = index + 1
            continue
        _position, name, entry_flags, path = additions[rank]
        key = strings_at + len(new_strings)
        new_strings += name + b"\0"
        value = strings_at + len(new_strings)
        new_strings += path + b"\0"
        out_table += _NEW_ENTRY.pack(entry_flags, key, value, 0, 0)
    out_table += kept_bytes[cursor * _NEW_ENTRY.size :]
    return out_table, new_strings


def _rebase_extension(
    tail: bytearray,
    sections: list[tuple[int, int, int, int]],
    *,
    ext_offset: int,
    table_end: int,
    size: int,
    shift: int,
) -> int:
    """The kept extension (its header, its sections, the glibc-hwcaps string offsets) moved by ``shift`` in
    ``tail`` (the cache after the entry table, ``size`` the whole part's for the offsets' check); returns the
    extension's new offset."""
    for tag, _flags, offset, length in sections:
        if tag == 1:  # glibc-hwcaps: an array of string offsets, rebased
            at = offset - table_end
            offsets = _words(bytes(tail), at, length // 4)
            _check_offsets(offsets, table_end, size, "glibc-hwcaps section")
            tail[at : at + length] = _le_bytes([o + shift for o in offsets])
    at = ext_offset - table_end
    struct.pack_into("<II", tail, at, EXTENSION_MAGIC, len(sections))
    for i, (tag, section_flags, offset, length) in enumerate(sections):
        _EXT_SECTION.pack_into(tail, at + 8 + i * 16, tag, section_flags, offset + shift, length)
    return ext_offset + shift


def _extension_sections(part: bytes, offset: int) -> list[tuple[int, int, int, int]]:
    """The image's extension directory as ``[(tag, flags, offset, size)]``; every section must lie in the file."""
    if offset % 4 or offset + _EXT_HEADER.size > len(part):
        raise LdCacheError(f"extension directory at {offset} outside the cache")
    magic, count = _EXT_HEADER.unpack_from(part, offset)
    if magic != EXTENSION_MAGIC or count > 64 or offset + 8 + count * 16 > len(part):
        raise LdCacheError(f"malformed extension directory at {offset}")
    sections = [_EXT_SECTION.unpack_from(part, offset + 8 + i * 16) for i in range(count)]
    table_end = _NEW_HEADER.size + struct.unpack_from("<I", part, 20)[0] * _NEW_ENTRY.size
    if offset < table_end:
        raise LdCacheError(f"extension directory at {offset} inside the entry table")
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
