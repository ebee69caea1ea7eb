# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Property-based: random valid configs keep every unrelated key and value, and absent undoes present."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.gpufleet.nvidia.plugins.module_utils.runtime import containerd as ctd
from ansible_collections.gpufleet.nvidia.plugins.module_utils.runtime import docker as dock

SHIM = "/usr/local/bin/nvidia-shim"
KEYS = st.text(alphabet="abcdefghijklmnopqrstuvwxyz-_", min_size=1, max_size=12).filter(
    lambda k: k not in ("runtimes", "default-runtime", "features")
)
SCALARS = st.one_of(st.booleans(), st.integers(-1000, 1000), st.text(max_size=20))
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(KEYS, inner, max_size=3)),
    max_leaves=8,
)


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(KEYS, VALUES, max_size=6), st.sampled_from([2, 4, "\t"]))
def test_docker_keeps_unrelated_keys_and_absent_undoes_present(data, indent):
    # written as admins write it: UTF-8 as is (a \\u escape would come back unescaped, same value)
    src = json.dumps(data, indent=indent, ensure_ascii=False) + "\n" if data else ""
    edit = dock.present(src, SHIM, set_as_default=True, cdi=True)
    out = json.loads(edit.text)
    for key, value in data.items():
        assert out[key] == value
    assert list(out)[: len(data)] == list(data)
    assert dock.absent(edit.text, SHIM, cdi=True).text == src


TOML_KEYS = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=10)
TOML_SCALARS = st.one_of(st.booleans(), st.integers(-1000, 1000), st.text(alphabet="abc xyz/._-", max_size=12))


def _render(top, cri_keys):
    lines = ["version = 2"] + [f"{k} = {json.dumps(v)}" for k, v in top.items()]
    if cri_keys:
        lines += ["", '[plugins."io.containerd.grpc.v1.cri"]'] + [
            f"  {k} = {json.dumps(v)}" for k, v in cri_keys.items()
        ]
    lines += [
        "",
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]',
        '  runtime_type = "io.containerd.runc.v2"',
    ]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("drop_in", [False, True])
@settings(max_examples=40, deadline=None)
@given(
    top=st.dictionaries(
        TOML_KEYS.filter(lambda k: k not in ("version", "imports", "plugins")), TOML_SCALARS, max_size=4
    ),
    cri_keys=st.dictionaries(
        TOML_KEYS.filter(lambda k: k not in ("containerd", "enable_cdi")), TOML_SCALARS, max_size=4
    ),
)
def test_containerd_keeps_unrelated_keys_and_absent_undoes_present(drop_in, top, cri_keys):
    tomlkit = pytest.importorskip("tomlkit")
    src = _render(top, cri_keys)
    if drop_in:
        main, drop = ctd.present_drop_in(src, None, SHIM, set_as_default=True, cdi=True)
        merged = tomlkit.parse(drop.text)["plugins"]["io.containerd.grpc.v1.cri"]
        for key, value in cri_keys.items():  # the whole CRI table travels with the drop-in
            assert merged[key] == value
        back, _drop = ctd.absent_drop_in(main.text, drop.text)
    else:
        main = ctd.present_main(src, SHIM, set_as_default=True, cdi=True)
        back = ctd.absent_main(main.text, SHIM, cdi=True)
    doc = tomlkit.parse(main.text)
    for key, value in top.items():
        assert doc[key] == value
    assert back.text == src
