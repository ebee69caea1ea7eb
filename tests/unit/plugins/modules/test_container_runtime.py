# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The module's main() against temporary files: check mode, diff, backup, idempotence, bad input,
and validation by the real containerd binary when it is installed."""

import json
import os
import shutil
import time
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpufleet.nvidia.plugins.module_utils.runtime import runner, service
from ansible_collections.gpufleet.nvidia.plugins.modules import container_runtime

pytestmark = pytest.mark.controller
SHIM = "/usr/local/bin/nvidia-shim"


@pytest.fixture(autouse=True)
def pending_dir(tmp_path, monkeypatch):
    """The restart-pending marks go to a temporary folder, not this machine's /run."""
    path = tmp_path / "restart-pending"
    monkeypatch.setattr(service, "PENDING_DIR", str(path))
    # and the takeover record to one of its own, not this machine's /var/lib
    record = str(tmp_path / "lib" / "takeover.json")
    monkeypatch.setitem(container_runtime.ARGUMENT_SPEC["record_path"], "default", record)
    return path


def run(**args):
    args.setdefault("path", SHIM)
    with patch_module_args(args), pytest.raises(SystemExit) as exc:
        container_runtime.main()
    return exc.value.code


@pytest.fixture
def result(capsys):
    def _run(**args):
        code = run(**args)
        out = json.loads(capsys.readouterr().out)
        out["rc_exit"] = code
        return out

    return _run


def test_docker_check_mode_diff_then_write_backup_and_idempotence(tmp_path, result):
    cfg = tmp_path / "daemon.json"
    cfg.write_text('{\n  "log-driver": "journald"\n}\n')
    before = cfg.read_bytes()
    r = result(engine="docker", config_path=str(cfg), set_as_default=True, _ansible_check_mode=True, _ansible_diff=True)
    assert r["changed"] and cfg.read_bytes() == before
    assert r["diff"][0]["before"] == before.decode()
    assert '"nvidia"' in r["diff"][0]["after"]
    r = result(engine="docker", config_path=str(cfg), set_as_default=True, backup=True, engine_version="20.10.24")
    assert r["changed"] and r["validated_by"] == "parse"
    assert len(r["backup_files"]) == 1
    with open(r["backup_files"][0], "rb") as f:
        assert f.read() == before
    data = json.loads(cfg.read_text())
    assert data["runtimes"]["nvidia"] == {"path": SHIM, "args": []} and data["log-driver"] == "journald"
    written = cfg.read_bytes()
    r = result(engine="docker", config_path=str(cfg), set_as_default=True, engine_version="20.10.24")
    assert not r["changed"] and cfg.read_bytes() == written
    r = result(engine="docker", config_path=str(cfg), state="absent", engine_version="20.10.24")
    assert r["changed"] and cfg.read_bytes() == before


# `nvidia-ctk runtime configure --runtime=docker --cdi.enabled` (1.17), as NVIDIA's toolkit leaves a host
NVIDIA_DAEMON_JSON = """{
    "features": {
        "cdi": true
    },
    "runtimes": {
        "nvidia": {
            "args": [],
            "path": "nvidia-container-runtime"
        }
    }
}
"""


def test_docker_gives_back_nvidias_daemon_json_byte_for_byte(tmp_path, result):
    """present over NVIDIA's daemon.json records what it replaces; absent puts exactly that back and drops the
    record (a second present does not record its own values as NVIDIA's)."""
    cfg, record = tmp_path / "daemon.json", tmp_path / "lib" / "takeover.json"
    cfg.write_text(NVIDIA_DAEMON_JSON)
    common = {"engine": "docker", "config_path": str(cfg), "engine_version": "20.10.24"}
    nvidia = {"path": "/usr/bin/nvidia-container-runtime", "set_as_default": True, "cdi": True}
    r = result(**common, **nvidia, _ansible_check_mode=True)
    assert r.get("changed") and not record.exists(), r  # check mode: no record either
    r = result(**common, path="/usr/bin/nvidia-container-runtime", set_as_default=True, cdi=True)
    assert r["changed"] and json.loads(cfg.read_text())["default-runtime"] == "nvidia"
    recorded = json.loads(record.read_text())["engines"][str(cfg)]
    assert recorded == {"runtime": {"args": [], "path": "nvidia-container-runtime"}, "default-runtime": None, "cdi": 1}
    result(**common, path=SHIM, set_as_default=True, cdi=True)  # another path later: the first values stay
    assert json.loads(record.read_text())["engines"][str(cfg)] == recorded
    r = result(**common, state="absent", cdi=True, _ansible_check_mode=True, _ansible_diff=True)
    assert r["changed"] and r["diff"][0]["after"] == NVIDIA_DAEMON_JSON and record.exists()
    r = result(**common, state="absent", cdi=True)
    assert r["changed"] and cfg.read_text() == NVIDIA_DAEMON_JSON
    assert json.loads(record.read_text())["engines"][str(cfg)] == {**recorded, "given_back": True}
    r = result(**common, state="absent", cdi=True)  # a second uninstall: NVIDIA's runtime is not taken out
    assert not r["changed"] and cfg.read_text() == NVIDIA_DAEMON_JSON
    result(**common, path="/usr/bin/nvidia-container-runtime", set_as_default=True, cdi=True)  # taken over again
    assert json.loads(record.read_text())["engines"][str(cfg)] == recorded


