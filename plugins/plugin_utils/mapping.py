# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Tolerant reading of facts: what a host published may be missing, null or of another type."""

from __future__ import annotations

from typing import Any


def get(mapping: Any, key: str, default: Any = None) -> Any:
    """``mapping[key]``, or ``default`` when it is missing or null, or ``mapping`` is not a mapping."""
    try:
        value = mapping[key]
    except (KeyError, TypeError, AttributeError, IndexError):
        return default
    return default if value is None else value
