# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The ``engines`` filter: the roles' lists of engines from the engine registry (``plugin_utils.engines``)."""

from __future__ import annotations

from typing import Any, Callable

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.engines import engines


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"engines": engines}
