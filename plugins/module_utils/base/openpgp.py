# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""OpenPGP public keys as apt's ``signed-by`` keyrings want them: ``gpg --dearmor`` without gpg.

A repository publishes its key ASCII-armoured (RFC 4880 section 6.2; NVIDIA's ``gpgkey`` is); apt's ``gpgv``
reads a keyring file named ``*.gpg`` only as binary OpenPGP packets, which is what ``gpg --dearmor`` writes:
the armour's base64 body, decoded. ``dearmor`` does that (checking the CRC-24 when present), ``packets`` walks
the packet headers (section 4.2, old and new format) and ``fingerprints`` gives the v4 fingerprint of each
primary key (section 12.2: SHA-1 over 0x99, a two-octet length and the key packet's body).

Standard library only (target Pythons 3.8+).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from dataclasses import dataclass

from . import fileio
from .runner import Failure, Host, Result, octal_mode

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Iterator

PUBLIC_KEY = 6  # packet tag of a primary public key
ARMOR_BEGIN = "-----BEGIN PGP PUBLIC KEY BLOCK-----"
ARMOR_END = "-----END PGP PUBLIC KEY BLOCK-----"
MAX_KEY_BYTES = 1 << 20  # a keyring of a few keys is kilobytes; anything this large is not one


class KeyDataError(ValueError):
    """The data is not an OpenPGP public key (the message says why)."""


def _crc24(data: bytes) -> int:
    crc = 0xB704CE
    for octet in data:
        crc ^= octet << 16
        for _bit in range(8):
            crc <<= 1
            if crc & 0x1000000:
                crc ^= 0x1864CFB
    return crc & 0xFFFFFF


def dearmor(data: bytes) -> bytes:
    """Binary OpenPGP packets from ``data``: decoded when it is an armoured public key block, as is when binary."""
    if len(data) > MAX_KEY_BYTES:
        raise KeyDataError(f"{len(data)} bytes is too large for a repository key (at most {MAX_KEY_BYTES})")
    text = data.decode("ascii", errors="replace")
    if ARMOR_BEGIN not in text:
        if data[:1] and data[0] & 0x80:
            return bytes(data)
        raise KeyDataError(f"neither binary OpenPGP data nor an armoured block ({ARMOR_BEGIN})")
    lines = [line.strip() for line in text.split(ARMOR_BEGIN, 1)[1].splitlines()]
    if ARMOR_END not in lines:
        raise KeyDataError(f"the armoured block has no {ARMOR_END} line")
    lines = lines[: lines.index(ARMOR_END)]
    if "" in lines[1:]:  # header lines ("Comment: ...", "Version: ...") end at the first empty line
        lines = lines[lines.index("", 1) + 1 :]
    checksum = None
    if lines and lines[-1].startswith("="):
        checksum = lines.pop()[1:]
    try:
        body = base64.b64decode("".join(lines), validate=True)
        expected = base64.b64decode(checksum, validate=True) if checksum is not None else None
    except (binascii.Error, ValueError) as exc:
        raise KeyDataError(f"the armoured block is not valid base64: {exc}") from None
    if expected is not None and int.from_bytes(expected, "big") != _crc24(body):
        raise KeyDataError("the armoured block's CRC-24 checksum does not match its body (damaged in transit?)")
    return body


def packets(data: bytes) -> Iterator[tuple[int, bytes]]:
    """``(tag, body)`` of each packet in binary OpenPGP ``data``; raises ``KeyDataError`` on a malformed header."""
    pos = 0
    while pos < len(data):
        head = data[pos]
        if not head & 0x80:
            raise KeyDataError(f"octet {pos} is not an OpenPGP packet header")
        if head & 0x40:  # new format
            tag, pos = head & 0x3F, pos + 1
            first = data[pos] if pos < len(data) else 0
            if first < 192:
                length, pos = first, pos + 1
            elif first < 224:
                length, pos = ((first - 192) << 8) + data[pos + 1] + 192, pos + 2
            elif first == 255:
                length, pos = int.from_bytes(data[pos + 1 : pos + 5], "big"), pos + 5
            else:
                raise KeyDataError(f"packet at octet {pos - 1} has a partial body length (not a key packet)")
        else:  # old format
            tag, kind, pos = (head >> 2) & 0x0F, head & 0x03, pos + 1
            if kind == 3:
                raise KeyDataError(f"packet at octet {pos - 1} has an indeterminate length (not a key packet)")
            size = (1, 2, 4)[kind]
            length, pos = int.from_bytes(data[pos : pos + size], "big"), pos + size
        if pos + length > len(data):
            raise KeyDataError(f"packet at octet {pos} runs past the end of the data")
        yield tag, data[pos : pos + length]
        pos += length


def fingerprints(data: bytes) -> list[str]:
    """The fingerprints (upper-case hex; v4 keys, SHA-1) of the primary public keys in binary ``data``.

    Raises ``KeyDataError`` when ``data`` holds no primary public key (a signature, a secret key, garbage)."""
    found = []
    for tag, body in packets(data):
        if tag != PUBLIC_KEY:
            continue
        if body[:1] == b"\x04":
            found.append(hashlib.sha1(b"\x99" + len(body).to_bytes(2, "big") + body).hexdigest().upper())  # noqa: S324
        else:  # v5/v6 keys: fingerprinted with SHA-256 over a different prefix; named by version here
            found.append(f"v{body[0] if body else 0}-key")
    if not found:
        raise KeyDataError("no OpenPGP public key packet in the data")
    return found


# The apt_keyring module's work.


@dataclass(frozen=True)
class KeyringRequest:
    """The keyring to write: ``dest``, from ``url`` or ``content``, checked against ``fingerprints`` (normalised,
    upper case without spaces; empty: any key), with ``mode``."""

    dest: str
    url: str | None
    content: str | None
    fingerprints: frozenset[str]
    mode: int
    timeout: int

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> KeyringRequest:
        mode = octal_mode(params["mode"], "mode:")
        wanted = frozenset(f.replace(" ", "").upper() for f in params["fingerprints"])
        return cls(params["dest"], params["url"], params["content"], wanted, mode, params["timeout"])


@dataclass
class KeyringResult(Result):
    """``apt_keyring``'s return values (RETURN)."""

    changed: bool
    dest: str
    fingerprints: list[str]
    diff: dict[str, str] | None = None


def _keyring_diff(request: KeyringRequest, before: bytes | None, before_mode: int | None, found: list[str]) -> dict:
    try:
        old = ", ".join(fingerprints(before)) if before is not None else ""
    except KeyDataError:
        old = f"({len(before or b'')} bytes that are not an OpenPGP key)"
    return {
        "before_header": request.dest if before is not None else "/dev/null",
        "after_header": request.dest,
        "before": f"keys: {old}\nmode: {oct(before_mode) if before_mode is not None else ''}\n",
        "after": f"keys: {', '.join(found)}\nmode: {oct(request.mode)}\n",
    }


def write_keyring(request: KeyringRequest, host: Host, *, fetch: Callable[[str, int], bytes]) -> KeyringResult:
    """The ``apt_keyring`` module: dearmor the key (``fetch(url, timeout)`` or the content), check its fingerprints,
    write the keyring when its bytes or mode differ."""
    dest, source = request.dest, request.url or "content"
    data = fetch(request.url, request.timeout) if request.url else (request.content or "").encode()
    try:
        keyring = dearmor(data)
        found = fingerprints(keyring)
    except KeyDataError as exc:
        raise Failure(f"{source}: not a usable repository key for {dest}: {exc}") from None
    wanted = request.fingerprints
    unexpected = [f for f in found if wanted and f not in wanted]
    if unexpected:
        raise Failure(
            f"{source}: key {', '.join(unexpected)} is not one of the expected fingerprints "
            f"{', '.join(sorted(wanted))}; nothing written to {dest}",
            fingerprints=found,
        )
    try:
        with open(dest, "rb") as f:
            before = f.read()
        before_mode = os.stat(dest).st_mode & 0o7777
    except FileNotFoundError:
        before, before_mode = None, None
    result = KeyringResult(changed=before != keyring or before_mode != request.mode, dest=dest, fingerprints=found)
    if host.diff:
        result.diff = _keyring_diff(request, before, before_mode, found)
    if result.changed and not host.check_mode:
        try:
            fileio.atomic_write(dest, keyring, request.mode, makedirs=True)
        except OSError as exc:
            raise Failure(f"{dest}: could not write the keyring: {exc}") from None
    return result
