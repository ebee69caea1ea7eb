# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The layers of ``module_utils`` (docs/architecture.md): each subpackage imports only its own modules and the
layers below it, so no import runs back up and the host programs' payload stays ``hostprog/`` plus what it needs."""

import ast
import os

import pytest

MODULE_UTILS = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))),
    "plugins",
    "module_utils",
)
# subpackage -> the subpackages it may import (besides itself)
ALLOWED = {
    "base": set(),
    "cdi": {"base"},
    "runtime": {"base"},
    "discovery": {"base", "cdi", "runtime"},
    "hostprog": {"base", "cdi", "discovery"},
    "mig": {"base", "cdi", "discovery"},
    "remediate": {"base", "discovery"},
    "slurm": {"base", "cdi"},
    "validate": {"base", "discovery", "runtime"},
}


def _modules():
    for package in sorted(os.listdir(MODULE_UTILS)):
        folder = os.path.join(MODULE_UTILS, package)
        if os.path.isdir(folder) and not package.startswith("__"):
            for top, dirs, names in os.walk(folder):  # the engine folders under runtime/ too
                dirs[:] = sorted(d for d in dirs if not d.startswith("__"))
                for name in sorted(names):
                    if name.endswith(".py"):
                        yield package, os.path.join(top, name)


def _imported_packages(package, path):
    """``(line, target subpackage or what it names)`` for every import in the file that reaches the collection."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    depth = os.path.relpath(path, MODULE_UTILS).count(os.sep)  # 1 in runtime/, 2 in runtime/docker/
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            if node.level <= depth:
                yield node.lineno, package
            elif node.level == depth + 1 and node.module:
                yield node.lineno, node.module.split(".")[0]
            else:
                yield node.lineno, "." * node.level + (node.module or "")
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for name in names:
                if name.startswith(("ansible_collections.", "ansible.")):
                    yield node.lineno, name


def test_every_subpackage_has_a_layer():
    packages = {package for package, _path in _modules()}
    assert packages == set(ALLOWED), "a new subpackage needs its place in ALLOWED and in docs/architecture.md"
    assert not [n for n in os.listdir(MODULE_UTILS) if n.endswith(".py")], "module_utils holds subpackages only"


@pytest.mark.parametrize(("package", "path"), list(_modules()), ids=os.path.basename)
def test_imports_only_go_down(package, path):
    for line, target in _imported_packages(package, path):
        assert target == package or target in ALLOWED[package], (
            f"{os.path.relpath(path, MODULE_UTILS)}:{line} imports {target!r}; {package}/ may import only "
            f"{sorted(ALLOWED[package] | {package})} (absolute collection or ansible imports: none)"
        )
