# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The containerd config editor (runtime/containerd/edit.py): config v1/v2/v3, main file or drop-in.

Every case also checks that a second run changes nothing and, where present added everything it touched,
that ``absent`` gives back the input byte for byte.
"""

import re
import shutil
import subprocess

import pytest
import tomlkit

from ansible_collections.gpufleet.nvidia.plugins.module_utils.runtime.common import RuntimeConfigError
from ansible_collections.gpufleet.nvidia.plugins.module_utils.runtime.containerd import edit as ctd
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils.runtime.golden import SHIM
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils.runtime.golden import golden as _golden
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils.runtime.golden import read_fixture as _read

# ---- containerd ------------------------------------------------------------------------------------------
V16, V17, V21 = (1, 6, 20), (1, 7, 24), (2, 1, 1)
# case, engine version, absent-after-present gives back the input
CONTAINERD_MAIN = [
    ("empty-v2", V16, True),
    ("empty-v3", V21, True),
    ("default-1.6", V16, True),
    ("kubespray-v2", V17, True),
    ("v1-legacy", V16, True),
    ("v3-systemd", V21, True),
    ("k3s-v2", V17, True),
    ("existing-nvidia", V17, False),
    ("v1-runc-v1", V16, True),
    ("v1-custom-default", V16, True),
    ("v2-custom-default", V16, True),
    ("v2-kata-default", V17, True),
    ("v3-custom-default", V21, True),
]


@pytest.mark.parametrize(("case", "version", "roundtrip"), CONTAINERD_MAIN)
def test_containerd_main_file(case, version, roundtrip):
    src = _read("containerd", f"{case}.input.toml")
    kw = {"empty_version": ctd.default_version(version), "cdi": True}
    edit = ctd.present_main(src, SHIM, set_as_default=True, **kw)
    assert edit.changed
    _golden(edit.text, "containerd", f"{case}.main.expected.toml")
    again = ctd.present_main(edit.text, SHIM, set_as_default=True, **kw)
    assert again.changes == []
    assert again.text == edit.text
    back = ctd.absent_main(edit.text, SHIM, **kw)
    assert back.changed
    if roundtrip:
        assert back.text == src


def test_containerd_copies_systemd_cgroup_from_the_default_runtime():
    edit = ctd.present_main(_read("containerd", "v3-systemd.input.toml"), SHIM, empty_version=3)
    assert '[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.nvidia.options]' in edit.text
    nvidia = edit.text.split("runtimes.nvidia.options]", 1)[1]
    assert "SystemdCgroup = true" in nvidia
    assert f'BinaryName = "{SHIM}"' in nvidia


def test_containerd_existing_nvidia_gets_our_binary_and_keeps_the_rest():
    edit = ctd.present_main(_read("containerd", "existing-nvidia.input.toml"), SHIM)
    assert f'BinaryName = "{SHIM}"' in edit.text
    assert "/usr/bin/nvidia-container-runtime" not in edit.text
    assert "privileged_without_host_devices = false" in edit.text
    assert any("SystemdCgroup" in c for c in edit.changes)  # follows runc's


def _runtime(text, name, cri="cri"):
    """The keys of one runtime table and of its options, as text (header line excluded)."""
    body = text.split(f"containerd.runtimes.{name}]", 1)[1].split("\n[", 1)[0]
    return body


@pytest.mark.parametrize("drop_in", [False, True])
def test_containerd_v1_runc_v1_keeps_the_v1_shim(drop_in):
    """NVIDIA's tool copies the default runtime's table, type included (nvidia-container-toolkit v1.20.0,
    pkg/config/engine/containerd/config.go GetDefaultRuntimeOptions), and on config version 1 also sets
    options.Runtime (config_v1.go)."""
    src = _read("containerd", "v1-runc-v1.input.toml")
    if drop_in:
        _main, edit = ctd.present_drop_in(src, None, SHIM, empty_version=2)
    else:
        edit = ctd.present_main(src, SHIM, empty_version=2)
    ours = edit.text.split("containerd.runtimes.nvidia]", 1)[1]
    assert 'runtime_type = "io.containerd.runc.v1"' in ours.split("[", 1)[0]
    assert "io.containerd.runc.v2" not in edit.text
    options = ours.split("containerd.runtimes.nvidia.options]", 1)[1]
    assert f'BinaryName = "{SHIM}"' in options and f'Runtime = "{SHIM}"' in options
    assert "SystemdCgroup = true" in options and "NoPivotRoot = false" in options


@pytest.mark.parametrize(
    ("case", "version"), [("v1-custom-default", 1), ("v2-custom-default", 2), ("v3-custom-default", 3)]
)
def test_containerd_copies_every_key_of_a_custom_default_runtime(case, version):
    src = _read("containerd", f"{case}.input.toml")
    edit = ctd.present_main(src, SHIM, empty_version=version)
    custom = src.split("containerd.runtimes.custom]", 1)[1]
    ours = edit.text.split("containerd.runtimes.nvidia]", 1)[1]
    for line in custom.splitlines():
        key = line.strip()
        if not key or key.startswith("[") or key.startswith("BinaryName"):
            continue
        assert key in ours, f"{key} not copied into runtimes.nvidia"
    assert f'BinaryName = "{SHIM}"' in ours
    assert "/usr/local/sbin/runc" not in ours
    assert ("Runtime = " in ours) == (version == 1)


def test_containerd_skips_a_default_runtime_without_a_binary_to_swap():
    edit = ctd.present_main(_read("containerd", "v2-kata-default.input.toml"), SHIM, empty_version=2)
    ours = edit.text.split("containerd.runtimes.nvidia]", 1)[1]
    assert "io.containerd.kata.v2" not in ours
    assert 'runtime_type = "io.containerd.runc.v2"' in ours and "SystemdCgroup = true" in ours


def test_containerd_existing_runtime_follows_the_default_runtimes_type():
    src = _read("containerd", "v1-runc-v1.input.toml")
    first = ctd.present_main(src, SHIM, empty_version=2).text
    # someone (an older version of this collection) wrote runc.v2 and no root: both follow runc again
    ours = first.split("[plugins.cri.containerd.runtimes.nvidia]", 1)
    head, options = ours[1].split("[plugins.cri.containerd.runtimes.nvidia.options]", 1)
    stale_head = '\n          runtime_type = "io.containerd.runc.v2"\n          '
    stale = ours[0] + "[plugins.cri.containerd.runtimes.nvidia]" + stale_head
    stale += "[plugins.cri.containerd.runtimes.nvidia.options]" + options
    assert "runtime_root" in head
    assert stale != first
    edit = ctd.present_main(stale, SHIM, empty_version=2)
    assert any("runtime_type -> io.containerd.runc.v1" in c for c in edit.changes)
    assert any("runtime_root" in c for c in edit.changes)
    assert ctd.present_main(edit.text, SHIM, empty_version=2).changes == []


@pytest.mark.parametrize(
    ("text", "version"),
    [("", 2), ("  \n", 2), ("root = '/x'\n", 1), ("version = 2\n", 2), ("version = 3\n", 3)],
)
def test_containerd_version_detection(text, version):
    assert ctd.detect_version(text, empty_version=2) == version


def test_containerd_empty_file_is_v3_on_containerd_2():
    assert ctd.default_version((2, 0, 0)) == 3
    assert ctd.default_version((1, 7, 0)) == 2
    assert ctd.default_version(None) == 2
    assert ctd.whole_table_needed((2, 0, 4)) and not ctd.whole_table_needed((2, 1, 0))


# case, engine version, other imported files, absent gives back the main file
CONTAINERD_DROP_IN = [
    ("empty-v2", V16, [], True),
    ("kubespray-v2", V17, [], True),
    ("imports-list", V16, [], True),
    ("gpu-operator-imports", V17, ["99-nvidia.gpu-operator.toml"], True),
    ("v3-systemd", V21, [], True),
    ("empty-v3", V21, [], True),
    ("v1-runc-v1", V16, [], True),
    ("v2-custom-default", V16, [], True),
    ("v2-custom-default", V21, [], True),
    ("v3-custom-default", V21, [], True),
]


@pytest.mark.parametrize(("case", "version", "others", "roundtrip"), CONTAINERD_DROP_IN)
def test_containerd_drop_in(case, version, others, roundtrip):
    src = _read("containerd", f"{case}.input.toml")
    imports = [(f"/etc/containerd/conf.d/{o}", _read("containerd", o)) for o in others]
    kw = {
        "empty_version": ctd.default_version(version),
        "whole_table": ctd.whole_table_needed(version),
        "imports": imports,
        "set_as_default": True,
        "cdi": True,
    }
    main, drop = ctd.present_drop_in(src, None, SHIM, **kw)
    whole = "-2.1" if case.startswith("v2-") and not kw["whole_table"] else ""
    _golden(main.text, "containerd", f"{case}.dropin-main.expected.toml")
    _golden(drop.text, "containerd", f"{case}.dropin{whole}.expected.toml")
    assert ctd.is_ours(drop.text)
    again_main, again_drop = ctd.present_drop_in(main.text, drop.text, SHIM, **kw)
    assert not again_main.changed and not again_drop.changed
    back_main, back_drop = ctd.absent_drop_in(main.text, drop.text, empty_version=kw["empty_version"])
    assert back_drop.text is None
    if roundtrip:
        assert back_main.text == src


def test_containerd_imports_are_appended_never_replaced():
    src = _read("containerd", "imports-list.input.toml")
    main, _drop = ctd.present_drop_in(src, None, SHIM)
    assert '"/etc/containerd/mirrors.toml",' in main.text
    assert main.text.index("mirrors.toml") < main.text.index("99-gpufleet-nvidia.toml")


def test_containerd_glob_import_already_covers_the_drop_in():
    main, drop = ctd.present_drop_in(_read("containerd", "gpu-operator-imports.input.toml"), None, SHIM)
    assert not main.changed
    assert drop.changed


def test_containerd_whole_table_before_2_1_minimal_after():
    src = _read("containerd", "kubespray-v2.input.toml")
    _main, old = ctd.present_drop_in(src, None, SHIM, whole_table=True)
    _main, new = ctd.present_drop_in(src, None, SHIM, whole_table=False)
    assert 'sandbox_image = "registry.k8s.io/pause:3.9"' in old.text
    assert "registry-1.docker.io" in old.text
    assert "sandbox_image" not in new.text
    # the runtime options still follow the default runtime's in both
    for text in (old.text, new.text):
        assert "SystemdCgroup = true" in text.split("runtimes.nvidia.options]", 1)[1]


def test_containerd_refuses_a_foreign_drop_in():
    with pytest.raises(RuntimeConfigError, match=r"not written by gpufleet\.nvidia"):
        ctd.present_drop_in("", "# my own file\n", SHIM)
    _main, drop = ctd.absent_drop_in("", "# my own file\n")
    assert not drop.changed and drop.text == "# my own file\n"


@pytest.mark.parametrize(
    ("case", "line", "words"),
    [
        ("bad-toml", 2, "not valid TOML"),
        ("runtimes-string", 4, 'is "runc", a table is expected'),
        ("bad-version", 1, "config versions 1, 2 and 3"),
    ],
)
def test_containerd_refuses_what_it_cannot_edit(case, line, words):
    src = _read("containerd", f"{case}.input.toml")
    with pytest.raises(RuntimeConfigError) as err:
        ctd.present_main(src, SHIM, path="/etc/containerd/config.toml")
    assert err.value.line == line, str(err.value)
    assert words in str(err.value)
    assert err.value.path == "/etc/containerd/config.toml"


@pytest.mark.parametrize(
    "version, warns",
    [
        ((1, 6, 20), True),
        ((1, 6, 99), True),
        ((1, 7, 0), False),
        ((1, 7, 24), False),
        ((2, 1, 9), False),
        (None, False),
    ],
)
def test_containerd_cdi_warning_below_1_7(version, warns):
    warning = ctd.Containerd().cdi_warning(version)
    assert bool(warning) is warns
    if warns:
        assert "enable_cdi" in warning and "1.7" in warning


def test_containerd_default_back_to_false():
    """true -> false in the admin's own file: the default our comment recorded comes back; a drop-in is rewritten
    without it; a default that names another runtime is never touched."""
    src = _read("containerd", "kubespray-v2.input.toml")
    kw = {"empty_version": 2, "cdi": True}
    on = ctd.present_main(src, SHIM, set_as_default=True, **kw).text
    off = ctd.present_main(on, SHIM, set_as_default=False, **kw)
    assert off.changed and any("default_runtime_name" in c for c in off.changes)
    assert ctd.detect_version(off.text, "x", 2) == 2
    assert 'default_runtime_name = "nvidia"' not in off.text
    assert ctd.present_main(src, SHIM, set_as_default=False, **kw).text == off.text  # as if never default
    assert not ctd.present_main(off.text, SHIM, set_as_default=False, **kw).changed
    assert not ctd.present_main(on, SHIM, set_as_default=None, **kw).changed
    # an empty file: our added key is removed, containerd falls back to runc
    on = ctd.present_main("", SHIM, set_as_default=True, empty_version=2).text
    off = ctd.present_main(on, SHIM, set_as_default=False, empty_version=2).text
    assert "default_runtime_name" not in off
    # drop-in: rewritten whole, so the default is simply not in it
    _main, drop_on = ctd.present_drop_in("", None, SHIM, set_as_default=True, whole_table=False)
    _main, drop_off = ctd.present_drop_in("", drop_on.text, SHIM, set_as_default=False, whole_table=False)
    assert "default_runtime_name" in drop_on.text and "default_runtime_name" not in drop_off.text


def _containerd_major():
    binary = shutil.which("containerd")
    if not binary:
        return None
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, check=False).stdout
    match = re.search(r" v?(\d+)\.(\d+)", out)
    return (int(match.group(1)), int(match.group(2))) if match else None


# golden outputs containerd 1.x must read (config versions 1 and 2), with the runtime type ours must have
DUMPED = [
    ("v1-runc-v1.main.expected.toml", None, "io.containerd.runc.v1"),
    ("v1-runc-v1.dropin-main.expected.toml", "v1-runc-v1.dropin.expected.toml", "io.containerd.runc.v1"),
    ("v1-custom-default.main.expected.toml", None, "io.containerd.runc.v1"),
    ("v1-legacy.main.expected.toml", None, "io.containerd.runc.v2"),
    ("v2-custom-default.main.expected.toml", None, "io.containerd.runc.v1"),
    ("v2-custom-default.dropin-main.expected.toml", "v2-custom-default.dropin.expected.toml", "io.containerd.runc.v1"),
    ("v2-kata-default.main.expected.toml", None, "io.containerd.runc.v2"),
    ("kubespray-v2.main.expected.toml", None, "io.containerd.runc.v2"),
]


@pytest.mark.skipif(
    not (_containerd_major() and _containerd_major() < (2, 0)), reason="needs containerd 1.x (config v1 and v2)"
)
@pytest.mark.parametrize(("main", "drop_in", "runtime_type"), DUMPED)
def test_containerd_1x_reads_the_written_config(tmp_path, main, drop_in, runtime_type):
    """The real containerd (1.6 on Debian 12) reads each written file and sees our runtime with the type and
    binary we meant (``config dump`` prints the merged result as version 2)."""
    text = _read("containerd", main)
    if drop_in:
        candidate = tmp_path / "99-gpufleet-nvidia.toml"
        candidate.write_text(_read("containerd", drop_in), encoding="utf-8")
        text = ctd.retarget_imports(text, ctd.DEFAULT_PATH, ctd.DEFAULT_DROP_IN, str(candidate))
    config = tmp_path / "config.toml"
    config.write_text(text, encoding="utf-8")
    done = subprocess.run(
        ["containerd", "--config", str(config), "config", "dump"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    dumped = tomlkit.parse(done.stdout)
    cri = dumped["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["containerd"]["default_runtime_name"] == "nvidia"
    ours = cri["containerd"]["runtimes"]["nvidia"]
    assert ours["runtime_type"] == runtime_type
    assert ours["options"]["BinaryName"] == SHIM
