# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Property-based: the engine-config editors on generated admin files, other runtimes and all.

Generated files carry every key the editor owns too (other runtimes next to ``nvidia``, another default runtime,
``features`` and ``enable_cdi`` already set, an ``nvidia`` runtime of another toolkit), and for each:

* the editor adds or updates only the ``nvidia`` runtime and its documented keys (docker: ``runtimes.nvidia``,
  ``default-runtime``, ``features.cdi``; containerd: ``<cri>.containerd.runtimes.nvidia``,
  ``<cri>.containerd.default_runtime_name``, ``<cri>.enable_cdi``, and containerd's built-in ``runc`` written out
  where the file had no runtime table); every other key the admin had is there with its value, in its order;
* editing twice is editing once (the second edit changes nothing, byte for byte);
* ``absent`` gives the admin's file back byte for byte, except where JSON cannot remember what was there (docker:
  a ``default-runtime`` that ``set_as_default`` replaced, an ``nvidia`` runtime that was there before, an empty
  ``runtimes``/``features`` object: dockerd reads none the same as empty); containerd's tracking comments remember
  every replaced value.
"""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import example, given, note, settings
from hypothesis import strategies as st

from ansible_collections.gpufleet.nvidia.plugins.module_utils.runtime.containerd import edit as ctd
from ansible_collections.gpufleet.nvidia.plugins.module_utils.runtime.containerd.facts import CRI_PLUGIN
from ansible_collections.gpufleet.nvidia.plugins.module_utils.runtime.docker import edit as dock

SHIM = "/usr/local/bin/nvidia-shim"
OWNED = ("runtimes", "default-runtime", "features")

# ---------------------------------------------------------------------------------------------------- docker
KEYS = st.text(alphabet="abcdefghijklmnopqrstuvwxyz-_", min_size=1, max_size=12)
SCALARS = st.one_of(st.booleans(), st.integers(-1000, 1000), st.text(max_size=20))
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(KEYS, inner, max_size=3)),
    max_leaves=8,
)
RUNTIME_NAMES = st.sampled_from(["runsc", "crun", "kata", "youki", "sysbox-runc", "nvidia-legacy"]) | KEYS.filter(
    lambda k: k != "nvidia"
)
RUNTIME = st.fixed_dictionaries(
    {"path": st.text(min_size=1, max_size=20)},
    optional={"runtimeArgs": st.lists(st.text(max_size=8), max_size=3), "args": st.lists(st.text(max_size=8))},
)
NVIDIA_OF_ANOTHER_TOOLKIT = st.fixed_dictionaries(
    {"path": st.sampled_from(["/usr/bin/nvidia-container-runtime", "nvidia-container-runtime"])},
    optional={"runtimeArgs": st.lists(st.text(max_size=8), max_size=2)},
)


@st.composite
def daemon_json(draw):
    data = draw(st.dictionaries(KEYS.filter(lambda k: k not in OWNED), VALUES, max_size=5))
    items = list(data.items())
    if draw(st.booleans()):
        runtimes = dict(draw(st.dictionaries(RUNTIME_NAMES, RUNTIME, max_size=3)))
        if draw(st.integers(0, 4)) == 0:
            runtimes["nvidia"] = draw(NVIDIA_OF_ANOTHER_TOOLKIT)
        items.insert(draw(st.integers(0, len(items))), ("runtimes", runtimes))
    if draw(st.booleans()):
        features = dict(
            draw(st.dictionaries(st.sampled_from(["buildkit", "containerd-snapshotter", "x"]), st.booleans()))
        )
        if draw(st.booleans()):
            features["cdi"] = draw(st.booleans())
        items.insert(draw(st.integers(0, len(items))), ("features", features))
    if draw(st.booleans()):
        runtimes = dict(items).get("runtimes") or {}
        default = draw(st.sampled_from(["runc", *sorted(n for n in runtimes if n != "nvidia")]))
        items.insert(draw(st.integers(0, len(items))), ("default-runtime", default))
    return dict(items)


def _without_owned(data):
    """The admin's own part of a daemon.json: everything but runtimes.nvidia, default-runtime, features.cdi."""
    out = {k: v for k, v in data.items() if k != "default-runtime"}
    if isinstance(out.get("runtimes"), dict):
        out["runtimes"] = {k: v for k, v in out["runtimes"].items() if k != "nvidia"}
    if isinstance(out.get("features"), dict):
        out["features"] = {k: v for k, v in out["features"].items() if k != "cdi"}
    return {k: v for k, v in out.items() if not (k in ("runtimes", "features") and v == {})}


