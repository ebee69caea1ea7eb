# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""host_programs in-process: sources from the loaded package (pkgutil); writes, idempotence, check, diff, absent."""

import json
import os
import stat
import sys

import pytest

pytestmark = pytest.mark.controller

from ansible.module_utils.testing import patch_module_args  # noqa: E402

from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi import spec as _cdi  # noqa: E402
from ansible_collections.gpufleet.nvidia.plugins.module_utils.hostprog import install as _host_programs  # noqa: E402
from ansible_collections.gpufleet.nvidia.plugins.modules import host_programs  # noqa: E402


def _package_files():
    modules = _host_programs.payload(_host_programs.read_payload_source)
    return len(modules) + len(_host_programs.packages(modules))


@pytest.fixture
def call(capsys, tmp_path):
    base = {
        "bindir": str(tmp_path / "bin"),
        "libdir": str(tmp_path / "lib"),
        "runtime": "/usr/bin/crun",
        "config_path": str(tmp_path / "etc" / "gpufleet" / "runtime.json"),
    }

    def run(check=False, diff=False, **args):
        extra = {"_ansible_check_mode": check, "_ansible_diff": diff}
        with patch_module_args({**base, **args, **extra}), pytest.raises(SystemExit) as exit_info:
            host_programs.main()
        return exit_info.value.code, json.loads(capsys.readouterr().out)

    return run, tmp_path


def test_payload_imports_every_module_the_programs_need():
    """What the module imports (and so what Ansible ships) holds the computed payload, read the way the module reads."""
    modules = _host_programs.payload(_host_programs.read_payload_source)
    prefix = _host_programs.MODULE_UTILS + "."
    assert set(modules) <= {n[len(prefix) :] for n in sys.modules if n.startswith(prefix)}


def test_the_module_imports_every_program_by_name():
    """Ansible ships what the module's source imports: each program's module must be named there (in a test process
    every module is in ``sys.modules`` anyway, so the check above cannot see a missing one)."""
    with open(host_programs.__file__) as f:
        source = f.read()
    for module, _function in _host_programs.PROGRAMS.values():
        package, name = module.rsplit(".", 1)
        assert f"module_utils.{package} import {name} as " in source, module


def test_check_mode_writes_nothing_and_reports_every_file(call):
    run, tmp = call
    code, result = run(check=True, diff=True)
    assert code == 0 and result["changed"]
    # the package's __init__ and modules, one launcher per default program (gpufleet-mig-boot is the mig role's),
    # the shim's configuration
    default = _host_programs.DEFAULT_PROGRAMS
    assert "gpufleet-mig-boot" in _host_programs.PROGRAMS and "gpufleet-mig-boot" not in default
    assert len(result["changed_files"]) == len(result["files"]) == _package_files() + len(default) + 1
    assert not (tmp / "bin").exists() and not (tmp / "lib").exists() and not (tmp / "etc").exists()
    assert result["runtime_config"] == {
        "path": str(tmp / "etc" / "gpufleet" / "runtime.json"),
        "accept_envvar_unprivileged": True,
        "accept_volume_mounts": False,
        "accept_cdi_annotations_unprivileged": True,
        "debug_log": "",
    }
    assert result["diff"][0]["before_header"] == "/dev/null"


def test_install_copies_the_loaded_sources_then_is_idempotent(call):
    run, tmp = call
    code, result = run()
    assert code == 0 and result["changed"] and result["runtime"] == "/usr/bin/crun"
    shim = tmp / "bin" / "gpufleet-container-runtime"
    assert stat.S_IMODE(shim.stat().st_mode) == 0o755 and "/usr/bin/crun" in shim.read_text()
    with open(_cdi.__file__, encoding="utf-8") as f:
        assert (tmp / "lib" / "gpufleet_nvidia" / "cdi" / "spec.py").read_text() == f.read()
    assert result["programs"]["gpufleet-cdi-hook"] == str(tmp / "bin" / "gpufleet-cdi-hook")
    code, again = run()
    assert code == 0 and not again["changed"] and again["changed_files"] == [] and again["digest"] == result["digest"]


def test_only_changed_bytes_or_mode_are_rewritten(call):
    run, tmp = call
    run()
    hook = tmp / "bin" / "gpufleet-cdi-hook"
    module = tmp / "lib" / "gpufleet_nvidia" / "cdi" / "spec.py"
    os.chmod(str(hook), 0o700)
    module.write_text("tampered\n")
    _code, result = run(diff=True)
    assert sorted(result["changed_files"]) == sorted([str(hook), str(module)])
    assert stat.S_IMODE(hook.stat().st_mode) == 0o755 and module.read_text() != "tampered\n"
    assert any(d["before"] == "tampered\n" for d in result["diff"])


def test_a_subset_and_absent(call):
    run, tmp = call
    run(programs=["gpufleet-cdi-hook", "gpufleet-dev-char-links"])
    assert sorted(os.listdir(str(tmp / "bin"))) == ["gpufleet-cdi-hook", "gpufleet-dev-char-links"]
    _code, gone = run(state="absent", programs=["gpufleet-cdi-hook", "gpufleet-dev-char-links"], check=True)
    assert gone["changed"] and (tmp / "bin" / "gpufleet-cdi-hook").exists()
    _code, gone = run(state="absent", programs=["gpufleet-cdi-hook", "gpufleet-dev-char-links"])
    assert gone["changed"] and os.listdir(str(tmp / "bin")) == [] and not (tmp / "lib" / "gpufleet_nvidia").exists()
    _code, again = run(state="absent")
    assert not again["changed"]


