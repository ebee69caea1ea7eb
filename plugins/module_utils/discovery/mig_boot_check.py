# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The ``mig_boot_failed`` check (in ``problems.CHECKS``): what ``gpufleet-mig-boot`` (the boot unit the ``mig``
role installs, ``mig/boot.py``) could not do at this boot, from the status it leaves in ``STATUS``.

Standard library only (target Pythons 3.8+).
"""

from __future__ import annotations

import json
from typing import Any, Dict

from ..base.fileio import read_text
from ..base.pathsafe import host_path

# Under /run: the status of this boot only, gone at the next.
STATUS = "/run/gpufleet/mig-boot.json"
# The layout the mig role applied, which the boot unit applies again ({"name", "layout"}; written by the role).
RECORD = "/etc/gpufleet/mig-layout.json"

Problem = Dict[str, str]


def problem(code: str, message: str, fix: str) -> Problem:
    return {"code": code, "message": message, "fix": fix}


def _read_json(root: str, path: str, limit: int) -> tuple[str | None, Any]:
    """``(text, value)`` of a JSON file under ``root``: text None when the file cannot be read, value None when it is
    not JSON."""
    text = read_text(host_path(root, path), tolerant=True, limit=limit)
    try:
        return text, json.loads(text) if text else None
    except ValueError:
        return text, None


def read_status(root: str) -> dict[str, Any] | None:
    """The boot unit's status of this boot, None when it has not run (or left nothing readable)."""
    status = _read_json(root, STATUS, 1 << 16)[1]
    return status if isinstance(status, dict) else None


def mig_boot(root: str) -> dict[str, Any]:
    """The ``mig_boot`` facts: ``layout``, the name of the layout the boot unit applies again at every boot (None: no
    record, so nothing is applied at boot), and ``status``, what the unit did at this boot (None: it has not run)."""
    text, record = _read_json(root, RECORD, 1 << 20)
    name = record.get("name") if isinstance(record, dict) else None
    # A record that cannot be read still makes the unit run (and fail) at boot: it is named, not hidden.
    layout = (str(name) if name else "(unreadable record)") if text else None
    return {"layout": layout, "status": read_status(root)}


def mig_boot_failed(host: Any) -> list[Problem]:
    """The boot unit's failure at this boot: the layout not applied (MIG left disabled on the GPUs it changes), or a
    client of the GPU (nvidia-persistenced, Fabric Manager, DCGM) or nvidia_drm not back."""
    status = read_status(host.root)
    if not status or status.get("ok", True):
        return []
    message = status.get("message") or "failed"
    return [
        problem(
            "mig_boot_failed",
            f"gpufleet-mig-layout.service at this boot: {message}",
            "read 'journalctl -b -u gpufleet-mig-layout.service', fix what it names (stop what holds the GPU, unload "
            "nvidia_drm), then run the mig stage again (site.yml --tags mig) or 'systemctl restart "
            "gpufleet-mig-layout.service'",
        )
    ]