def test_docker_never_records_its_own_runtime_as_the_state_to_give_back(tmp_path, result):
    """A second present that changes our own entry (set_as_default, cdi, another shim path, as the integration
    test's rollback steps do) records nothing: absent still takes our runtime out and gives the original bytes."""
    cfg, record = tmp_path / "daemon.json", tmp_path / "lib" / "takeover.json"
    original = '{\n  "log-level": "warn"\n}\n'
    cfg.write_text(original)
    common = {"engine": "docker", "config_path": str(cfg), "engine_version": "20.10.24"}
    ours = "/usr/local/bin/gpufleet-container-runtime"
    r = result(**common, path=ours)
    assert r.get("changed"), r
    assert result(**common, path=ours, set_as_default=True, cdi=True)["changed"]
    # the shim moved: the entry found still names our shim
    moved = "/opt/gpufleet/bin/gpufleet-container-runtime"
    assert result(**common, path=moved, cdi=True)["changed"]
    assert not record.exists()
    r = result(**common, path=moved, state="absent", cdi=True)
    assert r["changed"] and cfg.read_text() == original


def test_docker_records_nothing_for_a_file_without_those_keys(tmp_path, result):
    cfg = tmp_path / "daemon.json"
    cfg.write_text('{\n  "log-level": "warn"\n}\n')
    result(engine="docker", config_path=str(cfg), engine_version="20.10.24", set_as_default=True, cdi=True)
    assert not (tmp_path / "lib" / "takeover.json").exists()


def test_bad_input_fails_with_path_line_and_leaves_the_file(tmp_path, result):
    cfg = tmp_path / "daemon.json"
    cfg.write_text('{\n  "runtimes": "nvidia"\n}\n')
    r = result(engine="docker", config_path=str(cfg))
    assert r["failed"] and r["line"] == 2 and r["path"] == str(cfg)
    assert str(cfg) + ":2:" in r["msg"]
    assert cfg.read_text() == '{\n  "runtimes": "nvidia"\n}\n'


def test_relative_path_refused(tmp_path, result):
    r = result(engine="docker", config_path=str(tmp_path / "d.json"), path="nvidia-shim")
    assert r["failed"] and "absolute" in r["msg"]


needs_containerd = pytest.mark.skipif(
    not shutil.which("containerd"), reason="containerd binary not installed: engine validation not exercised"
)


@needs_containerd
def test_containerd_drop_in_validated_by_config_dump(tmp_path, result):
    main = tmp_path / "config.toml"
    drop = tmp_path / "conf.d" / "99-gpufleet-nvidia.toml"
    main.write_text(
        'version = 2\n\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\n'
        '  runtime_type = "io.containerd.runc.v2"\n'
        '  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]\n'
        "    SystemdCgroup = true  # kubelet: systemd\n"
    )
    original = main.read_bytes()
    r = result(engine="containerd", config_path=str(main), drop_in=str(drop), set_as_default=True, _ansible_diff=True)
    assert r["changed"] and r["validated_by"] == "containerd config dump", r
    assert len(r["diff"]) == 2 and r["config_version"] == 2
    assert str(drop) in main.read_text() and "# kubelet: systemd" in main.read_text()
    r2 = result(engine="containerd", config_path=str(main), drop_in=str(drop), set_as_default=True)
    assert not r2["changed"]
    r3 = result(engine="containerd", config_path=str(main), drop_in=str(drop), state="absent")
    assert r3["changed"] and not drop.exists() and main.read_bytes() == original


@needs_containerd
def test_containerd_refused_config_is_never_written(tmp_path, result):
    main = tmp_path / "config.toml"
    main.write_text("version = 3\n")  # containerd 1.6 knows nothing of version 3
    r = result(engine="containerd", config_path=str(main), drop_in=False, engine_version="2.1.1")
    # containerd 1.6 parses it without complaint, but the runtime is not where it looks: refused by our check
    assert r["failed"] and "nothing was written" in r["msg"], r
    assert main.read_text() == "version = 3\n"


