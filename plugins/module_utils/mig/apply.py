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


def read_tables(library: Any, gpus: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Each MIG-capable GPU's profile table, read from NVML (the GPU's own profiles, whatever its model)."""
    capable = [g for g in gpus if g.get("mig_mode") is not None and g.get("uuid")]
    if not capable:
        return {}
    with Session(library) as session:
        return {g["index"]: session.profiles(session.handle(g["uuid"])) for g in capable}


def apply_layout(request: LayoutRequest, host: Host) -> LayoutResult:
    """Plan the layout on the GPUs NVML finds; apply the changed steps (outside check mode)."""
    facts = discover(root="/", sources=["nvml"])
    if "nvml" not in facts["sources"]["answered"]:
        raise Failure(
            "mig_layout: NVML does not answer on this host ({}); MIG needs the NVIDIA driver loaded".format(
                "; ".join(facts["warnings"]) or "no libnvidia-ml.so.1 or no kernel module"
            )
        )
    library = nvml_candidates("/", read_driver_cache("/"))
    try:
        tables = read_tables(library, facts["gpus"])
        steps = plan(facts["gpus"], request.layout, tables)
    except LayoutError as exc:
        raise Failure(f"mig_layout: {exc}") from None
    except (NvmlError, OSError) as exc:
        raise Failure(f"mig_layout: reading the GPUs' MIG profiles from NVML: {exc}") from None
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
