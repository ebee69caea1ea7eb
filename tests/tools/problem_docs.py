#!/usr/bin/env python
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The docsite's troubleshooting guide, generated from the one place problem codes live.

    tests/tools/problem_docs.py            rewrite docs/docsite/rst/troubleshooting.rst
    tests/tools/problem_docs.py --check    exit 1 when the guide is not what the code gives

Every ``problem(code, message, fix)`` call of ``plugins/module_utils/discovery/problems.py`` (then of the files in
``MORE``, checks kept in their own file) becomes a section: the
code, what the host shows (the message, its variable parts as ``<name>``) and the fix. ``gpu_xid_<n>`` codes come
from ``ACTIONS`` of ``discovery/xid.py``: one per XID whose bucket is a host problem (``HOST_BUCKETS``). The source
is read as text (ast), so a new code reaches the guide by running this, and a stale guide fails
``tests/controller/docs/test_docsite.py``.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROBLEMS = REPO / "plugins" / "module_utils" / "discovery" / "problems.py"
XID = REPO / "plugins" / "module_utils" / "discovery" / "xid.py"
# Checks of CHECKS that live in their own file (problems.py stays under the length limit), after problems.py's.
MORE = (
    REPO / "plugins" / "module_utils" / "discovery" / "next_boot.py",
    REPO / "plugins" / "module_utils" / "discovery" / "mig_boot_check.py",
    REPO / "plugins" / "module_utils" / "discovery" / "gpu_watch_state.py",
    REPO / "plugins" / "module_utils" / "discovery" / "imex.py",
    # NVIDIA's security bulletins and the driver branch lifecycle, joined on the controller by the fleet report
    REPO / "plugins" / "plugin_utils" / "exposure.py",
)
# The GPU watch's metrics (its METRICS table), listed after the problems.
WATCH = REPO / "plugins" / "module_utils" / "hostprog" / "gpu_watch.py"
GUIDE = REPO / "docs" / "docsite" / "rst" / "troubleshooting.rst"
LABEL = "ansible_collections.gpufleet.nvidia.docsite.troubleshooting"
_RST_SPECIAL = "\\*`|_"

HEAD = f""".. _{LABEL}:

Troubleshooting
===============

``gpu_facts`` (the discover stage) names every problem it sees on a host as ``{{code, message, fix}}`` in
``ansible_facts.nvidia.problems``; the fleet report groups them by code ("Problems by kind") with their fix and the
hosts that have them. Below, every code the collection can report: what the host shows (the parts in ``<...>`` are
the host's own values) and what to do.

.. contents::
  :local:
  :depth: 1

..
  Generated from plugins/module_utils/discovery/problems.py and discovery/xid.py by tests/tools/problem_docs.py;
  do not edit (tests/controller/docs/test_docsite.py fails when it is stale).
"""


