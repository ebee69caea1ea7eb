# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a role variable means when it arrives as a string: from an AWX survey, a job template's extra variables or
``-e key=value``, every value is a string (``"false"``, ``"900"``, ``"docker,podman"``). Extra variables win over
everything a role could set, so a role cannot replace them with typed values: each use of a bool, int or list
variable goes through one of these (as the ``as_bool``, ``as_int`` and ``as_list`` filters), and the meaning of
``"no"`` or ``"a, b"`` lives here only. Ansible's own ``bool`` filter turns ``None`` into ``False``; a nullable bool
(``device_plugin_enabled``, ``toolkit_accept_*``: null means "derive it") must stay ``None``."""

from __future__ import annotations

from typing import Any

TRUE = frozenset(("true", "yes", "on", "1", "y", "t"))
FALSE = frozenset(("false", "no", "off", "0", "n", "f"))
# What a survey sends for "not set" in a nullable variable.
NULL = frozenset(("", "none", "null", "~"))


def as_bool(value: Any, name: str = "value") -> bool | None:
    """True/False from a bool, an int 0/1 or a string such as ``"yes"`` or ``"False"``; None stays None."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        text = value.strip().lower()
        if text in TRUE:
            return True
        if text in FALSE:
            return False
        if text in NULL:
            return None
    raise ValueError(f"{name}: {value!r} is not a boolean (true/false, yes/no, on/off, 1/0)")


def as_int(value: Any, name: str = "value") -> int | None:
    """An int from an int or a string of digits (``"900"``, ``" 60 "``); None stays None."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError(f"{name}: {value!r} is not an integer")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        text = value.strip()
        if text.lower() in NULL:
            return None
        try:
            return int(text, 10)
        except ValueError:
            pass
    raise ValueError(f"{name}: {value!r} is not an integer")


def as_list(value: Any, name: str = "value") -> list[Any]:
    """A list from a list or tuple, or a comma-separated string (``"docker, podman"``; ``""`` is the empty list).

    A string that is a JSON or YAML list (``'["a", "b"]'``, as a survey's text field may send) is read as one."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return list(value)
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("[") and text.endswith("]"):
            text = text[1:-1]
            return [item.strip().strip("'\"") for item in text.split(",") if item.strip().strip("'\"")]
        return [item.strip() for item in text.split(",") if item.strip()]
    raise ValueError(f"{name}: {value!r} is not a list or a comma-separated string")
