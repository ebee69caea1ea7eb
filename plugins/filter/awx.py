# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""awx_survey, awx_objects: AWX job templates and surveys from the roles' argument specs (plugin_utils/awx.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils import awx


def awx_survey(names: list[str], options: dict[str, Any], name: str = "survey", description: str = "") -> dict:
    try:
        return awx.survey_spec(list(names), dict(options), name, description)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def awx_objects(config: dict[str, Any], options: dict[str, Any]) -> dict[str, Any]:
    try:
        return awx.controller_objects(dict(config), dict(options))
    except (KeyError, ValueError) as exc:
        raise AnsibleFilterError(f"awx_objects: {exc}") from exc


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"awx_survey": awx_survey, "awx_objects": awx_objects}
