# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The device_plugin role's render against NVIDIA's chart and plugin at k8s-device-plugin v0.20.0 (tagged 2026-08-19,
read 2026-11-27): the mounts of every DaemonSet, the settings v0.18-v0.20 added (allocation policy, XID health
settings, per-node configurations through config-manager) and what Helm mode cannot carry. Each fact names its file."""

import pytest
import yaml

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.device_plugin.documents import (
    documents,
    helm_unsupported,
    helm_values,
)
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.device_plugin.settings import DevicePluginError

NODES = [
    {"name": "gpu-1", "labels": {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.count": "2"}},
    {"name": "gpu-2", "labels": {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.count": "1"}, "config": "ts"},
]
CONFIGS = {"ts": {"time_slicing": {"replicas": 4}}, "mig-mixed": {"mig_strategy": "mixed"}}


def render(settings, nodes=None):
    if nodes is None:
        nodes = NODES if settings.get("configs") else [{k: v for k, v in n.items() if k != "config"} for n in NODES]
    return {(d["kind"], d["metadata"]["name"]): d for _g, _f, docs in documents(settings, nodes) for d in docs}


def pod(settings, name):
    return render(settings)[("DaemonSet", name)]["spec"]["template"]["spec"]


def main_container(spec, name):
    return next(c for c in spec["containers"] if c["name"] == name)


def mount_paths(c):
    return {m["mountPath"] for m in c["volumeMounts"]}


def env(c):
    return {e["name"]: e.get("value", e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")) for e in c["env"]}


# --- Mounts -----------------------------------------------------------------------------------------------------------
# Facts (deployments/helm/nvidia-device-plugin/templates at v0.20.0): daemonset-device-plugin.yml mounts
# /var/lib/kubelet/device-plugins, /driver-root (read-only, hostPath nvidiaDriverRoot of type Directory, whenever
# nvidiaDriverRoot is a string, which the role's Helm values always make it), /dev/shm and /mps (the MPS folders,
# always) and /var/run/cdi (always), plus /available-configs and /config with a config map; daemonset-gfd.yml mounts
# the features.d folder, /sys and /config (+ /available-configs); daemonset-mps-control-daemon.yml /dev/shm and /mps
# (+ the configs). dcgm-exporter 4.5.3-4.8.2 deployment/templates/daemonset.yaml: /var/lib/kubelet/pod-resources.
CHART_MOUNTS = {
    "nvidia-device-plugin": {"/var/lib/kubelet/device-plugins", "/driver-root", "/dev/shm", "/mps", "/var/run/cdi"},
    "gpu-feature-discovery": {"/etc/kubernetes/node-feature-discovery/features.d", "/sys", "/config"},
    "mps-control-daemon": {"/dev/shm", "/mps"},
    "dcgm-exporter": {"/var/lib/kubelet/pod-resources"},
}
WITH_CONFIG_MAP = {"/available-configs", "/config"}


@pytest.mark.parametrize(
    "settings",
    [{}, {"device_list_strategy": ["cdi-cri"]}, {"mps": {"replicas": 2}}, {"configs": CONFIGS}],
    ids=["default", "cdi", "mps", "per-node-configs"],
)
def test_every_daemonset_mounts_what_nvidias_chart_mounts(settings):
    settings = {**settings, "dcgm_exporter_enabled": True}
    docs = render(settings)
    for (kind, _name), doc in docs.items():
        if kind != "DaemonSet":
            continue
        spec = doc["spec"]["template"]["spec"]
        for c in spec["containers"]:
            if c["name"] not in CHART_MOUNTS:
                continue
            want = set(CHART_MOUNTS[c["name"]])
            if settings.get("configs") and c["name"] != "dcgm-exporter":
                want |= WITH_CONFIG_MAP
            assert want <= mount_paths(c), (c["name"], sorted(want - mount_paths(c)))


@pytest.mark.parametrize("root", ["/", "/run/nvidia/driver"])
def test_the_driver_root_is_at_driver_root_always(root):
    spec = pod({"nvidia_driver_root": root}, "nvidia-device-plugin")
    c = main_container(spec, "nvidia-device-plugin")
    mount = next(m for m in c["volumeMounts"] if m["mountPath"] == "/driver-root")
    assert mount["readOnly"] is True
    volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
    assert volume["hostPath"] == {"path": root, "type": "Directory"}
    assert env(c)["NVIDIA_DRIVER_ROOT"] == root
    # /driver-root is the plugin's own default for the container path (api/config/v1/consts.go
    # DefaultContainerDriverRoot); the chart sets no CONTAINER_DRIVER_ROOT and neither does the role.
    assert "CONTAINER_DRIVER_ROOT" not in env(c)
    assert env(c)["MPS_ROOT"] == "/run/nvidia/mps"


# --- Allocation policy ------------------------------------------------------------------------------------------------
# Facts: api/config/v1/flags.go PluginCommandLineFlags.SharedDevicesAllocationPolicy (sharedDevicesAllocationPolicy);
# consts.go "distributed" and "packed"; cmd/nvidia-device-plugin/main.go refuses any other value at start.


@pytest.mark.parametrize("policy", ["distributed", "packed"])
def test_the_allocation_policy_reaches_the_config(policy):
    config = yaml.safe_load(
        render({"allocation_policy": policy})[("ConfigMap", "nvidia-device-plugin-config")]["data"]["config.yaml"]
    )
    assert config["flags"]["plugin"]["sharedDevicesAllocationPolicy"] == policy


def test_an_unknown_allocation_policy_is_refused_by_name():
    with pytest.raises(DevicePluginError, match="device_plugin_allocation_policy: 'spread' is not one of distributed"):
        render({"allocation_policy": "spread"})


# --- XID health settings ----------------------------------------------------------------------------------------------
# Facts: internal/rm/health.go reads DP_DISABLE_HEALTHCHECKS ("all"/"xids" or XIDs) and DP_ENABLE_HEALTHCHECKS (XIDs
# that count even when disabled), and logs and skips a malformed XID; the chart has no value for either.


def test_xid_settings_become_the_plugins_variables():
    c = main_container(
        pod({"health_disabled_xids": "all", "health_enabled_xids": [48, 79]}, "nvidia-device-plugin"),
        "nvidia-device-plugin",
    )
    assert env(c)["DP_DISABLE_HEALTHCHECKS"] == "all"
    assert env(c)["DP_ENABLE_HEALTHCHECKS"] == "48,79"
    plain = main_container(pod({}, "nvidia-device-plugin"), "nvidia-device-plugin")
    assert not {"DP_DISABLE_HEALTHCHECKS", "DP_ENABLE_HEALTHCHECKS"} & set(env(plain))


def test_a_malformed_xid_is_refused_not_skipped():
    with pytest.raises(DevicePluginError, match="device_plugin_health_disabled_xids: 'x48' is not an XID"):
        render({"health_disabled_xids": ["x48"]})


def test_helm_mode_names_the_settings_the_chart_cannot_carry():
    assert helm_unsupported({}) == []
    (problem,) = helm_unsupported({"health_enabled_xids": [48]})
    assert "device_plugin_health_enabled_xids" in problem and "device_plugin_mode apply" in problem


# --- Per-node configurations ------------------------------------------------------------------------------------------
# Facts: templates/daemonset-device-plugin.yml and daemonset-gfd.yml, with a config map: shareProcessNamespace, an
# init container and a sidecar running config-manager (NODE_LABEL nvidia.com/device-plugin.config, CONFIG_FILE_SRCDIR
# /available-configs, CONFIG_FILE_DST /config/config.yaml, DEFAULT_CONFIG, FALLBACK_STRATEGIES named,single; the sidecar
# SEND_SIGNAL true, SIGNAL 1, PROCESS_TO_SIGNAL the program), the ConfigMap on /available-configs, /config an
# emptyDir; role.yml: nodes get/list/watch for the dedicated ServiceAccount.


@pytest.mark.parametrize(
    ("name", "program"),
    [("nvidia-device-plugin", "nvidia-device-plugin"), ("gpu-feature-discovery", "gpu-feature-discovery")],
)
def test_per_node_configurations_run_config_manager_as_the_chart_does(name, program):
    spec = pod({"configs": CONFIGS}, name)
    assert spec["shareProcessNamespace"] is True
    (init,) = [c for c in spec["initContainers"] if c["command"] == ["config-manager"]]
    sidecar = next(c for c in spec["containers"] if c["command"] == ["config-manager"])
    assert env(init)["ONESHOT"] == "true" and env(init)["SEND_SIGNAL"] == "false"
    assert env(sidecar)["ONESHOT"] == "false"
    assert (env(sidecar)["SEND_SIGNAL"], env(sidecar)["SIGNAL"], env(sidecar)["PROCESS_TO_SIGNAL"]) == (
        "true",
        "1",
        program,
    )
    for c in (init, sidecar):
        assert env(c)["NODE_LABEL"] == "nvidia.com/device-plugin.config"
        assert env(c)["NODE_NAME"] == "spec.nodeName"
        assert (env(c)["CONFIG_FILE_SRCDIR"], env(c)["CONFIG_FILE_DST"]) == (
            "/available-configs",
            "/config/config.yaml",
        )
        assert env(c)["DEFAULT_CONFIG"] == "default"
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["config"] == {"name": "config", "emptyDir": {}}
    assert volumes["available-configs"]["configMap"]["name"] == "nvidia-device-plugin-config"
    assert spec["serviceAccountName"]
    docs = render({"configs": CONFIGS})
    role = docs[("ClusterRole", spec["serviceAccountName"])]
    assert {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]} in role["rules"]


def test_the_config_map_has_one_key_per_configuration_and_each_node_its_label():
    docs = render({"configs": CONFIGS})
    data = docs[("ConfigMap", "nvidia-device-plugin-config")]["data"]
    assert sorted(data) == ["default", "mig-mixed", "ts"]
    assert yaml.safe_load(data["ts"])["sharing"]["timeSlicing"]["resources"] == [
        {"name": "nvidia.com/gpu", "replicas": 4}
    ]
    assert yaml.safe_load(data["mig-mixed"])["flags"]["migStrategy"] == "mixed"
    assert yaml.safe_load(data["default"])["flags"]["migStrategy"] == "none"
    assert docs[("Node", "gpu-1")]["metadata"]["labels"]["nvidia.com/device-plugin.config"] == "default"
    assert docs[("Node", "gpu-2")]["metadata"]["labels"]["nvidia.com/device-plugin.config"] == "ts"
    # A MIG configuration anywhere: NVIDIA_MIG_MONITOR_DEVICES on the plugin, as the chart's addMigMonitorDevices.
    plugin = main_container(pod({"configs": CONFIGS}, "nvidia-device-plugin"), "nvidia-device-plugin")
    assert env(plugin)["NVIDIA_MIG_MONITOR_DEVICES"] == "all"
    values = helm_values({"configs": CONFIGS})
    assert (
        sorted(values["config"]["map"]) == ["default", "mig-mixed", "ts"] and values["config"]["default"] == "default"
    )


def test_without_configurations_the_one_config_is_mounted_directly():
    spec = pod({}, "nvidia-device-plugin")
    assert "shareProcessNamespace" not in spec and "initContainers" not in spec
    assert ("ServiceAccount", "nvidia-device-plugin") not in render({})
    assert "nvidia.com/device-plugin.config" not in render({})[("Node", "gpu-1")]["metadata"]["labels"]


@pytest.mark.parametrize(
    ("configs", "message"),
    [
        ({"default": {"mig_strategy": "single"}}, "'default' cannot name a configuration"),
        ({"Bad Name": {"mig_strategy": "single"}}, "'Bad Name' cannot name a configuration"),
        ({"x": {"namespace": "other"}}, "namespace cannot differ per node"),
        ({"x": {}}, "must be a non-empty dict"),
        ({"x": {"mig_strategy": "both"}}, "device_plugin_configs.x: device_plugin_mig_strategy: 'both'"),
    ],
)
def test_configurations_that_cannot_work_are_refused(configs, message):
    with pytest.raises(DevicePluginError, match=message):
        render({"configs": configs})


def test_a_node_naming_an_unknown_configuration_and_mps_with_configurations_are_refused():
    with pytest.raises(DevicePluginError, match="device_plugin_node_config: 'nope' is not a configuration"):
        render({"configs": CONFIGS}, [{"name": "gpu-1", "labels": {}, "config": "nope"}])
    with pytest.raises(DevicePluginError, match="cannot be combined with device_plugin_mps"):
        render({"configs": {"p": {"allocation_policy": "packed"}}, "mps": {"replicas": 2}}, NODES[:1])


def test_the_validation_pod_asks_for_what_its_nodes_configuration_advertises():
    docs = render({"configs": {"ts": {"time_slicing": {"replicas": 4, "rename_by_default": True}}}})
    pods = {d["spec"]["nodeSelector"]["kubernetes.io/hostname"]: d for (kind, _n), d in docs.items() if kind == "Pod"}
    gpu1 = pods["gpu-1"]["spec"]["containers"][0]["resources"]["limits"]
    gpu2 = pods["gpu-2"]["spec"]["containers"][0]["resources"]["limits"]
    assert gpu1 == {"nvidia.com/gpu": 1}
    assert gpu2 == {"nvidia.com/gpu.shared": 1}


# --- GFD and DCGM at the pinned tags ----------------------------------------------------------------------------------
# Facts: daemonset-gfd.yml sets POD_NAME from metadata.name (internal/lm/output.go getOwnerReferences reads the pod to
# make the DaemonSet the NodeFeature object's owner); role.yml grants pods get with GFD.


def test_gfd_knows_its_pod_and_may_read_it_with_the_node_feature_api():
    gfd = main_container(pod({}, "gpu-feature-discovery"), "gpu-feature-discovery")
    assert env(gfd)["POD_NAME"] == "metadata.name"
    role = render({"gfd_node_feature_api": True})[("ClusterRole", "gpu-feature-discovery")]
    assert {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]} in role["rules"]


def test_dcgm_exporter_runs_as_nvidias_chart_runs_it():
    c = pod({"dcgm_exporter_enabled": True}, "nvidia-dcgm-exporter")["containers"][0]
    assert c["image"] == "nvcr.io/nvidia/k8s/dcgm-exporter:4.5.3-4.8.2-ubuntu22.04"
    assert c["securityContext"]["capabilities"] == {"add": ["SYS_ADMIN"], "drop": ["ALL"]}
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert c["args"] == ["-f", "/etc/dcgm-exporter/default-counters.csv"]


# Fact: internal/rm/rm.go names a mixed-strategy MIG resource strings.ReplaceAll("mig-"+profile, "+", "."), so the
# media-extension profile 1g.10gb+me is advertised as nvidia.com/mig-1g.10gb.me.
def test_a_mig_profile_with_a_plus_is_asked_for_by_the_name_the_plugin_advertises():
    node = {"name": "a100", "labels": {}, "gpus": [{"mig_devices": [{"profile": "1g.10gb+me"}]}]}
    docs = render({"mig_strategy": "mixed"}, [node])
    (pod_doc,) = [d for (kind, _n), d in docs.items() if kind == "Pod"]
    assert pod_doc["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/mig-1g.10gb.me": 1}
