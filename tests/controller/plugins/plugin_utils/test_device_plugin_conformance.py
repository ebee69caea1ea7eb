# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The device_plugin role's render read against NVIDIA's own files, one scenario at a time.

No cluster runs here, so each of NVIDIA's requirements is stated below as a fact, with its source (file and tag,
read 2026-11-23 at v0.17.4 and again 2026-11-27 at v0.20.0), and the render of each scenario (default, time slicing,
MPS, MIG single/mixed, CDI strategies,
NodeFeature API, DCGM) is checked against it. ``kubernetes-validate`` checks the same documents' schema
(``tests/controller/plugins/filter/test_device_plugin_manifests.py``). Where the render deliberately differs from
NVIDIA's chart, the test says so and why (the role's README lists every difference).
"""

import json

import pytest
import yaml

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.device_plugin.documents import documents, helm_values
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.device_plugin.problems import toolkit_problems
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.device_plugin.settings import (
    ROLE_DEFAULTS,
    DevicePluginError,
)

CHART = "k8s-device-plugin v0.20.0, deployments/helm/nvidia-device-plugin"
NODE = {"name": "gpu-1", "labels": {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.count": "2"}}


def render(settings, nodes=(NODE,)):
    """``{(kind, name): document}`` of the whole render."""
    return {(d["kind"], d["metadata"]["name"]): d for _g, _f, docs in documents(settings, list(nodes)) for d in docs}


def daemonset(settings, name):
    return render(settings)[("DaemonSet", name)]["spec"]["template"]["spec"]


def container(settings, daemonset_name, index=0):
    return daemonset(settings, daemonset_name)["containers"][index]


def env(c):
    """A container's environment: plain values as strings, fieldRefs as ``fieldRef:<path>``."""
    out = {}
    for e in c.get("env", []):
        out[e["name"]] = e["value"] if "value" in e else "fieldRef:" + e["valueFrom"]["fieldRef"]["fieldPath"]
    return out


def mounts(c):
    return {m["name"]: m["mountPath"] for m in c.get("volumeMounts", [])}


def host_paths(spec):
    return {v["name"]: v["hostPath"]["path"] for v in spec.get("volumes", []) if "hostPath" in v}


def bounding_has_sys_admin(c):
    """containerd/CRI-O apply ``drop`` first, then ``add``; their default set has no SYS_ADMIN."""
    ctx = c.get("securityContext") or {}
    return bool(ctx.get("privileged")) or "SYS_ADMIN" in (ctx.get("capabilities") or {}).get("add", [])


PLUGIN, GFD, MPS, DCGM = (
    "nvidia-device-plugin",
    "gpu-feature-discovery",
    "nvidia-device-plugin-mps-control-daemon",
    ("nvidia-dcgm-exporter"),
)

# --- 1. NVIDIA_MIG_MONITOR_DEVICES -----------------------------------------------------------------------------------
# Fact (CHART templates/_helpers.tpl "nvidia-device-plugin.options": addMigMonitorDevices is true only when the MIG
# strategy is not none; daemonset-device-plugin.yml and daemonset-gfd.yml set NVIDIA_MIG_MONITOR_DEVICES=all only
# then). Fact (nvidia-container-toolkit v1.17.8, cmd/nvidia-container-runtime-hook/container_config.go:273): the
# legacy hook panics "cannot set MIG_MONITOR_DEVICES in non privileged container" unless CAP_SYS_ADMIN is in the
# container's bounding set.
MIG_MONITOR = "NVIDIA_MIG_MONITOR_DEVICES"


@pytest.mark.parametrize("strategies", [["volume-mounts"], ["envvar"], ["cdi-annotations"], ["cdi-cri"]])
def test_no_mig_monitor_without_mig(strategies):
    settings = {"device_list_strategy": strategies}
    for name in (PLUGIN, GFD):
        assert MIG_MONITOR not in env(container(settings, name)), name
    assert MIG_MONITOR not in env(container({"mps": {"replicas": 2}}, MPS))


@pytest.mark.parametrize("mig", ["single", "mixed"])
@pytest.mark.parametrize("strategies", [["volume-mounts"], ["envvar"], ["cdi-cri"]])
def test_mig_monitor_with_mig_only_where_the_hook_accepts_it(mig, strategies):
    settings = {"mig_strategy": mig, "device_list_strategy": strategies}
    for name in (PLUGIN, GFD):
        c = container(settings, name)
        assert env(c)[MIG_MONITOR] == "all", name
        assert bounding_has_sys_admin(c), name


