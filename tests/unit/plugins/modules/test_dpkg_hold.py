# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""dpkg_hold in-process against this machine's real dpkg, on a copy of its status database (dpkg --admindir): held,
released, check mode, diff, a package dpkg does not know, bad names."""

import functools
import os
import shutil
import subprocess

import pytest

pytestmark = pytest.mark.controller

from ansible_collections.gpufleet.nvidia.plugins.module_utils.base import dpkg_hold as hold  # noqa: E402
from ansible_collections.gpufleet.nvidia.plugins.modules import dpkg_hold  # noqa: E402

PACKAGES = ["bash", "coreutils", "libc6"]  # libc6: Multi-Arch same, listed by dpkg as libc6:amd64


@pytest.fixture
def admindir(tmp_path, monkeypatch):
    """A copy of this machine's dpkg database; ``dpkg`` on PATH reads and writes it (``--admindir``)."""
    if not shutil.which("dpkg"):
        pytest.skip("needs dpkg")
    db = tmp_path / "dpkg"
    db.mkdir()
    for name in ("status", "available"):
        if os.path.exists(f"/var/lib/dpkg/{name}"):
            shutil.copy(f"/var/lib/dpkg/{name}", db / name)
    (db / "updates").mkdir()
    (db / "info").mkdir()
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "dpkg").write_text(f'#!/bin/sh\nexec {shutil.which("dpkg")} --admindir={db} "$@"\n')
    (bindir / "dpkg").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    return db


def selection(db, name):
    args = ["dpkg", f"--admindir={db}", "--get-selections", name]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    return next(iter(hold.selections(out).values()), None)


@pytest.fixture
def call(call_main):
    return functools.partial(call_main, dpkg_hold)


def test_hold_check_then_apply_then_nothing_then_release(call, admindir):
    assert [selection(admindir, p) for p in PACKAGES] == ["install", "install", "install"]
    code, result = call(check=True, diff=True, name=PACKAGES)
    assert code == 0 and result["changed"] and result["changed_packages"] == PACKAGES
    assert (
        result["diff"]["after"] == "bash hold\ncoreutils hold\nlibc6 hold\n"
        and "bash install\n" in result["diff"]["before"]
    )
    assert selection(admindir, "bash") == "install"
    code, result = call(name=PACKAGES)
    assert code == 0 and result["changed"] and [selection(admindir, p) for p in PACKAGES] == ["hold"] * 3
    code, result = call(name=[*PACKAGES, "bash", "libc6:amd64"])
    assert code == 0 and not result["changed"], result
    assert result["before"] == {"bash": "hold", "coreutils": "hold", "libc6": "hold", "libc6:amd64": "hold"}
    code, result = call(name=["bash"], selection="install")
    assert code == 0 and result["changed_packages"] == ["bash"] and selection(admindir, "bash") == "install"
    assert selection(admindir, "coreutils") == "hold"


def test_a_package_dpkg_does_not_know_is_reported_not_handed_to_dpkg(call, admindir):
    code, result = call(name=["bash", "nvidia-driver-not-here"])
    assert code == 0 and result["changed"] and result["missing"] == ["nvidia-driver-not-here"]
    assert selection(admindir, "bash") == "hold" and selection(admindir, "nvidia-driver-not-here") is None


@pytest.mark.parametrize("name", ["Bash", "-r", "a b", "x"])
def test_a_bad_name_is_refused(call, admindir, name):
    code, result = call(name=[name])
    assert code == 1 and result["msg"] == f"name: {name!r} is not a Debian package name (such as 'nvidia-driver')"