@settings(max_examples=50, deadline=None)
@given(daemon_json(), st.sampled_from([2, 4, "\t", None]), st.sampled_from([True, False, None]), st.booleans())
def test_docker_touches_only_the_nvidia_runtime_and_absent_undoes_it(data, indent, set_as_default, cdi):
    # written as admins write it: UTF-8 as is (a \\u escape would come back unescaped, same value)
    src = json.dumps(data, indent=indent, ensure_ascii=False) + "\n" if data else ""
    edit = dock.present(src, SHIM, set_as_default=set_as_default, cdi=cdi)
    out = json.loads(edit.text or "{}")
    # only the documented keys changed; the admin's keys, other runtimes and other features kept, in order
    assert _without_owned(out) == _without_owned(data)
    assert list(out)[: len(data)] == list(data)
    assert list(out["runtimes"])[: len(data.get("runtimes", {}))] == list(data.get("runtimes", {}))
    kept = {k: v for k, v in data.get("runtimes", {}).get("nvidia", {}).items() if k != "path"}
    assert out["runtimes"]["nvidia"] == {"path": SHIM, **kept, **({} if kept else {"args": []})}
    if set_as_default:
        assert out["default-runtime"] == "nvidia"
    else:
        assert out.get("default-runtime") == data.get("default-runtime")
    if cdi:
        assert out["features"]["cdi"] is True
    else:
        assert out.get("features", {}).get("cdi") == data.get("features", {}).get("cdi")
    # twice is once
    again = dock.present(edit.text, SHIM, set_as_default=set_as_default, cdi=cdi)
    assert again.changes == [] and again.text == edit.text
    # absent: the admin's file back, where JSON can remember it
    back = dock.absent(edit.text, SHIM, cdi=cdi)
    restored = json.loads(back.text or "{}")
    assert "nvidia" not in restored.get("runtimes", {}) and restored.get("default-runtime") != "nvidia"
    assert _without_owned(restored) == _without_owned(data)
    runtimes, features = data.get("runtimes"), data.get("features")
    lost = (
        "nvidia" in (runtimes or {})  # another toolkit's runtime: ours once updated, absent removes it
        or (set_as_default and "default-runtime" in data)  # the admin's default, replaced: JSON has no comment
        or runtimes == {}  # dropped when emptied
        or (cdi and features is not None and set(features) <= {"cdi"})  # the same
        or (cdi and "cdi" in (features or {}))  # features.cdi: absent with cdi removes it
    )
    if not lost:
        assert back.text == src


def test_docker_an_empty_runtimes_object_is_not_remembered():
    """The one loss ``absent`` has besides replaced values: ``"runtimes": {}`` goes (dockerd reads none the same)."""
    src = '{\n  "runtimes": {},\n  "debug": true\n}\n'
    edit = dock.present(src, SHIM)
    assert json.loads(dock.absent(edit.text, SHIM).text) == {"debug": True}


# ---------------------------------------------------------------------------------------------------- containerd
TOML_KEYS = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=10)
TOML_SCALARS = st.one_of(st.booleans(), st.integers(-1000, 1000), st.text(alphabet="abc xyz/._-", max_size=12))
CTD_RUNTIME_NAMES = st.sampled_from(["runc", "crun", "kata", "runsc", "youki"])
CTD_RUNTIME = st.fixed_dictionaries(
    {"runtime_type": st.sampled_from(["io.containerd.runc.v2", "io.containerd.kata.v2", "io.containerd.runsc.v1"])},
    optional={
        "privileged_without_host_devices": st.booleans(),
        "options": st.dictionaries(
            st.sampled_from(["SystemdCgroup", "BinaryName", "Root", "NoPivotRoot"]), TOML_SCALARS, max_size=3
        ),
    },
)


@st.composite
def containerd_config(draw):
    """(version, top-level keys, CRI plugin keys, containerd table keys, runtimes)."""
    version = draw(st.sampled_from([2, 3]))
    top = draw(st.dictionaries(TOML_KEYS.filter(lambda k: k not in ("version", "imports", "plugins")), TOML_SCALARS))
    cri = dict(draw(st.dictionaries(TOML_KEYS.filter(lambda k: k not in ("containerd", "enable_cdi")), TOML_SCALARS)))
    if draw(st.booleans()):
        cri["enable_cdi"] = draw(st.booleans())
    containerd = dict(
        draw(st.dictionaries(TOML_KEYS.filter(lambda k: k not in ("runtimes", "default_runtime_name")), TOML_SCALARS))
    )
    runtimes = dict(draw(st.dictionaries(CTD_RUNTIME_NAMES, CTD_RUNTIME, max_size=3)))  # copies: drawn values stay
    if draw(st.integers(0, 3)) == 0:
        runtimes["nvidia"] = {
            "runtime_type": "io.containerd.runc.v2",
            "options": {"BinaryName": "/usr/local/nvidia/toolkit/nvidia-container-runtime"},
        }
    if draw(st.booleans()):
        containerd["default_runtime_name"] = draw(st.sampled_from(["runc", *sorted(runtimes)]))
    return version, top, cri, containerd, runtimes


