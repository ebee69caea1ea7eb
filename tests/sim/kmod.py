# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Stand-in kernel modules and boot trees for the next-boot pairing tests.

``elf_module`` writes a minimal ELF64 relocatable file with a ``.modinfo`` section (``version=``, ``vermagic=``)
and a section-name table, the two things the pairing reads; ``sign`` appends a module signature the way the
kernel's ``scripts/sign-file`` does: a detached PKCS#7 (CMS) message made by OpenSSL (``openssl cms -sign -binary
-noattr -nocerts``, sign-file's flags), the 12-byte ``struct module_signature`` (id_type 2, ``sig_len``
big-endian) and ``~Module signature appended~\\n``. ``test_key`` makes a self-signed certificate with a chosen
subject and serial, standing in for a MOK or a distribution's key.
"""

from __future__ import annotations

import struct
import subprocess
from pathlib import Path

MARKER = b"~Module signature appended~\n"


def elf_module(version: str, vermagic: str, name: str = "nvidia") -> bytes:
    """An ELF64 little-endian ``ET_REL`` with sections: null, ``.modinfo``, ``.shstrtab``."""
    modinfo = b"".join(
        f"{k}={v}\0".encode()
        for k, v in (("license", "Dual MIT/GPL"), ("version", version), ("name", name), ("vermagic", vermagic))
    )
    shstrtab = b"\0.modinfo\0.shstrtab\0"
    header_size = 64
    modinfo_off = header_size
    shstr_off = modinfo_off + len(modinfo)
    shoff = (shstr_off + len(shstrtab) + 7) & ~7
    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + b"\0" * 8
    header = ident + struct.pack("<HHIQQQIHHHHHH", 1, 62, 1, 0, 0, shoff, 0, 64, 0, 0, 64, 3, 2)
    body = header + modinfo + shstrtab
    body += b"\0" * (shoff - len(body))
    null = b"\0" * 64
    sec_modinfo = struct.pack("<IIQQQQIIQQ", 1, 1, 2, 0, modinfo_off, len(modinfo), 0, 0, 1, 0)
    sec_shstr = struct.pack("<IIQQQQIIQQ", 10, 3, 0, 0, shstr_off, len(shstrtab), 0, 0, 1, 0)
    return body + null + sec_modinfo + sec_shstr


def test_key(directory: Path, common_name: str, serial: int) -> tuple[Path, Path]:
    """``(key.pem, cert.pem)``: an EC P-256 key and its self-signed certificate ``CN=<common_name>``."""
    directory.mkdir(parents=True, exist_ok=True)
    key, cert = directory / "key.pem", directory / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", f"/CN={common_name}",
         "-set_serial", str(serial)],
        check=True, capture_output=True,
    )  # fmt: skip
    return key, cert


def sign(module: bytes, key: Path, cert: Path, *, keyid: bool = False) -> bytes:
    """``module`` with an appended signature by ``key`` (named by issuer and serial, or by subject key id)."""
    argv = ["openssl", "cms", "-sign", "-binary", "-noattr", "-nocerts", "-nosmimecap", "-outform", "DER",
            "-md", "sha256", "-signer", str(cert), "-inkey", str(key)] + (["-keyid"] if keyid else [])  # fmt: skip
    der = subprocess.run(argv, input=module, check=True, capture_output=True).stdout
    return module + der + struct.pack(">BBBBB3xI", 0, 0, 2, 0, 0, len(der)) + MARKER


def mokutil_listing(cert: Path) -> str:
    """What ``mokutil --list-enrolled`` prints for ``cert`` (a ``[key 1]`` block of OpenSSL's text form)."""
    text = subprocess.run(
        ["openssl", "x509", "-in", str(cert), "-noout", "-text"], check=True, capture_output=True, text=True
    ).stdout
    return f"[key 1]\nSHA1 Fingerprint: 00\n{text}"


def write(root: Path, inner: str, data: bytes | str, mode: int = 0o644) -> Path:
    path = root / inner.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    (path.write_bytes if isinstance(data, bytes) else path.write_text)(data)
    path.chmod(mode)
    return path


def ubuntu_grub(root: Path, kernels: list[str], saved_entry: str | None = None) -> None:
    """An Ubuntu-shaped ``/boot/grub``: the newest kernel first, the rest under "Advanced options"."""
    uuid = "0f3c-77"
    lines = [
        'if [ "${next_entry}" ] ; then',
        '   set default="${next_entry}"',
        "else",
        '   set default="${saved_entry}"' if saved_entry else '   set default="0"',
        "fi",
    ]
    first = kernels[0]
    lines += [
        f"menuentry 'Ubuntu' --class ubuntu $menuentry_id_option 'gnulinux-simple-{uuid}' {{",
        f"\tlinux\t/boot/vmlinuz-{first} root=UUID={uuid} ro",
        "}",
    ]
    lines.append(f"submenu 'Advanced options for Ubuntu' $menuentry_id_option 'gnulinux-advanced-{uuid}' {{")
    for k in kernels:
        lines += [
            f"\tmenuentry 'Ubuntu, with Linux {k}' --class ubuntu "
            f"$menuentry_id_option 'gnulinux-{k}-advanced-{uuid}' {{",
            f"\t\tlinux\t/boot/vmlinuz-{k} root=UUID={uuid} ro",
            "\t}",
        ]
    lines.append("}")
    write(root, "/boot/grub/grub.cfg", "\n".join(lines) + "\n")
    env = "# GRUB Environment Block\n" + (f"saved_entry={saved_entry}\n" if saved_entry else "")
    write(root, "/boot/grub/grubenv", env + "#" * (1024 - len(env)))
    for k in kernels:
        write(root, f"/boot/vmlinuz-{k}", b"kernel")
