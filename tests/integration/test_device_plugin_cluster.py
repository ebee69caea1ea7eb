# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The device_plugin role against a real Kubernetes cluster: only when GPUFLEET_KUBECONFIG names a
kubeconfig (no API server can run on the development machines); skipped with that reason otherwise.

* GPUFLEET_KUBECONFIG: the kubeconfig (cluster-admin); GPUFLEET_K8S_CONTEXT: optional context.
* GPUFLEET_K8S_GPU_NODES: comma list of GPU node names to label and validate (empty: none; then only
  the cluster documents are applied and the validation is not run).
* GPUFLEET_K8S_VALIDATE=1: also run the validation pod per node and require it to succeed (needs real
  GPUs and the images reachable from the nodes).

The role applies into a namespace of its own (gpufleet-it-<pid>), which the test deletes at the end.
What the API server stores must hold every field of the rendered documents.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.integration
KUBECONFIG = os.environ.get("GPUFLEET_KUBECONFIG", "")
ROOT = Path(__file__).resolve().parents[2]

if not KUBECONFIG:
    pytest.skip(
        "device_plugin cluster tests: no cluster given (set GPUFLEET_KUBECONFIG to a kubeconfig to run them)",
        allow_module_level=True,
    )
pytest.importorskip(
    "kubernetes", reason="kubernetes.core needs the Python 'kubernetes' package: pip install kubernetes"
)


def contains(live, want, path="") -> list:
    """Fields of ``want`` that ``live`` lacks or holds with another value (API defaults may add fields)."""
    if isinstance(want, dict):
        if not isinstance(live, dict):
            return [path]
        return [p for k, v in want.items() for p in contains(live.get(k), v, f"{path}.{k}")]
    if isinstance(want, list):
        if not isinstance(live, list) or len(live) != len(want):
            return [path]
        return [p for i, (a, b) in enumerate(zip(live, want)) for p in contains(a, b, f"{path}[{i}]")]
    return [] if str(live) == str(want) else [f"{path}: {live!r} != {want!r}"]


def kubectl(*args):
    cmd = ["kubectl", "--kubeconfig", KUBECONFIG, *args]
    if os.environ.get("GPUFLEET_K8S_CONTEXT"):
        cmd[3:3] = ["--context", os.environ["GPUFLEET_K8S_CONTEXT"]]
    return subprocess.run(cmd, capture_output=True, text=True, check=False)


def test_apply_sends_the_rendered_documents_and_the_cluster_keeps_them(tmp_path):
    namespace = f"gpufleet-it-{os.getpid()}"
    nodes = [n for n in os.environ.get("GPUFLEET_K8S_GPU_NODES", "").split(",") if n]
    validate = os.environ.get("GPUFLEET_K8S_VALIDATE") == "1" and bool(nodes)
    hosts = {n: {"device_plugin_node_name": n} for n in nodes} or {
        "no-gpu-node-given": {"device_plugin_node_name": "x"}
    }
    inventory = {
        "all": {
            "vars": {
                "ansible_connection": "local",
                "ansible_python_interpreter": sys.executable,
                "device_plugin_enabled": True,
                "device_plugin_check_runtime": False,  # the cluster's nodes are not this inventory's hosts
                "device_plugin_gpu_facts": {"pci_gpu_count": 1, "labels": {"gpufleet.nvidia/it": namespace}},
                "device_plugin_namespace": namespace,
                "device_plugin_kubeconfig": KUBECONFIG,
                "device_plugin_context": os.environ.get("GPUFLEET_K8S_CONTEXT", ""),
                "device_plugin_runtime_class_name": "nvidia",
                "device_plugin_node_labels": bool(nodes),
                "device_plugin_validate": validate,
                # NFD is cluster-wide and outside the test's namespace: the cluster's own, or none.
                "device_plugin_nfd_enabled": False,
            },
            "hosts": hosts,
        }
    }
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
    play = tmp_path / "play.yml"
    play.write_text("- hosts: all\n  gather_facts: false\n  roles: [gpufleet.nvidia.device_plugin]\n")
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".cache" / "collections"))
    bin_ = str(Path(sys.executable).parent / "ansible-playbook")
    try:
        render = subprocess.run(
            [
                bin_,
                "-i",
                str(tmp_path / "inventory.yml"),
                str(play),
                "-e",
                "device_plugin_mode=render_only",
                "-e",
                f"device_plugin_render_dir={tmp_path / 'gitops'}",
            ],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        assert render.returncode == 0, render.stdout
        apply = subprocess.run(
            [bin_, "-i", str(tmp_path / "inventory.yml"), str(play)],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        assert apply.returncode == 0, apply.stdout + apply.stderr
        for path in sorted((tmp_path / "gitops").rglob("*.yaml")):
            if path.parent.name == "validation":
                continue  # removed again after the run
            for doc in yaml.safe_load_all(path.read_text()):
                ns = ["-n", doc["metadata"]["namespace"]] if "namespace" in doc["metadata"] else []
                got = kubectl("get", doc["kind"], doc["metadata"]["name"], *ns, "-o", "json")
                assert got.returncode == 0, got.stderr
                missing = contains(json.loads(got.stdout), doc)
                assert not missing, f"{path.name} {doc['kind']}: {missing}"
        again = subprocess.run(
            [bin_, "-i", str(tmp_path / "inventory.yml"), str(play)],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        assert again.returncode == 0
        assert all("changed=0" in line for line in again.stdout.splitlines() if " : ok=" in line), again.stdout
    finally:
        kubectl("delete", "namespace", namespace, "--ignore-not-found", "--wait=false")
        for node in nodes:
            kubectl("label", "node", node, "gpufleet.nvidia/it-")
