# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The ``dcgm_diag`` module's work: run NVIDIA DCGM's diagnostic, ``dcgmi diag -r <level> -j``, where DCGM is
installed, and say whether it passed.

The command and its levels (1 quick, 2 medium, 3 long, 4 extended) are dcgmi diag's reference,
https://docs.nvidia.com/datacenter/dcgm/latest/reference/command-line-reference/dcgmi/dcgmi-diag.html (read
2026-11-28). The JSON output (``--json``/``-j``) has no published stable schema ("release-pin and test CLI consumers",
https://docs.nvidia.com/datacenter/dcgm/latest/reference/diagnostics/errors.html, read 2026-11-28); its shape as
DCGM 3 and 4 print it: one top-level object, ``"DCGM GPU Diagnostic"`` (DCGM 3) or ``"DCGM Diagnostic"`` (DCGM 4),
holding ``test_categories``: ``[{category, tests: [{name, results: [{status, warnings?: [{warning, error_id?}],
gpu_id?|entity_id?}]}]}]``, each ``status`` ``Pass``, ``Fail``, ``Warn``, ``Skip`` or ``Not Run`` (the plugins page,
https://docs.nvidia.com/datacenter/dcgm/latest/reference/diagnostics/plugins/index.html: Fail is a finding or a test
that could not complete). A diagnostic passes when no result is ``Fail`` and the command exited 0.

Where ``dcgmi`` is not installed the result says so (``available: false``); nothing fails. Check mode does not run
the diagnostic (it loads the GPUs for seconds to hours). Standard library only (target Pythons 3.8+).
"""

from __future__ import annotations

import json
from typing import Any

from ..base.runner import Failure, Host, Result

TOP_KEYS = ("DCGM Diagnostic", "DCGM GPU Diagnostic")


def parse(text: str) -> dict[str, Any]:
    """``{passed, tests: [{category, name, status, entity, warnings}], failed: [...names]}`` from ``dcgmi diag -j``'s
    output; raises ValueError when it is no such JSON."""
    data = json.loads(text[text.find("{") : text.rfind("}") + 1] if "{" in text else text)
    body = next((data[k] for k in TOP_KEYS if isinstance(data, dict) and k in data), None)
    if not isinstance(body, dict) or not isinstance(body.get("test_categories"), list):
        raise ValueError(f"no {' or '.join(repr(k) for k in TOP_KEYS)} object with test_categories")
    tests = []
    for category in body["test_categories"]:
        for test in category.get("tests") or []:
            for res in test.get("results") or [{}]:
                entity = res.get("entity_id", res.get("gpu_id", res.get("gpu_ids")))
                warnings = [w.get("warning", "") for w in res.get("warnings") or [] if isinstance(w, dict)]
                tests.append(
                    {
                        "category": category.get("category"),
                        "name": test.get("name"),
                        "status": str(res.get("status", "")),
                        "entity": entity,
                        "warnings": warnings,
                    }
                )
    failed = [t for t in tests if t["status"].lower() == "fail"]
    return {
        "passed": not failed,
        "tests": tests,
        "failed": [
            f"{t['name']}{'' if t['entity'] is None else ' (GPU ' + str(t['entity']) + ')'}: "
            f"{'; '.join(t['warnings']) or 'Fail'}"
            for t in failed
        ],
    }


class DiagRequest:
    def __init__(self, level: int, command: str) -> None:
        self.level = level
        self.command = command

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> DiagRequest:
        if params["level"] not in (1, 2, 3, 4):
            raise Failure(f"dcgm_diag: level {params['level']} is no dcgmi diag level; use 1 to 4")
        return cls(params["level"], params["command"])


class DiagResult(Result):
    def __init__(self, available: bool, ran: bool, passed: bool | None, summary: str, **more: Any) -> None:
        self.changed = False
        self.available = available
        self.ran = ran
        self.passed = passed
        self.summary = summary
        self.failed = more.get("failed")
        self.tests = more.get("tests")
        self.rc = more.get("rc")


def run_diag(req: DiagRequest, host: Host) -> DiagResult:
    dcgmi = host.get_bin_path(req.command)
    if dcgmi is None:
        return DiagResult(False, False, None, f"DCGM is not installed ({req.command} not found): no diagnostic ran")
    argv = [dcgmi, "diag", "-r", str(req.level), "-j"]
    if host.check_mode:
        return DiagResult(True, False, None, f"check mode: would run {' '.join(argv)}")
    rc, out, err = host.run_command(argv)
    try:
        parsed = parse(out)
    except ValueError as exc:
        raise Failure(
            f"{' '.join(argv)} (rc {rc}) printed no diagnostic JSON ({exc}): {(err or out).strip()[:400]}. Is "
            "nv-hostengine running (systemctl status nvidia-dcgm)?",
            rc=rc,
        ) from exc
    passed = parsed["passed"] and rc == 0
    summary = (
        f"dcgmi diag -r {req.level}: passed ({len(parsed['tests'])} results)"
        if passed
        else f"dcgmi diag -r {req.level}: failed (rc {rc}): {'; '.join(parsed['failed']) or 'no Fail result'}"
    )
    return DiagResult(True, True, passed, summary, failed=parsed["failed"], tests=parsed["tests"], rc=rc)
