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
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.device_plugin.settings import image, uses_cdi

# Where the runtime ignores NVIDIA_VISIBLE_DEVICES from unprivileged containers, a container that reaches GPUs
# through the variable with no nvidia.com/gpu allocation (the plugin itself: NVML over every GPU) needs
# CAP_SYS_ADMIN in its bounding set, which is how NVIDIA's runtime and this collection's shim tell a privileged
# container (nvidia-container-toolkit v1.17.8, internal/config/image/privileged.go, IsPrivileged). NVIDIA's chart
# adds it for the same reason (k8s-device-plugin v0.17.4, deployments/helm/nvidia-device-plugin/templates/
# _helpers.tpl, "nvidia-device-plugin.requiresCapSysAdmin": volume-mounts among the strategies, or MIG; CHANGELOG
# v0.16.2 "Add CAP_SYS_ADMIN if volume-mounts list strategy is included", issue #856). Every other capability
# stays dropped; containerd and CRI-O apply "drop: [ALL]" first, then "add" (to the bounding set too).
PLUGIN_SECURITY = {"capabilities": {"drop": ["ALL"], "add": ["SYS_ADMIN"]}}
# GFD reads vGPU information from the host: privileged, as NVIDIA's chart runs it (values.yaml gfd.securityContext).
GFD_SECURITY = {"privileged": True}
MPS_ROOT = "/run/nvidia/mps"
# The MPS pipes and the daemon's shared memory as NVIDIA's binaries see them: mps.ContainerRoot is "/mps", hard-coded
# (k8s-device-plugin v0.17.4, cmd/mps-control-daemon/mps/root.go; used by the daemon and by the plugin's health
# check, internal/plugin/mps.go), and "mount-shm" puts a tmpfs on /mps/shm (cmd/mps-control-daemon/mount/
# mount-shm.go) that the daemon and the plugin see as /dev/shm. The host folder is MPS_ROOT (the chart's mps.root).
MPS_CONTAINER_ROOT = "/mps"
SHM = "/dev/shm"  # noqa: S108 - the container's shared memory, backed by a host folder for MPS


def mig_monitor_env(s: dict[str, Any]) -> list[tuple[str, str]]:
    """``NVIDIA_MIG_MONITOR_DEVICES=all`` where MIG is on, nowhere else. NVIDIA's chart sets it on the plugin, GFD and
    the MPS daemon only when the MIG strategy is not ``none`` (k8s-device-plugin v0.17.4, deployments/helm/
    nvidia-device-plugin/templates/_helpers.tpl, ``addMigMonitorDevices``), and NVIDIA's legacy-mode hook refuses to
    start a container that sets it without CAP_SYS_ADMIN in its bounding set ("cannot set MIG_MONITOR_DEVICES in non
    privileged container": nvidia-container-toolkit v1.17.8, cmd/nvidia-container-runtime-hook/container_config.go);
    every container that gets it here is privileged or has SYS_ADMIN added."""
    return [("NVIDIA_MIG_MONITOR_DEVICES", "all")] if s["mig_strategy"] != "none" else []


def plugin_security(s: dict[str, Any]) -> dict[str, Any]:
    """The plugin container's securityContext (the same in the manifests and in the Helm values)."""
    if s["pass_device_specs"]:
        # Device specs name /dev nodes the plugin must see and hand to kubelet: privileged, as NVIDIA's own
        # "compat with CPU manager" manifest runs it (and its chart: compatWithCPUManager -> privileged).
        return {"privileged": True}
    return copy.deepcopy(PLUGIN_SECURITY)


