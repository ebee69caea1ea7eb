# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The ``gpu_facts`` module's work: its argument spec, the request built from the parameters, and the call of
``discover.discover`` with the module's ``run_command`` (``base.runner.run_module`` runs it).

Apart from ``discover`` so that the host programs, which reach discovery (the boot-time CDI refresh), do not carry
the module runner. Standard library only (target Pythons 3.8+).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..base.runner import ROOT, Failure, Host, Result
from .discover import SOURCES, discover
from .toolkit import DEFAULT_BINDIR


def argspec() -> dict[str, Any]:
    return {
        "root": ROOT,
        "driver_root": {"type": "path"},
        "sources": {"type": "list", "elements": "str", "choices": ["auto", *SOURCES], "default": ["auto"]},
        "toolkit_bindir": {"type": "path", "default": DEFAULT_BINDIR},
        "kernel_log": {"type": "path", "default": "/dev/kmsg"},
    }


@dataclass(frozen=True)
class FactsRequest:
    """What ``gpu_facts`` is asked to read: ``discover``'s arguments."""

    root: str
    driver_root: str | None
    sources: list[str]
    toolkit_bindir: str
    kernel_log: str

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> FactsRequest:
        return cls(**{name: params[name] for name in argspec()})


@dataclass
class FactsResult(Result):
    """``gpu_facts``' return values (RETURN): the facts under ``nvidia``; it never changes anything."""

    ansible_facts: dict[str, Any]
    changed: bool = False


def run_gpu_facts(request: FactsRequest, host: Host) -> FactsResult:
    """The ``gpu_facts`` module: ``discover`` with the module's ``run_command``; a bad ``sources`` fails it."""

    def run_command(argv: list[str]) -> tuple[int, str, str]:
        return host.run_command(argv, check_rc=False)

    try:
        facts = discover(
            root=request.root,
            driver_root=request.driver_root,
            sources=request.sources,
            run_command=run_command,
            toolkit_bindir=request.toolkit_bindir,
            kernel_log=request.kernel_log,
        )
    except ValueError as exc:
        raise Failure(f"gpu_facts: {exc}") from None
    return FactsResult(ansible_facts={"nvidia": facts})
