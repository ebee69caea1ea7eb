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


# ---------------------------------------------------------------- differential against json, on generated documents
# The reader must give what ``json.loads`` gives, or refuse what it refuses (``json`` may raise RecursionError
# where this raises ValueError). Decided and held here: duplicate keys -- the last one wins, as in ``json`` (the
# engines write config.json with Go's encoding/json, which never repeats a key); numbers -- Python's ints
# (``json`` refuses an int of more than ``sys.get_int_max_str_digits()`` digits on 3.11+, and so does this),
# ``1e400`` is infinity, and the
# non-standard ``NaN``/``Infinity`` literals are read as ``json`` reads them; ``\\u`` escapes, surrogate pairs and
# lone surrogates as ``json``; nesting too deep for the interpreter is a ValueError. Bytes must be UTF-8 (an
# optional BOM): ``json.loads`` also detects UTF-16/32, this reader refuses them (engines write UTF-8).

from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=10**300, max_value=10**320)
    | st.floats()
    | st.text(max_size=12),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=25,
)
_TOKENS = ['{', '}', '[', ']', ',', ':', ' ', '\n', '"', '"a"', '"\\u00e9"', '"\\ud83d\\ude00"', '"\\udc00"', '\\',
           '"\\x"', '1', '-', '0', '.5', 'e9', '1e400', '-0', '01', 'true', 'false', 'null', 'NaN', 'Infinity',
           '-Infinity', 'nul', '\t', '\x00', '"\x01"', 'é', '9' * 5000, '\ufeff']  # fmt: skip


@st.composite
def _documents(draw):
    kind = draw(st.sampled_from(["dumped", "tokens", "duplicates", "deep", "mutated"]))
    if kind == "dumped":
        value = draw(_values)
        return json.dumps(value, ensure_ascii=draw(st.booleans()), indent=draw(st.sampled_from([None, 0, 2, "\t"])))
    if kind == "tokens":
        return "".join(draw(st.lists(st.sampled_from(_TOKENS), max_size=20)))
    if kind == "duplicates":
        pairs = draw(st.lists(st.tuples(st.sampled_from(["a", "b", "env", "é"]), _values), max_size=6))
        return "{" + ",".join(f"{json.dumps(k)}:{json.dumps(v)}" for k, v in pairs) + "}"
    if kind == "deep":
        depth = draw(st.sampled_from([1, 10, 500, 5_000, 100_000]))
        opener, closer = draw(st.sampled_from([("[", "]"), ('{"a":', "}")]))
        return opener * depth + "0" + closer * draw(st.sampled_from([depth, depth - 1]))
    text = json.dumps(draw(_values))
    at = draw(st.integers(0, len(text)))
    return text[:at] + draw(st.sampled_from(_TOKENS)) + text[at + draw(st.integers(0, 3)) :]


def _outcome(load, data):
    try:
        return "ok", repr(load(data))  # repr: NaN equals NaN, True differs from 1, key order counts
    except (ValueError, RecursionError):
        return "refused", None


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_documents())
@example("\ufeffnull")  # a BOM: refused in a str, skipped in bytes
def test_loads_agrees_with_json_on_generated_documents(text):
    expected = _outcome(json.loads, text)
    assert _outcome(_jsonio.loads, text) == expected
    # the shim reads bytes: UTF-8, a BOM allowed (json.loads of str refuses one, of bytes skips it)
    data = text.encode("utf-8")
    assert _outcome(_jsonio.loads, data) == _outcome(json.loads, data.decode("utf-8-sig"))


def test_duplicate_keys_the_last_wins_as_in_json():
    assert _jsonio.loads('{"env": ["A=1"], "env": ["B=2"]}') == {"env": ["B=2"]}


def test_utf16_bytes_are_refused_though_json_reads_them():
    data = '{"a": 1}'.encode("utf-16")
    assert json.loads(data) == {"a": 1}
    with pytest.raises(ValueError, match="not UTF-8"):
        _jsonio.loads(data)
