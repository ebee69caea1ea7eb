# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a kernel module file says about itself, read without ``modinfo``: the ``.modinfo`` ELF section (``version``,
``vermagic``) and the appended signature's signer, and the lists of keys a kernel trusts.

A signed module is ``<ELF module><PKCS#7 message><struct module_signature><"~Module signature appended~\\n">``:
the 12-byte information block is ``algo, hash, id_type, signer_len, key_id_len`` (one byte each), 3 pad bytes and
``sig_len`` (big-endian u32); ``id_type`` 2 is a PKCS#7 message (DER, detached data, no certificates) whose
SignerInfo names the key by issuer and serial number, or by subject key identifier with ``sign-file -k``. Sources
(read 2026-11-27): the kernel's Documentation/admin-guide/module-signing.rst ("Signed modules and stripping")
https://www.kernel.org/doc/html/latest/admin-guide/module-signing.html and include/uapi/linux/module_signature.h
https://git.kernel.org/pub/scm/linux/kernel/git/torvalds/linux.git/tree/include/uapi/linux/module_signature.h;
RFC 5652 (CMS SignedData, SignerInfo, IssuerAndSerialNumber) https://www.rfc-editor.org/rfc/rfc5652. ``modinfo``
prints the same two fields as ``signer`` (the issuer's common name) and ``sig_key`` (the serial, or the key
identifier, in colon-separated hex); this module gives them in that form.

Compressed modules: ``.ko.xz`` and ``.ko.gz`` are read through the standard library; ``.ko.zst`` (Ubuntu 24.04's
kernels, Python has no zstd before 3.14) is read by ``modinfo`` when the caller can run it. The signature lies inside
the compressed data (the kernel signs before it compresses).

