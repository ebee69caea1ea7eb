# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Every option combination's documents pass kubernetes-validate in strict mode for each Kubernetes
minor from 1.29 to the newest the pinned kubernetes-validate knows; the YAML files are the documents.

Combinations: pairwise (all-pairs) coverage of the options below, built greedily and deterministically,
so every value of every option meets every value of every other option at least once.
"""

import itertools
import json

import kubernetes_validate
import pytest
import yaml
from ansible.errors import AnsibleFilterError
from kubernetes_validate.utils import SchemaNotFoundError

from ansible_collections.gpufleet.nvidia.plugins.filter.device_plugin_manifests import FilterModule

manifests = FilterModule().filters()["device_plugin_manifests"]
NODES = [
    {"name": "gpu-a", "labels": {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.count": "8"}},
    {"name": "gpu-b.rack2.example", "labels": {"nvidia.com/gpu.present": "true"}},
]

OPTIONS = {
    "mig_strategy": ["none", "single", "mixed"],
    "device_list_strategy": [["envvar"], ["volume-mounts"], ["cdi-annotations"], ["cdi-cri"], ["envvar", "cdi-cri"]],
    "device_id_strategy": ["uuid", "index"],
    "sharing": [
        {},
        {"time_slicing": {"replicas": 4}},
        {"time_slicing": {"replicas": 2, "rename": "nvidia.com/gpu.shared", "fail_requests_greater_than_one": True}},
        {"mps": {"replicas": 2}},
    ],
    "gfd": [{"gfd_enabled": False}, {"gfd_enabled": True}, {"gfd_node_feature_api": True}],
    "dcgm": [
        {},
        {"dcgm_exporter_enabled": True},
        {"dcgm_exporter_enabled": True, "dcgm_exporter_service_monitor": True},
    ],
    "pass_device_specs": [False, True],
    "nvidia_driver_root": ["/", "/run/nvidia/driver"],
    "runtime_class_name": ["nvidia", ""],
    "image_registry": ["nvcr.io", "registry.local:5000"],
}


def allowed(combo):
    mps = "mps" in combo.get("sharing", {})
    return not (mps and (combo.get("mig_strategy", "none") != "none" or combo.get("device_id_strategy") == "index"))


def pairwise():
    """Greedy all-pairs: add the full combination covering most uncovered pairs until none is left."""
    keys = list(OPTIONS)
    uncovered = set()
    for (i, a), (j, b) in itertools.combinations(enumerate(keys), 2):
        for x, y in itertools.product(range(len(OPTIONS[a])), range(len(OPTIONS[b]))):
            if allowed({a: OPTIONS[a][x], b: OPTIONS[b][y]}):
                uncovered.add((i, x, j, y))
    combos = []
    while uncovered:
        best, best_gain = None, -1
        # Seeded by each uncovered pair in turn (deterministic), filled greedily option by option.
        for i, x, j, y in sorted(uncovered)[:40]:
            choice = {i: x, j: y}
            for k in range(len(keys)):
                if k in choice:
                    continue
                scores = []
                for v in range(len(OPTIONS[keys[k]])):
                    trial = {**choice, k: v}
                    if not allowed({keys[m]: OPTIONS[keys[m]][w] for m, w in trial.items()}):
                        continue
                    gain = sum((min(k, m), trial[min(k, m)], max(k, m), trial[max(k, m)]) in uncovered for m in trial)
                    scores.append((gain, -v, v))
                choice[k] = max(scores)[2]
            gain = sum(
                (a, choice[a], b, choice[b]) in uncovered for a, b in itertools.combinations(range(len(keys)), 2)
            )
            if gain > best_gain:
                best, best_gain = choice, gain
        uncovered -= {(a, best[a], b, best[b]) for a, b in itertools.combinations(range(len(keys)), 2)}
        combos.append({keys[k]: OPTIONS[keys[k]][v] for k, v in best.items()})
    return combos


def settings_of(combo):
    settings = {k: v for k, v in combo.items() if k not in ("sharing", "gfd", "dcgm")}
    for k in ("sharing", "gfd", "dcgm"):
        settings.update(combo[k])
    if settings["image_registry"] != "nvcr.io":
        settings["dcgm_exporter_image_registry"] = settings["validate_image_registry"] = settings["image_registry"]
    return settings


COMBOS = pairwise()
VERSIONS = [f"1.{minor}.0" for minor in range(29, int(kubernetes_validate.utils.latest_version().split(".")[1]) + 1)]


def test_pairwise_covers_every_pair_with_few_combinations():
    assert 15 <= len(COMBOS) <= 40, len(COMBOS)
    for a, b in itertools.combinations(OPTIONS, 2):
        for x, y in itertools.product(OPTIONS[a], OPTIONS[b]):
            if allowed({a: x, b: y}):
                assert any(c[a] == x and c[b] == y for c in COMBOS), (a, x, b, y)
    assert all(allowed(c) for c in COMBOS)
    assert VERSIONS[0] == "1.29.0" and len(VERSIONS) >= 9  # kubernetes-validate 1.37 knows up to 1.37


_VALIDATED = set()


@pytest.mark.parametrize("combo", COMBOS, ids=[f"combo{i}" for i in range(len(COMBOS))])
def test_every_document_is_valid_in_strict_mode_for_each_version(combo):
    rendered = manifests(settings_of(combo), NODES)
    unique = {json.dumps(d, sort_keys=True): d for d in rendered["documents"]}
    custom = []
    for key, doc in unique.items():
        for version in VERSIONS:
            if (key, version) in _VALIDATED:  # the same document in an earlier combination
                continue
            _VALIDATED.add((key, version))
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except SchemaNotFoundError:
                custom.append(doc["kind"])
                break
            except kubernetes_validate.ValidationError as exc:
                pytest.fail(f"{doc['kind']}/{doc['metadata']['name']} invalid for Kubernetes {version}: {exc.message}")
    # Only the Prometheus operator's ServiceMonitor is a custom resource (no schema in kubernetes-validate).
    assert set(custom) <= {"ServiceMonitor"}
    for doc in unique.values():
        if doc["kind"] == "ServiceMonitor":
            assert doc["apiVersion"] == "monitoring.coreos.com/v1"
            assert doc["spec"]["endpoints"][0]["port"] == "metrics"


def test_strict_mode_rejects_an_unknown_field():
    """The validation above can fail: a field the schema does not know is an error in strict mode."""
    ds = next(d for d in manifests({}, NODES)["documents"] if d["kind"] == "DaemonSet")
    ds["spec"]["template"]["spec"]["containers"][0]["gpus"] = 1
    with pytest.raises(kubernetes_validate.ValidationError, match="gpus"):
        kubernetes_validate.validate(ds, VERSIONS[-1], strict=True)


@pytest.mark.parametrize("combo", COMBOS[:5], ids=[f"combo{i}" for i in range(5)])
def test_files_hold_exactly_the_documents_in_apply_order(combo):
    rendered = manifests(settings_of(combo), NODES)
    # nfd/ holds NFD's Kustomization (built and applied on its own), not documents of the role's.
    from_files = [doc for f in rendered["files"] if f["group"] != "nfd" for doc in yaml.safe_load_all(f["content"])]
    assert from_files == rendered["documents"]
    assert [f["group"] for f in rendered["files"]] == sorted(
        (f["group"] for f in rendered["files"]), key=["cluster", "nodes", "validation", "nfd"].index
    )
    config = yaml.safe_load(next(d for d in rendered["documents"] if d["kind"] == "ConfigMap")["data"]["config.yaml"])
    assert config == rendered["config"]
    assert yaml.safe_load(rendered["helm_values"]["config"]["map"]["default"]) == rendered["config"]


def _bounding_has_sys_admin(container):
    """Whether containerd / CRI-O put CAP_SYS_ADMIN in the container's bounding set: privileged, or added (they
    apply "drop" ALL first, then "add"); their default set has no SYS_ADMIN."""
    context = container.get("securityContext") or {}
    if context.get("privileged"):
        return True
    added = {c.upper().removeprefix("CAP_") for c in (context.get("capabilities") or {}).get("add", [])}
    return bool(added & {"SYS_ADMIN", "ALL"})


def _containers(documents):
    for doc in documents:
        if doc["kind"] == "DaemonSet":
            yield doc["metadata"]["name"], doc["spec"]["template"]["spec"]["containers"]
        elif doc["kind"] == "Pod":
            yield doc["metadata"]["name"], doc["spec"]["containers"]


@pytest.mark.parametrize("combo", COMBOS, ids=[f"combo{i}" for i in range(len(COMBOS))])
def test_no_container_loses_its_gpus_where_the_variable_from_unprivileged_containers_is_ignored(combo):
    """On Kubernetes nodes the runtime honours NVIDIA_VISIBLE_DEVICES only from containers with CAP_SYS_ADMIN in the
    bounding set: every container that reaches GPUs through the variable, with no nvidia.com/ resource allocated,
    has it (plugin, GFD, MPS daemon, DCGM exporter); a container with an allocation gets none (validation pod)."""
    seen = set()
    for name, containers in _containers(manifests(settings_of(combo), NODES)["documents"]):
        for container in containers:
            env = {e["name"]: e.get("value") for e in container.get("env", [])}
            limits = (container.get("resources") or {}).get("limits") or {}
            allocated = any(key.startswith("nvidia.com/") for key in limits)
            if env.get("NVIDIA_VISIBLE_DEVICES") not in (None, "", "void") and not allocated:
                assert _bounding_has_sys_admin(container), name
                seen.add(name.split("-validate-")[0])
            if allocated:
                assert not _bounding_has_sys_admin(container), name
    assert "nvidia-device-plugin" in seen


def test_bad_option_is_a_filter_error_naming_the_role():
    with pytest.raises(AnsibleFilterError, match=r"device_plugin role: device_plugin_mig_strategy"):
        manifests({"mig_strategy": "both"}, NODES)


def test_node_labels_are_what_the_node_documents_carry():
    """The count the role publishes comes from here: with GFD on only gpu.present (gpu.count is GFD's)."""
    assert manifests({}, NODES)["node_labels"] == {
        "gpu-a": {"nvidia.com/gpu.present": "true"},
        "gpu-b.rack2.example": {"nvidia.com/gpu.present": "true"},
    }
    assert manifests({"gfd_enabled": False}, NODES)["node_labels"]["gpu-a"]["nvidia.com/gpu.count"] == "8"
    assert manifests({"node_labels": False}, NODES)["node_labels"] == {}


def test_node_unlabels_take_off_exactly_the_labels_the_role_puts_on():
    """device_plugin_state=absent sends these as merge patches: a null value deletes the key, nothing else changes."""
    rendered = manifests({"gfd_enabled": False}, NODES)
    unlabels = {d["metadata"]["name"]: d["metadata"]["labels"] for d in rendered["node_unlabels"]}
    assert unlabels == {name: dict.fromkeys(labels) for name, labels in rendered["node_labels"].items()}
    assert all(d["kind"] == "Node" and d["apiVersion"] == "v1" for d in rendered["node_unlabels"])
    assert manifests({"node_labels": False}, NODES)["node_unlabels"] == []
