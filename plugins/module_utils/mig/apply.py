# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The ``mig_layout`` module's work: plan a MIG layout per GPU (``layout.plan``) and apply it through NVML.

Nothing changes while a GPU the plan changes is in use; what NVML answers is asked of discovery
(``discovery.discover``), once. Python 3.8+, standard library.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..base.runner import Failure, Host, Result
from ..cdi.driver_files import read_driver_cache
from ..discovery.discover import discover, nvml_candidates
from ..discovery.nvml import NvmlError
from .layout import LayoutError, holders, plan
from .nvml_mig import Session


@dataclass(frozen=True)
class LayoutRequest:
    """The layout wanted: one entry per GPU selector, in mig-parted's vocabulary."""

    layout: list[dict[str, Any]]

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> LayoutRequest:
        return cls(params["layout"])


@dataclass
class LayoutResult(Result):
    """``mig_layout``'s return values (RETURN)."""

    changed: bool
    gpus: list[dict[str, Any]]
    diff: dict[str, str]


def step_result(step: dict) -> dict:
    """What the module returns of a plan's step."""
    return {k: step[k] for k in ("index", "uuid", "before", "after", "changed")}


def _busy(facts: dict[str, Any], steps: list[dict]) -> list[str]:
    """``GPU <index> (<name>): <holders>`` for each GPU the plan changes that a process holds."""
    by_index = {g["index"]: g for g in facts["gpus"]}
    return [
        f"GPU {s['index']} ({s['name']}): " + ", ".join(holders(facts["gpu_users"], by_index[s["index"]].get("minor")))
        for s in steps
        if s["changed"] and holders(facts["gpu_users"], by_index[s["index"]].get("minor"))
    ]


def apply_layout(request: LayoutRequest, host: Host) -> LayoutResult:
    """Plan the layout on the GPUs NVML finds; apply the changed steps (outside check mode)."""
    facts = discover(root="/", sources=["nvml"])
    if "nvml" not in facts["sources"]["answered"]:
        raise Failure(
            "mig_layout: NVML does not answer on this host ({}); MIG needs the NVIDIA driver loaded".format(
                "; ".join(facts["warnings"]) or "no libnvidia-ml.so.1 or no kernel module"
            )
        )
    try:
        steps = plan(facts["gpus"], request.layout)
    except LayoutError as exc:
        raise Failure(f"mig_layout: {exc}") from None
    busy = _busy(facts, steps)
    if busy:
        raise Failure(
            "mig_layout: the layout changes GPUs that are in use, so nothing was changed: "
            + "; ".join(busy)
            + ". Stop those processes (or drain the host), then run again",
            gpus=[step_result(s) for s in steps],
        )
    changed = any(s["changed"] for s in steps)
    if changed and not host.check_mode:
        try:
            library = nvml_candidates("/", read_driver_cache("/"))
            with Session(library) as session:
                for step in steps:
                    if step["changed"]:
                        session.apply(step)
        except (NvmlError, OSError, ValueError) as exc:
            raise Failure(f"mig_layout: {exc}", gpus=[step_result(s) for s in steps]) from None
    diff = {
        "before": "".join(f"GPU {s['index']} ({s['uuid']}): {s['before']}\n" for s in steps),
        "after": "".join(f"GPU {s['index']} ({s['uuid']}): {s['after']}\n" for s in steps),
    }
    return LayoutResult(changed=changed, gpus=[step_result(s) for s in steps], diff=diff)
