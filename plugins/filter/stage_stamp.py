# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""stage_stamp_variables, stage_stamp_spec, stage_stamp_plan, stage_stamp_records: what a stamped site.yml stage reads
and owns, the converge_check arguments of a host, and the stamps written at the end of a run
(plugin_utils/stage_stamp)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils import stage_stamp


def stage_stamp_variables(stage: str) -> list[str]:
    if not stage_stamp.stamped(stage):
        return []
    try:
        return stage_stamp.role_variables(stage)
    except (OSError, ValueError) as exc:
        raise AnsibleFilterError(f"stage_stamp_variables: cannot read the role {stage}'s argument spec: {exc}") from exc


def stage_stamp_spec(stage: str, values: Mapping[str, Any], nvidia: Mapping[str, Any] | None = None) -> dict[str, Any]:
    try:
        return stage_stamp.spec(stage, dict(values or {}), nvidia)
    except (OSError, ValueError, KeyError) as exc:
        raise AnsibleFilterError(f"stage_stamp_spec: stage {stage}: {exc}") from exc


def stage_stamp_plan(
    values: Mapping[str, Any], fast_path: Any = True, run_tags: Any = None, skip_tags: Any = None
) -> dict[str, Any]:
    try:
        return stage_stamp.plan(values, fast_path, run_tags, skip_tags)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise AnsibleFilterError(f"stage_stamp_plan: {exc}") from exc


def stage_stamp_records(
    stages: Any, host_vars: Mapping[str, Any], nvidia: Mapping[str, Any] | None = None
) -> list[dict[str, Any]]:
    try:
        return stage_stamp.records(list(stages or []), host_vars, nvidia)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise AnsibleFilterError(f"stage_stamp_records: {exc}") from exc


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "stage_stamp_variables": stage_stamp_variables,
            "stage_stamp_spec": stage_stamp_spec,
            "stage_stamp_plan": stage_stamp_plan,
            "stage_stamp_records": stage_stamp_records,
        }