Standard library only (target Pythons 3.8+).
"""

from __future__ import annotations

import gzip
import lzma
import re
import struct
import zlib
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

MARKER = b"~Module signature appended~\n"
INFO_BLOCK = 12
PKCS7_ID_TYPE = 2
MAX_SECTION = 1 << 20
MAX_MODULE = 512 << 20
_CN_OID = b"\x55\x04\x03"
_STRING_TAGS = {0x0C: "utf-8", 0x13: "ascii", 0x16: "ascii", 0x14: "latin-1", 0x1E: "utf-16-be"}

RunCommand = Callable[[List[str]], Tuple[int, str, str]]
ModuleInfo = Dict[str, Optional[str]]


class ModuleFileError(ValueError):
    """The file is not a kernel module this reader understands (the message says what is wrong)."""


def colon_hex(raw: bytes) -> str:
    """``b'\\x0a\\xbc'`` -> ``0A:BC`` (modinfo's ``sig_key`` form)."""
    return ":".join(f"{b:02X}" for b in raw)


def normal_key_id(text: str | None) -> str:
    """A serial or key identifier in any of the usual spellings (``0A:BC``, ``0abc``, ``10 (0xa)``) -> ``abc``."""
    text = (text or "").strip().lower()
    match = re.search(r"\(0x([0-9a-f]+)\)", text)
    digits = match.group(1) if match else re.sub(r"[^0-9a-f]", "", text)
    return digits.lstrip("0") or ("0" if digits else "")


# --- ELF .modinfo -----------------------------------------------------------------------------------------------


def _section(read: Callable[[int, int], bytes], name: bytes) -> bytes | None:
    ident = read(0, 64)
    if len(ident) < 52 or ident[:4] != b"\x7fELF":
        raise ModuleFileError("not an ELF file")
    order = "<" if ident[5] == 1 else ">"
    if ident[4] == 2:
        shoff = struct.unpack_from(order + "Q", ident, 0x28)[0]
        shentsize, shnum, shstrndx = struct.unpack_from(order + "HHH", ident, 0x3A)
        layout, offset_at = order + "IIQQQQ", (4, 5)
    elif ident[4] == 1:
        shoff = struct.unpack_from(order + "I", ident, 0x20)[0]
        shentsize, shnum, shstrndx = struct.unpack_from(order + "HHH", ident, 0x2E)
        layout, offset_at = order + "IIIIII", (4, 5)
    else:
        raise ModuleFileError(f"unknown ELF class {ident[4]}")
    if not shnum or shstrndx >= shnum or shentsize < struct.calcsize(layout):
        raise ModuleFileError("no section headers")
    table = read(shoff, shentsize * shnum)
    headers = [struct.unpack_from(layout, table, i * shentsize) for i in range(len(table) // shentsize)]
    if len(headers) <= shstrndx:
        raise ModuleFileError("truncated section headers")
    strtab = headers[shstrndx]
    names = read(strtab[offset_at[0]], min(strtab[offset_at[1]], MAX_SECTION))
    for header in headers:
        end = names.find(b"\0", header[0])
        if names[header[0] : end if end >= 0 else None] == name:
            return read(header[offset_at[0]], min(header[offset_at[1]], MAX_SECTION))
    return None


def modinfo_fields(read: Callable[[int, int], bytes]) -> dict[str, str]:
    """The ``.modinfo`` section's ``key=value`` strings (first value of each key); ``read(offset, size)``."""
    section = _section(read, b".modinfo")
    fields: dict[str, str] = {}
    for item in (section or b"").split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep and key:
            fields.setdefault(key.decode("ascii", "replace"), value.decode("utf-8", "replace"))
    return fields


# --- the appended signature ----------------------------------------------------------------------------------------


def _tlv(data: bytes, pos: int) -> tuple[int, int, int]:
    if pos + 2 > len(data):
        raise ModuleFileError("truncated DER")
    tag, length = data[pos], data[pos + 1]
    pos += 2
    if length & 0x80:
        count = length & 0x7F
        if not 0 < count <= 4 or pos + count > len(data):
            raise ModuleFileError("bad DER length")
        length = int.from_bytes(data[pos : pos + count], "big")
        pos += count
    if pos + length > len(data):
        raise ModuleFileError("truncated DER")
    return tag, pos, pos + length


def _children(data: bytes, start: int, end: int) -> Iterator[tuple[int, int, int]]:
    pos = start
    while pos < end:
        tag, inner, pos = _tlv(data, pos)
        yield tag, inner, pos


def _common_name(data: bytes, start: int, end: int) -> str | None:
    for _set, s, e in _children(data, start, end):
        for _seq, s2, e2 in _children(data, s, e):
            parts = list(_children(data, s2, e2))
            if len(parts) == 2 and data[parts[0][1] : parts[0][2]] == _CN_OID:
                tag, vs, ve = parts[1]
                return data[vs:ve].decode(_STRING_TAGS.get(tag, "latin-1"), "replace")
    return None


def pkcs7_signer(der: bytes) -> dict[str, str | None]:
    """The first SignerInfo of a PKCS#7 SignedData: ``{"signer": issuer CN or None, "sig_key": hex}``."""
    _tag, start, end = _tlv(der, 0)
    content = list(_children(der, start, end))
    if len(content) < 2 or content[1][0] != 0xA0:
        raise ModuleFileError("not a PKCS#7 ContentInfo")
    _tag, sd_start, sd_end = _tlv(der, content[1][1])
    sets = [c for c in _children(der, sd_start, sd_end) if c[0] == 0x31]
    if len(sets) < 2:
        raise ModuleFileError("PKCS#7 SignedData without signerInfos")
    infos = list(_children(der, sets[-1][1], sets[-1][2]))
    if not infos:
        raise ModuleFileError("PKCS#7 SignedData with no SignerInfo")
    fields = list(_children(der, infos[0][1], infos[0][2]))
    if len(fields) < 2:
        raise ModuleFileError("short SignerInfo")
    tag, s, e = fields[1]
    if tag == 0x80:  # subjectKeyIdentifier [0] IMPLICIT (sign-file -k)
        return {"signer": None, "sig_key": colon_hex(der[s:e])}
    issuer_and_serial = list(_children(der, s, e))
    if len(issuer_and_serial) != 2:
        raise ModuleFileError("bad IssuerAndSerialNumber")
    (_t, ns, ne), (_t2, ss, se) = issuer_and_serial
    serial = der[ss:se]
    return {"signer": _common_name(der, ns, ne), "sig_key": colon_hex(serial.lstrip(b"\0") or b"\0")}


def signature(tail: bytes) -> dict[str, Any] | None:
    """The signature appended to a module, from the module's last bytes (``tail``, at least the whole signature):
    None when unsigned, else ``{"signer", "sig_key", "id_type"}``."""
    if not tail.endswith(MARKER) or len(tail) < len(MARKER) + INFO_BLOCK:
        return None
    info = tail[-len(MARKER) - INFO_BLOCK : -len(MARKER)]
    _algo, _hash, id_type, signer_len, key_id_len = info[:5]
    sig_len = struct.unpack(">I", info[8:12])[0]
    end = len(tail) - len(MARKER) - INFO_BLOCK
    if id_type != PKCS7_ID_TYPE or signer_len or key_id_len:
        return {"signer": None, "sig_key": None, "id_type": id_type}
    if sig_len > end:
        raise ModuleFileError(f"signature length {sig_len} exceeds the file")
    found = pkcs7_signer(tail[end - sig_len : end])
    return {**found, "id_type": id_type}


# --- whole files ------------------------------------------------------------------------------------------------


def _decompressed(path: str) -> bytes:
    opener = lzma.open if path.endswith(".xz") else gzip.open
    with opener(path, "rb") as f:
        data = f.read(MAX_MODULE + 1)
    if len(data) > MAX_MODULE:
        raise ModuleFileError(f"more than {MAX_MODULE} bytes once decompressed")
    return data


def read_module(path: str) -> ModuleInfo:
    """``{"version", "vermagic", "signer", "sig_key", "signed"}`` of the module file at ``path`` (``.ko``,
    ``.ko.xz``, ``.ko.gz``); raises OSError or ModuleFileError."""
    if path.endswith((".xz", ".gz")):
        data = _decompressed(path)
        fields = modinfo_fields(lambda offset, size: data[offset : offset + size])
        sig = signature(data[-(1 << 16) :])
    else:
        with open(path, "rb") as f:

            def read(offset: int, size: int) -> bytes:
                f.seek(offset)
                return f.read(size)

            fields = modinfo_fields(read)
            size = f.seek(0, 2)
            sig = signature(read(max(0, size - (1 << 16)), 1 << 16))
    return {
        "version": fields.get("version"),
        "vermagic": fields.get("vermagic"),
        "signed": "yes" if sig else "no",
        "signer": (sig or {}).get("signer"),
        "sig_key": (sig or {}).get("sig_key"),
    }


def parse_modinfo(text: str) -> ModuleInfo:
    """``modinfo <file>``'s ``key: value`` lines -> the fields ``read_module`` gives."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key and not key.startswith((" ", "\t")):
            fields.setdefault(key.strip(), value.strip())
    signed = bool(fields.get("sig_id") or fields.get("signer") or fields.get("sig_key"))
    return {
        "version": fields.get("version"),
        "vermagic": fields.get("vermagic"),
        "signed": "yes" if signed else "no",
        "signer": fields.get("signer"),
        "sig_key": fields.get("sig_key"),
    }


def module_info(
    path: str, run_command: RunCommand | None, modinfo: str | None = None
) -> tuple[ModuleInfo | None, str | None]:
    """``(info, None)`` or ``(None, why it could not be read)``: the file itself where Python can read it,
    the program ``modinfo`` (its path) for ``.ko.zst`` when ``run_command`` is given."""
    if path.endswith(".zst"):
        if run_command is None or not modinfo:
            return None, f"{path} is zstd-compressed and modinfo cannot be run here"
        rc, out, err = run_command([modinfo, path])
        if rc != 0:
            return None, f"modinfo {path} failed: {(err or out).strip()[:200]}"
        return parse_modinfo(out), None
    try:
        return read_module(path), None
    except (OSError, ModuleFileError, EOFError, lzma.LZMAError, zlib.error, struct.error) as exc:
        return None, f"cannot read {path}: {exc}"


# --- trusted keys -----------------------------------------------------------------------------------------------

_PROC_KEY = re.compile(r"\sasymmetri\s+(?P<cn>.+?): (?P<id>[0-9a-f]+)(?:: X509\.|$)")


def proc_keys(text: str | None) -> list[dict[str, str]]:
    """The X.509 keys in ``/proc/keys`` (what the running kernel holds: its built-in key, the secondary, platform
    and machine keyrings; the description is ``<subject CN>: <subject key id, else serial>``)."""
    keys = []
    for line in (text or "").splitlines():
        match = _PROC_KEY.search(line)
        if match:
            keys.append({"cn": match.group("cn"), "key_id": normal_key_id(match.group("id")), "source": "kernel"})
    return keys


_CN_IN_SUBJECT = re.compile(r"CN\s*=\s*(?P<cn>[^,/\n]+)")


def mokutil_keys(text: str | None, source: str) -> list[dict[str, str]]:
    """The certificates ``mokutil --list-enrolled`` (or ``--list-new``) prints (OpenSSL's text form, one
    ``[key N]`` block each): ``[{"cn", "serial", "key_id", "source"}]``."""
    keys: list[dict[str, str]] = []
    current: dict[str, str] | None = None
    pending = ""
    for raw in (text or "").splitlines():
        line = raw.strip()
        if re.match(r"^\[key \d+\]$", line):
            current = {"cn": "", "serial": "", "key_id": "", "source": source}
            keys.append(current)
            pending = ""
            continue
        if current is None:
            continue
        if pending and line:
            current[pending] = normal_key_id(line)
            pending = ""
        elif line.startswith("Serial Number:"):
            value = line.split(":", 1)[1].strip()
            if value:
                current["serial"] = normal_key_id(value)
            else:
                pending = "serial"
        elif line.startswith("X509v3 Subject Key Identifier"):
            pending = "key_id"
        elif line.startswith("Subject:"):
            match = _CN_IN_SUBJECT.search(line)
            current["cn"] = match.group("cn").strip() if match else ""
    return keys


def trusting_key(info: ModuleInfo, keys: list[dict[str, str]]) -> dict[str, str] | None:
    """The first key of ``keys`` that signed the module ``info`` describes: the same key identifier (serial or
    subject key id) or, for a key the kernel holds, the same common name; the common names agree where both are
    known."""
    key_id = normal_key_id(info.get("sig_key"))
    signer = (info.get("signer") or "").strip()
    for key in keys:
        same_id = bool(key_id) and key_id in (key.get("serial"), key.get("key_id"))
        # /proc/keys names a key by its subject key identifier, the signature by issuer and serial: there the
        # common name is what can be compared.
        same_name = bool(signer) and signer == key.get("cn") and (not key_id or key.get("source") == "kernel")
        if not (same_id or same_name):
            continue
        if signer and key.get("cn") and signer != key["cn"]:
            continue
        return key
    return None
