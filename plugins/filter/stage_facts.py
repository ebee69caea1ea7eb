# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""stage_toolkit, stage_runtime: an earlier stage's fact from this play, else as the host shows it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ansible_collections.gpufleet.nvidia.plugins.module_utils.validate.stage_facts import stage_runtime, stage_toolkit


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"stage_toolkit": stage_toolkit, "stage_runtime": stage_runtime}
