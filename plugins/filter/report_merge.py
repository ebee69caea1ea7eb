# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""``merge_fleet_reports(reports, generated=None)``: the JSON reports of a sliced run's slices as one fleet report
(``plugin_utils/report_merge.py``); documentation: ``merge_fleet_reports.yml``."""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils import report, report_merge


def merge_fleet_reports(reports: Any, generated: Any = None) -> report.Model:
    """One fleet report from the slices'; see ``merge_fleet_reports.yml``."""
    try:
        return report_merge.merge_reports(reports, generated)
    except report.ReportError as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"merge_fleet_reports": merge_fleet_reports}
