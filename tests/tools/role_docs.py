#!/usr/bin/env python
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Each role README's variable table, generated from the role's ``meta/argument_specs.yml``.

    tests/tools/role_docs.py            rewrite the tables of every role
    tests/tools/role_docs.py --check    exit 1 (naming the READMEs) when a table is not what the specs give

The table sits between ``<!-- role_docs:begin -->`` and ``<!-- role_docs:end -->`` in ``roles/<role>/README.md``;
the specs stay the one place a variable's type, default and meaning are written (``ansible-doc -t role`` reads
them too), and ``defaults/main.yml`` is tested against them (tests/controller/roles/test_argument_specs.py).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
ROLES = ("driver", "mig", "toolkit", "runtime", "slurm", "device_plugin", "validate", "drain", "gpu_watch", "imex")
BEGIN = "<!-- role_docs:begin (generated from meta/argument_specs.yml by tests/tools/role_docs.py; do not edit) -->"
END = "<!-- role_docs:end -->"
_MARKUP = re.compile(r"\b([CMOVPRLUEI])\(([^()]*)\)")


def options(role: str, repo: Path = REPO) -> dict[str, Any]:
    """The role's ``main`` entry point options, in file order."""
    specs = yaml.safe_load((repo / "roles" / role / "meta" / "argument_specs.yml").read_text())
    return specs["argument_specs"]["main"]["options"]


def _markdown(text: str) -> str:
    """Ansible doc markup as Markdown: C(x), O(x), V(x), M(x), P(x#y) -> `x`; I(x) -> *x*; | escaped."""

    def one(m: re.Match) -> str:
        kind, body = m.group(1), m.group(2)
        if kind == "I":
            return f"*{body}*"
        if kind in ("L", "U"):
            return body.split(",")[0]
        return f"`{body.split('#')[0].split('=')[0] if kind in 'MP' else body}`"

    return _MARKUP.sub(one, " ".join(str(text).split())).replace("|", "\\|")


def _default(spec: dict[str, Any]) -> str:
    if "default" not in spec or spec["default"] is None:
        return "null"
    value = spec["default"]
    return f"`{value if isinstance(value, str) and value else json.dumps(value)}`"


def _type(spec: dict[str, Any]) -> str:
    kind = spec.get("type", "str")
    if spec.get("elements"):
        kind += f" of {spec['elements']}"
    if spec.get("choices"):
        kind += ": " + ", ".join(f"`{c}`" for c in spec["choices"])
    return kind


def table(role: str, repo: Path = REPO) -> str:
    """The Markdown table, between its markers."""
    rows = [BEGIN, "| variable | type | default | meaning |", "| --- | --- | --- | --- |"]
    for name, spec in options(role, repo).items():
        description = spec.get("description", "")
        first = description[0] if isinstance(description, list) else description
        rows.append(f"| `{name}` | {_type(spec)} | {_default(spec)} | {_markdown(first)} |")
    rows.append(END)
    return "\n".join(rows)


def render(role: str, repo: Path = REPO) -> tuple[str, str]:
    """``(current README, README with the generated table)``."""
    readme = (repo / "roles" / role / "README.md").read_text()
    start, end = readme.find(BEGIN), readme.find(END)
    if start < 0 or end < start:
        raise SystemExit(f"roles/{role}/README.md: no {BEGIN!r} ... {END!r} block")
    return readme, readme[:start] + table(role, repo) + readme[end + len(END) :]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when a README's table is out of date")
    args = parser.parse_args(argv)
    stale = []
    for role in ROLES:
        current, wanted = render(role)
        if current != wanted:
            stale.append(f"roles/{role}/README.md")
            if not args.check:
                (REPO / "roles" / role / "README.md").write_text(wanted)
    if args.check and stale:
        print(f"out of date (run tests/tools/role_docs.py): {', '.join(stale)}", file=sys.stderr)
        return 1
    for path in stale:
        print(f"rewrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
