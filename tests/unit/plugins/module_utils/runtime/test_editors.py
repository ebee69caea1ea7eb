"""Table-driven tests of the runtime-registration editors: admin-written configs in, expected files out.

Inputs and expected results live under fixtures/<engine>/. The expected files are golden files:
regenerate them with ``REGEN_RUNTIME_FIXTURES=1 pytest ...`` after a deliberate change, and review the
diff. Every case also checks that a second run changes nothing and, where present added everything it
touched, that ``absent`` gives back the input byte for byte.
"""

import json
import os

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.base.version import parse as parse_version
from ansible_collections.gpufleet.nvidia.plugins.module_utils.runtime import containerd as ctd
from ansible_collections.gpufleet.nvidia.plugins.module_utils.runtime import crio
from ansible_collections.gpufleet.nvidia.plugins.module_utils.runtime import docker as dock
from ansible_collections.gpufleet.nvidia.plugins.module_utils.runtime.common import (
    RuntimeConfigError,
    reads_cdi,
)

FIX = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
SHIM = "/usr/local/bin/nvidia-shim"
REGEN = os.environ.get("REGEN_RUNTIME_FIXTURES") == "1"


def _read(*parts):
    with open(os.path.join(FIX, *parts), encoding="utf-8") as f:
        return f.read()


def _golden(actual, *parts):
    path = os.path.join(FIX, *parts)
    if REGEN:
        with open(path, "w", encoding="utf-8") as f:
            f.write(actual)
    assert actual == _read(*parts), f"{path} differs (REGEN_RUNTIME_FIXTURES=1 rewrites it; review the diff)"


# ---- docker ----------------------------------------------------------------------------------------------
# case, absent-after-present gives back the input
DOCKER = [
    ("empty", True),
    ("log-opts-2sp", True),
    ("tabs", True),
    ("runsc-4sp", False),  # default-runtime "runc" was replaced; JSON has no comment to remember it
    ("nvidia-ctk", False),  # the runtime existed before: absent removes it
    ("features", True),
    ("compact", True),
]


@pytest.mark.parametrize(("case", "roundtrip"), DOCKER)
def test_docker_present(case, roundtrip):
    src = _read("docker", f"{case}.input.json")
    edit = dock.present(src, SHIM, set_as_default=True, cdi=True)
    assert edit.changed
    _golden(edit.text, "docker", f"{case}.expected.json")
    data = json.loads(edit.text)
    assert data["runtimes"]["nvidia"]["path"] == SHIM
    assert data["default-runtime"] == "nvidia"
    assert data["features"]["cdi"] is True
    if src.strip():
        before = json.loads(src)
        for key, value in before.items():  # every other key kept, in order
            if key not in ("runtimes", "default-runtime", "features"):
                assert data[key] == value
        assert [k for k in data if k in before] == list(before)
    again = dock.present(edit.text, SHIM, set_as_default=True, cdi=True)
    assert not again.changed
    assert again.text == edit.text
    back = dock.absent(edit.text, SHIM, cdi=True)
    if roundtrip:
        assert back.text == src
    assert "nvidia" not in json.loads(back.text or "{}").get("runtimes", {})


@pytest.mark.parametrize(
    ("case", "line", "words"),
    [
        ("bad-json", 5, "not valid JSON"),
        ("runtimes-string", 2, 'runtimes is "nvidia", dockerd expects an object'),
        ("features-list", 2, 'features is ["cdi"]'),
    ],
)
def test_docker_refuses_what_it_cannot_edit(case, line, words):
    src = _read("docker", f"{case}.input.json")
    with pytest.raises(RuntimeConfigError) as err:
        dock.present(src, SHIM, cdi=True, path="/etc/docker/daemon.json")
    assert err.value.line == line
    assert words in str(err.value)
    assert str(err.value).startswith(f"/etc/docker/daemon.json:{line}: ")
    assert "left untouched" in err.value.hint


def test_docker_keeps_indentation_styles():
    assert dock.detect_indent('{\n\t"a": 1\n}') == "\t"
    assert dock.detect_indent('{\n  "a": 1\n}') == "  "
    assert dock.detect_indent('{"a": 1}') is None