def device_plugin_daemonset(s: dict[str, Any], checksum: str) -> dict[str, Any]:
    mounts = [
        {"name": "device-plugin", "mountPath": "/var/lib/kubelet/device-plugins"},
        {"name": "config", "mountPath": "/config", "readOnly": True},
    ]
    # Directory, not unset: kubelet's folder must exist, never be created empty (k8s-device-plugin v0.17.4 CHANGELOG
    # "Ensure that directory volumes have Directory type": the chart's kubelet-device-plugins-dir, host-sys,
    # driver-root).
    volumes = [_host_path("device-plugin", "/var/lib/kubelet/device-plugins", "Directory"), _config_volume()]
    env = [
        ("CONFIG_FILE", CONFIG_PATH),
        ("NVIDIA_VISIBLE_DEVICES", "all"),
        ("NVIDIA_DRIVER_CAPABILITIES", "compute,utility"),
    ]
    env.extend(mig_monitor_env(s))
    if s["nvidia_driver_root"] != "/" or uses_cdi(s):
        mounts.append({"name": "driver-root", "mountPath": "/driver-root", "readOnly": True})
        volumes.append(_host_path("driver-root", s["nvidia_driver_root"], "Directory"))
        env.append(("NVIDIA_DRIVER_ROOT", s["nvidia_driver_root"]))
        env.append(("CONTAINER_DRIVER_ROOT", "/driver-root"))
    if uses_cdi(s):
        # The plugin writes a CDI spec whose hooks run NVIDIA_CDI_HOOK_PATH; its default is /usr/bin/nvidia-ctk
        # (k8s-device-plugin v0.17.4, cmd/nvidia-device-plugin/main.go "nvidia-cdi-hook-path", api/config/v1/
        # consts.go DefaultNvidiaCTKPath); set here always, as the chart's cdi.nvidiaHookPath would.
        env.append(("NVIDIA_CDI_HOOK_PATH", s["cdi_hook_path"]))
        mounts.append({"name": "cdi-root", "mountPath": "/var/run/cdi"})
        volumes.append(_host_path("cdi-root", "/var/run/cdi", "DirectoryOrCreate"))
    if s["mps"]:
        # The plugin's health check reaches the daemon's pipes under /mps; MPS_ROOT is the host folder it names in
        # the mounts it gives workloads (NVIDIA's chart: MPS_ROOT={{ .Values.mps.root }}, mps-root on /mps).
        mounts.append({"name": "mps-shm", "mountPath": SHM})
        mounts.append({"name": "mps-root", "mountPath": MPS_CONTAINER_ROOT})
        volumes.extend(_mps_volumes())
        env.append(("MPS_ROOT", MPS_ROOT))
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
    spec = _pod_spec(s, [container], volumes)
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
        # stops at start ("required flag node-name not set": k8s-device-plugin v0.17.4, internal/lm/output.go and
        # internal/flags/node.go); the chart sets both always (templates/daemonset-gfd.yml).
        "env": [
            _field_env("NODE_NAME", "spec.nodeName"),
            _field_env("NAMESPACE", "metadata.namespace"),
            *_env(
                [
                    ("CONFIG_FILE", CONFIG_PATH),
                    ("NVIDIA_VISIBLE_DEVICES", "all"),
                    ("NVIDIA_DRIVER_CAPABILITIES", "compute,utility"),
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
    account = "gpu-feature-discovery" if s["gfd_node_feature_api"] else None
    spec = _pod_spec(s, [container], volumes, service_account=account)
    return _daemonset(
        "gpu-feature-discovery", s, "gpu-feature-discovery", spec, {"gpufleet.nvidia/config-sha256": checksum}
    )


def gfd_rbac(s: dict[str, Any]) -> list[dict[str, Any]]:
    """GFD writes NodeFeature objects (node-feature-discovery's API) only when asked; then it needs these."""
    meta = _meta("gpu-feature-discovery", s, "gpu-feature-discovery", namespaced=False)
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": _meta("gpu-feature-discovery", s, "gpu-feature-discovery"),
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": meta,
            "rules": [
                {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
                {
                    "apiGroups": ["nfd.k8s-sigs.io"],
                    "resources": ["nodefeatures"],
                    "verbs": ["get", "list", "watch", "create", "update"],
                },
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": copy.deepcopy(meta),
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "gpu-feature-discovery",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "gpu-feature-discovery", "namespace": s["namespace"]}],
        },
    ]


def _mps_volumes() -> list[dict[str, Any]]:
    return [_host_path("mps-root", MPS_ROOT, "DirectoryOrCreate"), _host_path("mps-shm", MPS_ROOT + "/shm")]


def mps_daemonset(s: dict[str, Any], checksum: str) -> dict[str, Any]:
    """NVIDIA's MPS control daemon (k8s-device-plugin v0.17.4, templates/daemonset-mps-control-daemon.yml): an init
    container mounts the tmpfs on /mps/shm, propagated to the host folder, which the daemon and the plugin then see
    as /dev/shm. No hostPID (the chart has none). The node selector is the plugin's, not the chart's
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
        # NODE_NAME: the exporter maps pods to GPUs for this node only (dcgm-exporter 4.2.3-4.1.3,
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
        "securityContext": {"runAsNonRoot": False, "runAsUser": 0, "capabilities": {"add": ["SYS_ADMIN"]}},
        "volumeMounts": [{"name": "pod-resources", "mountPath": "/var/lib/kubelet/pod-resources", "readOnly": True}],
        "readinessProbe": {"httpGet": {"path": "/health", "port": s["dcgm_exporter_port"]}, "initialDelaySeconds": 15},
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
