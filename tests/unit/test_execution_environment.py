# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The execution environment's view of the collection: meta/execution-environment.yml names the Python and system
needs of what runs on the controller, and the ready EE's definition installs the collection and nothing the tests use.
(make ee runs ansible-builder introspect and create on the built tarball; this checks the sources without it.)"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
CONTROLLER = ("plugins/filter", "plugins/plugin_utils")
# ansible-core's own requirements: present wherever ansible-core runs, so an EE has them by construction.
ANSIBLE_CORE = {"ansible", "yaml", "jinja2", "markupsafe", "cryptography", "packaging", "resolvelib"}


def _meta() -> dict:
    return yaml.safe_load((ROOT / "meta" / "execution-environment.yml").read_text())


def _requirements() -> set[str]:
    lines = (ROOT / _meta()["dependencies"]["python"]).read_text().splitlines()
    names = [re.split(r"[<>=!~ ;\[]", line.strip(), maxsplit=1)[0] for line in lines if line.strip()[:1].isalnum()]
    return {name.lower() for name in names}


def _controller_imports() -> set[str]:
    found = set()
    for top in CONTROLLER:
        for path in (ROOT / top).glob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    found |= {alias.name.split(".")[0] for alias in node.names}
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    found.add(node.module.split(".")[0])
    return found - {"__future__", "ansible_collections"} - set(sys.stdlib_module_names)


def test_meta_names_existing_requirement_files_in_builder_v3_form():
    meta = _meta()
    assert meta["version"] == 3
    assert set(meta["dependencies"]) == {"python", "system"}
    for rel in meta["dependencies"].values():
        assert (ROOT / rel).is_file(), rel


def test_every_controller_import_is_in_the_ee_requirements_or_ansible_core():
    imports = _controller_imports()
    assert {"jinja2", "markupsafe", "yaml"} <= imports  # the scan reads the plugins (a broken scan finds nothing)
    assert imports <= _requirements() | ANSIBLE_CORE, imports - _requirements() - ANSIBLE_CORE
    assert {"jinja2", "markupsafe"} <= _requirements()


def test_the_controller_side_kubernetes_tasks_have_their_python_and_helm():
    uses_k8s = any("kubernetes.core." in p.read_text() for p in (ROOT / "roles").glob("*/tasks/*.yml"))
    uses_helm = any("kubernetes.core.helm" in p.read_text() for p in (ROOT / "roles").glob("*/tasks/*.yml"))
    assert uses_k8s and uses_helm
    assert "kubernetes" in _requirements()
    bindep = (ROOT / _meta()["dependencies"]["system"]).read_text()
    assert re.search(r"^helm \[platform:", bindep, re.M)
    assert re.search(r"^openssh-clients? \[platform:", bindep, re.M)


def test_the_ready_ee_installs_the_built_collection_and_no_test_collection():
    ee = yaml.safe_load((ROOT / "extensions" / "ee" / "execution-environment.yml").read_text())
    assert ee["version"] == 3
    galaxy = yaml.safe_load((ROOT / "extensions" / "ee" / ee["dependencies"]["galaxy"]).read_text())
    names = [c["name"] for c in galaxy["collections"]]
    assert names == ["/build/collections/gpufleet-nvidia.tar.gz"]
    tests_only = {c["name"] for c in yaml.safe_load((ROOT / "tests" / "requirements.yml").read_text())["collections"]}
    assert not tests_only & set(yaml.safe_load((ROOT / "galaxy.yml").read_text())["dependencies"])
