# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a host's apt knows: ``apt-cache policy`` read, and the archive components the driver plan needs
(``driver_plan.plan``'s ``apt_components``) that give no candidate. Used on the controller through the
``driver_missing_components`` filter; standard library only.
"""

from __future__ import annotations

import re


def missing_components(policy: dict[str, str], needed: dict[str, str]) -> list[str]:
    """Archive components (contrib, non-free, non-free-firmware) whose packages have no apt candidate.
    ``policy``: package -> candidate (``(none)`` or empty when apt knows no version); ``needed``: the plan's
    ``apt_components``."""
    missing = []
    for package, component in needed.items():
        if policy.get(package, "(none)") in ("(none)", "") and component not in missing:
            missing.append(component)
    return missing


def parse_policy(stdout: str) -> dict[str, str]:
    """``apt-cache policy PKG...`` output -> {package: candidate}; a package apt does not know is absent."""
    found: dict[str, str] = {}
    current = None
    for line in stdout.splitlines():
        head = re.match(r"^(\S+):$", line)
        if head:
            current = head.group(1)
            found[current] = "(none)"
            continue
        cand = re.match(r"^\s+Candidate:\s*(\S+)", line)
        if cand and current:
            found[current] = cand.group(1)
    return found
