# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""host_files in-process: files written, left, removed and backed up; check mode and diff; refusals; the units, through
a systemctl on PATH that keeps the units' state in a folder (the real systemd runs it in the runtime role's
integration tests on the simulated fleet)."""

import functools
import os
import stat
from pathlib import Path

import pytest

pytestmark = pytest.mark.controller

from ansible_collections.gpufleet.nvidia.plugins.module_utils.base import hostfiles  # noqa: E402
from ansible_collections.gpufleet.nvidia.plugins.modules import host_files  # noqa: E402

# systemctl as far as host_files asks it: is-enabled/is-active answer from marker files, enable/disable/start/stop
# make or remove them, every call is logged.
SYSTEMCTL = """#!/bin/sh
state="$SYSTEMCTL_STATE"
echo "$*" >> "$state/log"
case "$1" in
  daemon-reload) exit 0 ;;
  is-enabled) test -e "$state/$2.enabled" ;;
  is-active) test -e "$state/$2.active" ;;
  enable) touch "$state/$2.enabled" ;;
  disable) rm -f "$state/$2.enabled" ;;
  start) [ "$2" = broken.service ] && { echo "Job for broken.service failed" >&2; exit 1; }; touch "$state/$2.active" ;;
  stop) rm -f "$state/$2.active" ;;
