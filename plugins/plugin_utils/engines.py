# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The roles' lists of engines, their units and folders, from the engine registry (``module_utils.runtime.registry``):
what the ``engines`` filter returns."""

from __future__ import annotations

from typing import Any

from ansible_collections.gpufleet.nvidia.plugins.module_utils.runtime.registry import selected


def engines(names: Any, trait: str = "all", field: str = "name") -> list:
    """``registry.selected``: the engines of ``names`` (a list, or ``all``) that have ``trait``, as their ``field``
    (a Jinja list arrives as a list subclass, a tuple as a list)."""
    return selected(list(names) if isinstance(names, (list, tuple)) else names, trait, field)
