# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The device_plugin role's workloads: the device plugin's DaemonSet, GPU feature discovery (with its RBAC), the MPS
control daemon, the DCGM exporter with its Service and ServiceMonitor, and the ``nvidia`` RuntimeClass."""

from __future__ import annotations

import copy
from typing import Any

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.device_plugin.config import CONFIG_PATH, FEATURES_DIR
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.device_plugin.objects import (
    _config_volume,
    _daemonset,
    _env,
    _field_env,
    _host_path,
    _labels,
    _meta,
    _pod_spec,
)
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.device_plugin.settings import (
    DEFAULT_CONFIG,
    NODE_CONFIG_LABEL,
    image,
    uses_cdi,
)

# Where the runtime ignores NVIDIA_VISIBLE_DEVICES from unprivileged containers, a container that reaches GPUs
# through the variable with no nvidia.com/gpu allocation (the plugin itself: NVML over every GPU) needs
# CAP_SYS_ADMIN in its bounding set, which is how NVIDIA's runtime and this collection's shim tell a privileged
# container (nvidia-container-toolkit v1.17.8, internal/config/image/privileged.go, IsPrivileged). NVIDIA's chart
# adds it for the same reason (k8s-device-plugin v0.20.0, 2026-08-19, deployments/helm/nvidia-device-plugin/templates/
# _helpers.tpl, "nvidia-device-plugin.requiresCapSysAdmin": volume-mounts among the strategies, or MIG; CHANGELOG
# v0.16.2 "Add CAP_SYS_ADMIN if volume-mounts list strategy is included", issue #856). Every other capability
# stays dropped; containerd and CRI-O apply "drop: [ALL]" first, then "add" (to the bounding set too).
PLUGIN_SECURITY = {"capabilities": {"drop": ["ALL"], "add": ["SYS_ADMIN"]}}
# GFD reads vGPU information from the host: privileged, as NVIDIA's chart runs it (values.yaml gfd.securityContext).
GFD_SECURITY = {"privileged": True}
MPS_ROOT = "/run/nvidia/mps"
# The MPS pipes and the daemon's shared memory as NVIDIA's binaries see them: mps.ContainerRoot is "/mps", hard-coded
# (k8s-device-plugin v0.20.0, cmd/mps-control-daemon/mps/root.go; used by the daemon and by the plugin's health
# check, internal/plugin/mps.go), and "mount-shm" puts a tmpfs on /mps/shm (cmd/mps-control-daemon/mount/
# mount-shm.go) that the daemon and the plugin see as /dev/shm. The host folder is MPS_ROOT (the chart's mps.root).
MPS_CONTAINER_ROOT = "/mps"
SHM = "/dev/shm"  # noqa: S108 - the container's shared memory, backed by a host folder for MPS


def mig_monitor_env(s: dict[str, Any]) -> list[tuple[str, str]]:
    """``NVIDIA_MIG_MONITOR_DEVICES=all`` where MIG is on, nowhere else. NVIDIA's chart sets it on the plugin, GFD and
    the MPS daemon only when the MIG strategy is not ``none`` (k8s-device-plugin v0.20.0, deployments/helm/
    nvidia-device-plugin/templates/_helpers.tpl, ``addMigMonitorDevices``), and NVIDIA's legacy-mode hook refuses to
    start a container that sets it without CAP_SYS_ADMIN in its bounding set ("cannot set MIG_MONITOR_DEVICES in non
    privileged container": nvidia-container-toolkit v1.17.8, cmd/nvidia-container-runtime-hook/container_config.go);
    every container that gets it here is privileged or has SYS_ADMIN added."""
    strategies = {s["mig_strategy"]} | {c["mig_strategy"] for c in s["configs"].values()}
    return [("NVIDIA_MIG_MONITOR_DEVICES", "all")] if strategies != {"none"} else []


def plugin_security(s: dict[str, Any]) -> dict[str, Any]:
    """The plugin container's securityContext (the same in the manifests and in the Helm values)."""
    if s["pass_device_specs"]:
        # Device specs name /dev nodes the plugin must see and hand to kubelet: privileged, as NVIDIA's own
        # "compat with CPU manager" manifest runs it (and its chart: compatWithCPUManager -> privileged).
        return {"privileged": True}
    return copy.deepcopy(PLUGIN_SECURITY)


def config_manager(s: dict[str, Any], name: str, oneshot: bool, process: str) -> dict[str, Any]:
    """NVIDIA's config-manager: with ``device_plugin_configs``, it copies the configuration the node's
    ``nvidia.com/device-plugin.config`` label names (else ``default``) to /config/config.yaml, once as an init
    container and then as a sidecar that signals the program (SIGHUP) when the label changes (k8s-device-plugin v0.20.0,
    2026-08-19: deployments/helm/nvidia-device-plugin/templates/daemonset-device-plugin.yml and daemonset-gfd.yml,
    the init and sidecar containers, env as there)."""
    container = {
        "name": name,
        "image": image(s),
        "imagePullPolicy": s["image_pull_policy"],
        "command": ["config-manager"],
        "env": [
            *_env([("ONESHOT", "true" if oneshot else "false"), ("KUBECONFIG", "")]),
            _field_env("NODE_NAME", "spec.nodeName"),
            *_env(
                [
                    ("NODE_LABEL", NODE_CONFIG_LABEL),
                    ("CONFIG_FILE_SRCDIR", "/available-configs"),
                    ("CONFIG_FILE_DST", CONFIG_PATH),
                    ("DEFAULT_CONFIG", DEFAULT_CONFIG),
                    ("FALLBACK_STRATEGIES", "named,single"),
                    ("SEND_SIGNAL", "false" if oneshot else "true"),
                    ("SIGNAL", "" if oneshot else "1"),
                    ("PROCESS_TO_SIGNAL", "" if oneshot else process),
                ]
            ),
        ],
        "volumeMounts": [
            {"name": "available-configs", "mountPath": "/available-configs"},
            {"name": "config", "mountPath": "/config"},
        ],
    }
    return container


def _config_parts(
    s: dict[str, Any], spec: dict[str, Any], main: dict[str, Any], program: str, *, security: dict[str, Any]
) -> None:
    """With ``device_plugin_configs``: the ConfigMap as /available-configs, /config an emptyDir that config-manager
    fills, its init container and sidecar, and one process namespace so the sidecar can signal the program (as the
    chart does whenever it has a config map). Without: the ConfigMap's one config.yaml on /config."""
    if not s["configs"]:
        return
    spec["shareProcessNamespace"] = True
    spec["initContainers"] = [*spec.get("initContainers", []), config_manager(s, f"{program}-init", True, "")]
    sidecar = config_manager(s, f"{program}-sidecar", False, program)
    sidecar["securityContext"] = copy.deepcopy(security)
    spec["containers"].insert(0, sidecar)
    main["volumeMounts"].append({"name": "available-configs", "mountPath": "/available-configs"})
    spec["volumes"] = [v for v in spec["volumes"] if v["name"] != "config"]
    spec["volumes"].append({"name": "available-configs", "configMap": {"name": "nvidia-device-plugin-config"}})
    spec["volumes"].append({"name": "config", "emptyDir": {}})
    for mount in main["volumeMounts"]:
        if mount["name"] == "config":
            mount.pop("readOnly", None)


def health_env(s: dict[str, Any]) -> list[tuple[str, str]]:
    """The plugin's XID health settings: DP_DISABLE_HEALTHCHECKS (XIDs that do not mark a GPU unhealthy; ``all``
    turns the XID check off) and DP_ENABLE_HEALTHCHECKS (XIDs that do, even when disabled or among the ones the plugin
    ignores by itself: 13, 31, 43, 45, 68, 109), read by k8s-device-plugin v0.20.0 (2026-08-19) in internal/rm/
    health.go getDisabledHealthCheckXids. NVIDIA's chart has no value for them."""
    out = []
    if s["health_disabled_xids"]:
        out.append(("DP_DISABLE_HEALTHCHECKS", ",".join(s["health_disabled_xids"])))
    if s["health_enabled_xids"]:
        out.append(("DP_ENABLE_HEALTHCHECKS", ",".join(s["health_enabled_xids"])))
    return out


def device_plugin_daemonset(s: dict[str, Any], checksum: str) -> dict[str, Any]:
    """The plugin's DaemonSet with every mount NVIDIA's chart gives it (k8s-device-plugin v0.20.0, 2026-08-19,
    templates/daemonset-device-plugin.yml): kubelet's device-plugins folder, the driver root at /driver-root (the
    role always names one, as its Helm values set nvidiaDriverRoot; the plugin's CDI detection and spec read it there,
    api/config/v1/consts.go DefaultContainerDriverRoot), the MPS folders (the plugin's health check of the MPS daemon
    reads them) and /var/run/cdi (where a CDI strategy writes its spec)."""
    mounts = [
        {"name": "device-plugin", "mountPath": "/var/lib/kubelet/device-plugins"},
        {"name": "driver-root", "mountPath": "/driver-root", "readOnly": True},
        # The plugin's health check reaches the MPS daemon's pipes under /mps; MPS_ROOT is the host folder it names
        # in the mounts it gives workloads (the chart: MPS_ROOT={{ .Values.mps.root }}, mps-root on /mps).
        {"name": "mps-shm", "mountPath": SHM},
        {"name": "mps-root", "mountPath": MPS_CONTAINER_ROOT},
        {"name": "cdi-root", "mountPath": "/var/run/cdi"},
        {"name": "config", "mountPath": "/config", "readOnly": True},
    ]
    # Directory, not unset: kubelet's folder and the driver root must exist, never be created empty
    # (k8s-device-plugin CHANGELOG v0.18.0 "Ensure that directory volumes have Directory type").
    volumes = [
        _host_path("device-plugin", "/var/lib/kubelet/device-plugins", "Directory"),
        *_mps_volumes(),
        _host_path("driver-root", s["nvidia_driver_root"], "Directory"),
        _host_path("cdi-root", "/var/run/cdi", "DirectoryOrCreate"),
        _config_volume(),
    ]
    env = [
        ("MPS_ROOT", MPS_ROOT),
        ("NVIDIA_DRIVER_ROOT", s["nvidia_driver_root"]),
        ("CONFIG_FILE", CONFIG_PATH),
        ("NVIDIA_VISIBLE_DEVICES", "all"),
        ("NVIDIA_DRIVER_CAPABILITIES", "compute,utility"),
    ]
    env.extend(mig_monitor_env(s))
    env.extend(health_env(s))
    if uses_cdi(s):
        # The plugin writes a CDI spec whose hooks run NVIDIA_CDI_HOOK_PATH; its default is /usr/bin/nvidia-ctk
        # (k8s-device-plugin v0.20.0, cmd/nvidia-device-plugin/main.go "nvidia-cdi-hook-path", api/config/v1/
        # consts.go DefaultNvidiaCTKPath); set here always, as the chart's cdi.nvidiaHookPath would.
        env.append(("NVIDIA_CDI_HOOK_PATH", s["cdi_hook_path"]))
    security = plugin_security(s)
    container = {
        "name": "nvidia-device-plugin",
        "image": image(s),
        "imagePullPolicy": s["image_pull_policy"],
        "command": ["nvidia-device-plugin"],
        "env": _env(env),
        "securityContext": security,
        "volumeMounts": mounts,
    }
    account = "nvidia-device-plugin" if s["configs"] else None
    spec = _pod_spec(s, [container], volumes, service_account=account)
    _config_parts(s, spec, container, "nvidia-device-plugin", security=security)
    return _daemonset(
        "nvidia-device-plugin", s, "nvidia-device-plugin", spec, {"gpufleet.nvidia/config-sha256": checksum}
    )


def gfd_daemonset(s: dict[str, Any], checksum: str) -> dict[str, Any]:
    container = {
        "name": "gpu-feature-discovery",
        "image": image(s),
        "imagePullPolicy": s["image_pull_policy"],
        "command": ["gpu-feature-discovery"],
        # NODE_NAME and NAMESPACE name the NodeFeature object GFD writes with the NodeFeature API; without them GFD
        # stops at start ("required flag node-name not set": k8s-device-plugin v0.20.0, internal/lm/output.go and
        # internal/flags/node.go); POD_NAME lets it make its DaemonSet and pod the object's owners (output.go
        # getOwnerReferences, which reads the pod). The chart sets all three always (templates/daemonset-gfd.yml).
        "env": [
            _field_env("NODE_NAME", "spec.nodeName"),
            _field_env("NAMESPACE", "metadata.namespace"),
            _field_env("POD_NAME", "metadata.name"),
            *_env(
                [
                    ("CONFIG_FILE", CONFIG_PATH),
                    ("NVIDIA_VISIBLE_DEVICES", "all"),
                    ("NVIDIA_DRIVER_CAPABILITIES", "compute,utility"),
                    # Explicit both ways: GFD's own default is the NodeFeature API since v0.19.0 (cmd/
                    # gpu-feature-discovery/main.go use-node-feature-api, Value: true).
                    ("GFD_USE_NODE_FEATURE_API", "true" if s["gfd_node_feature_api"] else "false"),
                    *mig_monitor_env(s),
                ]
            ),
        ],
        "securityContext": copy.deepcopy(GFD_SECURITY),
        "volumeMounts": [
            {"name": "output-dir", "mountPath": FEATURES_DIR},
            {"name": "host-sys", "mountPath": "/sys", "readOnly": True},
            {"name": "config", "mountPath": "/config", "readOnly": True},
        ],
    }
    volumes = [
        _host_path("output-dir", FEATURES_DIR, "DirectoryOrCreate"),
        _host_path("host-sys", "/sys", "Directory"),
        _config_volume(),
    ]
    account = "gpu-feature-discovery" if s["gfd_node_feature_api"] or s["configs"] else None
    spec = _pod_spec(s, [container], volumes, service_account=account)
    _config_parts(s, spec, container, "gpu-feature-discovery", security=GFD_SECURITY)
    return _daemonset(
        "gpu-feature-discovery", s, "gpu-feature-discovery", spec, {"gpufleet.nvidia/config-sha256": checksum}
    )


def config_manager_rbac(s: dict[str, Any]) -> list[dict[str, Any]]:
    """The plugin's ServiceAccount where config-manager reads its node's label (the chart's service-account.yml,
    role.yml rule nodes get/list/watch, role-binding.yml)."""
    return _account_rbac(s, "nvidia-device-plugin", [{"apiGroups": [""], "resources": ["nodes"], "verbs": RO}])


RO = ["get", "list", "watch"]


def _account_rbac(s: dict[str, Any], name: str, rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
    meta = _meta(name, s, name, namespaced=False)
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(name, s, name)},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": meta, "rules": rules},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": copy.deepcopy(meta),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": s["namespace"]}],
        },
    ]


