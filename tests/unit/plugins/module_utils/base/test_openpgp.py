# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""base.openpgp: ``gpg --dearmor`` and v4 fingerprints without gpg, checked against gpg itself."""

import os
import shutil
import subprocess
import tempfile

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.base import openpgp


@pytest.fixture(scope="module")
def gpg_key():
    """``(armoured, binary from gpg --dearmor, fingerprint)`` of a key made by gpg now (ed25519 and RSA)."""
    if not shutil.which("gpg"):
        pytest.skip("needs gpg to make a key to compare with")
    home = tempfile.mkdtemp(prefix="gf-gpg-", dir="/tmp")
    env = dict(os.environ, GNUPGHOME=home)
    try:
        os.chmod(home, 0o700)
        keys = []
        for uid, algo in (("ed <t@gpufleet.invalid>", "ed25519"), ("rsa <r@gpufleet.invalid>", "rsa2048")):
            cmd = ["gpg", "--batch", "--passphrase", "", "--quick-gen-key", uid, algo, "sign", "never"]
            subprocess.run(cmd, env=env, check=True, capture_output=True)
            colons = subprocess.run(
                ["gpg", "--batch", "--with-colons", "--list-keys", uid], env=env, check=True, capture_output=True
            ).stdout.decode()
            found = [line.split(":")[9] for line in colons.splitlines() if line.startswith("fpr:")]
            fingerprint = found[0]  # (next() in this generator fixture would be pylint's stop-iteration-return)
            armoured = subprocess.run(
                ["gpg", "--batch", "--armor", "--export", fingerprint], env=env, check=True, capture_output=True
            ).stdout
            dearmor = ["gpg", "--dearmor"]
            binary = subprocess.run(dearmor, input=armoured, env=env, check=True, capture_output=True).stdout
            keys.append((armoured, binary, fingerprint))
        yield keys
    finally:
        subprocess.run(["gpgconf", "--kill", "all"], env=env, capture_output=True, check=False)
        shutil.rmtree(home, ignore_errors=True)


def test_dearmor_is_what_gpg_dearmor_writes(gpg_key):
    for armoured, binary, fingerprint in gpg_key:
        assert openpgp.dearmor(armoured) == binary
        assert openpgp.dearmor(binary) == binary  # binary stays as it is
        assert openpgp.fingerprints(binary) == [fingerprint]


def test_headers_and_text_around_the_block_are_skipped(gpg_key):
    armoured, binary, _fingerprint = gpg_key[0]
    begin, rest = armoured.split(b"\n", 1)
    assert rest.startswith(b"\n")  # the empty line that ends the (here: no) header lines
    commented = b"a key follows\n" + begin + b"\nComment: made for a test\nVersion: 1\n" + rest
    assert openpgp.dearmor(commented) == binary


def test_two_keys_in_one_keyring(gpg_key):
    both = gpg_key[0][1] + gpg_key[1][1]
    assert openpgp.fingerprints(both) == [gpg_key[0][2], gpg_key[1][2]]


def test_a_damaged_block_is_refused(gpg_key):
    armoured = gpg_key[0][0].decode()
    lines = armoured.splitlines()
    body = next(i for i, line in enumerate(lines) if len(line) > 40)
    lines[body] = ("A" if lines[body][0] != "A" else "B") + lines[body][1:]
    with pytest.raises(openpgp.KeyDataError, match="CRC-24"):
        openpgp.dearmor("\n".join(lines).encode())
    with pytest.raises(openpgp.KeyDataError, match="END PGP PUBLIC KEY BLOCK"):
        openpgp.dearmor(armoured.split("-----END")[0].encode())


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"<html>404 Not Found</html>", "neither binary"),  # a web server's error page
        (b"", "neither binary"),
        (b"\x99\x00\x05abc", "runs past the end"),  # a header longer than the data
        (b"\xc2\x03abc", "no OpenPGP public key packet"),  # a signature packet (tag 2), no key
        (b"\x9b", "indeterminate length"),
        (b"x" * (openpgp.MAX_KEY_BYTES + 1), "too large"),
    ],
)
def test_what_is_not_a_key(data, message):
    with pytest.raises(openpgp.KeyDataError, match=message):
        openpgp.fingerprints(openpgp.dearmor(data))
