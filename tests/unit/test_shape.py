# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The shape of ``plugins/``: thin modules, thin filters, no file too long to read (docs/architecture.md).

* A module is an argument spec plus a call into ``module_utils``: at most ``MODULE_CODE_LINES`` lines of code, which
  counts every line that is not blank, not a comment and not inside a documentation string (the module's
  ``DOCUMENTATION``, ``EXAMPLES`` and ``RETURN`` and every docstring), as ``ast`` sees them.
  Its ``main()`` is at most ``MAIN_STATEMENTS`` statements: the module built from its argument spec, and the call.
* No file under ``plugins/`` has more than ``FILE_LINES`` lines; generated data (``plugins/plugin_utils/data/``, written
  by a script that also checks it) is not read as code and is left out.
* A filter file is entry points over ``plugin_utils`` (or ``module_utils``, for a rule the hosts run too): it imports
  from ``plugins.plugin_utils`` or ``plugins.module_utils``, and each of its functions (nested ones and
  ``FilterModule.filters`` included) is at most ``FILTER_STATEMENTS`` statements, its docstring aside, counting the
  statements inside ``if``/``try``/``with`` blocks, and holds no loop and no comprehension: a decision, a walk or a
  rule over the input belongs in ``plugin_utils`` or ``module_utils``, where it is tested without Jinja.

Files that do not meet a rule yet are listed in ``ALLOWED``, each against its rule; a listed file that meets the rule
fails the test, so the list only shrinks.
"""

from __future__ import annotations

import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLUGINS = os.path.join(ROOT, "plugins")
MODULE_CODE_LINES = 160
FILE_LINES = 700
FILTER_STATEMENTS = 6
MAIN_STATEMENTS = 5
DOC_NAMES = {"DOCUMENTATION", "EXAMPLES", "RETURN"}
LOOPS = (ast.For, ast.AsyncFor, ast.While, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)

# rule -> the files (relative to plugins/) that do not meet it yet
ALLOWED = {
    "module_code_lines": set(),
    "module_main": set(),
    "file_lines": set(),
    "thin_filter": set(),
}


def _files(folder: str, ext: str = "") -> list[str]:
    found = []
    for top, dirs, names in os.walk(os.path.join(PLUGINS, folder)):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        found += [os.path.relpath(os.path.join(top, n), PLUGINS) for n in sorted(names) if n.endswith(ext)]
    return found


def _parse(rel: str) -> tuple[str, ast.Module]:
    with open(os.path.join(PLUGINS, rel), encoding="utf-8") as f:
        source = f.read()
    return source, ast.parse(source)


def _docstring(body: list[ast.stmt]) -> ast.stmt | None:
    first = body[0] if body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        return first
    return None


def code_lines_of(source: str) -> int:
    """The lines of code of ``source`` outside its documentation strings, blank lines and comments."""
    tree = ast.parse(source)
    docs = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id in DOC_NAMES for t in node.targets):
            docs.update(range(node.lineno, node.end_lineno + 1))
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = _docstring(node.body)
            if doc is not None:
                docs.update(range(doc.lineno, doc.end_lineno + 1))
    lines = source.splitlines()
    return sum(1 for i, line in enumerate(lines, 1) if i not in docs and line.strip() and line.lstrip()[:1] != "#")


def code_lines(rel: str) -> int:
    return code_lines_of(_parse(rel)[0])


def _statements(body: list[ast.stmt]) -> int:
    count = 0
    for stmt in body:
        count += 1
        for field in ("body", "orelse", "finalbody"):
            inner = getattr(stmt, field, None)
            if isinstance(inner, list) and not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                count += _statements(inner)
        for handler in getattr(stmt, "handlers", None) or []:
            count += _statements(handler.body)
    return count


def filter_problems(rel: str) -> list[str]:
    """Why the filter file ``rel`` is not thin (empty: it is)."""
    _source, tree = _parse(rel)
    problems = []
    imports = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    if not any(".plugins.plugin_utils" in name or ".plugins.module_utils" in name for name in imports):
        problems.append("imports nothing from plugins.plugin_utils or plugins.module_utils")
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        body = node.body[1:] if _docstring(node.body) is not None else node.body
        count = _statements(body)
        if count > FILTER_STATEMENTS:
            problems.append(f"{node.name}: {count} statements (at most {FILTER_STATEMENTS})")
        loops = sorted({type(n).__name__ for stmt in body for n in ast.walk(stmt) if isinstance(n, LOOPS)})
        if loops:
            problems.append(f"{node.name}: {', '.join(loops)}")
    return problems


def main_problems(rel: str) -> list[str]:
    """Why the module ``rel``'s ``main()`` is not an argument spec and a call (empty: it is)."""
    mains = [n for n in _parse(rel)[1].body if isinstance(n, ast.FunctionDef) and n.name == "main"]
    if not mains:
        return ["no main()"]
    count = _statements(mains[0].body[1:] if _docstring(mains[0].body) is not None else mains[0].body)
    return [f"main(): {count} statements (at most {MAIN_STATEMENTS})"] if count > MAIN_STATEMENTS else []


def _too_long(rel: str) -> int:
    with open(os.path.join(PLUGINS, rel), "rb") as f:
        return sum(1 for _line in f)


MODULES = [rel for rel in _files("modules", ".py") if not rel.endswith("__init__.py")]
FILTERS = [rel for rel in _files("filter", ".py") if not rel.endswith("__init__.py")]
# Generated data files (tests/tools/security_data.py writes and checks plugins/plugin_utils/data/*.json).
DATA = "plugin_utils/data/"
ALL_FILES = [rel for rel in _files(".") if not rel.startswith(DATA)]

RULES = {
    "module_code_lines": (
        MODULES,
        lambda rel: [f"{code_lines(rel)} lines of code"] if code_lines(rel) > MODULE_CODE_LINES else [],
    ),
    "module_main": (MODULES, main_problems),
    "file_lines": (ALL_FILES, lambda rel: [f"{_too_long(rel)} lines"] if _too_long(rel) > FILE_LINES else []),
    "thin_filter": (FILTERS, filter_problems),
}


@pytest.mark.parametrize("rule", sorted(RULES))
def test_rule_holds_outside_the_allow_list(rule):
    files, check = RULES[rule]
    failing = {rel: check(rel) for rel in files if rel not in ALLOWED[rule]}
    failing = {rel: why for rel, why in failing.items() if why}
    assert not failing, f"{rule}: {failing} (see this file's docstring for the rule)"


@pytest.mark.parametrize("rule", sorted(RULES))
def test_allow_list_is_not_stale(rule):
    files, check = RULES[rule]
    stale = sorted(rel for rel in ALLOWED[rule] if rel not in files or not check(rel))
    assert not stale, f"{rule}: {stale} meet the rule now (or are gone): take them off ALLOWED"


def test_code_lines_counts_code_only():
    source = '"""Doc."""\nDOCUMENTATION = r"""\nx: 1\n"""\n\n# a comment\n\ndef f():\n    """Doc."""\n    return 1\n'
    assert code_lines_of(source) == 2  # def f(): and return 1
    assert _statements(ast.parse("if a:\n    b = 1\nelse:\n    c = 2\n").body) == 3