def _render(version, top, cri, containerd, runtimes):
    plugin = f'plugins."{CRI_PLUGIN[version]}"'
    lines = [f"version = {version}"] + [f"{k} = {json.dumps(v)}" for k, v in top.items()]
    if cri:
        lines += ["", f"[{plugin}]"] + [f"  {k} = {json.dumps(v)}" for k, v in cri.items()]
    if containerd:
        lines += ["", f"[{plugin}.containerd]"] + [f"  {k} = {json.dumps(v)}" for k, v in containerd.items()]
    for name, runtime in runtimes.items():
        lines += ["", f"[{plugin}.containerd.runtimes.{name}]"]
        lines += [f"  {k} = {json.dumps(v)}" for k, v in runtime.items() if k != "options"]
        if "options" in runtime:
            lines += [f"  [{plugin}.containerd.runtimes.{name}.options]"]
            lines += [f"    {k} = {json.dumps(v)}" for k, v in runtime["options"].items()]
    return "\n".join(lines) + "\n"


def _plain(text):
    tomlkit = pytest.importorskip("tomlkit")
    return tomlkit.parse(text).unwrap()


def _cri_of(doc, version):
    return doc.get("plugins", {}).get(CRI_PLUGIN[version], {})


def _admins_part(doc, version, written_out=()):
    """A parsed config without what the editor owns (and the built-in runtimes it wrote out)."""
    doc = copy.deepcopy(doc)
    cri = _cri_of(doc, version)
    cri.pop("enable_cdi", None)
    ctd_table = cri.get("containerd", {})
    ctd_table.pop("default_runtime_name", None)
    runtimes = ctd_table.get("runtimes", {})
    for name in ("nvidia", *written_out):
        runtimes.pop(name, None)
    for table, key in ((ctd_table, "runtimes"), (cri, "containerd"), (doc.get("plugins", {}), CRI_PLUGIN[version])):
        if table.get(key) == {}:
            del table[key]
    if doc.get("plugins") == {}:
        del doc["plugins"]
    return doc


# Found by this test: the second run took the options from another runtime than the first (the default had become
# ours, so the one it replaced was no longer the source), and so changed the file again.
REPLACED_DEFAULT = (
    2,
    {},
    {},
    {"default_runtime_name": "kata"},
    {
        "crun": {"runtime_type": "io.containerd.runc.v2", "options": {"SystemdCgroup": False}},
        "kata": {"runtime_type": "io.containerd.runc.v2"},
        "nvidia": {"runtime_type": "io.containerd.runc.v2", "options": {"BinaryName": "/usr/local/nvidia/nvidia"}},
    },
)


@pytest.mark.parametrize("drop_in", [False, True])
@settings(max_examples=20, deadline=None)
@given(config=containerd_config(), set_as_default=st.sampled_from([True, False, None]), cdi=st.booleans())
@example(config=REPLACED_DEFAULT, set_as_default=True, cdi=False)
def test_containerd_touches_only_the_nvidia_runtime_and_absent_undoes_it(drop_in, config, set_as_default, cdi):
    version, top, cri, containerd, runtimes = config
    src = _render(version, top, cri, containerd, runtimes)
    before = _plain(src)
    note(src)
    # a runtimes table in a file replaces the built-in one: with none (the drop-in: none but ours) runc is written out
    written_out = () if set(runtimes) - ({"nvidia"} if drop_in else set()) else ("runc",)
    kw = {"set_as_default": set_as_default, "cdi": cdi, "empty_version": version}
    if drop_in:
        main, drop = ctd.present_drop_in(src, None, SHIM, whole_table=True, **kw)
        assert _plain(main.text) == {**before, "imports": [ctd.DEFAULT_DROP_IN]}  # the main file: one import more
        # the drop-in: the whole CRI table (it replaces the main file's before containerd 2.1), plus ours
        result = _plain(drop.text)
        assert _cri_of(_admins_part(result, version, written_out), version) == _cri_of(
            _admins_part(before, version), version
        )
        again = ctd.present_drop_in(main.text, drop.text, SHIM, whole_table=True, **kw)
        assert not again[0].changed and not again[1].changed
        back, back_drop = ctd.absent_drop_in(main.text, drop.text)
        assert back_drop.text is None
    else:
        main = ctd.present_main(src, SHIM, **kw)
        result = _plain(main.text)
        assert _admins_part(result, version, written_out) == _admins_part(before, version)
        again = ctd.present_main(main.text, SHIM, **kw)
        assert again.changes == [] and again.text == main.text
        back = ctd.absent_main(main.text, SHIM, cdi=cdi)
    cri_result = _cri_of(result, version)
    nvidia = cri_result["containerd"]["runtimes"]["nvidia"]
    assert nvidia["runtime_type"] == "io.containerd.runc.v2" and nvidia["options"]["BinaryName"] == SHIM
    default = cri_result["containerd"].get("default_runtime_name")
    if set_as_default:
        assert default == "nvidia"
    elif set_as_default is None or containerd.get("default_runtime_name") != "nvidia":
        assert default == containerd.get("default_runtime_name")
    assert cri_result.get("enable_cdi") == (True if cdi else cri.get("enable_cdi"))
    if drop_in or "nvidia" not in runtimes:  # a runtime of another toolkit is ours once updated: absent removes it
        assert back.text == src
    else:
        assert _admins_part(_plain(back.text), version) == _admins_part(before, version)
