# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""base.version: the one reading of a dotted version."""

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.base import version as v


@pytest.mark.parametrize(
    "text, expected",
    [
        ("1.7.27", (1, 7, 27)),
        ("1.7", (1, 7, 0)),  # never read as (1,): that once made containerd 1.7 look like 1.0
        ("2.1.0-rc.1", (2, 1, 0)),
        ("v28.0.4", (28, 0, 4)),
        ("20.10.24+dfsg1", (20, 10, 24)),
        ("1.6.20~ds1", (1, 6, 20)),
        ("1.7.27.3", (1, 7, 27)),
        ("Docker version 20.10.24+dfsg1, build 5d6db84", (20, 10, 24)),
        ("containerd containerd.io 1.7.27 05044ec0a9a75232cad458027ca83437aae3f4da", (1, 7, 27)),
        ("containerd github.com/containerd/containerd/v2 v2.1.1 cb1076646aa3740577fafbf3d914198b7fe8e3f7", (2, 1, 1)),
        ("crio version 1.30.4\n", (1, 30, 4)),
        ("535.261.03", (535, 261, 3)),
        ("garbage", None),
        ("28", None),
        ("", None),
        (None, None),
        ("v", None),
        ("1.", None),
        ("2:20.10.24", None),  # an epoch is stripped first
    ],
)
def test_parse(text, expected):
    assert v.parse(text) == expected


@pytest.mark.parametrize(
    "text, expected",
    [("2:20.10.24+dfsg1-1", "20.10.24+dfsg1-1"), ("1.7.27", "1.7.27"), ("", ""), (None, ""), ("a:1.2", "a:1.2")],
)
def test_strip_epoch(text, expected):
    assert v.strip_epoch(text) == expected
    assert v.parse(v.strip_epoch("2:20.10.24")) == (20, 10, 24)


@pytest.mark.parametrize(
    "text, expected",
    [("12.2", (12, 2)), ("535.104.05", (535, 104, 5)), ("12-1", (12, 1)), ("12.x", (12,)), ("", ()), ("x", ())],
)
def test_parts(text, expected):
    assert v.parts(text) == expected


@pytest.mark.parametrize(
    "have, op, want, holds",
    [
        ("12.2", ">=", "12.0", True),
        ("12", ">=", "12.0", True),
        ("12", "==", "12.0.0", True),
        ("11.8", ">=", "12.0", False),
        ("535.104.05", "<", "535.104.12", True),
        ("12.2", "!=", "12.2", False),
        ("12.2", ">", "12.1.9", True),
        ("12.2", "<=", "12.2.0", True),
        ("12.2", "=", "12.3", False),
    ],
)
def test_compare(have, op, want, holds):
    assert v.compare(have, op, want) is holds


def test_text_of():
    assert v.text_of((1, 7, 27)) == "1.7.27"
    assert v.text_of(None) == ""


def test_imports_nothing():
    """The shim reaches it on every container start: it must not pull ``re`` in."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(v))
    top = {a.name for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
    assert top == {"annotations"}  # typing only under ``if False``