# --- 2. MPS ----------------------------------------------------------------------------------------------------------
# Facts (k8s-device-plugin v0.20.0, re-read 2026-11-27): cmd/mps-control-daemon/mps/root.go "ContainerRoot =
# Root("/mps")", used by the daemon (mps/manager.go) and by the plugin's MPS health check (internal/plugin/mps.go);
# cmd/mps-control-daemon/mount/ mount-shm.go mounts a tmpfs on /mps/shm. CHART
# templates/daemonset-mps-control-daemon.yml: init container "mps-control-daemon-mounts" (command [mps-control-daemon,
# mount-shm], privileged, mps-root on /mps with mountPropagation Bidirectional); the daemon mounts mps-shm on /dev/shm
# and mps-root on /mps, is privileged and has NODE_NAME; daemonset-device-plugin.yml mounts mps-shm on /dev/shm,
# mps-root on /mps and sets MPS_ROOT to the host folder (values.yaml mps.root "/run/nvidia/mps"). At v0.20.0
# (2026-08-19) the daemon runs with hostPID: true by default (values.yaml mps.enableHostPID: true, "hostPID is needed
# for the MPS server to find its own PID via /proc/self"); the plugin's template never sets hostPID.
MPS_SETTINGS = {"mps": {"replicas": 4}}


def test_mps_pipes_are_where_nvidias_binaries_look():
    for name in (PLUGIN, MPS):
        spec = daemonset(MPS_SETTINGS, name)
        c = spec["containers"][0]
        assert mounts(c)["mps-root"] == "/mps", name
        assert mounts(c)["mps-shm"] == "/dev/shm", name
        assert host_paths(spec)["mps-root"] == "/run/nvidia/mps", name
        assert host_paths(spec)["mps-shm"] == "/run/nvidia/mps/shm", name
    assert daemonset(MPS_SETTINGS, MPS)["hostPID"] is True
    assert "hostPID" not in daemonset(MPS_SETTINGS, PLUGIN)
    assert env(container(MPS_SETTINGS, PLUGIN))["MPS_ROOT"] == "/run/nvidia/mps"


def test_mps_daemon_mounts_its_shared_memory_first():
    spec = daemonset(MPS_SETTINGS, MPS)
    (init,) = spec["initContainers"]
    assert init["command"] == ["mps-control-daemon", "mount-shm"]
    assert init["securityContext"] == {"privileged": True}
    assert init["volumeMounts"] == [{"name": "mps-root", "mountPath": "/mps", "mountPropagation": "Bidirectional"}]
    daemon = spec["containers"][0]
    assert daemon["command"] == ["mps-control-daemon"]
    assert daemon["securityContext"] == {"privileged": True}
    assert env(daemon)["NODE_NAME"] == "fieldRef:spec.nodeName"


def test_mps_daemon_schedules_where_the_plugin_does():
    """Deliberate difference: NVIDIA's chart selects nvidia.com/mps.capable=true, a label only GFD sets and only NFD
    puts on the node; the role's single config has MPS on for every node the plugin runs on, so the daemon takes the
    plugin's selector and schedules with or without GFD/NFD."""
    assert daemonset(MPS_SETTINGS, MPS)["nodeSelector"] == daemonset(MPS_SETTINGS, PLUGIN)["nodeSelector"]
    assert "nvidia.com/mps.capable" not in daemonset(MPS_SETTINGS, MPS)["nodeSelector"]
    assert ("DaemonSet", MPS) not in render({})


# --- 3. GFD with the NodeFeature API ---------------------------------------------------------------------------------
# Facts (k8s-device-plugin v0.20.0, re-read 2026-11-27): internal/lm/output.go NewOutputer returns "required flag
# node-name not set" / "required flag namespace not set" when GFD_USE_NODE_FEATURE_API is on and they are empty;
# internal/flags/node.go reads them from NODE_NAME and NAMESPACE. CHART templates/daemonset-gfd.yml sets
# NODE_NAME=spec.nodeName and NAMESPACE=metadata.namespace always; templates/role.yml lets GFD create/update
# nodefeatures (nfd.k8s-sigs.io).


