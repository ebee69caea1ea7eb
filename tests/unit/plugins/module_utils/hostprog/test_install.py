# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The host programs' package holds every module they import, and each program starts from an installation."""

import ast
import json
import os
import subprocess
import sys

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.hostprog import install as _host_programs

MODULE_UTILS = os.path.dirname(os.path.dirname(os.path.abspath(_host_programs.__file__)))


def _read(module):
    with open(os.path.join(MODULE_UTILS, *module.split(".")) + ".py", encoding="utf-8") as f:
        return f.read()


def test_payload_is_the_programs_modules_and_everything_they_import():
    modules = _host_programs.payload(_read)
    for module, _function in _host_programs.PROGRAMS.values():
        assert module in modules
    # closed: every relative import of every module in the payload (at any depth: lazy imports count) is in it
    for module in modules:
        tree = ast.parse(_read(module))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level:
                pkg = module.split(".")[: -node.level]
                target = ".".join(pkg + node.module.split(".")) if node.module else None
                names = [target] if target else [".".join([*pkg, a.name]) for a in node.names]
                assert set(names) <= set(modules), (module, names)
    # the shim reaches the ld.so.cache writer through the hook, and the refresh reaches discovery lazily
    assert {"hostprog.cdi_hook", "cdi.ldcache", "base.jsonio", "discovery.discover"} <= set(modules)
    # the installer and the engine config editors are not shipped to the hosts' programs; discovery (reached by
    # the refresh) reads engines through the adapters' read side only
    assert "hostprog.install" not in modules
    editors = {"runtime.docker.edit", "runtime.containerd.edit", "runtime.crio.edit", "runtime.toml", "runtime.service"}
    assert "runtime.registry" in modules and not (editors | {"runtime.adapters", "runtime.runner"}) & set(modules)


def test_packages_are_every_folder_on_the_way():
    assert _host_programs.packages(["a.b.c", "d"]) == ["", "a", "a.b"]


def test_render_files_from_a_reader():
    files = _host_programs.render_files("/b", "/l", _read, programs=["gpufleet-dev-char-links"])
    paths = [f[0] for f in files]
    assert paths[0] == "/l/gpufleet_nvidia/__init__.py" and paths[-1] == "/b/gpufleet-dev-char-links"
    assert "/l/gpufleet_nvidia/hostprog/__init__.py" in paths and "/l/gpufleet_nvidia/cdi/__init__.py" in paths
    assert ("/l/gpufleet_nvidia/hostprog/cdi_refresh.py", _read("hostprog.cdi_refresh"), 0o644) in files
    assert files[-1][2] == 0o755 and "from gpufleet_nvidia.hostprog.dev_char import main" in files[-1][1]


def test_runtime_config_is_deterministic_sorted_json_with_every_key():
    text = _host_programs.render_runtime_config()
    assert text == (
        '{\n  "accept_cdi_annotations_unprivileged": true,\n  "accept_envvar_unprivileged": true,\n'
        '  "accept_volume_mounts": false\n}\n'
    )
    assert json.loads(text) == _host_programs.RUNTIME_CONFIG_DEFAULTS
    kube = _host_programs.render_runtime_config(
        accept_envvar_unprivileged=False, accept_volume_mounts=True, accept_cdi_annotations_unprivileged=False
    )
    assert json.loads(kube) == {
        "accept_cdi_annotations_unprivileged": False,
        "accept_envvar_unprivileged": False,
        "accept_volume_mounts": True,
    }
    assert kube == _host_programs.render_runtime_config(False, True, accept_cdi_annotations_unprivileged=False)
    assert list(json.loads(kube)) == sorted(json.loads(kube))


def test_runtime_config_refuses_what_is_not_a_bool():
    with pytest.raises(ValueError, match="accept_volume_mounts must be true or false, got 'yes'"):
        _host_programs.render_runtime_config(True, "yes")
    with pytest.raises(ValueError, match="accept_cdi_annotations_unprivileged must be true or false, got 'no'"):
        _host_programs.render_runtime_config(accept_cdi_annotations_unprivileged="no")


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