@pytest.mark.parametrize("name", dock.RESERVED_NAMES)
def test_docker_refuses_a_reserved_runtime_name(name):
    # dockerd 20.10, 26 and 28 refuse to start with these in runtimes ("runtime name 'runc' is reserved"),
    # and `dockerd --validate` (26, 28) passes such a file: found on the simulated fleet.
    text = '{\n  "log-driver": "journald"\n}\n'
    with pytest.raises(RuntimeConfigError) as exc:
        dock.present(text, SHIM, name=name, path="/etc/docker/daemon.json")
    assert "reserved" in str(exc.value) and name in str(exc.value) and "/etc/docker/daemon.json" in str(exc.value)


@pytest.mark.parametrize(
    "version, warns",
    [
        ((20, 10, 24), True),
        ((24, 0, 9), True),
        ((25, 0, 0), False),
        ((26, 1, 5), False),
        ((28, 5, 2), False),
        (None, False),
    ],
)
def test_docker_cdi_warning_below_25(version, warns):
    warning = dock.cdi_warning(version)
    assert bool(warning) is warns
    if warns:
        assert ".".join(str(n) for n in version) in warning and "docker 25" in warning


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
    warning = ctd.cdi_warning(version)
    assert bool(warning) is warns
    if warns:
        assert "enable_cdi" in warning and "1.7" in warning


def test_docker_absent_leaves_foreign_runtime():
    src = _read("docker", "nvidia-ctk.input.json")
    edit = dock.absent(src, SHIM)
    assert not edit.changed
    assert edit.text == src


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
    _golden(main.text, "containerd", f"{case}.dropin-main.expected.toml")
    _golden(drop.text, "containerd", f"{case}.dropin.expected.toml")
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


# ---- CRI-O -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("case", ["crun-monitor", "runc-default", "empty"])
def test_crio_drop_in(case):
    src = _read("crio", f"{case}.input.conf")
    edit = crio.present_drop_in(None, SHIM, set_as_default=True, configs=[("/etc/crio/crio.conf", src)])
    _golden(edit.text, "crio", f"{case}.dropin.expected.conf")
    again = crio.present_drop_in(edit.text, SHIM, set_as_default=True, configs=[("/etc/crio/crio.conf", src)])
    assert not again.changed
    assert crio.absent_drop_in(edit.text).text is None


@pytest.mark.parametrize("case", ["crun-monitor", "runc-default"])
def test_crio_main_file_roundtrip(case):
    src = _read("crio", f"{case}.input.conf")
    edit = crio.present_main(src, SHIM, set_as_default=True)
    _golden(edit.text, "crio", f"{case}.main.expected.conf")
    assert not crio.present_main(edit.text, SHIM, set_as_default=True).changed
    assert crio.absent_main(edit.text, SHIM).text == src


def test_crio_monitor_settings_follow_the_default_runtime_across_drop_ins():
    base = _read("crio", "crun-monitor.input.conf")
    later = '[crio.runtime]\ndefault_runtime = "runc"\n[crio.runtime.runtimes.runc]\nmonitor_cgroup = "pod"\n'
    monitor = dict(crio.monitor_settings([("/etc/crio/crio.conf", base), ("/etc/crio/crio.conf.d/10.conf", later)]))
    assert monitor == {"monitor_path": "/usr/libexec/crio/conmon", "monitor_cgroup": "pod"}


@pytest.mark.parametrize(
    ("engine", "version", "reads"),
    [
        ("docker", "20.10.24+dfsg1", False),
        ("docker", "25.0.0", True),
        ("docker", "26.1.5+dfsg1", True),
        ("containerd", "1.6.20~ds1", False),
        ("containerd", "1.7.24~ds1", True),  # read as "1" by the role's former Jinja parse: CDI stayed off
        ("containerd", "2.1.9", True),
        ("containerd", "1:1.7.24", True),  # a package epoch
        ("crio", "1.22.5", False),
        ("crio", "1.30.4", True),
        ("podman", None, True),
        ("docker", None, False),  # unknown: no CDI
        ("docker", "", False),
        ("runsc", "1.0.0", False),
    ],
)
def test_reads_cdi_one_rule_for_module_role_and_validate(engine, version, reads):
    assert reads_cdi(engine, version) is reads
    if engine in ("docker", "containerd") and version:  # the editors warn exactly where it is False
        warn = (dock if engine == "docker" else ctd).cdi_warning(parse_version(version.split(":")[-1]))
        assert (warn is None) is reads