@pytest.mark.parametrize("api", [False, True])
def test_gfd_knows_its_node_and_namespace(api):
    c = container({"gfd_node_feature_api": api}, GFD)
    assert env(c)["NODE_NAME"] == "fieldRef:spec.nodeName"
    assert env(c)["NAMESPACE"] == "fieldRef:metadata.namespace"
    assert env(c)["GFD_USE_NODE_FEATURE_API"] == str(api).lower()


def test_gfd_with_the_node_feature_api_may_write_node_features():
    docs = render({"gfd_node_feature_api": True})
    spec = daemonset({"gfd_node_feature_api": True}, GFD)
    assert spec["serviceAccountName"] == "gpu-feature-discovery"
    rules = docs[("ClusterRole", "gpu-feature-discovery")]["rules"]
    nfd = next(r for r in rules if r["apiGroups"] == ["nfd.k8s-sigs.io"])
    assert "nodefeatures" in nfd["resources"] and {"create", "update", "get"} <= set(nfd["verbs"])


# --- 4. Renaming and the resource the validation pod asks for --------------------------------------------------------
# Facts (k8s-device-plugin v0.20.0, re-read 2026-11-27): api/config/v1/config.go DisableResourceNamingInConfig and
# replicas.go disableResoureRenaming: "rename" is dropped ("Setting the 'rename' field ... is not yet supported") unless
# renameByDefault is true, and then every shared resource becomes <name>.shared (resources.go DefaultSharedRename).
# internal/rm/rm.go: MIG "single" advertises nvidia.com/gpu, "mixed" one nvidia.com/mig-<profile> per profile.
MIG_NODE = {
    "name": "gpu-mig",
    "labels": {"nvidia.com/gpu.present": "true"},
    "gpus": [{"mig_devices": [{"profile": "1g.10gb"}, {"profile": "3g.40gb"}]}, {"mig_devices": []}],
}


MIG_SHARED = {"rename_by_default": True, "resources": [{"name": "nvidia.com/mig-1g.10gb", "replicas": 2}]}


def validation_requests(settings, nodes=(NODE,)):
    pods = [d for (kind, _name), d in render(settings, nodes).items() if kind == "Pod"]
    return [p["spec"]["containers"][0]["resources"]["limits"] for p in pods]


def config_sharing(settings):
    return json.loads(render(settings)[("ConfigMap", "nvidia-device-plugin-config")]["data"]["config.yaml"])["sharing"]


def test_rename_means_what_the_plugin_does():
    """rename: nvidia.com/gpu.shared is what v0.20 can do: it reaches the config as renameByDefault (else ignored)."""
    sharing = config_sharing({"time_slicing": {"replicas": 4, "rename": "nvidia.com/gpu.shared"}})
    assert sharing["timeSlicing"]["renameByDefault"] is True
    assert sharing["timeSlicing"]["resources"] == [
        {"name": "nvidia.com/gpu", "replicas": 4, "rename": "nvidia.com/gpu.shared"}
    ]
    with pytest.raises(DevicePluginError, match=r"rename 'nvidia.com/shared-gpu' would be ignored.*gpu.shared"):
        render({"time_slicing": {"replicas": 4, "rename": "nvidia.com/shared-gpu"}})
    mixed = {
        "resources": [
            {"name": "nvidia.com/mig-1g.10gb", "replicas": 2, "rename": "nvidia.com/mig-1g.10gb.shared"},
            {"name": "nvidia.com/mig-3g.40gb", "replicas": 2},
        ]
    }
    with pytest.raises(DevicePluginError, match="renames every shared resource or none"):
        render({"mig_strategy": "mixed", "time_slicing": mixed})


@pytest.mark.parametrize(
    ("settings", "nodes", "requests"),
    [
        ({}, (NODE,), [{"nvidia.com/gpu": 1}]),
        ({"time_slicing": {"replicas": 4}}, (NODE,), [{"nvidia.com/gpu": 1}]),
        ({"time_slicing": {"replicas": 4, "rename": "nvidia.com/gpu.shared"}}, (NODE,), [{"nvidia.com/gpu.shared": 1}]),
        ({"mps": {"replicas": 2, "rename_by_default": True}}, (NODE,), [{"nvidia.com/gpu.shared": 1}]),
        ({"mig_strategy": "single"}, (MIG_NODE,), [{"nvidia.com/gpu": 1}]),
        ({"mig_strategy": "mixed"}, (MIG_NODE,), [{"nvidia.com/mig-1g.10gb": 1}]),
        ({"mig_strategy": "mixed", "time_slicing": MIG_SHARED}, (MIG_NODE,), [{"nvidia.com/mig-1g.10gb.shared": 1}]),
        # mixed and no MIG device known: nothing the pod could ask for, so no pod (it would fail a healthy node)
        ({"mig_strategy": "mixed"}, (NODE,), []),
    ],
)
def test_validation_pod_asks_for_a_resource_the_node_advertises(settings, nodes, requests):
    assert validation_requests(settings, nodes) == requests


