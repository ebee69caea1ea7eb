# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A Slurm node's drain, as pure functions: the ``scontrol`` command lines that drain and resume it, and where a
drain stands, read from ``scontrol show node <name> --oneliner``.

Rules, from the Slurm documentation (read 2026-11-27):

* https://slurm.schedmd.com/scontrol.html : ``scontrol update NodeName=<node> State=DRAIN Reason=<text>`` takes
  the node out of scheduling, jobs running there go on; a ``Reason`` is required with ``DRAIN``;
  ``State=RESUME`` returns a drained node to service. ``show node --oneliner`` prints one line of
  ``Key=Value`` pairs; ``State`` is the base state and its flags joined by ``+`` (``IDLE+DRAIN``,
  ``MIXED+DRAIN``); ``Reason`` is the text given and ``[user@time]``.
* https://slurm.schedmd.com/sinfo.html : a node is ``DRAINING`` while a job still runs on it after the drain, and
  ``DRAINED`` once none does; ``sinfo -R`` lists the drained nodes with their reason.

Standard library only (target Pythons 3.8+).
"""

from __future__ import annotations

import re

_KEY = re.compile(r"^([A-Za-z][A-Za-z0-9_/.]*)=(.*)$")
# Base states that mean a job is on the node (sinfo: ALLOCATED, MIXED, COMPLETING).
_BUSY = {"ALLOCATED", "MIXED", "COMPLETING"}


def drain_argv(node: str, reason: str) -> list[str]:
    """``scontrol`` arguments that drain ``node`` with ``reason`` (a reason is required: refuse an empty one)."""
    if not reason.strip():
        raise ValueError("a Slurm drain needs a reason (scontrol refuses State=DRAIN without Reason=)")
    return ["scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason.strip()}"]


def resume_argv(node: str) -> list[str]:
    """``scontrol`` arguments that return a drained ``node`` to service."""
    return ["scontrol", "update", f"NodeName={node}", "State=RESUME"]


def parse_show_node(text: str) -> dict[str, str]:
    """``scontrol show node <name> --oneliner`` -> ``{Key: Value}``; a value with spaces (``Reason``) keeps its
    words. Raises ``ValueError`` on output that names no node (``Node <name> not found``)."""
    fields: dict[str, str] = {}
    last = None
    for word in text.split():
        match = _KEY.match(word)
        if match:
            last = match.group(1)
            fields[last] = match.group(2)
        elif last is not None:
            fields[last] += " " + word
    if "NodeName" not in fields:
        raise ValueError(f"scontrol show node printed no node: {text.strip()[:200]}")
    return fields


def drain_state(fields: dict[str, str]) -> dict[str, object]:
    """Where the node's drain stands: ``{"state": "drained" | "draining" | "in_service", "reason": ..., "flags"}``.

    ``drained``: the drain flag is set and no job runs there (work may start); ``draining``: drain flag set, a job
    still runs (wait, or stop at the timeout); ``in_service``: no drain flag.
    """
    parts = fields.get("State", "").upper().split("+")
    base, flags = parts[0], parts[1:]
    reason = fields.get("Reason", "")
    if "DRAIN" not in flags:
        state = "in_service"
    elif base in _BUSY:
        state = "draining"
    else:
        state = "drained"
    return {"state": state, "reason": reason, "base": base, "flags": flags}
