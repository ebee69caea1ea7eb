# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The daemon.json editor (runtime/docker/edit.py): admin-written files in, golden files out.

Every case also checks that a second run changes nothing and, where present added everything it touched,
that ``absent`` gives back the input byte for byte.
"""

import json

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.runtime.common import RuntimeConfigError
from ansible_collections.gpufleet.nvidia.plugins.module_utils.runtime.docker import edit as dock
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils.runtime.golden import SHIM
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils.runtime.golden import golden as _golden
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils.runtime.golden import read_fixture as _read

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
    warning = dock.Docker().cdi_warning(version)
    assert bool(warning) is warns
    if warns:
        assert ".".join(str(n) for n in version) in warning and "docker 25" in warning


def test_docker_absent_leaves_foreign_runtime():
    src = _read("docker", "nvidia-ctk.input.json")
    edit = dock.absent(src, SHIM)
    assert not edit.changed
    assert edit.text == src


def test_docker_absent_with_what_was_there_puts_it_back():
    """NVIDIA's daemon.json (``nvidia-ctk runtime configure --cdi.enabled``): present changes its runtime's path and
    adds the default; absent with ``prior`` of the original gives back the original bytes, and an admin's key added
    in between stays."""
    src = (
        '{\n    "features": {\n        "cdi": true\n    },\n    "runtimes": {\n        "nvidia": {\n'
        '            "args": [],\n            "path": "nvidia-container-runtime"\n        }\n    }\n}\n'
    )
    was = dock.prior(src)
    assert was == {"runtime": {"args": [], "path": "nvidia-container-runtime"}, "default-runtime": None, "cdi": True}
    ours = dock.present(src, SHIM, set_as_default=True, cdi=True).text
    back = dock.absent(ours, None, cdi=True, was=was)
    assert back.text == src and back.changes == [
        'runtimes.nvidia: back to {"args": [], "path": "nvidia-container-runtime"}',
        "default-runtime: 'nvidia' removed (dockerd falls back to runc)",
    ]
    assert not dock.absent(src, None, cdi=True, was=was).changed
    edited = json.loads(ours)
    edited["log-level"] = "warn"
    assert json.loads(dock.absent(json.dumps(edited), None, cdi=True, was=was).text)["log-level"] == "warn"
    admins = {"runtime": {"path": "/opt/x"}, "default-runtime": "runsc", "cdi": False}
    put = json.loads(dock.absent(ours, None, cdi=True, was=admins).text)
    assert put["runtimes"]["nvidia"] == {"path": "/opt/x"} and put["default-runtime"] == "runsc"
    assert put["features"] == {"cdi": False}
    nothing = {"runtime": None, "default-runtime": None, "cdi": None}
    assert dock.absent(ours, None, cdi=True, was=nothing).text == ""


def test_docker_default_back_to_false_removes_only_our_default():
    """true -> false: ``default-runtime: nvidia`` goes (dockerd falls back to runc); an admin's other default stays;
    None (the module's option not set) leaves either as it is."""
    src = '{\n  "log-driver": "journald"\n}\n'
    on = dock.present(src, SHIM, set_as_default=True).text
    assert json.loads(on)["default-runtime"] == "nvidia"
    off = dock.present(on, SHIM, set_as_default=False)
    assert off.changes == ["default-runtime: 'nvidia' removed (set_as_default is false; dockerd falls back to runc)"]
    assert "default-runtime" not in json.loads(off.text) and json.loads(off.text)["runtimes"]["nvidia"]["path"] == SHIM
    assert not dock.present(off.text, SHIM, set_as_default=False).changed  # second run: nothing
    assert not dock.present(on, SHIM, set_as_default=None).changed
    admins = '{\n  "default-runtime": "runsc",\n  "runtimes": {"runsc": {"path": "/usr/bin/runsc"}}\n}\n'
    edit = dock.present(admins, SHIM, set_as_default=False)
    assert json.loads(edit.text)["default-runtime"] == "runsc"
    assert edit.changes == [f"runtimes.nvidia: added with path {SHIM}"]
