"""The host programs' package holds every module they import, and each program starts from an installation."""

import ast
import json
import os
import subprocess
import sys

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils import _host_programs

MODULE_UTILS = os.path.dirname(os.path.abspath(_host_programs.__file__))


def _relative_imports(module):
    with open(os.path.join(MODULE_UTILS, module + ".py"), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            found |= {node.module} if node.module else {a.name for a in node.names}
    return found


def test_modules_list_is_closed_under_imports():
    for module in _host_programs.MODULES:
        missing = _relative_imports(module) - set(_host_programs.MODULES)
        assert not missing, "%s imports %s, not in _host_programs.MODULES" % (module, sorted(missing))
    for module, _function in _host_programs.PROGRAMS.values():
        assert module in _host_programs.MODULES


def test_render_files_from_a_reader():
    files = _host_programs.render_files("/b", "/l", lambda m: "# %s\n" % m, programs=["gpufleet-dev-char-links"])
    paths = [f[0] for f in files]
    assert paths[0] == "/l/gpufleet_nvidia/__init__.py" and paths[-1] == "/b/gpufleet-dev-char-links"
    assert ("/l/gpufleet_nvidia/_cdi_refresh.py", "# _cdi_refresh\n", 0o644) in files
    assert files[-1][2] == 0o755 and "from gpufleet_nvidia._dev_char import main" in files[-1][1]


def test_runtime_config_is_deterministic_sorted_json_with_both_keys():
    text = _host_programs.render_runtime_config()
    assert text == '{\n  "accept_envvar_unprivileged": true,\n  "accept_volume_mounts": false\n}\n'
    assert json.loads(text) == _host_programs.RUNTIME_CONFIG_DEFAULTS
    kube = _host_programs.render_runtime_config(accept_envvar_unprivileged=False, accept_volume_mounts=True)
    assert json.loads(kube) == {"accept_envvar_unprivileged": False, "accept_volume_mounts": True}
    assert kube == _host_programs.render_runtime_config(False, True)
    assert list(json.loads(kube)) == sorted(json.loads(kube))


def test_runtime_config_refuses_what_is_not_a_bool():
    with pytest.raises(ValueError, match="accept_volume_mounts must be true or false, got 'yes'"):
        _host_programs.render_runtime_config(True, "yes")


def test_installed_helpers_run(tmp_path):
    bindir, libdir = str(tmp_path / "bin"), str(tmp_path / "lib")
    _host_programs.install(bindir, libdir, python=sys.executable)
    out = subprocess.run(
        [os.path.join(bindir, "gpufleet-dev-char-links"), "--dev-root", str(tmp_path), "--dry-run"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert json.loads(out)["links"] == 0
    config = tmp_path / "refresh.json"
    config.write_text(json.dumps({"root": str(tmp_path)}))
    res = subprocess.run(
        [os.path.join(bindir, "gpufleet-cdi-refresh"), "--config", str(config)],
        check=False,
        capture_output=True,
        text=True,
    )
    # no driver under this root: nothing to do, said in the report
    assert res.returncode == 0 and json.loads(res.stdout)["reason"].startswith("no NVIDIA driver userspace"), res
