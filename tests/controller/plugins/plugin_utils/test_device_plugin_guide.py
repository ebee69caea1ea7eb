# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""docs/kubernetes.md and the docsite's Kubernetes guide (docs/docsite/rst/kubernetes.rst): each pod, job or
deployment of the guides would schedule against the role's render for the settings named above it.

What the device plugin advertises is worked out here from the rendered ``config.yaml`` by NVIDIA's rules, not by the
builder's own helper (k8s-device-plugin v0.20.0, read 2026-11-27): internal/rm/rm.go, MIG ``none``/``single`` give
``nvidia.com/gpu``, ``mixed`` one ``nvidia.com/mig-<profile>`` per profile of the node; api/config/v1/replicas.go,
with ``renameByDefault`` a shared resource is advertised only as ``<name>.shared``.
"""

import json
import re
import textwrap
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.device_plugin.config import plugin_config
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.device_plugin.documents import documents
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.device_plugin.settings import normalize

DOCS = Path(__file__).resolve().parents[4] / "docs"
GUIDE = DOCS / "kubernetes.md"
DOCSITE_GUIDE = DOCS / "docsite" / "rst" / "kubernetes.rst"
_BLOCK = re.compile(r"<!-- guide: (\{.*?\}) -->\n```yaml\n(.*?)```", re.S)
# The docsite's form: an RST comment with the settings, then the manifest as an indented yaml code block.
_RST_BLOCK = re.compile(r"^\.\. guide: (\{.*?\})\n\n\.\. code-block:: yaml\n\n((?:(?:    .*)?\n)+)", re.M)


def guide_pods():
    return [(json.loads(meta), yaml.safe_load(body)) for meta, body in _BLOCK.findall(GUIDE.read_text())]


def docsite_workloads():
    found = _RST_BLOCK.findall(DOCSITE_GUIDE.read_text())
    return [(json.loads(meta), yaml.safe_load(textwrap.dedent(body))) for meta, body in found]


def pod_spec(obj):
    """A Pod's spec, or the pod template's of a Job, Deployment, StatefulSet or DaemonSet."""
    return obj["spec"] if obj["kind"] == "Pod" else obj["spec"]["template"]["spec"]


def advertised(config, profiles):
    if config["flags"]["migStrategy"] == "mixed":
        names = {"nvidia.com/mig-" + p for p in profiles}
    else:
        names = {"nvidia.com/gpu"}
    for sharing in (config.get("sharing") or {}).values():
        if sharing.get("renameByDefault"):
            for resource in sharing["resources"]:
                if resource["name"] in names:
                    names = (names - {resource["name"]}) | {resource["name"] + ".shared"}
    return names


def test_the_guide_has_a_pod_for_each_sharing_mode():
    settings = [json.dumps(meta["settings"], sort_keys=True) for meta, _pod in guide_pods()]
    for needle in ("{}", "time_slicing", "rename_by_default", "mps", '"single"', '"mixed"'):
        assert any(needle in s for s in settings), needle


def test_the_docsite_guide_has_the_tensorflow_workloads():
    workloads = docsite_workloads()
    assert {w["kind"] for _m, w in workloads} == {"Job", "Deployment"}
    assert all("tensorflow" in c["image"] for _m, w in workloads for c in pod_spec(w)["containers"])
    # Every yaml block of the page is checked: none slips past the pattern above.
    assert DOCSITE_GUIDE.read_text().count(".. code-block:: yaml") == len(workloads)


ALL = guide_pods() + docsite_workloads()


@pytest.mark.parametrize(("meta", "obj"), ALL, ids=[f"{p['kind']}-{p['metadata']['name']}" for _m, p in ALL])
def test_guide_pod_schedules_against_the_render(meta, obj):
    pod = {"spec": pod_spec(obj)}
    node = {
        "name": "gpu-1",
        "labels": {"nvidia.com/gpu.present": "true"},
        "gpus": [{"mig_devices": [{"profile": p} for p in meta.get("mig_profiles", [])]}],
    }
    docs = [d for _g, _f, group in documents(meta["settings"], [node]) for d in group]
    config = yaml.safe_load(next(d for d in docs if d["kind"] == "ConfigMap")["data"]["config.yaml"])
    names = advertised(config, meta.get("mig_profiles", []))
    for container in pod["spec"]["containers"]:
        limits = container["resources"]["limits"]
        assert set(limits) <= names, (limits, names)
        assert "NVIDIA_VISIBLE_DEVICES" not in {e["name"] for e in container.get("env", [])}
    runtime_classes = {d["metadata"]["name"] for d in docs if d["kind"] == "RuntimeClass"}
    assert pod["spec"]["runtimeClassName"] in runtime_classes
    plugin = next(d for d in docs if d["kind"] == "DaemonSet" and d["metadata"]["name"] == "nvidia-device-plugin")
    for toleration in plugin["spec"]["template"]["spec"]["tolerations"]:
        assert toleration in pod["spec"]["tolerations"]
    kubernetes_validate.validate(obj, kubernetes_validate.utils.latest_version(), strict=True)
    # The role's own validation pod for the same node asks for a resource in the same set.
    pods = [d for d in docs if d["kind"] == "Pod"]
    assert pods and set(pods[0]["spec"]["containers"][0]["resources"]["limits"]) <= names


def test_a_pod_asking_for_the_wrong_resource_would_not_schedule():
    """The check above can fail: with renaming there is no nvidia.com/gpu left to ask for."""
    config = plugin_config(normalize({"time_slicing": {"replicas": 4, "rename_by_default": True}}))
    assert "nvidia.com/gpu" not in advertised(config, [])
    assert advertised(plugin_config(normalize({"mig_strategy": "mixed"})), ["1g.10gb"]) == {"nvidia.com/mig-1g.10gb"}
