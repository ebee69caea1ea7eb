"""host_programs in-process: sources from the loaded package (pkgutil); writes, idempotence, check, diff, absent."""

import json
import os
import stat

import pytest

pytestmark = pytest.mark.controller

from ansible.module_utils.testing import patch_module_args  # noqa: E402

from ansible_collections.gpufleet.nvidia.plugins.module_utils import _cdi, _host_programs  # noqa: E402
from ansible_collections.gpufleet.nvidia.plugins.modules import host_programs  # noqa: E402


@pytest.fixture
def call(capsys, tmp_path):
    base = {"bindir": str(tmp_path / "bin"), "libdir": str(tmp_path / "lib"), "runtime": "/usr/bin/crun"}

    def run(check=False, diff=False, **args):
        extra = {"_ansible_check_mode": check, "_ansible_diff": diff}
        with patch_module_args({**base, **args, **extra}), pytest.raises(SystemExit) as exit_info:
            host_programs.main()
        return exit_info.value.code, json.loads(capsys.readouterr().out)

    return run, tmp_path


def test_payload_imports_every_module_the_programs_need():
    names = sorted(m.__name__.rsplit(".", 1)[1] for m in host_programs.PAYLOAD)
    assert names == sorted(_host_programs.MODULES)


def test_check_mode_writes_nothing_and_reports_every_file(call):
    run, tmp = call
    code, result = run(check=True, diff=True)
    assert code == 0 and result["changed"]
    assert len(result["changed_files"]) == len(result["files"]) == 1 + len(_host_programs.MODULES) + 5
    assert not (tmp / "bin").exists() and not (tmp / "lib").exists()
    assert result["diff"][0]["before_header"] == "/dev/null"


def test_install_copies_the_loaded_sources_then_is_idempotent(call):
    run, tmp = call
    code, result = run()
    assert code == 0 and result["changed"] and result["runtime"] == "/usr/bin/crun"
    shim = tmp / "bin" / "gpufleet-container-runtime"
    assert stat.S_IMODE(shim.stat().st_mode) == 0o755 and "/usr/bin/crun" in shim.read_text()
    with open(_cdi.__file__, encoding="utf-8") as f:
        assert (tmp / "lib" / "gpufleet_nvidia" / "_cdi.py").read_text() == f.read()
    assert result["programs"]["gpufleet-cdi-hook"] == str(tmp / "bin" / "gpufleet-cdi-hook")
    code, again = run()
    assert code == 0 and not again["changed"] and again["changed_files"] == [] and again["digest"] == result["digest"]


def test_only_changed_bytes_or_mode_are_rewritten(call):
    run, tmp = call
    run()
    hook = tmp / "bin" / "gpufleet-cdi-hook"
    module = tmp / "lib" / "gpufleet_nvidia" / "_cdi.py"
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
