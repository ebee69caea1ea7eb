"""The module's main() against temporary files: check mode, diff, backup, idempotence, bad input,
and validation by the real containerd binary when it is installed."""

import json
import shutil

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpufleet.nvidia.plugins.modules import container_runtime

pytestmark = pytest.mark.controller
SHIM = "/usr/local/bin/nvidia-shim"


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
