# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""apt_prepare in-process against this machine's real dpkg database (dpkg-query) and apt lists (apt-cache policy);
``apt-get update`` and ``dpkg --configure -a`` are stand-ins on PATH that record their calls (they would change this
machine), and dpkg's journal and apt's stamp are files of the test. Also the pure parts: what would change, as
``ansible.builtin.apt`` decides it."""

import functools
import os
import shutil
import subprocess
import time

import pytest

pytestmark = pytest.mark.controller

from ansible_collections.gpufleet.nvidia.plugins.module_utils.base import apt_prepare as ap  # noqa: E402
from ansible_collections.gpufleet.nvidia.plugins.modules import apt_prepare  # noqa: E402

INSTALLED = {
    "bash": ("5.2.15-2+b8", "installed"),
    "nvidia-driver": ("535.261.03-1", "installed"),
    "libnvidia-ml1": ("535.261.03-1", "installed"),
    "nvidia-kernel-dkms": ("535.261.03-1", "config-files"),
    "nvidia-smi": ("535.261.03-1", "not-installed"),
    "firmware-nvidia-gsp": ("535.261.03-1", "unpacked"),
}


def test_parse_installed_keeps_the_installed_architecture_of_a_multiarch_package():
    text = "libc6\t2.36-9\tconfig-files\nlibc6\t2.36-9\tinstalled\nbash\t5.2\tinstalled\nbroken line\n"
    assert ap.parse_installed(text) == {"libc6": ("2.36-9", "installed"), "bash": ("5.2", "installed")}


@pytest.mark.parametrize(
    ("packages", "want"),
    [
        (["bash", "nvidia-driver", "libnvidia-ml1:amd64"], []),  # installed, any version: never upgraded
        (["nvidia-driver=535.261.03-*", "libnvidia-ml1=535.261.03-1"], []),
        (["nvidia-driver=550.*"], ["nvidia-driver=550.*"]),  # installed at another version
        (
            ["nvidia-kernel-dkms", "nvidia-smi", "firmware-nvidia-gsp"],
            ["nvidia-kernel-dkms", "nvidia-smi", "firmware-nvidia-gsp"],
        ),
        (["nvidia-open-580", "bash"], ["nvidia-open-580"]),  # not known to dpkg
    ],
)
def test_pending_present_is_what_ansible_apt_would_install(packages, want):
    assert ap.pending(tuple(packages), "present", INSTALLED) == want


@pytest.mark.parametrize(
    ("packages", "want"),
    [
        (["nvidia-*", "libnvidia-*"], ["nvidia-driver", "nvidia-kernel-dkms", "libnvidia-ml1"]),  # config-files: purged
        (["nvidia-smi", "cuda-drivers*"], []),  # not installed, unknown
        (["firmware-nvidia-gsp", "firmware-*"], ["firmware-nvidia-gsp"]),  # half there counts, once
    ],
)
def test_pending_absent_is_what_a_purge_would_remove(packages, want):
    assert ap.pending(tuple(packages), "absent", INSTALLED) == want


@pytest.fixture
def host_env(tmp_path, monkeypatch):
    """Stand-ins for ``apt-get`` and ``dpkg`` that log their arguments; the real ``dpkg-query`` and ``apt-cache``;
    dpkg's journal folder and apt's lists under ``tmp_path``, the lists updated a minute ago."""
    for tool in ("dpkg-query", "apt-cache"):
        if not shutil.which(tool):
            pytest.skip(f"needs {tool}")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "calls"
    for tool in ("apt-get", "dpkg"):
        exit_code = f'exit "${{{tool.upper().replace("-", "_")}_RC:-0}}"'
        (bindir / tool).write_text(
            f'#!/bin/sh\necho "{tool} $* DEBIAN_FRONTEND=$DEBIAN_FRONTEND" >> {log}\n{exit_code}\n'
        )
        (bindir / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    paths = ap.Paths(
        dpkg_updates=str(tmp_path / "updates"), update_stamp=str(tmp_path / "stamp"), lists=str(tmp_path / "lists")
    )
    os.mkdir(paths.dpkg_updates)
    os.mkdir(paths.lists)
    minute_ago = time.time() - 60
    os.utime(paths.lists, (minute_ago, minute_ago))
    monkeypatch.setattr(ap, "PATHS", paths)
    monkeypatch.setattr(ap, "UPDATE_RETRY_DELAYS", (0, 0))

    def calls():
        return log.read_text().splitlines() if log.exists() else []

    return paths, calls


@pytest.fixture
def call(call_main):
    return functools.partial(call_main, apt_prepare)


def known_uninstalled():
    """A package this machine's apt knows (a candidate) but dpkg has not installed, or None."""
    for name in ("cowsay", "sl", "hello", "figlet"):
        res = subprocess.run(
            ["dpkg-query", "-W", "-f=${db:Status-Status}", name], check=False, capture_output=True, text=True
        )
        policy = ap.parse_policy(
            subprocess.run(["apt-cache", "policy", name], check=False, capture_output=True, text=True).stdout
        )
        if res.stdout != "installed" and policy.get(name, "(none)") != "(none)":
            return name
    return None