esac
"""


@pytest.fixture
def systemd(tmp_path, monkeypatch):
    """The state folder of the systemctl stand-in (its ``log`` lists the calls)."""
    bindir, state = tmp_path / "bin", tmp_path / "systemd"
    bindir.mkdir()
    state.mkdir()
    (bindir / "systemctl").write_text(SYSTEMCTL)
    (bindir / "systemctl").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    monkeypatch.setenv("SYSTEMCTL_STATE", str(state))
    return state


def calls(state):
    log = state / "log"
    return log.read_text().splitlines() if log.exists() else []


@pytest.fixture
def call(call_main):
    return functools.partial(call_main, host_files)


def test_check_then_write_then_nothing(call, tmp_path, systemd):
    conf, rule = tmp_path / "etc" / "gpufleet" / "x.json", tmp_path / "udev" / "rules.d" / "71-x.rules"
    files = [
        {"path": str(conf), "content": '{"a": 1}\n'},
        {"path": str(rule), "content": "ACTION==add\n", "mode": "0600"},
    ]
    code, result = call(check=True, diff=True, files=files)
    assert code == 0 and result["changed"] and result["changed_files"] == [str(conf), str(rule)]
    assert not conf.exists() and not rule.parent.exists()
    assert [d["after"] for d in result["diff"]] == ['{"a": 1}\n', "ACTION==add\n"]
    assert result["diff"][0]["before_header"] == f"{conf} (absent)" and result["diff"][0]["before"] == ""
    code, result = call(files=files)
    assert code == 0 and result["changed"] and conf.read_text() == '{"a": 1}\n'
    assert stat.S_IMODE(rule.stat().st_mode) == 0o600 and stat.S_IMODE(rule.parent.stat().st_mode) == 0o755
    assert (conf.stat().st_uid, conf.stat().st_gid) == (0, 0)
    assert not result["daemon_reloaded"] and calls(systemd) == []  # nothing under a unit folder
    code, result = call(diff=True, files=files)
    assert code == 0 and not result["changed"] and result["changed_files"] == [] and result["diff"] == []
    assert [p.name for p in conf.parent.iterdir()] == ["x.json"]  # no temporary file left


def test_mode_alone_is_changed_in_place_and_shown(call, tmp_path):
    path = tmp_path / "x.conf"
    path.write_text("same\n")
    path.chmod(0o666)
    inode = path.stat().st_ino
    code, result = call(diff=True, files=[{"path": str(path), "content": "same\n"}])
    assert code == 0 and result["changed"] and stat.S_IMODE(path.stat().st_mode) == 0o644
    assert path.stat().st_ino == inode and path.read_text() == "same\n"
    assert result["diff"][0]["before"].startswith("mode 0666") and result["diff"][0]["after"].startswith("mode 0644")


def test_absent_removes_only_what_is_there_with_a_backup(call, tmp_path):
    kept, gone = tmp_path / "nvidia.conf", tmp_path / "blacklist-nouveau.conf"
    gone.write_text("blacklist nouveau\n")
    files = [{"path": str(gone), "state": "absent", "backup": True}, {"path": str(kept), "state": "absent"}]
    code, result = call(check=True, files=files)
    assert code == 0 and result["changed_files"] == [str(gone)] and gone.exists()
    code, result = call(files=files)
    assert code == 0 and result["changed_files"] == [str(gone)] and not gone.exists()
    backup = result["backups"][str(gone)]
    assert os.path.dirname(backup) == str(tmp_path) and Path(backup).read_text() == "blacklist nouveau\n"
    code, result = call(files=files)
    assert code == 0 and not result["changed"]


def test_backup_before_a_change(call, tmp_path):
    path = tmp_path / "admin.conf"
    path.write_text("old\n")
    code, result = call(files=[{"path": str(path), "content": "new\n", "backup": True}])
    assert code == 0 and path.read_text() == "new\n" and Path(result["backups"][str(path)]).read_text() == "old\n"


@pytest.mark.parametrize("kind", ["link", "folder"])
def test_a_link_or_folder_at_a_path_is_refused_before_anything_is_written(call, tmp_path, kind):
    first, second, target = tmp_path / "first.conf", tmp_path / "second.conf", tmp_path / "elsewhere"
    target.write_text("not ours\n")
    if kind == "link":
        second.symlink_to(target)
    else:
        second.mkdir()
    code, result = call(files=[{"path": str(first), "content": "a\n"}, {"path": str(second), "content": "b\n"}])
    assert code == 1 and result["msg"].startswith(f"{second} is a {kind};") and "remove or move it" in result["msg"]
    assert not first.exists() and target.read_text() == "not ours\n"


@pytest.mark.parametrize(
    ("files", "message"),
    [
        (
            [{"path": "relative.conf", "content": ""}],
            "files[0] (relative.conf): path must be an absolute, normalised path",
        ),
        ([{"path": "/tmp/x", "content": "", "mode": "rw"}], "files[0] (/tmp/x): mode 'rw' is not an octal mode"),
        ([{"path": "/tmp/x", "content": "", "owner": "nobody-here"}], "owner 'nobody-here' is not a user on this host"),
        ([{"path": "/tmp/x"}], "files[0] (/tmp/x): a present file needs its content"),
        ([{"path": "/tmp/x", "content": ""}, {"path": "/tmp/x", "state": "absent"}], "/tmp/x is named twice"),
    ],
)
def test_bad_input_is_named(call, files, message):
    code, result = call(files=files)
    assert code == 1 and message in result["msg"]


def test_units_follow_their_files(call, systemd, tmp_path, monkeypatch):
    unitdir = tmp_path / "etc" / "systemd" / "system"
    monkeypatch.setattr(hostfiles, "UNIT_DIRS", (f"{tmp_path}/etc/systemd/",))
    unit = unitdir / "gpufleet-x.service"
    args = {
        "files": [{"path": str(unit), "content": "[Service]\nType=oneshot\n"}],
        "units": [{"name": "gpufleet-x.service", "enabled": True, "state": "started"}],
    }
    # check mode, the unit file not written yet: systemd is not asked about it
    code, result = call(check=True, **args)
    assert code == 0 and result["changed"] and result["daemon_reloaded"] and calls(systemd) == []
    assert result["units"]["gpufleet-x.service"]["done"] == ["enable", "start"] and not unit.exists()
    code, result = call(**args)
    assert code == 0 and result["units"]["gpufleet-x.service"] == {
        "enabled": True,
        "active": True,
        "done": ["enable", "start"],
    }
    assert calls(systemd) == [
        "daemon-reload",
        "is-enabled gpufleet-x.service",
        "is-active gpufleet-x.service",
        "enable gpufleet-x.service",
        "start gpufleet-x.service",
    ]
    (systemd / "log").unlink()
    code, result = call(**args)
    assert code == 0 and not result["changed"] and not result["daemon_reloaded"]
    assert calls(systemd) == ["is-enabled gpufleet-x.service", "is-active gpufleet-x.service"]
    # stopped and disabled again; in check mode only asked
    args["units"] = [{"name": "gpufleet-x.service", "enabled": False, "state": "stopped"}]
    code, result = call(check=True, **args)
    assert code == 0 and result["changed"] and result["units"]["gpufleet-x.service"]["done"] == ["disable", "stop"]
    assert (systemd / "gpufleet-x.service.active").exists()
    code, result = call(**args)
    assert code == 0 and not (systemd / "gpufleet-x.service.active").exists()
    assert not (systemd / "gpufleet-x.service.enabled").exists()


def test_a_unit_that_fails_to_start_is_named(call, systemd):
    code, result = call(units=[{"name": "broken.service", "enabled": True, "state": "started"}])
    assert code == 1 and result["msg"].startswith("systemctl start broken.service failed (exit 1): Job for broken")
    assert "journalctl -u broken.service" in result["msg"] and result["done"] == ["enable"]


UDEVADM = """#!/bin/sh
echo "$*" >> "$UDEVADM_LOG"
[ -e "$UDEVADM_LOG.fail" ] && { echo "Failed to send reload request" >&2; exit 1; }
exit 0
"""


@pytest.fixture
def udev(tmp_path, monkeypatch):
    """A udev rules folder under tmp_path, udevadm on PATH logging its calls, and udevd's control socket (or not)."""
    import socket

    rules = tmp_path / "lib" / "udev" / "rules.d"
    bindir = tmp_path / "udevbin"
    bindir.mkdir()
    (bindir / "udevadm").write_text(UDEVADM)
    (bindir / "udevadm").chmod(0o755)
    log = tmp_path / "udevadm.log"
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    monkeypatch.setenv("UDEVADM_LOG", str(log))
    monkeypatch.setattr(hostfiles, "UDEV_DIRS", (f"{rules}/",))
    control = tmp_path / "control"
    monkeypatch.setattr(hostfiles, "UDEV_CONTROL", str(control))
    server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    server.bind(str(control))
    yield {"rules": rules, "log": log, "control": control}
    server.close()