def _name(node: ast.AST) -> str:
    """A short name for a formatted value: ``facts['gpu_count']`` -> gpu_count, ``gpu.get('x')`` -> x."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Constant):
        return str(node.value)
    if isinstance(node, ast.Subscript):
        inner = node.slice
        if isinstance(inner, ast.Constant) and isinstance(inner.value, str):
            return inner.value
        return _name(node.value)
    if isinstance(node, ast.Call):
        if isinstance(node.func, ast.Attribute) and node.func.attr == "get" and node.args:
            return _name(node.args[0])
        if isinstance(node.func, ast.Attribute) and node.func.attr == "join" and node.args:
            return _name(node.args[0])
        if isinstance(node.func, ast.Attribute):
            return _name(node.func.value)
        return _name(node.func)
    if isinstance(node, ast.BoolOp):
        return _name(node.values[0])
    return "value"


def _text(node: ast.AST) -> str:
    """A string expression as text, each variable part as ``<name>``."""
    if isinstance(node, ast.Constant):
        return str(node.value)
    if isinstance(node, ast.JoinedStr):
        out = ""
        for part in node.values:
            if isinstance(part, ast.Constant):
                out += str(part.value)
            elif isinstance(part, ast.FormattedValue):
                out += f"<{_name(part.value)}>"
        return out
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _text(node.left) + _text(node.right)
    return f"<{_name(node)}>"


def problems(source: str) -> list[dict[str, list[str] | str]]:
    """``[{code, messages, fixes}]`` in source order, one entry per code (its variants in order)."""
    found: dict[str, dict] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "problem":
            if len(node.args) != 3:
                raise SystemExit(f"{PROBLEMS}:{node.lineno}: problem() needs (code, message, fix) positionally")
            code = _text(node.args[0])
            entry = found.setdefault(code, {"code": code, "line": node.lineno, "messages": [], "fixes": []})
            for key, arg in (("messages", node.args[1]), ("fixes", node.args[2])):
                text = " ".join(_text(arg).split())
                if text not in entry[key]:
                    entry[key].append(text)
    return sorted(found.values(), key=lambda e: e["line"])


def xid_actions(source: str) -> tuple[dict[int, tuple[str, str, str]], tuple[str, ...]]:
    """``ACTIONS`` and ``HOST_BUCKETS`` of xid.py, read as literals."""
    values = {}
    for node in ast.parse(source).body:
        target = (
            node.target
            if isinstance(node, ast.AnnAssign)
            else (node.targets[0] if isinstance(node, ast.Assign) else None)
        )
        if isinstance(target, ast.Name) and target.id in ("ACTIONS", "HOST_BUCKETS"):
            values[target.id] = ast.literal_eval(node.value)
    return values["ACTIONS"], values["HOST_BUCKETS"]


def rst_text(text: str) -> str:
    for ch in _RST_SPECIAL:
        text = text.replace(ch, "\\" + ch)
    return text


def render(problems_source: str, xid_source: str, *more_sources: str, watch_source: str | None = None) -> str:
    actions, host_buckets = xid_actions(xid_source)
    out = [HEAD]
    for entry in problems(problems_source) + [e for source in more_sources for e in problems(source)]:
        code = entry["code"]
        if code == "gpu_xid_<xid>":
            out.append(_section("gpu_xid_<n>", entry["messages"], entry["fixes"]))
            for xid, (bucket, meaning, todo) in sorted(actions.items()):
                if bucket in host_buckets:
                    out.append(
                        _section(
                            f"gpu_xid_{xid}",
                            [f"<GPU> logged Xid {xid} ({meaning}) <count> time(s) since boot"],
                            [f"{todo} (NVIDIA Xid catalog: {bucket})"],
                            level="~",
                        )
                    )
            continue
        out.append(_section(code, entry["messages"], entry["fixes"]))
    if watch_source is not None:
        out.append(metrics_section(watch_source))
    return "\n".join(out).rstrip("\n") + "\n"


def metrics_section(watch_source: str) -> str:
    """The GPU watch's metrics, from ``METRICS`` of hostprog/gpu_watch.py (read as a literal)."""
    metrics = next(
        ast.literal_eval(node.value)
        for node in ast.parse(watch_source).body
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) and node.targets[0].id == "METRICS"
    )
    title = "GPU watch metrics"
    lines = [f".. _{LABEL}.gpu_watch_metrics:", "", title, "-" * len(title), ""]
    lines += [
        "The ``gpu_watch`` role's timer writes these into ``gpufleet_gpu.prom`` in the node exporter's textfile",
        "directory every interval. Every per-GPU series carries ``gpu`` (the index), ``uuid`` and ``pci_bus_id``;",
        "``gpufleet_gpu_problem`` has one series per problem above, labelled ``code`` and ``action`` (the remediation",
        "class: ``RESET_GPU``, ``RESTART_BM``, ``CONTACT_SUPPORT`` or ``NONE``), and ``gpufleet_gpu_last_xid``",
        "carries the XID's ``action`` too.",
        "",
    ]
    for name, (kind, text) in metrics.items():
        lines += [f"``{name}`` ({kind})", f"  {rst_text(text)}", ""]
    return "\n".join(lines)


def _section(code: str, messages: list[str], fixes: list[str], level: str = "-") -> str:
    title = f"``{code}``"
    anchor = code.replace("<", "").replace(">", "")
    lines = [f".. _{LABEL}.{anchor}:", "", title, level * len(title), ""]
    for message in messages:
        lines += [f"**Seen**: {rst_text(message)}", ""]
    for fix in fixes:
        lines += [f"**Fix**: {rst_text(fix)}", ""]
    return "\n".join(lines)


def generate() -> str:
    more = [path.read_text(encoding="utf-8") for path in MORE]
    return render(
        PROBLEMS.read_text(encoding="utf-8"),
        XID.read_text(encoding="utf-8"),
        *more,
        watch_source=WATCH.read_text(encoding="utf-8"),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the guide is stale")
    args = parser.parse_args(argv)
    text = generate()
    if args.check:
        if GUIDE.read_text(encoding="utf-8") != text:
            print(f"{GUIDE.relative_to(REPO)} is stale: run tests/tools/problem_docs.py", file=sys.stderr)
            return 1
        return 0
    GUIDE.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
