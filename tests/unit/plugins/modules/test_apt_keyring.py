# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""apt_keyring in-process: de-armoured keyring from a file:// URL or content; check, diff, idempotence, refusals."""

import functools
import os
import shutil
import stat
import subprocess
import tempfile

import pytest

pytestmark = pytest.mark.controller

from ansible_collections.gpufleet.nvidia.plugins.modules import apt_keyring  # noqa: E402


@pytest.fixture(scope="module")
def key(tmp_path_factory):
    """``(armoured path, binary from gpg --dearmor, fingerprint)`` of a key gpg makes now."""
    if not shutil.which("gpg"):
        pytest.skip("needs gpg to make a key")
    home = tempfile.mkdtemp(prefix="gf-gpg-", dir="/tmp")
    env = dict(os.environ, GNUPGHOME=home)
    try:
        os.chmod(home, 0o700)
        uid = "repo <k@gpufleet.invalid>"
        subprocess.run(
            ["gpg", "--batch", "--passphrase", "", "--quick-gen-key", uid, "ed25519", "sign", "never"],
            env=env,
            check=True,
            capture_output=True,
        )
        armoured = subprocess.run(["gpg", "--armor", "--export", uid], env=env, check=True, capture_output=True).stdout
        binary = subprocess.run(["gpg", "--dearmor"], input=armoured, env=env, check=True, capture_output=True).stdout
        colons = subprocess.run(["gpg", "--with-colons", "--list-keys", uid], env=env, check=True, capture_output=True)
        fingerprint = next(x.split(":")[9] for x in colons.stdout.decode().splitlines() if x.startswith("fpr:"))
    finally:
        subprocess.run(["gpgconf", "--kill", "all"], env=env, capture_output=True, check=False)
        shutil.rmtree(home, ignore_errors=True)
    path = tmp_path_factory.mktemp("key") / "gpgkey"
    path.write_bytes(armoured)
    return path, binary, fingerprint


@pytest.fixture
def call(call_main):
    return functools.partial(call_main, apt_keyring)


def test_check_then_write_then_nothing(call, key, tmp_path):
    path, binary, fingerprint = key
    dest = tmp_path / "keyrings" / "nvidia-container-toolkit-keyring.gpg"
    url = path.as_uri()
    code, result = call(check=True, diff=True, url=url, dest=str(dest))
    assert code == 0 and result["changed"] and result["fingerprints"] == [fingerprint] and not dest.exists()
    assert result["diff"]["before_header"] == "/dev/null" and fingerprint in result["diff"]["after"]
    code, result = call(url=url, dest=str(dest))
    assert code == 0 and result["changed"]
    assert dest.read_bytes() == binary and stat.S_IMODE(dest.stat().st_mode) == 0o644
    code, result = call(url=url, dest=str(dest), fingerprints=[" ".join([fingerprint[:20], fingerprint[20:]]).lower()])
    assert code == 0 and not result["changed"]


def test_an_armoured_file_in_place_is_replaced_by_the_binary_keyring(call, key, tmp_path):
    path, binary, _fingerprint = key
    dest = tmp_path / "k.gpg"
    dest.write_bytes(path.read_bytes())
    dest.chmod(0o600)
    code, result = call(diff=True, content=path.read_text(), dest=str(dest))
    assert code == 0 and result["changed"] and dest.read_bytes() == binary
    assert stat.S_IMODE(dest.stat().st_mode) == 0o644 and "mode: 0o600" in result["diff"]["before"]


def test_an_unexpected_key_is_refused_and_nothing_is_written(call, key, tmp_path):
    path, _binary, fingerprint = key
    dest = tmp_path / "k.gpg"
    code, result = call(url=path.as_uri(), dest=str(dest), fingerprints=["0" * 40])
    assert code == 1 and fingerprint in result["msg"] and str(dest) in result["msg"] and not dest.exists()


def test_what_is_not_a_key_is_refused(call, tmp_path):
    page = tmp_path / "gpgkey"
    page.write_text("<html>Not Found</html>")
    code, result = call(url=page.as_uri(), dest=str(tmp_path / "k.gpg"))
    assert code == 1 and "not a usable repository key" in result["msg"] and page.as_uri() in result["msg"]
    code, result = call(url=(tmp_path / "missing").as_uri(), dest=str(tmp_path / "k.gpg"))
    assert code == 1 and "could not fetch" in result["msg"]