# --- 5. CDI strategies and the hook program ---------------------------------------------------------------------------
# Facts: k8s-device-plugin v0.20.0 cmd/nvidia-device-plugin/main.go, flag "nvidia-cdi-hook-path" (env
# NVIDIA_CDI_HOOK_PATH), default api/config/v1/consts.go DefaultNvidiaCTKPath "/usr/bin/nvidia-ctk"; the vendored
# nvidia-container-toolkit internal/discover/hooks.go calls "<path> <hook-name> args" (with "hook" inserted for
# nvidia-ctk). nvidia-container-toolkit v1.17.8 packaging/debian/nvidia-container-toolkit-base.install installs
# /usr/bin/nvidia-cdi-hook. CHART: cdi.nvidiaHookPath -> NVIDIA_CDI_HOOK_PATH; templates mount /var/run/cdi
# (DirectoryOrCreate) and the driver root on /driver-root.


@pytest.mark.parametrize("strategies", [["cdi-annotations"], ["cdi-cri"], ["envvar", "cdi-cri"]])
def test_cdi_spec_hooks_name_nvidias_hook_program(strategies):
    settings = {"device_list_strategy": strategies}
    spec = daemonset(settings, PLUGIN)
    c = spec["containers"][0]
    assert env(c)["NVIDIA_CDI_HOOK_PATH"] == "/usr/bin/nvidia-cdi-hook"
    assert mounts(c)["cdi-root"] == "/var/run/cdi" and host_paths(spec)["cdi-root"] == "/var/run/cdi"
    assert mounts(c)["driver-root"] == "/driver-root"
    assert helm_values(settings)["cdi"] == {"nvidiaHookPath": "/usr/bin/nvidia-cdi-hook"}
    assert (
        env(container({**settings, "cdi_hook_path": "/opt/nvidia/bin/nvidia-cdi-hook"}, PLUGIN))["NVIDIA_CDI_HOOK_PATH"]
        == "/opt/nvidia/bin/nvidia-cdi-hook"
    )
    assert "NVIDIA_CDI_HOOK_PATH" not in env(container({}, PLUGIN))


def test_cdi_strategy_with_the_native_toolkit_fails_the_node_early():
    native = {"provider": "native", "accept_envvar_unprivileged": False, "accept_volume_mounts": True}
    (problem,) = toolkit_problems(native, ["cdi-cri"])
    assert "nvidia-cdi-hook" in problem and "toolkit_provider: nvidia" in problem
    assert toolkit_problems({**native, "provider": "nvidia"}, ["cdi-cri"]) == []


# --- 6. Labels the role writes never contradict GFD's ---------------------------------------------------------------
# Facts (k8s-device-plugin v0.20.0, re-read 2026-11-27): internal/lm/resource.go baseLabeler writes <resource>.product
# (with "-SHARED" when shared and not renamed), .count, .replicas (the sharing replicas, else 1) and .sharing-strategy
# ("time-slicing", "mps", or "none" when replicas is 1); nvml.go newSharingLabeler writes mps.capable; mig-strategy.go
# makes nvidia.com/gpu.* describe MIG devices under "single" and writes nvidia.com/mig.strategy. Nothing in GFD writes
# nvidia.com/gpu.present (git grep over internal/lm and cmd/gpu-feature-discovery at v0.20.0).
FACT_LABELS = {
    "nvidia.com/gpu.present": "true",
    "nvidia.com/gpu.count": "2",
    "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
    "nvidia.com/gpu.memory": "40960",
    "nvidia.com/gpu.replicas": "1",
    "nvidia.com/gpu.sharing-strategy": "none",
    "nvidia.com/cuda.driver-version.major": "535",
    "example.com/rack": "r2",
}
FACT_NODE = {"name": "gpu-1", "labels": FACT_LABELS}


def node_labels(settings):
    return render(settings, (FACT_NODE,))[("Node", "gpu-1")]["metadata"]["labels"]


