# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The device_plugin role's pure builder: option checks, the values that reach the plugin's config file,
the Helm values and the runtime check (stdlib only: also runs under the oldest target Python)."""

import json
import re

import pytest
import yaml

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.device_plugin.daemonsets import runtime_class
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.device_plugin.documents import documents, helm_values
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.device_plugin.labels import PRESENT_LABEL
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.device_plugin.problems import (
    runtime_problems,
    toolkit_problems,
)
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.device_plugin.settings import DevicePluginError, normalize

NODE = {"name": "gpu-1.example", "labels": {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.count": "2"}}


def docs_by_kind(settings, nodes=(NODE,)):
    out = {}
    for _group, _name, docs in documents(settings, list(nodes)):
        for doc in docs:
            out.setdefault(doc["kind"], []).append(doc)
    return out


def config_of(settings):
    return json.loads(docs_by_kind(settings)["ConfigMap"][0]["data"]["config.yaml"])


def test_default_config_is_nvidias_v1_format_with_the_default_values():
    # volume-mounts, not NVIDIA's envvar: where the runtime ignores a container's own NVIDIA_VISIBLE_DEVICES
    # (Kubernetes nodes), the mounts are what the plugin's allocation is read from.
    assert config_of({}) == {
        "version": "v1",
        "flags": {
            "migStrategy": "none",
            "failOnInitError": True,
            "nvidiaDriverRoot": "/",
            "useNodeFeatureAPI": False,
            "plugin": {
                "passDeviceSpecs": False,
                "deviceListStrategy": "volume-mounts",
                "deviceIDStrategy": "uuid",
                "sharedDevicesAllocationPolicy": "distributed",
            },
            "gfd": {
                "oneshot": False,
                "noTimestamp": False,
                "sleepInterval": "60s",
                "outputFile": "/etc/kubernetes/node-feature-discovery/features.d/gfd",
                "machineTypeFile": "/sys/class/dmi/id/product_name",
            },
        },
    }


def test_every_flag_reaches_the_config_file():
    config = config_of(
        {
            "mig_strategy": "mixed",
            "device_list_strategy": "envvar, cdi-annotations",
            "device_id_strategy": "index",
            "fail_on_init_error": False,
            "pass_device_specs": True,
            "nvidia_driver_root": "/run/nvidia/driver",
            "allocation_policy": "packed",
        }
    )
    assert config["flags"]["migStrategy"] == "mixed"
    assert config["flags"]["failOnInitError"] is False
    assert config["flags"]["nvidiaDriverRoot"] == "/run/nvidia/driver"
    assert config["flags"]["plugin"] == {
        "passDeviceSpecs": True,
        "deviceListStrategy": ["envvar", "cdi-annotations"],
        "deviceIDStrategy": "index",
        "sharedDevicesAllocationPolicy": "packed",
    }


def test_time_slicing_with_rename_and_flags():
    config = config_of({"time_slicing": {"replicas": 4, "rename": "nvidia.com/gpu.shared", "rename_by_default": True}})
    assert config["sharing"] == {
        "timeSlicing": {
            "renameByDefault": True,
            "failRequestsGreaterThanOne": False,
            "resources": [{"name": "nvidia.com/gpu", "replicas": 4, "rename": "nvidia.com/gpu.shared"}],
        }
    }


def test_mps_sharing_with_resources_list_and_its_control_daemon():
    settings = {"mps": {"resources": [{"name": "nvidia.com/gpu", "replicas": 3}]}}
    assert config_of(settings)["sharing"] == {
        "mps": {"renameByDefault": False, "resources": [{"name": "nvidia.com/gpu", "replicas": 3}]}
    }
    names = [d["metadata"]["name"] for d in docs_by_kind(settings)["DaemonSet"]]
    assert "nvidia-device-plugin-mps-control-daemon" in names
    assert "nvidia-device-plugin-mps-control-daemon" not in [
        d["metadata"]["name"] for d in docs_by_kind({})["DaemonSet"]
    ]


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"mig_strategy": "all"}, r"device_plugin_mig_strategy: 'all' is not one of none, single, mixed"),
        ({"device_list_strategy": ["cdi"]}, r"device_plugin_device_list_strategy: 'cdi' is not one of"),
        ({"device_list_strategy": []}, r"device_plugin_device_list_strategy: must name at least one"),
        ({"device_list_strategy": ["envvar", "envvar"]}, r"lists a strategy twice"),
        ({"device_id_strategy": "serial"}, r"device_plugin_device_id_strategy"),
        (
            {"time_slicing": {"replicas": 1}},
            r"device_plugin_time_slicing.resources\[0\]: replicas must be .* at least 2",
        ),
        ({"time_slicing": {"replicas": "4"}}, r"replicas must be an integer"),
        ({"time_slicing": {"replica": 4}}, r"device_plugin_time_slicing: unknown key\(s\) replica"),
        ({"time_slicing": {"replicas": 2, "resources": []}}, r"not both"),
        ({"time_slicing": {"replicas": 2}, "mps": {"replicas": 2}}, r"device_plugin_mps: time slicing and MPS"),
        ({"mps": {"replicas": 2}, "mig_strategy": "single"}, r"MPS sharing is not supported together with MIG"),
        ({"mps": {"replicas": 2}, "device_id_strategy": "index"}, r"device_id_strategy=uuid"),
        ({"time_slicing": {"resources": [{"name": "gpu", "replicas": 2}]}}, r"is not an nvidia.com/ resource"),
        ({"time_slicing": {"replicas": 2, "rename": "Bad Name!"}}, r"rename 'Bad Name!' is not a valid"),
        ({"namespace": "GPU_NS"}, r"device_plugin_namespace: 'GPU_NS' is not a DNS label"),
        ({"image_tag": ""}, r"device_plugin_image_tag"),
        ({"dcgm_exporter_service_monitor": True}, r"needs device_plugin_dcgm_exporter_enabled=true"),
        ({"dcgm_exporter_enabled": True, "dcgm_exporter_port": 70000}, r"device_plugin_dcgm_exporter_port"),
        ({"nvidia_driver_root": "run/nvidia"}, r"not an absolute path"),
        ({"container_engine": "docker"}, r"device_plugin_container_engine: 'docker'"),
        ({"mig": "none"}, r"unknown setting\(s\): device_plugin_mig"),
    ],
)
def test_option_checks_name_the_variable(settings, message):
    with pytest.raises(DevicePluginError, match=message):
        documents(settings, [NODE])


def test_daemonsets_select_gpu_nodes_use_the_runtime_class_and_roll_on_config_change():
    ds = docs_by_kind({})["DaemonSet"][0]
    spec = ds["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert spec["runtimeClassName"] == "nvidia"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    assert spec["containers"][0]["image"] == "nvcr.io/nvidia/k8s-device-plugin:v0.20.0"
    before = ds["spec"]["template"]["metadata"]["annotations"]["gpufleet.nvidia/config-sha256"]
    after = docs_by_kind({"mig_strategy": "single"})["DaemonSet"][0]["spec"]["template"]["metadata"]["annotations"]
    assert after["gpufleet.nvidia/config-sha256"] != before


def test_air_gapped_registry_reaches_every_image():
    settings = {
        "image_registry": "mirror.local:5000",
        "dcgm_exporter_enabled": True,
        "dcgm_exporter_image_registry": "mirror.local:5000",
        "validate_image_registry": "mirror.local:5000",
        "image_pull_secrets": ["mirror"],
    }
    kinds = docs_by_kind(settings)
    for doc in kinds["DaemonSet"] + kinds["Pod"]:
        spec = doc["spec"]["template"]["spec"] if doc["kind"] == "DaemonSet" else doc["spec"]
        assert all(c["image"].startswith("mirror.local:5000/") for c in spec["containers"]), doc["metadata"]["name"]
        assert spec["imagePullSecrets"] == [{"name": "mirror"}]


def test_cdi_strategy_mounts_the_cdi_folder_and_the_driver_root():
    ds = docs_by_kind({"device_list_strategy": ["cdi-cri"]})["DaemonSet"][0]
    mounts = {m["name"]: m["mountPath"] for m in ds["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]}
    assert mounts["cdi-root"] == "/var/run/cdi"
    assert mounts["driver-root"] == "/driver-root"


def test_rbac_only_where_a_component_talks_to_the_api():
    assert "ClusterRole" not in docs_by_kind({"dcgm_exporter_enabled": True})
    kinds = docs_by_kind({"gfd_node_feature_api": True})
    assert kinds["ClusterRoleBinding"][0]["subjects"][0] == {
        "kind": "ServiceAccount",
        "name": "gpu-feature-discovery",
        "namespace": "nvidia-device-plugin",
    }
    assert "gpu-feature-discovery" not in [
        d["metadata"]["name"] for d in docs_by_kind({"gfd_enabled": False})["DaemonSet"]
    ]


def test_runtime_class_node_labels_and_validation_pod():
    kinds = docs_by_kind({})
    assert kinds["RuntimeClass"] == [runtime_class(normalize({}))]
    assert kinds["RuntimeClass"][0]["handler"] == "nvidia"
    # GFD is on by default: the role writes only the label GFD never writes (gpu.count is GFD's)
    node = {"name": "gpu-1.example", "labels": {PRESENT_LABEL: "true"}}
    assert kinds["Node"] == [{"apiVersion": "v1", "kind": "Node", "metadata": node}]
    pod = kinds["Pod"][0]
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": 1}
    assert pod["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "gpu-1.example"}
    assert pod["spec"]["restartPolicy"] == "Never"
    assert "ServiceMonitor" not in docs_by_kind({"dcgm_exporter_enabled": True})
    assert "ServiceMonitor" in docs_by_kind({"dcgm_exporter_enabled": True, "dcgm_exporter_service_monitor": True})


def test_nodes_switches_and_duplicates():
    assert "Node" not in docs_by_kind({"node_labels": False})
    assert "Pod" not in docs_by_kind({"validate": False})
    with pytest.raises(DevicePluginError, match="named by two hosts"):
        documents({}, [NODE, NODE])
    with pytest.raises(DevicePluginError, match="not a valid Kubernetes node name"):
        documents({}, [{"name": "Bad_Node", "labels": {}}])


def test_validation_command_string_runs_through_a_shell():
    pod = docs_by_kind({"validate_command": "nvidia-smi -L"})["Pod"][0]
    assert pod["spec"]["containers"][0]["command"] == ["sh", "-c", "nvidia-smi -L"]


def test_helm_values_carry_the_same_config():
    settings = {"mig_strategy": "single", "time_slicing": {"replicas": 2}, "image_registry": "mirror.local"}
    values = helm_values(settings)
    assert json.loads(values["config"]["map"]["default"]) == config_of(settings)
    assert values["image"] == {
        "repository": "mirror.local/nvidia/k8s-device-plugin",
        "tag": "v0.20.0",
        "pullPolicy": "IfNotPresent",
    }
    assert values["runtimeClassName"] == "nvidia"
    assert values["nfd"] == {"enabled": True}  # NFD with GFD, as NVIDIA's chart
    # The chart's security contexts are the manifests' (not left to the chart's derivation).
    assert values["securityContext"] == {"capabilities": {"drop": ["ALL"], "add": ["SYS_ADMIN"]}}
    assert values["gfd"] == {"enabled": True, "securityContext": {"privileged": True}}
    assert helm_values({"pass_device_specs": True})["securityContext"] == {"privileged": True}


def plugin_container(settings):
    ds = next(d for d in docs_by_kind(settings)["DaemonSet"] if d["metadata"]["name"] == "nvidia-device-plugin")
    return ds["spec"]["template"]["spec"]["containers"][0]


def test_plugin_keeps_its_gpus_where_the_runtime_ignores_the_variable_from_unprivileged_containers():
    """The plugin reaches every GPU through NVIDIA_VISIBLE_DEVICES=all with no nvidia.com/gpu of its own: it needs
    CAP_SYS_ADMIN in its bounding set (the runtime's test for privileged), and nothing else added."""
    for strategies in (["volume-mounts"], ["envvar"], ["cdi-annotations"], ["cdi-cri"]):
        container = plugin_container({"device_list_strategy": strategies})
        assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"} in container["env"]
        assert container["securityContext"] == {"capabilities": {"drop": ["ALL"], "add": ["SYS_ADMIN"]}}, strategies
    assert plugin_container({"pass_device_specs": True})["securityContext"] == {"privileged": True}


def test_validation_pod_gets_its_gpu_only_through_the_allocation():
    """Unprivileged, no NVIDIA_VISIBLE_DEVICES of its own: under volume-mounts it proves the plugin's mounts work."""
    container = docs_by_kind({})["Pod"][0]["spec"]["containers"][0]
    assert container["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    assert "env" not in container and container["resources"]["limits"] == {"nvidia.com/gpu": 1}


NATIVE_K8S = {
    "provider": "native",
    "accept_envvar_unprivileged": False,
    "accept_volume_mounts": True,
    "accept_cdi_annotations_unprivileged": False,
}
NATIVE_DOCKER = {"provider": "native", "accept_envvar_unprivileged": True, "accept_volume_mounts": False}
NVIDIA_DEFAULTS = {"provider": "nvidia", "accept_envvar_unprivileged": True, "accept_volume_mounts": False}
NVIDIA_K8S = {"provider": "nvidia", "accept_envvar_unprivileged": False, "accept_volume_mounts": True}


@pytest.mark.parametrize(
    ("toolkit", "strategies", "messages"),
    [
        # a Kubernetes node (the toolkit's default there) takes volume-mounts; CDI strategies need NVIDIA's hook
        (NATIVE_K8S, ["volume-mounts"], []),
        (NATIVE_K8S, ["envvar", "volume-mounts"], []),
        (NVIDIA_K8S, ["cdi-annotations"], []),
        (NVIDIA_K8S, ["cdi-cri"], []),
        (NVIDIA_K8S, ["envvar", "cdi-cri"], []),
        (
            NATIVE_K8S,
            ["cdi-annotations"],
            [r"has cdi-annotations: .* hooks run NVIDIA's nvidia-cdi-hook .* native toolkit provider does not install"],
        ),
        (NATIVE_K8S, ["envvar", "cdi-cri"], [r"has cdi-cri: .*toolkit_provider: nvidia"]),
        (
            NATIVE_K8S,
            ["envvar"],
            [
                r"device_plugin_device_list_strategy \['envvar'\] passes devices only through NVIDIA_VISIBLE_DEVICES, "
                r"but gpufleet_toolkit.accept_envvar_unprivileged is false on this node: .* pods would get no GPU; "
                r"set device_plugin_device_list_strategy: \[volume-mounts\] .* toolkit_accept_envvar_unprivileged: true"
            ],
        ),
        (
            NVIDIA_K8S,
            ["envvar"],
            [r"accept-nvidia-visible-devices-envvar-when-unprivileged = true in /etc/nvidia-container-runtime/config"],
        ),
        # a node whose runtime does not read the mounts
        (NATIVE_DOCKER, ["envvar"], []),
        (
            NATIVE_DOCKER,
            ["volume-mounts"],
            [
                r"\['volume-mounts'\] has volume-mounts, but gpufleet_toolkit.accept_volume_mounts is false on this "
                r"node: .*NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices.*; "
                r"set toolkit_accept_volume_mounts: true and run the toolkit stage .*device_plugin_node_group"
            ],
        ),
        (
            NVIDIA_DEFAULTS,
            ["volume-mounts", "cdi-annotations"],
            [r"run nvidia-ctk config --in-place --set accept-nvidia-visible-devices-as-volume-mounts=true"],
        ),
        # no fact, or a fact without the settings: nothing to say
        (None, ["envvar"], []),
        ({"provider": "native"}, ["volume-mounts"], []),
    ],
)
def test_toolkit_problems(toolkit, strategies, messages):
    problems = toolkit_problems(toolkit, strategies)
    assert len(problems) == len(messages), problems
    for problem, message in zip(problems, messages):
        assert re.search(message, problem), problem


RUNTIME_OK = {"engines": {"containerd": {"registered": True, "cdi": True}}}


@pytest.mark.parametrize(
    ("runtime", "strategies", "message"),
    [
        (
            None,
            ["envvar"],
            r"gpufleet_runtime is not set on this host and gpu_facts found no container engine there",
        ),
        ({"engines": {}}, ["envvar"], r"gpufleet_runtime.engines has no containerd"),
        (
            {"engines": {"containerd": {"registered": False, "cdi": True, "message": "config.toml not writable"}}},
            ["envvar"],
            r"registered is false: config.toml not writable",
        ),
        ({"engines": {"containerd": {"registered": True, "cdi": False}}}, ["cdi-cri"], r"cdi-cri needs CDI"),
        # containerd 1.6 (no CDI) with cdi-annotations: the shim would have to honour the plugin's annotations, and on
        # a Kubernetes node it ignores them from unprivileged pods; the node fails early, naming the settings
        (
            {"engines": {"containerd": {"registered": True, "cdi": False}}},
            ["cdi-annotations"],
            r"cdi-annotations needs CDI in containerd, but gpufleet_runtime.engines.containerd.cdi is false .*"
            r"toolkit_accept_cdi_annotations_unprivileged is false .* set runtime_cdi: true on containerd 1.7\+ or "
            r"CRI-O, or choose device_plugin_device_list_strategy: \[volume-mounts\]",
        ),
    ],
)
def test_runtime_problems(runtime, strategies, message):
    problems = runtime_problems(runtime, "containerd", strategies)
    assert len(problems) == 1
    assert re.search(message, problems[0])


def test_runtime_ready():
    assert runtime_problems(RUNTIME_OK, "containerd", ["cdi-annotations"]) == []
    assert (
        runtime_problems({"engines": {"containerd": {"registered": True, "cdi": False}}}, "containerd", ["envvar"])
        == []
    )


def test_render_files_labels_and_unlabels():
    from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.device_plugin.render import HEADER, render

    out = render({"mig_strategy": "none"}, [NODE])
    assert all(f["content"].startswith(HEADER) and f["path"].startswith(f["group"] + "/") for f in out["files"])
    assert out["node_labels"] == {NODE["name"]: out["node_labels"][NODE["name"]]}
    (unlabel,) = out["node_unlabels"]
    assert set(unlabel["metadata"]["labels"].values()) == {None}
    # NVIDIA's chart carries cluster documents and NFD (its dependency), never node labels or validation pods.
    assert not any(f["helm"] for f in out["files"] if f["group"] not in ("cluster", "nfd"))


NFD_DEFAULT = "https://github.com/kubernetes-sigs/node-feature-discovery/deployment/overlays/default?ref=v0.19.0"


@pytest.mark.parametrize(
    ("settings", "resources"),
    [
        ({}, [NFD_DEFAULT]),
        ({"nfd_kustomization": "ssh://git@git.example/nfd/deployment/overlays/default?ref=v0.19.0"}, None),
        ({"nfd_enabled": False}, []),
        ({"gfd_enabled": False}, []),
    ],
)
def test_nfd_kustomization_file_only_with_gfd_and_nfd(settings, resources):
    """apply and render_only deploy NFD from its own kustomization at the release the chart pins; one file names it."""
    from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.device_plugin.render import render

    files = [f for f in render(settings)["files"] if f["group"] == "nfd"]
    if resources == []:
        assert files == []
        return
    (nfd,) = files
    assert nfd["path"] == "nfd/kustomization.yaml" and nfd["helm"]
    doc = yaml.safe_load(nfd["content"])
    assert doc["apiVersion"] == "kustomize.config.k8s.io/v1beta1" and doc["kind"] == "Kustomization"
    assert doc["resources"] == (resources or [settings["nfd_kustomization"]])
    # Not a Kubernetes object: never among the documents apply sends one by one.
    assert "Kustomization" not in {d["kind"] for d in render(settings)["documents"]}


@pytest.mark.parametrize("value", ["", "deployment/overlays/default", "/srv/nfd", "github.com/x/y?ref=v1"])
def test_nfd_kustomization_must_be_a_remote_kustomization(value):
    with pytest.raises(
        DevicePluginError, match=r"device_plugin_nfd_kustomization: .* is not the URL of a kustomization"
    ):
        normalize({"nfd_kustomization": value})
    normalize({"nfd_kustomization": value, "nfd_enabled": False})  # not used: not checked


def test_render_raises_device_plugin_error():
    from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.device_plugin.render import render

    with pytest.raises(DevicePluginError):
        render({"mig_strategy": "bogus"})


def test_node_problems_reads_strategies_as_list_or_string():
    from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.device_plugin.problems import node_problems

    toolkit = {"accept_volume_mounts": False}
    as_string = node_problems(None, "containerd", " volume-mounts, ,envvar", toolkit)
    assert as_string == node_problems(None, "containerd", ["volume-mounts", "envvar"], toolkit)
    assert as_string == runtime_problems(None, "containerd", ["volume-mounts", "envvar"]) + toolkit_problems(
        toolkit, ["volume-mounts", "envvar"]
    )
    from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.device_plugin.settings import DEFAULTS

    strategies = list(DEFAULTS["device_list_strategy"])
    expected = runtime_problems(None, DEFAULTS["container_engine"], strategies) + toolkit_problems(None, strategies)
    assert node_problems(None) == expected