def test_crio_drop_in_and_cdi_note(tmp_path, result):
    main = tmp_path / "crio.conf"
    main.write_text(
        '[crio.runtime]\ndefault_runtime = "crun"\n[crio.runtime.runtimes.crun]\nmonitor_path = "/usr/bin/conmon"\n'
    )
    drop = tmp_path / "crio.conf.d" / "99-gpufleet-nvidia.conf"
    r = result(engine="crio", config_path=str(main), drop_in=str(drop), cdi=True)
    assert r["changed"] and 'monitor_path = "/usr/bin/conmon"' in drop.read_text()
    assert oct(drop.stat().st_mode & 0o777) == "0o644"
    r = result(engine="crio", config_path=str(main), drop_in=str(drop), state="absent")
    assert r["changed"] and not drop.exists()


def test_backup_never_leaves_a_copy_in_a_drop_in_folder(tmp_path, result):
    """CRI-O reads every file in crio.conf.d: a backup copy there would be configuration too."""
    main = tmp_path / "crio.conf"
    main.write_text('[crio.runtime]\ndefault_runtime = "runc"\n')
    drop = tmp_path / "crio.conf.d" / "99-gpufleet-nvidia.conf"
    assert result(engine="crio", config_path=str(main), drop_in=str(drop), backup=True)["changed"]
    r = result(engine="crio", config_path=str(main), drop_in=str(drop), backup=True, set_as_default=True)
    assert r["changed"] and r["backup_files"] == []
    assert sorted(p.name for p in drop.parent.iterdir()) == ["99-gpufleet-nvidia.conf"]


@pytest.mark.parametrize(
    "engine, version, warns",
    [
        ("docker", "20.10.24", True),
        ("docker", "26.1.5", False),
        ("containerd", "1.6.20", True),
        ("containerd", "1.7.24", False),
    ],
)
def test_cdi_warns_where_the_engine_ignores_it(tmp_path, result, engine, version, warns):
    cfg = tmp_path / ("daemon.json" if engine == "docker" else "config.toml")
    extra = {} if engine == "docker" else {"drop_in": False}
    r = result(engine=engine, config_path=str(cfg), cdi=True, engine_version=version, validate=False, **extra)
    assert r["changed"], r
    # warnings are reported as text or (newer ansible-core) as event dicts; the version names this run's warning
    text = json.dumps(r.get("warnings", []))
    assert (f"cdi=true: {engine} {version}" in text) is warns, text
    if warns:
        assert ("docker 25 and later" if engine == "docker" else "CDI support comes with containerd 1.7") in text


def test_docker_reserved_name_refused_before_anything_is_written(tmp_path, result):
    cfg = tmp_path / "daemon.json"
    r = result(engine="docker", config_path=str(cfg), name="runc", restart=True, engine_version="28.5.2")
    assert r["failed"] and "reserved" in r["msg"] and not cfg.exists()


class FakeSystem:
    """systemctl/journalctl/docker as a failed dockerd shows them: the unit ends up `failed` after the restart
    with the new file, and comes back after the old one is restored."""

    def __init__(self, cfg, good_text):
        self.cfg = cfg
        self.good = good_text
        self.calls = []

    def bin_path(self, name, required=False, opt_dirs=None):
        return f"/usr/bin/{name}"

    def run_command(self, cmd, *args, **kwargs):
        self.calls.append(cmd)
        healthy = self.cfg.read_text() == self.good
        tool = os.path.basename(cmd[0])
        if tool == "docker":
            return (0, "ok", "") if healthy else (1, "", "Cannot connect to the Docker daemon")
        if tool == "systemctl" and cmd[1] == "is-active":
            return (0, "active\n", "") if healthy else (3, "failed\n", "")
        if tool == "journalctl":
            return 0, "failed to start daemon: the engine's own words\n", ""
        return 0, "", ""