@pytest.mark.parametrize("sharing", [{}, {"time_slicing": {"replicas": 4}}, {"mps": {"replicas": 2}}])
def test_with_gfd_the_role_leaves_gfds_labels_alone(sharing):
    assert node_labels(sharing) == {"nvidia.com/gpu.present": "true", "example.com/rack": "r2"}


@pytest.mark.parametrize(
    ("sharing", "expected"),
    [
        (
            {},
            {
                "nvidia.com/gpu.replicas": "1",
                "nvidia.com/gpu.sharing-strategy": "none",
                "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
                "nvidia.com/mps.capable": "false",
            },
        ),
        (
            {"time_slicing": {"replicas": 4}},
            {
                "nvidia.com/gpu.replicas": "4",
                "nvidia.com/gpu.sharing-strategy": "time-slicing",
                "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-SHARED",
                "nvidia.com/mps.capable": "false",
            },
        ),
        (
            {"time_slicing": {"replicas": 4, "rename_by_default": True}},
            {
                "nvidia.com/gpu.replicas": "4",
                "nvidia.com/gpu.sharing-strategy": "time-slicing",
                "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
                "nvidia.com/mps.capable": "false",
            },
        ),
        (
            {"mps": {"replicas": 2}},
            {
                "nvidia.com/gpu.replicas": "2",
                "nvidia.com/gpu.sharing-strategy": "mps",
                "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-SHARED",
                "nvidia.com/mps.capable": "true",
            },
        ),
    ],
)
def test_without_gfd_the_role_writes_what_gfd_would(sharing, expected):
    labels = node_labels({"gfd_enabled": False, **sharing})
    for key, value in expected.items():
        assert labels[key] == value, key
    assert labels["nvidia.com/gpu.present"] == "true" and labels["nvidia.com/gpu.count"] == "2"


@pytest.mark.parametrize("mig", ["single", "mixed"])
def test_without_gfd_under_mig_the_per_gpu_resource_labels_are_left_out(mig):
    labels = node_labels({"gfd_enabled": False, "mig_strategy": mig})
    assert labels["nvidia.com/mig.strategy"] == mig
    for key in ("gpu.product", "gpu.count", "gpu.memory", "gpu.replicas", "gpu.sharing-strategy"):
        assert "nvidia.com/" + key not in labels
    assert labels["nvidia.com/gpu.present"] == "true"


# --- 7. NodeFeature API and NFD in Helm mode; DCGM --------------------------------------------------------------------
# Facts: CHART Chart.yaml dependency node-feature-discovery 0.19.0 (alias nfd, condition "nfd.enabled,gfd.enabled");
# values.yaml has no nfd.enableNodeFeatureApi at 0.20.0 and daemonset-gfd.yml sets no GFD_USE_NODE_FEATURE_API, so
# GFD follows its config file or its own default, the NodeFeature API (cmd/gpu-feature-discovery/main.go
# use-node-feature-api, Value: true, since v0.19.0); api/config/v1/flags.go reads useNodeFeatureAPI from the file
# unless the flag or its variable is set. templates/role.yml: nodefeatures and pods get with GFD.
# dcgm-exporter 4.5.3-4.8.2 (2026-05-06) deployment/templates/daemonset.yaml: NODE_NAME from spec.nodeName,
# DCGM_EXPORTER_KUBERNETES "true", /var/lib/kubelet/pod-resources mounted read-only; values.yaml securityContext adds
# SYS_ADMIN, drops ALL, no privilege escalation; arguments -f /etc/dcgm-exporter/default-counters.csv.


@pytest.mark.parametrize("api", [False, True])
def test_helm_mode_deploys_nfd_with_gfd_and_passes_the_node_feature_api(api):
    values = helm_values({"gfd_node_feature_api": api})
    assert values["nfd"] == {"enabled": True}
    config = yaml.safe_load(values["config"]["map"]["default"])
    assert config["flags"]["useNodeFeatureAPI"] is api
    assert values["gfd"]["enabled"] is True
    assert helm_values({"gfd_enabled": False})["nfd"]["enabled"] is False
    assert helm_values({"nfd_enabled": False})["nfd"]["enabled"] is False