def test_unwritable_bindir_fails_naming_the_file(call):
    run, tmp = call
    (tmp / "bin").write_text("a file, not a folder")
    code, result = run()
    assert code == 1 and "cannot write" in result["msg"] and str(tmp / "bin") in result["msg"]


CONFIG = ("etc", "gpufleet", "runtime.json")


def test_shim_configuration_defaults_are_nvidias_and_written_root_style(call):
    run, tmp = call
    code, result = run()
    config = tmp.joinpath(*CONFIG)
    assert code == 0 and str(config) in result["changed_files"] and str(config) in result["files"]
    assert json.loads(config.read_text()) == {
        "accept_cdi_annotations_unprivileged": True,
        "accept_envvar_unprivileged": True,
        "accept_volume_mounts": False,
    }
    assert config.read_text().endswith("}\n")
    assert stat.S_IMODE(config.stat().st_mode) == 0o644 and config.stat().st_uid == os.geteuid()
    assert stat.S_IMODE(config.parent.stat().st_mode) & 0o022 == 0  # created 0755 (less under a strict umask)


def test_kubernetes_node_settings_change_only_the_configuration_and_its_diff_tells(call):
    run, tmp = call
    _code, first = run()
    config = tmp.joinpath(*CONFIG)
    before = config.read_text()
    kube = {
        "accept_envvar_unprivileged": False,
        "accept_volume_mounts": True,
        "accept_cdi_annotations_unprivileged": False,
    }
    _code, check = run(check=True, diff=True, **kube)
    assert check["changed"] and check["changed_files"] == [str(config)] and config.read_text() == before
    assert check["diff"] == [
        {
            "before_header": str(config),
            "after_header": str(config),
            "before": before,
            "after": '{\n  "accept_cdi_annotations_unprivileged": false,\n  "accept_envvar_unprivileged": false,\n'
            '  "accept_volume_mounts": true\n}\n',
        }
    ]
    _code, applied = run(**kube)
    assert applied["changed_files"] == [str(config)] and applied["digest"] == first["digest"]
    assert config.read_text() == check["diff"][0]["after"]
    assert applied["runtime_config"]["accept_envvar_unprivileged"] is False
    assert applied["runtime_config"]["accept_cdi_annotations_unprivileged"] is False
    _code, again = run(**kube)
    assert not again["changed"]


def test_configuration_mode_and_symlink_are_repaired(call):
    run, tmp = call
    run()
    config = tmp.joinpath(*CONFIG)
    os.chmod(str(config), 0o666)  # noqa: S103 - the permissive mode the module must repair
    _code, result = run(diff=True)
    assert result["changed_files"] == [str(config)] and "(mode 666 -> 644)" in result["diff"][0]["after"]
    assert stat.S_IMODE(config.stat().st_mode) == 0o644
    target = tmp / "elsewhere.json"
    target.write_text(config.read_text())
    config.unlink()
    config.symlink_to(target)
    _code, result = run()
    assert result["changed_files"] == [str(config)] and not config.is_symlink() and target.exists()


def test_configuration_only_with_the_shim(call):
    run, tmp = call
    _code, result = run(programs=["gpufleet-cdi-hook"], accept_envvar_unprivileged=False)
    assert "runtime_config" not in result and not tmp.joinpath(*CONFIG).exists()
    assert all("runtime.json" not in path for path in result["files"])


def test_absent_removes_the_configuration_with_the_shim_only(call):
    run, tmp = call
    run()
    config = tmp.joinpath(*CONFIG)
    _code, kept = run(state="absent", programs=["gpufleet-cdi-hook"])
    assert config.exists() and str(config) not in kept["changed_files"]
    _code, check = run(state="absent", check=True)
    assert str(config) in check["changed_files"] and config.exists()
    _code, gone = run(state="absent")
    assert str(config) in gone["changed_files"] and not config.exists()


def test_a_directory_others_can_write_fails_naming_it_and_the_fix(call):
    run, tmp = call
    shared = tmp.joinpath(*CONFIG).parent
    shared.mkdir(parents=True)
    os.chmod(str(shared), 0o777)  # noqa: S103 - the directory the module must refuse
    code, result = run(check=True)
    assert code == 1 and not tmp.joinpath(*CONFIG).exists()
    assert f"{shared} is writable by group or others (mode 777)" in result["msg"]
    assert f"chmod go-w {shared}" in result["msg"]


def test_absent_leaves_a_program_that_is_not_ours_and_removes_the_emptied_folders(call):
    run, tmp = call
    run()
    (tmp / "lib" / "other").write_text("an admin's file\n")
    theirs = tmp / "bin" / "nvidia-container-cli"
    theirs.write_text("#!/bin/sh\n# NVIDIA's own\n")
    _code, check = run(state="absent", check=True, diff=True)
    assert str(theirs) not in check["changed_files"] and str(tmp / "lib") not in check["changed_files"]
    assert str(tmp / "etc" / "gpufleet") in check["changed_files"] and (tmp / "etc" / "gpufleet").is_dir()
    _code, gone = run(state="absent")
    assert gone["changed"] and "nvidia-container-cli" in str(gone.get("warnings")), gone.get("warnings")
    assert sorted(os.listdir(str(tmp / "bin"))) == ["nvidia-container-cli"] and theirs.read_text().endswith("own\n")
    assert os.listdir(str(tmp / "lib")) == ["other"] and not (tmp / "etc" / "gpufleet").exists()
    (tmp / "lib" / "other").unlink()
    _code, last = run(state="absent")
    assert last["changed_files"] == [str(tmp / "lib")] and not (tmp / "lib").exists()
    _code, again = run(state="absent")
    assert not again["changed"]
