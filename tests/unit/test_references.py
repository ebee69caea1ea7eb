# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Every module of this collection that a comment, a docstring or a page names exists.

Read from the comments and strings of the Python files and from the whole text of every other file (docs, role
READMEs, YAML, templates):

* dotted names: ``module_utils.base.fileio.read_regular``, ``plugin_utils.report``,
  ``ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi``: the longest leading part that is a package or
  a module must exist, and the next name (when there is one) must be defined in that module;
* names relative to ``module_utils`` in backquotes (``cdi.spec``, ``hostprog.shim.main``), read the same way;
* paths: ``plugins/module_utils/hostprog/oci.py``, ``plugins/filter/validate.py``; and, in comments, docstrings
  and pages, any other file of the repository (``tests/sim/README.md``);
* a module named by a private alias (``_oci.check_config``, ``_ldcache``) is the alias the file imports it under;
  any other such name (the flat ``module_utils/_oci.py`` layout) names a file that does not exist.
"""

import io
import os
import re
import tokenize

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLUGINS = os.path.join(ROOT, "plugins")
SCANNED = ("plugins", "roles", "playbooks", "docs", "extensions", "meta", "tests", "bench")
SKIPPED = {"__pycache__", "output", "fixtures", "results", ".pytest_cache"}  # what runs write; captured data
SUFFIXES = (".py", ".md", ".rst", ".yml", ".yaml", ".j2", ".sh", ".txt", ".toml", ".cfg", ".ini")

SUBPACKAGES = sorted(
    d
    for d in os.listdir(os.path.join(PLUGINS, "module_utils"))
    if os.path.isfile(os.path.join(PLUGINS, "module_utils", d, "__init__.py"))
)
IDENT = r"[A-Za-z_]\w*"
DOTTED = re.compile(
    rf"(?<![\w./-])(?:ansible_collections\.gpufleet\.nvidia\.plugins\.)?(module_utils|plugin_utils)((?:\.{IDENT})+\*?)"
)
RELATIVE = re.compile(rf"(?<!`)(``?)((?:{'|'.join(SUBPACKAGES)})(?:\.{IDENT})+\*?)(?:\(\))?\1(?!`)")
PATH = re.compile(r"(?<![\w./-])plugins/(?:module_utils|plugin_utils|modules|filter|doc_fragments)(?:/[\w.]*\w)+")
# Any other path of the repository with a file name (in comments, docstrings and pages only: tests hold made-up ones).
REPO_PATH = re.compile(
    r"(?<![\w./-])(?:roles|playbooks|extensions|tests|docs|bench|changelogs|requirements)/[\w./-]*\w"
    r"\.(?:py|md|rst|yml|yaml|j2|sh|txt|json|toml)\b"
)
# Paths of other projects, named next to the project (AWX's documentation).
OTHER_PROJECTS = {"docs/job_slicing.md", "docs/docsite/rst/userguide/job_slices.rst"}
PROSE = ("#", '"' * 3, "'" * 3, "r" + '"' * 3)  # a comment, a docstring
ALIAS = re.compile(rf"(?<![\w.])(_[a-z][a-z0-9_]*)(?=\.{IDENT}|\.py\b|``)")
# Backquoted names that read like a module relative to module_utils but are other projects' names.
NOT_OURS = {"cdi.k8s.io", "runtime.v1", "runtime.v1.RuntimeService", "mig.strategy", "cdi.nvidiaHookPath"}
FILE_SUFFIXES = {"json", "yml", "yaml", "toml", "log", "service", "conf", "txt", "sh", "py", "md", "j2"}  # runtime.json


def _files():
    paths = [os.path.join(ROOT, n) for n in sorted(os.listdir(ROOT)) if n.endswith(".md")]
    for top in SCANNED:
        for folder, dirs, names in os.walk(os.path.join(ROOT, top)):
            dirs[:] = sorted(d for d in dirs if d not in SKIPPED and not d.startswith("."))
            paths.extend(os.path.join(folder, n) for n in sorted(names) if n.endswith(SUFFIXES))
    return paths


def _texts(path):
    """``(source, [(line, text)])``: a Python file's comments and strings, any other file's whole text."""
    with open(path, encoding="utf-8") as f:
        source = f.read()
    if not path.endswith(".py"):
        return source, [(1, source)]
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return source, [(t.start[0], t.string) for t in tokens if t.type in (tokenize.COMMENT, tokenize.STRING)]


def _module_files():
    """Every module and package of plugins/, by its dotted name under ``plugins``."""
    found = {}
    for folder, dirs, names in os.walk(PLUGINS):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        package = os.path.relpath(folder, PLUGINS).replace(os.sep, ".")
        found[package] = os.path.join(folder, "__init__.py")
        for name in names:
            if name.endswith(".py") and name != "__init__.py":
                found[f"{package}.{name[:-3]}"] = os.path.join(folder, name)
    return found


MODULES = _module_files()


def resolve(dotted):
    """None when ``dotted`` (``module_utils.cdi.spec.build_spec``) names a module of plugins/ and, after it, a name
    that module defines; else why not."""
    parts = dotted.split(".")
    end = next((n for n in range(len(parts), 1, -1) if ".".join(parts[:n]) in MODULES), None)
    if end is None:
        return "no such module"
    name, rest = ".".join(parts[:end]), parts[end:]
    if not rest:
        return None
    with open(MODULES[name], encoding="utf-8") as f:
        source = f.read()
    attr = rf"{rest[0][:-1]}\w*" if rest[0].endswith("*") else rest[0]  # ``hostprog.oci.MAX_*``: some MAX_ name
    defined = rf"^\s*(?:def|class) {attr}\b|^\s*{attr}\s*[:=]|import .*\b{attr}\b|^from \. import"
    return None if re.search(defined, source, re.M) else f"{name} defines no {rest[0]!r}"


def _bound(source, alias):
    """Whether the file binds ``alias`` itself (``from ..hostprog import oci as _oci``, an assignment, a def)."""
    return re.search(rf"\bas {alias}\b|^\s*{alias}\s*[:=]|\b(?:def|class) {alias}\b", source, re.M)


def _alias_names_ours(alias):
    """Whether ``_name`` reads as one of our modules (``_oci``: hostprog/oci.py; ``_runtime_common``)."""
    tails = {m.rsplit(".", 1)[-1] for m in MODULES} | {"_".join(m.split(".")[1:]) for m in MODULES}
    return alias[1:] in tails


def _problems_in(text, source, *, own_package=None, py_files=(), aliases=True, prose=True):
    """``(offset, name, why)`` for each name in ``text`` that leads nowhere."""
    for m in DOTTED.finditer(text):
        why = resolve(m.group(1) + m.group(2))
        if why:
            yield m.start(), m.group(0), why
    for m in RELATIVE.finditer(text):
        name = m.group(2)
        if name in NOT_OURS or name.rsplit(".", 1)[-1] in FILE_SUFFIXES:
            continue
        why = resolve("module_utils." + name)
        packages = own_package.split(".") if own_package else []
        if why and any(resolve(".".join([*packages[:n], name])) is None for n in range(2, len(packages) + 1)):
            why = None  # a module beside it: ``base.toml_loader`` in runtime/ is runtime/base.py's
        if why:
            yield m.start(), name, why
    for m in PATH.finditer(text):
        path = os.path.join(ROOT, m.group(0))
        if not (os.path.exists(path) or os.path.exists(path + ".py")):
            yield m.start(), m.group(0), "no such file"
    for m in REPO_PATH.finditer(text) if prose else ():
        path = m.group(0)
        made_by_a_run = path.startswith(("tests/output/", "tests/sim/build/"))
        if "..." in path:
            continue  # tests/unit/.../discovery_tree.py: a shortened path
        if not (made_by_a_run or path in OTHER_PROJECTS or os.path.exists(os.path.join(ROOT, path))):
            yield m.start(), path, "no such file"
    for m in ALIAS.finditer(text) if aliases else ():
        alias = m.group(1)
        if _alias_names_ours(alias) and f"{alias}.py" not in py_files and not _bound(source, alias):
            yield m.start(), alias, "no module has that name, and this file imports none under it"


def problems():
    """``path:line: name: why`` for every name in the repository's comments, docstrings and pages that leads
    nowhere."""
    files = [p for p in _files() if p != os.path.abspath(__file__)]  # not its own examples
    py_files = {os.path.basename(p) for p in files if p.endswith(".py")}
    found = []
    for path in files:
        rel = os.path.relpath(path, ROOT)
        try:
            source, chunks = _texts(path)
        except (UnicodeDecodeError, tokenize.TokenError, SyntaxError):
            continue
        own_package = None
        if rel.startswith("plugins" + os.sep) and rel.endswith(".py"):
            own_package = os.path.dirname(os.path.relpath(path, PLUGINS)).replace(os.sep, ".")
        aliases = path.endswith((".py", ".md", ".rst"))
        for line, text in chunks:
            prose = not path.endswith(".py") or text.startswith(PROSE)
            found_here = _problems_in(
                text, source, own_package=own_package, py_files=py_files, aliases=aliases, prose=prose
            )
            for offset, name, why in found_here:
                found.append(f"{rel}:{line + text.count(chr(10), 0, offset)}: {name}: {why}")
    return found


def test_every_module_named_in_comments_docstrings_and_docs_exists():
    found = problems()
    assert not found, "names that lead nowhere:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("module_utils.base.fileio.read_regular", True),
        ("module_utils.base", True),
        ("module_utils.hostprog.oci.MAX_*", True),
        ("module_utils.hostprog.oci.NOT_*", False),
        ("plugin_utils.report", True),
        ("module_utils.base.fileio.no_such_function", False),
        ("module_utils._oci", False),
        ("module_utils.hostprog.oci.nope", False),
        ("plugin_utils.nothing_here", False),
    ],
)
def test_resolve(name, ok):
    assert (resolve(name) is None) == ok, resolve(name)


def test_an_old_flat_name_is_caught():
    text = "bounded (``_oci.MAX_*``), the hook (``_cdi_hook.apply``), ``module_utils.cdi.nope``, ``hostprog.oci``"
    found = [name for _offset, name, _why in _problems_in(text, text)]
    assert found == ["module_utils.cdi.nope", "_oci", "_cdi_hook"]
    imported = "from ..hostprog import oci as _oci\n"
    assert not list(_problems_in("``_oci.MAX_*``", imported))
    assert not _alias_names_ours("_input")  # a Jinja variable, not a module


def test_nothing_points_outside_the_repository():
    """The project stands alone: no page or comment sends the reader to design notes kept somewhere else."""
    outside = re.compile(r"design notes|docs/design\b|design\.md|\.\./\.\./shared", re.I)
    found = []
    for path in _files():
        if path == os.path.abspath(__file__):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            for number, line in enumerate(f, 1):
                if outside.search(line):
                    found.append(f"{os.path.relpath(path, ROOT)}:{number}: {line.strip()}")
    assert not found, "\n".join(found)
