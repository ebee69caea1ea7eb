# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""_jsonio: the host programs' json without ``import json`` (its import is paid on every GPU start)."""

import json
import os
import subprocess
import sys

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.base import jsonio as _jsonio
from ansible_collections.gpufleet.nvidia.plugins.module_utils.hostprog import install as _host_programs

SAMPLES = [
    '{"ociVersion":"1.0.2","process":{"env":["PATH=/bin","NVIDIA_VISIBLE_DEVICES=0"],"args":["true"]}}',
    ' \n[1, -2, 3.5, 1e5, true, false, null, "\\u00e9\\n\\"", {"": []}] \n',
    '"plain"',
    "0",
    '{"nested": {"deep": [[[]]], "uni": "caf\\u00e9 \\ud83d\\ude00"}}',
]


@pytest.mark.parametrize("text", SAMPLES)
def test_loads_and_dumps_match_json(text):
    assert _jsonio.loads(text) == json.loads(text)
    assert _jsonio.loads(text.encode()) == json.loads(text)
    value = json.loads(text)
    assert _jsonio.dumps(value) == json.dumps(value, separators=(",", ":"))


def test_utf8_bytes_and_bom():
    assert _jsonio.loads('{"a": "é"}'.encode()) == {"a": "é"}
    assert _jsonio.loads(b"\xef\xbb\xbf[1]") == [1]


@pytest.mark.parametrize("bad", ["", "   ", "{", '{"a":}', "[1] x", "[1,]", "nul"])
def test_invalid_json_is_a_value_error(bad):
    with pytest.raises(ValueError):
        _jsonio.loads(bad)


def test_unserializable_is_a_type_error():
    with pytest.raises(TypeError, match="set"):
        _jsonio.dumps({"a": {1}})


def test_shim_and_hook_start_path_import_neither_json_nor_re(tmp_path):
    """The installed programs' GPU start path (parse config.json, inject, the hook's work done inline: soname
    link and ld.so.cache written, config.json written back; the hook's own imports and state parsing) loads
    no ``json``/``re``: each costs every GPU container start."""
    _host_programs.install(str(tmp_path / "bin"), str(tmp_path / "lib"), python=sys.executable)
    lib = "/usr/lib/x86_64-linux-gnu"
    hook_args = [
        "gpufleet-cdi-hook",
        "apply",
        "--folder",
        lib,
        "--library",
        f"x86_64::libcuda.so.1::{lib}/libcuda.so.535.1",
    ]
    index = {"driverVersion": "535.1", "cudaVersion": "12.2", "capabilities": ["utility", "compute"]}
    index["devices"] = {"0": {"deviceNodes": [{"path": "/dev/null", "hostPath": "/dev/null"}]}}
    index["containerEdits"] = {
        "mounts": [{"hostPath": "/dev/null", "containerPath": f"{lib}/libcuda.so.535.1", "options": ["ro", "bind"]}],
        "hooks": [{"hookName": "createContainer", "path": "/x/gpufleet-cdi-hook", "args": hook_args, "timeout": 10}],
    }
    index["mountCapabilities"] = {f"{lib}/libcuda.so.535.1": ["compute"]}
    (tmp_path / "index.json").write_text(json.dumps(index))
    bundle = tmp_path / "bundle"
    (bundle / "rootfs" / "etc").mkdir(parents=True)
    config = {"process": {"env": ["NVIDIA_VISIBLE_DEVICES=0"]}, "root": {"path": "rootfs"}}
    (bundle / "config.json").write_text(json.dumps(config))
    code = (
        "import sys; sys.path.insert(0, {!r})\n"
        "from gpufleet_nvidia.hostprog import shim as _shim, cdi_hook as _cdi_hook\n"
        "assert _shim.prepare({!r}, {{'index': {!r}}})\n"
        "assert _cdi_hook.container_root({!r})[0].endswith('rootfs')\n"
        "print(sorted(m for m in ('json', 're', 'enum', 'contextlib', 'collections', 'typing',\n"
        "                         'gpufleet_nvidia.hostprog.debuglog') if m in sys.modules))\n"
    ).format(str(tmp_path / "lib"), str(bundle), str(tmp_path / "index.json"), str(bundle))
    out = subprocess.run([sys.executable, "-IS", "-c", code], capture_output=True, text=True, check=True, cwd="/")
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
    written = json.loads((bundle / "config.json").read_text())
    assert written["linux"]["devices"][0]["path"] == "/dev/null"
    assert "hooks" not in written  # the hook's work was done inline
    assert os.readlink(str(bundle / "rootfs" / lib.lstrip("/") / "libcuda.so.1")) == "libcuda.so.535.1"
    assert (bundle / "rootfs" / "etc" / "ld.so.cache").read_bytes().startswith(b"glibc-ld.so.cache1.1")
    assert os.path.exists(str(tmp_path / "lib" / "gpufleet_nvidia" / "base" / "jsonio.py"))