def test_a_changed_udev_rule_is_read_again_by_a_running_udev(call, tmp_path, systemd, udev):
    rule, other = udev["rules"] / "71-gpufleet.rules", tmp_path / "etc" / "x.conf"
    files = [{"path": str(rule), "content": "ACTION==add\n"}, {"path": str(other), "content": "x\n"}]
    code, result = call(check=True, files=files)
    assert code == 0 and result["udev_reloaded"] and not udev["log"].exists()  # check mode: would, does not
    code, result = call(files=files)
    assert code == 0 and result["udev_reloaded"] and udev["log"].read_text().splitlines() == ["control --reload-rules"]
    code, result = call(files=files)
    assert code == 0 and not result["changed"] and not result["udev_reloaded"]
    code, result = call(files=[{"path": str(other), "content": "y\n"}])  # no rule changed: udev is not asked
    assert code == 0 and result["changed"] and not result["udev_reloaded"]
    assert len(udev["log"].read_text().splitlines()) == 1
    code, result = call(files=[{"path": str(rule), "state": "absent"}])  # a removed rule too
    assert code == 0 and result["udev_reloaded"] and len(udev["log"].read_text().splitlines()) == 2


def test_no_udev_running_no_reload(call, udev):
    udev["control"].unlink()
    udev["control"].write_text("")  # a plain file is no control socket
    code, result = call(files=[{"path": str(udev["rules"] / "71-gpufleet.rules"), "content": "ACTION==add\n"}])
    assert code == 0 and result["changed"] and not result["udev_reloaded"] and not udev["log"].exists()


def test_a_failed_udev_reload_names_the_rule(call, udev):
    Path(str(udev["log"]) + ".fail").write_text("")
    rule = udev["rules"] / "71-gpufleet.rules"
    code, result = call(files=[{"path": str(rule), "content": "ACTION==add\n"}])
    assert code == 1 and result["failed"]
    assert result["msg"] == (
        f"udevadm control --reload-rules failed (exit 1): Failed to send reload request; the rules written are {rule}"
    )
    assert rule.read_text() == "ACTION==add\n" and result["changed_files"] == [str(rule)]