def test_a_converged_host_is_one_look_and_nothing_to_do(call, host_env):
    calls = host_env[1]
    code, result = call(packages=["bash", "coreutils", "libc6:amd64"], candidates=["dpkg"], cache_valid_time=3600)
    assert code == 0 and not result["changed"], result
    assert result["pending"] == [] and not result["cache_updated"] and not result["recovered"]
    assert calls() == []


def test_what_is_not_installed_or_at_another_version_is_pending(call, host_env):
    version = subprocess.run(
        ["dpkg-query", "-W", "-f=${Version}", "bash"], check=False, capture_output=True, text=True
    ).stdout
    specs = [f"bash={version}", "bash=0.0-*", "coreutils"]
    other = known_uninstalled()
    if other:
        specs.append(other)
    code, result = call(packages=specs)
    assert code == 0 and result["pending"] == ["bash=0.0-*", *([other] if other else [])], result
    assert not result["cache_updated"]


def test_a_package_apt_does_not_know_updates_the_lists_check_mode_says_so(call, host_env):
    calls = host_env[1]
    code, result = call(check=True, packages=["bash", "gpufleet-no-such-package"])
    assert code == 0 and result["cache_updated"] and calls() == []
    assert result["update_reasons"] == ["no candidate for gpufleet-no-such-package"]
    assert result["pending"] == ["gpufleet-no-such-package"] and not result["changed"]
    code, result = call(packages=["bash", "gpufleet-no-such-package"])
    assert code == 0 and result["cache_updated"] and calls() == ["apt-get update -q DEBIAN_FRONTEND=noninteractive"]


def test_stale_lists_a_changed_source_and_zero_valid_time_update(call, host_env):
    paths, calls = host_env
    assert call(packages=["bash"], cache_valid_time=30)[1]["update_reasons"][0].startswith("the lists are 6")
    assert call(packages=["bash"], update_cache=True)[1]["update_reasons"] == ["the sources changed"]
    assert call(packages=["bash"], cache_valid_time=0)[1]["cache_updated"]
    with open(paths.update_stamp, "w"):
        pass  # apt's stamp, newer than the lists folder, is what counts
    assert not call(packages=["bash"], cache_valid_time=30)[1]["cache_updated"]
    assert len(calls()) == 3
    os.rmdir(paths.lists)
    os.unlink(paths.update_stamp)
    assert call(packages=["bash"])[1]["update_reasons"] == ["the lists were never updated"]


def test_absent_reads_only_dpkg(call, host_env):
    calls = host_env[1]
    code, result = call(state="absent", packages=["bas?", "gpufleet-no-such-*"], cache_valid_time=0)
    assert code == 0 and result["pending"] == ["bash"] and not result["cache_updated"] and calls() == []


def test_a_missing_archive_component_fails_naming_it_and_where(call, host_env):
    components = {"bash": "main", "gpufleet-no-such-gsp": "non-free-firmware"}
    code, result = call(packages=["bash"], components=components)
    assert code == 1 and result["failed"], result
    assert "apt has no candidate for gpufleet-no-such-gsp: enable the non-free-firmware component(s)" in result["msg"]
    assert "/etc/apt/sources.list.d/debian.sources (Components:)" in result["msg"]
    # check mode with the lists stale: the update that would run may bring it, so a warning
    code, result = call(check=True, packages=["bash"], components=components, update_cache=True)
    assert code == 0 and "non-free-firmware" in str(result["warnings"]), result


def test_an_interrupted_dpkg_run_is_finished_first(call, host_env):
    paths, calls = host_env
    open(os.path.join(paths.dpkg_updates, "0001"), "w").close()
    code, result = call(check=True, state="absent")
    assert code == 0 and result["changed"] and result["recovered"] and calls() == []
    code, result = call(state="absent")
    assert code == 0 and result["changed"] and calls() == ["dpkg --configure -a DEBIAN_FRONTEND=noninteractive"]
    code, result = call(state="absent", recover=False)
    assert code == 0 and not result["changed"] and len(calls()) == 1


def test_failures_name_the_command_and_what_to_do(call, host_env, monkeypatch):
    paths, calls = host_env
    monkeypatch.setenv("APT_GET_RC", "100")
    code, result = call(packages=["bash"], update_cache=True)
    assert code == 1 and "apt-get update failed (exit 100, 3 tries)" in result["msg"], result
    assert "fix or remove the failing source" in result["msg"] and len(calls()) == 3
    monkeypatch.setenv("DPKG_RC", "2")
    open(os.path.join(paths.dpkg_updates, "0001"), "w").close()
    code, result = call(state="absent")
    assert code == 1 and result["msg"].startswith(
        "dpkg --configure -a (finishing an interrupted dpkg run) failed (exit 2)"
    )
    assert "run 'dpkg --configure -a' on the host" in result["msg"]


@pytest.mark.parametrize(
    "args",
    [
        {"packages": ["Bash"]},
        {"packages": ["-oDebug::x=1"]},
        {"candidates": ["a b"]},
        {"components": {"nvidia-driver": ""}},
        {"components": {"nvidia-driver=1": "non-free"}},
        {"cache_valid_time": -1},
    ],
)
def test_bad_input_is_refused_naming_the_option(call, host_env, args):
    code, result = call(**args)
    assert code == 1 and result["msg"].split(":")[0] in args, result
