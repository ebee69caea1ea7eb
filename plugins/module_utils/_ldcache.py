# Copyright (c) gpufleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
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

import struct
from collections import namedtuple

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

LdCacheEntry = namedtuple("LdCacheEntry", ["soname", "path", "flags", "arch", "hwcap"])


class LdCacheError(ValueError):
    """The bytes are not an ld.so.cache this parser can read; the message says why."""


def entry_arch(flags):
    """Architecture name for an entry's flag word (``x86_64``, ``i386``, ...; ``other`` if unknown)."""
    if flags & FLAG_TYPE_MASK != FLAG_ELF_LIBC6:
        return "other"
    return _ARCH_BY_REQUIRED.get(flags & FLAG_REQUIRED_MASK, "other")


def _cstring(data, offset, where):
    if offset >= len(data):
        raise LdCacheError("string offset %d past the end of the cache (%d bytes) in %s" % (offset, len(data), where))
    end = data.find(b"\0", offset)
    if end < 0:
        raise LdCacheError("unterminated string at offset %d in %s" % (offset, where))
    return data[offset:end].decode("utf-8", "surrogateescape")


def _parse_new(data, base):
    if len(data) - base < _NEW_HEADER.size:
        raise LdCacheError("truncated new-format header at offset %d" % base)
    magic, version, nlibs, _len_strings, endian, _ext = _NEW_HEADER.unpack_from(data, base)
    if magic != NEW_MAGIC or version != NEW_VERSION:
        raise LdCacheError("unknown new-format magic %r%r at offset %d" % (magic, version, base))
    if endian == _ENDIAN_BIG:
        raise LdCacheError("big-endian ld.so.cache is not supported")
    if endian == _ENDIAN_INVALID:
        raise LdCacheError("ld.so.cache marks its own byte order as invalid")
    table = base + _NEW_HEADER.size
    if table + nlibs * _NEW_ENTRY.size > len(data):
        raise LdCacheError(
            "cache claims %d entries but has room for %d" % (nlibs, (len(data) - table) // _NEW_ENTRY.size)
        )
    entries = []
    for i in range(nlibs):
        flags, key, value, _osv, hwcap = _NEW_ENTRY.unpack_from(data, table + i * _NEW_ENTRY.size)
        where = "entry %d" % i
        entries.append(
            LdCacheEntry(
                _cstring(data, base + key, where), _cstring(data, base + value, where), flags, entry_arch(flags), hwcap
            )
        )
    return entries


def _parse_old(data):
    nlibs = struct.unpack_from("<I", data, 12)[0]
    table = 16
    strings = table + nlibs * _OLD_ENTRY.size
    if strings > len(data):
        raise LdCacheError("old-format cache claims %d entries, more than the file holds" % nlibs)
    entries = []
    for i in range(nlibs):
        flags, key, value = _OLD_ENTRY.unpack_from(data, table + i * _OLD_ENTRY.size)
        where = "old entry %d" % i
        entries.append(
            LdCacheEntry(
                _cstring(data, strings + key, where),
                _cstring(data, strings + value, where),
                flags,
                entry_arch(flags),
                0,
            )
        )
    return entries, strings


def parse_ld_so_cache(data):
    """Return the cache's entries (``LdCacheEntry``) in file order, which is the loader's search order.

    When the file carries both layouts, the new one wins (it is what glibc reads); raises
    ``LdCacheError`` for anything else.
    """
    if data.startswith(NEW_MAGIC):
        return _parse_new(data, 0)
    if data.startswith(OLD_MAGIC):
        if len(data) < 16:
            raise LdCacheError("truncated old-format header")
        old_entries, strings = _parse_old(data)
        # A combined file puts the new header right after the old table, 8-byte aligned.
        new_at = data.find(NEW_MAGIC, strings - (strings % 8))
        if new_at >= 0:
            return _parse_new(data, new_at)
        return old_entries
    raise LdCacheError("not an ld.so.cache (magic %r)" % data[:20])


def read_ld_so_cache(path):
    """Read and parse the cache file at ``path`` (a path on this machine, already root-prefixed)."""
    with open(path, "rb") as f:
        return parse_ld_so_cache(f.read())
