# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What a role variable means when a survey or ``-e`` sends it as a string (plugin_utils/role_vars.py), and the
filters that expose it."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.nvidia.plugins.filter.role_vars import FilterModule
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.role_vars import as_bool, as_int, as_list

pytestmark = pytest.mark.controller


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (True, True),
        (False, False),
        ("true", True),
        ("True", True),
        ("yes", True),
        ("on", True),
        ("1", True),
        (1, True),
        ("false", False),
        ("False", False),
        (" no ", False),
        ("off", False),
        ("0", False),
        (0, False),
        (None, None),
        ("", None),
        ("null", None),
    ],
)
def test_as_bool(value, expected):
    assert as_bool(value) is expected


@pytest.mark.parametrize("value", ["maybe", 2, 1.5, [], {}])
def test_as_bool_refuses_what_is_not_a_boolean(value):
    with pytest.raises(ValueError, match=r"driver_hold: .* is not a boolean"):
        as_bool(value, "driver_hold")


@pytest.mark.parametrize(
    ("value", "expected"), [(900, 900), ("900", 900), (" 60 ", 60), (60.0, 60), ("-1", -1), (None, None), ("", None)]
)
def test_as_int(value, expected):
    assert as_int(value) == expected


@pytest.mark.parametrize("value", ["ten", "1.5", True, 1.5, []])
def test_as_int_refuses_what_is_not_an_integer(value):
    with pytest.raises(ValueError, match="is not an integer"):
        as_int(value)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (["docker", "podman"], ["docker", "podman"]),
        (("a",), ["a"]),
        ("docker,podman", ["docker", "podman"]),
        (" docker , containerd ,", ["docker", "containerd"]),
        ("all", ["all"]),
        ("", []),
        (None, []),
        ('["docker", "crio"]', ["docker", "crio"]),
        ("['utility', 'compute']", ["utility", "compute"]),
        ("[]", []),
    ],
)
def test_as_list(value, expected):
    assert as_list(value) == expected


def test_as_list_refuses_a_number():
    with pytest.raises(ValueError, match="runtime_engines: 3 is not a list"):
        as_list(3, "runtime_engines")


def test_the_filters_raise_a_filter_error_with_the_name():
    filters = FilterModule().filters()
    assert filters["as_bool"]("no") is False
    assert filters["as_int"]("5") == 5
    assert filters["as_list"]("a,b") == ["a", "b"]
    with pytest.raises(AnsibleFilterError, match="validate_timeout: 'x' is not an integer"):
        filters["as_int"]("x", "validate_timeout")
