# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The collection's metadata says what users and ansible-core rely on, and agrees with the tree."""

import ast
import json
import os
import re
import sys

import pytest
import yaml
from ansible.module_utils.compat.version import LooseVersion

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODULES_DIR = os.path.join(ROOT, "plugins", "modules")


def _load(rel):
    with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
        return yaml.safe_load(f)


def _module_names():
    if not os.path.isdir(MODULES_DIR):
        return []
    return sorted(n[:-3] for n in os.listdir(MODULES_DIR) if n.endswith(".py") and n != "__init__.py")


def test_galaxy_identity_and_license():
    galaxy = _load("galaxy.yml")
    assert (galaxy["namespace"], galaxy["name"]) == ("gpufleet", "nvidia")
    assert re.fullmatch(r"\d+\.\d+\.\d+", galaxy["version"])
    assert galaxy["license"] == ["GPL-3.0-or-later"]
    assert {"infrastructure", "linux"} <= set(galaxy["tags"])
    with open(os.path.join(ROOT, "LICENSE"), encoding="utf-8") as f:
        assert "GNU GENERAL PUBLIC LICENSE" in f.readline() + f.readline()
    for key in ("repository", "documentation", "issues"):
        assert galaxy[key].startswith("https://github.com/gpufleet/nvidia"), f"galaxy.yml {key}: {galaxy[key]}"
    assert ".ansible-lint" not in galaxy["build_ignore"]  # galaxy-importer warns when the tarball lacks it


def test_galaxy_build_ignore_keeps_dev_files_out():
    ignored = set(_load("galaxy.yml")["build_ignore"])
    assert {".venv", ".cache", "tests/output", "*.tar.gz", "extensions/molecule/*/.molecule"} <= ignored


def _installed_collection_version(fqcn):
    namespace, name = fqcn.split(".")
    for entry in sys.path:
        manifest = os.path.join(entry, "ansible_collections", namespace, name, "MANIFEST.json")
        if os.path.isfile(manifest):
            with open(manifest, encoding="utf-8") as f:
                return json.load(f)["collection_info"]["version"]
    return None


def _test_requirements():
    return {c["name"]: c["version"] for c in _load("tests/requirements.yml")["collections"]}


SHIPPED = ("roles", "playbooks", "plugins", "meta")
FQCN = re.compile(r"(?<![\w.])([a-z][a-z0-9_]*)\.([a-z][a-z0-9_]*)\.[a-z][a-z0-9_]*(?![\w.])")


def _collections_used(dirs):
    """The other collections whose content the files under dirs name (module, filter, callback, connection FQCNs)."""
    used = set()
    for top in dirs:
        for base, _dirs, files in os.walk(os.path.join(ROOT, top)):
            for name in files:
                if name.endswith((".yml", ".yaml", ".j2", ".py")):
                    with open(os.path.join(base, name), encoding="utf-8") as f:
                        code = re.sub(r"(^|\s)#.*", "", f.read(), flags=re.M)  # what comments mention is not used
                        used |= {f"{a}.{b}" for a, b in FQCN.findall(code)}
    return used


def test_galaxy_declares_exactly_the_collections_shipped_content_uses():
    """An EE built from the collection gets what its roles, playbooks and plugins name, and nothing only tests use."""
    known = set(_load("galaxy.yml")["dependencies"]) | set(_test_requirements())
    used = {c for c in _collections_used(SHIPPED) if c in known}
    assert set(_load("galaxy.yml")["dependencies"]) == used
    assert not set(_test_requirements()) & set(_load("galaxy.yml")["dependencies"])
    assert {"community.docker", "ansible.posix"} <= _collections_used(["tests"])


@pytest.mark.parametrize("fqcn", ["community.docker", "community.general", "ansible.posix", "kubernetes.core"])
def test_dependency_declared_and_satisfied_by_the_pinned_toolchain(fqcn):
    deps = {**_load("galaxy.yml")["dependencies"], **_test_requirements()}
    assert fqcn in deps, f"neither galaxy.yml nor tests/requirements.yml declares {fqcn}"
    installed = _installed_collection_version(fqcn)
    assert installed, f"{fqcn} is not in the toolchain (the pinned `ansible` package should carry it)"
    for clause in deps[fqcn].split(","):
        op, ver = re.fullmatch(r"\s*(>=|<|==)\s*(\S+)\s*", clause).groups()
        have, want = LooseVersion(installed), LooseVersion(ver)
        assert {">=": have >= want, "<": have < want, "==": have == want}[op], f"{fqcn} {installed} vs {clause}"


def test_runtime_requires_ansible():
    assert _load("meta/runtime.yml")["requires_ansible"] == ">=2.18.0"


def test_action_group_lists_exactly_the_modules():
    group = _load("meta/runtime.yml")["action_groups"]["nvidia"] or []
    assert sorted(group) == _module_names()


@pytest.mark.parametrize("module", _module_names())
def test_module_carries_its_documentation(module):
    with open(os.path.join(MODULES_DIR, module + ".py"), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    assigned = {
        t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets if isinstance(t, ast.Name)
    }
    assert {"DOCUMENTATION", "EXAMPLES", "RETURN"} <= assigned