def test_restart_gives_up_as_soon_as_systemd_reports_failed_and_rolls_back(tmp_path, result, monkeypatch):
    cfg = tmp_path / "daemon.json"
    good = '{\n  "log-driver": "journald"\n}\n'
    cfg.write_text(good)
    fake = FakeSystem(cfg, good)
    monkeypatch.setattr(container_runtime.AnsibleModule, "get_bin_path", lambda self, *a, **k: fake.bin_path(*a, **k))
    monkeypatch.setattr(container_runtime.AnsibleModule, "run_command", lambda self, *a, **k: fake.run_command(*a, **k))
    start = time.monotonic()
    r = result(engine="docker", config_path=str(cfg), restart=True, restart_timeout=30, engine_version="20.10.24")
    assert time.monotonic() - start < 10, "waited out restart_timeout although the unit had failed"
    assert r["failed"] and r["rolled_back"] and r["engine_back"], r
    assert "the engine's own words" in r["msg"]
    assert cfg.read_text() == good
    journal = next(c for c in fake.calls if os.path.basename(c[0]) == "journalctl")
    assert "--since" in journal and journal[journal.index("--since") + 1].startswith("@")
    systemctl = [c[1:] for c in fake.calls if os.path.basename(c[0]) == "systemctl" and c[1] != "is-active"]
    # systemd's start limit is cleared before each restart, so the engine (not the limit) judges the file
    assert systemctl[:2] == [["reset-failed", "docker"], ["restart", "docker"]], systemctl


@pytest.mark.parametrize(
    ("engine", "drop_in", "expected"),
    [
        ("docker", None, "daemon.json"),
        ("containerd", "conf.d/99-nvidia.toml", "conf.d/99-nvidia.toml"),
        ("containerd", False, "config.toml"),
        ("crio", False, "crio.conf"),
    ],
)
def test_config_file_names_where_the_runtime_is_registered_changed_or_not(tmp_path, result, engine, drop_in, expected):
    main = tmp_path / {"docker": "daemon.json", "containerd": "config.toml", "crio": "crio.conf"}[engine]
    args = {"engine": engine, "config_path": str(main), "validate": False, "engine_version": "1.7.24"}
    if drop_in is not None:
        args["drop_in"] = str(tmp_path / drop_in) if drop_in else False
    first = result(**args)
    again = result(**args)
    assert first["changed"] and not again["changed"], (first, again)
    assert first["config_file"] == again["config_file"] == str(tmp_path / expected)
    assert os.path.isfile(first["config_file"]) and SHIM in (tmp_path / expected).read_text()


def test_backup_is_a_timestamped_copy_with_the_files_mode(tmp_path, result):
    cfg = tmp_path / "daemon.json"
    original = '{\n  "log-driver": "journald"\n}\n'
    cfg.write_text(original)
    cfg.chmod(0o600)
    r = result(engine="docker", config_path=str(cfg), backup=True, validate=False)
    (copy,) = r["backup_files"]
    assert Path(copy).read_text() == original and cfg.read_text() != original
    assert os.stat(copy).st_mode & 0o777 == 0o600 and cfg.stat().st_mode & 0o777 == 0o600


class HealthySystem(FakeSystem):
    """systemctl/docker of an engine that comes back with any file."""

    def run_command(self, cmd, *args, **kwargs):
        self.calls.append(cmd)
        if os.path.basename(cmd[0]) == "systemctl" and cmd[1] == "is-active":
            return 0, "active\n", ""
        return 0, "", ""


def restarts(fake):
    return [c for c in fake.calls if os.path.basename(c[0]) == "systemctl" and c[1] == "restart"]


def test_a_run_killed_between_write_and_restart_is_finished_by_the_next(tmp_path, result, monkeypatch, pending_dir):
    """The files were written, then the run died (the pending mark stays): the rerun finds nothing to change in the
    files, restarts the engine anyway and reports a change; the run after that changes nothing."""
    cfg = tmp_path / "daemon.json"
    cfg.write_text('{\n  "log-driver": "journald"\n}\n')
    fake = HealthySystem(cfg, "")
    monkeypatch.setattr(container_runtime.AnsibleModule, "get_bin_path", lambda self, *a, **k: fake.bin_path(*a, **k))
    monkeypatch.setattr(container_runtime.AnsibleModule, "run_command", lambda self, *a, **k: fake.run_command(*a, **k))
    args = {"engine": "docker", "config_path": str(cfg), "restart": True, "engine_version": "20.10.24"}
    monkeypatch.setattr(runner.Runner, "restart", lambda self: None)
    r = result(**args)  # "killed": the restart never ran
    assert r["changed"] and (pending_dir / "docker").read_text() == f"{cfg}\n"
    monkeypatch.undo()
    monkeypatch.setattr(service, "PENDING_DIR", str(pending_dir))
    monkeypatch.setattr(container_runtime.AnsibleModule, "get_bin_path", lambda self, *a, **k: fake.bin_path(*a, **k))
    monkeypatch.setattr(container_runtime.AnsibleModule, "run_command", lambda self, *a, **k: fake.run_command(*a, **k))
    written = cfg.read_bytes()
    r = result(**args, _ansible_check_mode=True)
    assert r["changed"] and not restarts(fake) and (pending_dir / "docker").exists()
    r = result(**args)
    assert (
        r["changed"] and r["restarted"] and len(restarts(fake)) == 1 and "ended before the restart" in r["changes"][-1]
    )
    assert cfg.read_bytes() == written and not (pending_dir / "docker").exists()
    r = result(**args)
    assert not r["changed"] and len(restarts(fake)) == 1


