# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""record(): a named tuple without ``collections``, behaving as namedtuple does where the collection uses it."""

import subprocess
import sys
from collections import namedtuple
from pathlib import Path

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.base.record import record

Node = record("Node", ("path", "major", "minor"))
Reference = namedtuple("Reference", ["path", "major", "minor"])


def test_positional_and_named_values_give_the_same_tuple():
    a = Node("/dev/nvidia0", 195, 0)
    b = Node("/dev/nvidia0", major=195, minor=0)
    c = Node(path="/dev/nvidia0", major=195, minor=0)
    assert a == b == c == ("/dev/nvidia0", 195, 0) == Reference("/dev/nvidia0", 195, 0)
    assert (a.path, a.major, a.minor) == ("/dev/nvidia0", 195, 0)
    path, major, minor = a
    assert (path, major, minor) == tuple(a) and a[2] == 0 and len(a) == 3
    assert hash(a) == hash(("/dev/nvidia0", 195, 0)) and isinstance(a, tuple)
    assert sorted([Node("b", 1, 1), Node("a", 2, 2)])[0].path == "a"
    assert (
        repr(a) == "Node(path='/dev/nvidia0', major=195, minor=0)" == repr(Reference(*a)).replace("Reference", "Node")
    )
    assert Node._fields == Reference._fields


def test_fields_are_read_only_and_no_other_attribute_exists():
    a = Node("/dev/nvidia0", 195, 0)
    with pytest.raises(AttributeError):
        a.major = 1
    with pytest.raises(AttributeError):
        a.extra = 1


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        (("a", 1, 2, 3), {}, "takes 3 values, got 4"),
        (("a", 1), {}, "is missing 'minor'"),
        (("a", 1, 2), {"major": 3}, r"unknown or repeated fields \['major'\]"),
        (("a",), {"major": 1, "minor": 2, "other": 3}, r"unknown or repeated fields \['other'\]"),
    ],
)
def test_wrong_values_fail_like_a_call(args, kwargs, message):
    with pytest.raises(TypeError, match=message):
        Node(*args, **kwargs)


def test_bad_field_names_are_refused():
    for fields in (("a", "a"), ("a", "_b"), ("a", "b c")):
        with pytest.raises(ValueError, match="field names"):
            record("Bad", fields)


def test_copies_keep_the_type():
    import copy

    a = Node("/dev/nvidia0", 195, 0)
    assert copy.copy(a).__class__ is Node and copy.deepcopy(a) == a


def test_importing_it_loads_no_other_module():
    """(``__future__``, which every module of the collection imports, aside.)"""
    code = (
        "import sys; before = set(sys.modules)\n"
        "from ansible_collections.gpufleet.nvidia.plugins.module_utils.base import record\n"
        "new = set(sys.modules) - before\n"
        "print(sorted(m for m in new if not m.startswith(('ansible_collections', '__future__'))))\n"
    )
    # the folder that holds ansible_collections/ (not sys.path[0]: other test files put their own folders first)
    root = str(Path(sys.modules[record.__module__].__file__).parents[6])  # <root>/ansible_collections/gpufleet/...
    out = subprocess.run(
        [sys.executable, "-S", "-c", code], capture_output=True, text=True, check=True, env={"PYTHONPATH": root}
    )
    assert out.stdout.strip() == "[]", out