def test_dcgm_exporter_knows_its_node():
    settings = {"dcgm_exporter_enabled": True}
    spec = daemonset(settings, DCGM)
    c = spec["containers"][0]
    assert env(c)["NODE_NAME"] == "fieldRef:spec.nodeName"
    assert env(c)["DCGM_EXPORTER_KUBERNETES"] == "true"
    assert {"name": "pod-resources", "mountPath": "/var/lib/kubelet/pod-resources", "readOnly": True} in c[
        "volumeMounts"
    ]
    assert host_paths(spec)["pod-resources"] == "/var/lib/kubelet/pod-resources"
    assert bounding_has_sys_admin(c)


# --- Pins ------------------------------------------------------------------------------------------------------------
# The facts above were read at k8s-device-plugin v0.20.0 (tagged 2026-08-19), NVIDIA's newest release (the tags of
# github.com/NVIDIA/k8s-device-plugin, read 2026-11-27): the role deploys that release, as image and as chart, so the
# render is what these tests describe. DCGM exporter 4.5.3-4.8.2 (tagged 2026-05-06) is NVIDIA's newest tag.


def test_the_render_is_the_release_these_facts_were_read_at():
    defaults = yaml.safe_load(ROLE_DEFAULTS.read_text())
    assert defaults["device_plugin_image_tag"] == "v0.20.0"
    assert defaults["device_plugin_helm_chart_version"] == "0.20.0"
    assert defaults["device_plugin_dcgm_exporter_image_tag"] == "4.5.3-4.8.2-ubuntu22.04"
    assert container({}, PLUGIN)["image"] == "nvcr.io/nvidia/k8s-device-plugin:v0.20.0"
    assert container({}, GFD)["image"] == container({"mps": {"replicas": 2}}, MPS)["image"]


# --- Default and time slicing ----------------------------------------------------------------------------------------
# Facts (CHART): daemonset-device-plugin.yml mounts hostPath /var/lib/kubelet/device-plugins (type Directory since
# v0.18.0, CHANGELOG "Ensure that directory volumes have Directory type") on the same path, sets
# NVIDIA_VISIBLE_DEVICES=all, NVIDIA_DRIVER_CAPABILITIES=compute,utility and CONFIG_FILE=/config/config.yaml;
# values.yaml priorityClassName system-node-critical, toleration nvidia.com/gpu Exists NoSchedule; daemonset-gfd.yml
# mounts /etc/kubernetes/node-feature-discovery/features.d (DirectoryOrCreate) and /sys (Directory), GFD privileged
# (values.yaml gfd.securityContext). api/config/v1 (replicas.go): sharing.timeSlicing takes renameByDefault,
# failRequestsGreaterThanOne and resources[name, replicas]; only MPS runs a control daemon.


def test_default_plugin_and_gfd_as_nvidias_chart_runs_them():
    spec = daemonset({}, PLUGIN)
    c = spec["containers"][0]
    assert {k: env(c)[k] for k in ("NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "CONFIG_FILE")} == {
        "NVIDIA_VISIBLE_DEVICES": "all",
        "NVIDIA_DRIVER_CAPABILITIES": "compute,utility",
        "CONFIG_FILE": "/config/config.yaml",
    }
    assert mounts(c)["device-plugin"] == "/var/lib/kubelet/device-plugins"
    kubelet = next(v for v in spec["volumes"] if v["name"] == "device-plugin")
    assert kubelet["hostPath"] == {"path": "/var/lib/kubelet/device-plugins", "type": "Directory"}
    assert spec["priorityClassName"] == "system-node-critical"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    # volume-mounts (the role's default list strategy): SYS_ADMIN, as the chart's requiresCapSysAdmin adds it
    assert bounding_has_sys_admin(c)
    gfd = daemonset({}, GFD)
    assert mounts(gfd["containers"][0])["output-dir"] == "/etc/kubernetes/node-feature-discovery/features.d"
    assert {v["name"]: v["hostPath"].get("type") for v in gfd["volumes"] if "hostPath" in v} == {
        "output-dir": "DirectoryOrCreate",
        "host-sys": "Directory",
    }
    assert gfd["containers"][0]["securityContext"] == {"privileged": True}


def test_time_slicing_is_config_only():
    settings = {"time_slicing": {"replicas": 4, "fail_requests_greater_than_one": True}}
    assert config_sharing(settings) == {
        "timeSlicing": {
            "renameByDefault": False,
            "failRequestsGreaterThanOne": True,
            "resources": [{"name": "nvidia.com/gpu", "replicas": 4}],
        }
    }
    assert ("DaemonSet", MPS) not in render(settings)
    assert "hostPID" not in daemonset(settings, PLUGIN)