def test_a_rollback_clears_the_pending_mark(tmp_path, result, monkeypatch, pending_dir):
    cfg = tmp_path / "daemon.json"
    good = '{\n  "log-driver": "journald"\n}\n'
    cfg.write_text(good)
    fake = FakeSystem(cfg, good)
    monkeypatch.setattr(container_runtime.AnsibleModule, "get_bin_path", lambda self, *a, **k: fake.bin_path(*a, **k))
    monkeypatch.setattr(container_runtime.AnsibleModule, "run_command", lambda self, *a, **k: fake.run_command(*a, **k))
    r = result(engine="docker", config_path=str(cfg), restart=True, restart_timeout=5, engine_version="20.10.24")
    assert r["failed"] and r["rolled_back"] and cfg.read_text() == good
    assert not (pending_dir / "docker").exists()


def test_a_file_that_cannot_be_written_puts_back_the_ones_written_before(tmp_path, result, monkeypatch, pending_dir):
    """containerd's main file (its imports line) is written, then the drop-in hits a full disk: the main file gets
    its old bytes back, nothing restarts, the message names the drop-in."""
    main = tmp_path / "config.toml"
    main.write_text('version = 2\n# the admin\'s note\n[plugins."io.containerd.grpc.v1.cri"]\n  enable_cdi = false\n')
    before = main.read_bytes()
    drop = tmp_path / "conf.d" / "99-gpufleet-nvidia.toml"
    real = runner.atomic_write

    def full_disk(path, data, *args, **kwargs):
        if path == str(drop):
            raise OSError(28, "No space left on device")
        return real(path, data, *args, **kwargs)

    monkeypatch.setattr(runner, "atomic_write", full_disk)
    fake = HealthySystem(main, "")
    monkeypatch.setattr(container_runtime.AnsibleModule, "get_bin_path", lambda self, *a, **k: fake.bin_path(*a, **k))
    monkeypatch.setattr(container_runtime.AnsibleModule, "run_command", lambda self, *a, **k: fake.run_command(*a, **k))
    r = result(
        engine="containerd",
        config_path=str(main),
        drop_in=str(drop),
        restart=True,
        validate=False,
        engine_version="1.7.24",
    )
    assert r["failed"] and r["path"] == str(drop), r
    assert f"cannot write {drop}: No space left on device" in r["msg"] and f"{main} got their previous" in r["msg"]
    assert main.read_bytes() == before and not drop.exists()
    assert not restarts(fake) and not (pending_dir / "containerd").exists()
    assert not [f for f in os.listdir(tmp_path) if ".gpufleet-" in f]  # no temporary file left


def test_a_temporary_left_by_a_write_killed_before_its_rename_is_removed_by_the_next_run(tmp_path, result):
    """A SIGKILL inside the atomic write leaves ``.<name>.gpufleet-<pid>-<hex>`` next to the file: the next run
    removes it (its writer is gone), counts that as a change, and then changes nothing; an admin's look-alike
    and a temporary whose writer still runs stay."""
    import subprocess
    import sys

    cfg = tmp_path / "daemon.json"
    cfg.write_text('{\n  "log-level": "warn"\n}\n')
    args = {"engine": "docker", "config_path": str(cfg), "engine_version": "20.10.24"}
    assert result(**args)["changed"]
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    leftover = tmp_path / f".daemon.json.gpufleet-{gone.pid}-0badc0de"
    leftover.write_text('{"half')
    live = tmp_path / f".daemon.json.gpufleet-{os.getpid()}-0badc0de"  # a writer that runs (this process)
    live.write_text("{}")
    admin = tmp_path / ".daemon.json.gpufleet-notes"
    admin.write_text("mine\n")
    written = cfg.read_bytes()
    r = result(**args, _ansible_check_mode=True)
    assert r["changed"] and r["removed_temporary_files"] == [str(leftover)] and leftover.exists()
    r = result(**args)
    assert r["changed"] and r["removed_temporary_files"] == [str(leftover)] and r["files"] == []
    assert any(str(leftover) in c for c in r["changes"])
    assert not leftover.exists() and live.exists() and admin.read_text() == "mine\n"
    assert cfg.read_bytes() == written
    r = result(**args)
    assert not r["changed"] and "removed_temporary_files" not in r