def gfd_rbac(s: dict[str, Any]) -> list[dict[str, Any]]:
    """GFD's ServiceAccount: nodes (config-manager reads the node's label; GFD the node), NodeFeature objects with the
    NodeFeature API, and its own pod (the objects' owners) - the chart's templates/role.yml at v0.20.0."""
    rules = [{"apiGroups": [""], "resources": ["nodes"], "verbs": RO}]
    if s["gfd_node_feature_api"]:
        rules.append(
            {
                "apiGroups": ["nfd.k8s-sigs.io"],
                "resources": ["nodefeatures"],
                "verbs": ["get", "list", "watch", "create", "update"],
            }
        )
        rules.append({"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]})
    return _account_rbac(s, "gpu-feature-discovery", rules)


def _mps_volumes() -> list[dict[str, Any]]:
    return [_host_path("mps-root", MPS_ROOT, "DirectoryOrCreate"), _host_path("mps-shm", MPS_ROOT + "/shm")]


def mps_daemonset(s: dict[str, Any], checksum: str) -> dict[str, Any]:
    """NVIDIA's MPS control daemon (k8s-device-plugin v0.20.0, 2026-08-19, templates/daemonset-mps-control-daemon.yml):
    an init container mounts the tmpfs on /mps/shm, propagated to the host folder, which the daemon and the plugin
    then see as /dev/shm. In the host's PID namespace, as the chart runs it by default (values.yaml
    mps.enableHostPID: true, "hostPID is needed for the MPS server to find its own PID via /proc/self"). The node
    selector is the plugin's, not the chart's
    ``nvidia.com/mps.capable=true``: that label comes only from GFD through NFD, and the role's one config turns MPS
    on for every node the plugin runs on, so the two selectors pick the same nodes wherever the label exists."""
    init = {
        "name": "mps-control-daemon-mounts",
        "image": image(s),
        "imagePullPolicy": s["image_pull_policy"],
        "command": ["mps-control-daemon", "mount-shm"],
        "securityContext": {"privileged": True},
        "volumeMounts": [
            {"name": "mps-root", "mountPath": MPS_CONTAINER_ROOT, "mountPropagation": "Bidirectional"},
        ],
    }
    container = {
        "name": "mps-control-daemon",
        "image": image(s),
        "imagePullPolicy": s["image_pull_policy"],
        "command": ["mps-control-daemon"],
        "env": [
            _field_env("NODE_NAME", "spec.nodeName"),
            *_env(
                [
                    ("CONFIG_FILE", CONFIG_PATH),
                    ("NVIDIA_VISIBLE_DEVICES", "all"),
                    ("NVIDIA_DRIVER_CAPABILITIES", "compute,utility"),
                ]
            ),
        ],
        "securityContext": {"privileged": True},
        "volumeMounts": [
            {"name": "mps-shm", "mountPath": SHM},
            {"name": "mps-root", "mountPath": MPS_CONTAINER_ROOT},
            {"name": "config", "mountPath": "/config", "readOnly": True},
        ],
    }
    spec = _pod_spec(s, [container], [*_mps_volumes(), _config_volume()])
    spec["hostPID"] = True
    spec["initContainers"] = [init]
    return _daemonset(
        "nvidia-device-plugin-mps-control-daemon",
        s,
        "nvidia-mps-control-daemon",
        spec,
        {"gpufleet.nvidia/config-sha256": checksum},
    )


def dcgm_exporter_docs(s: dict[str, Any]) -> list[dict[str, Any]]:
    component = "nvidia-dcgm-exporter"
    container = {
        "name": "dcgm-exporter",
        "image": image(s, "dcgm_exporter_image"),
        "imagePullPolicy": s["image_pull_policy"],
        # The counters NVIDIA's chart names (dcgm-exporter 4.5.3-4.8.2, 2026-05-06, deployment/values.yaml arguments).
        "args": ["-f", "/etc/dcgm-exporter/default-counters.csv"],
        # NODE_NAME: the exporter maps pods to GPUs for this node only (dcgm-exporter 4.5.3-4.8.2,
        # deployment/templates/daemonset.yaml sets it from spec.nodeName).
        "env": [
            *_env(
                [
                    ("DCGM_EXPORTER_LISTEN", f":{s['dcgm_exporter_port']}"),
                    ("DCGM_EXPORTER_KUBERNETES", "true"),
                    ("NVIDIA_VISIBLE_DEVICES", "all"),
                    ("NVIDIA_DRIVER_CAPABILITIES", "compute,utility"),
                ]
            ),
            _field_env("NODE_NAME", "spec.nodeName"),
        ],
        "ports": [{"name": "metrics", "containerPort": s["dcgm_exporter_port"], "protocol": "TCP"}],
        # As the chart's values.yaml securityContext: root for DCGM, SYS_ADMIN for the profiling metrics, nothing else.
        "securityContext": {
            "runAsNonRoot": False,
            "runAsUser": 0,
            "capabilities": {"add": ["SYS_ADMIN"], "drop": ["ALL"]},
            "allowPrivilegeEscalation": False,
        },
        "volumeMounts": [{"name": "pod-resources", "mountPath": "/var/lib/kubelet/pod-resources", "readOnly": True}],
        # The chart's probes (values.yaml livenessProbe/readinessProbe: 45 s before the first, every 5 s).
        "livenessProbe": {
            "httpGet": {"path": "/health", "port": s["dcgm_exporter_port"]},
            "initialDelaySeconds": 45,
            "periodSeconds": 5,
        },
        "readinessProbe": {"httpGet": {"path": "/health", "port": s["dcgm_exporter_port"]}, "initialDelaySeconds": 45},
    }
    spec = _pod_spec(s, [container], [_host_path("pod-resources", "/var/lib/kubelet/pod-resources")])
    docs = [
        _daemonset("nvidia-dcgm-exporter", s, component, spec),
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": _meta("nvidia-dcgm-exporter", s, component),
            "spec": {
                "selector": _labels(component),
                "ports": [
                    {"name": "metrics", "port": s["dcgm_exporter_port"], "targetPort": "metrics", "protocol": "TCP"}
                ],
            },
        },
    ]
    if s["dcgm_exporter_service_monitor"]:
        docs.append(
            {
                "apiVersion": "monitoring.coreos.com/v1",
                "kind": "ServiceMonitor",
                "metadata": _meta("nvidia-dcgm-exporter", s, component),
                "spec": {
                    "selector": {"matchLabels": _labels(component)},
                    "namespaceSelector": {"matchNames": [s["namespace"]]},
                    "endpoints": [
                        {"port": "metrics", "path": "/metrics", "interval": s["dcgm_exporter_service_monitor_interval"]}
                    ],
                },
            }
        )
    return docs


def runtime_class(s: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": s["runtime_class_name"], "labels": _labels("nvidia-runtime-class")},
        "handler": "nvidia",
    }
