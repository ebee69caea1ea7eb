# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The device_plugin role's Kubernetes documents, built from its settings (pure functions).

One place builds every document the role applies or writes for GitOps: the namespace, the device
plugin's ConfigMap (its ``config.yaml`` in NVIDIA's ``version: v1`` format) and DaemonSet, GPU feature
discovery, the MPS control daemon when MPS sharing is on, RBAC where a component talks to the API,
the ``nvidia`` RuntimeClass, the optional DCGM exporter with its Service and ServiceMonitor, a partial
Node per GPU node carrying ``gpu_facts``' labels, and a validation pod per GPU node. The Helm values
for NVIDIA's chart come from the same settings.

Settings are the role's variables without the ``device_plugin_`` prefix. Every check raises
``DevicePluginError`` whose message names the variable and what to set instead.

The defaults (the images' real, published NGC tags among them) are the role's ``defaults/main.yml``, read
here: one home for each value, which ``meta/argument_specs.yml`` and the README's table are tested against.

Controller-only (plugin_utils): the standard library and PyYAML.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from pathlib import Path
from typing import Any, Callable, Iterable, NoReturn, Sequence

import yaml

ROLE_DEFAULTS = Path(__file__).resolve().parents[2] / "roles" / "device_plugin" / "defaults" / "main.yml"
# The role's variables that steer the role itself (where to send the documents, which hosts), not the documents.
ROLE_ONLY = frozenset(
    {
        "api_delegate_to",
        "check_runtime",
        "context",
        "enabled",
        "gpu_facts",
        "helm_binary",
        "helm_chart_ref",
        "helm_chart_repo_url",
        "helm_chart_version",
        "helm_release_name",
        "kubeconfig",
        "mode",
        "node_group",
        "node_name",
        "render_dir",
        "state",
        "validate_keep_pods",
        "validate_timeout",
    }
)

MIG_STRATEGIES = ("none", "single", "mixed")
DEVICE_LIST_STRATEGIES = ("envvar", "volume-mounts", "cdi-annotations", "cdi-cri")
CDI_STRATEGIES = ("cdi-annotations", "cdi-cri")
# volume-mounts (k8s-device-plugin v0.17.4, internal/plugin/server.go, updateResponseForDeviceMounts): for each
# allocated device the container gets a mount of /dev/null on /var/run/nvidia-container-devices/<id> (<id> as
# deviceIDStrategy says), plus NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices, which replaces the list
# envvar would set (Allocate runs envvar first, then volume-mounts). The runtime honours the mounts only with
# NVIDIA's accept-nvidia-visible-devices-as-volume-mounts (the shim's "accept_volume_mounts"), and then the
# variable from an unprivileged container can be ignored: the default, which the toolkit role pairs with
# accept_envvar_unprivileged=false on Kubernetes nodes, so a pod gets only what the plugin allocated.
VOLUME_MOUNTS_ROOT = "/var/run/nvidia-container-devices"
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
DEVICE_ID_STRATEGIES = ("uuid", "index")
ENGINES = ("containerd", "crio")
GPU_RESOURCE = "nvidia.com/gpu"
# Renaming in k8s-device-plugin v0.17.4 (api/config/v1/config.go DisableResourceNamingInConfig, replicas.go
# disableResoureRenaming): a sharing resource's "rename" is dropped with a warning unless renameByDefault is true, and
# then every shared resource is renamed to <name>.shared (ResourceName.DefaultSharedRename), whatever "rename" says.
SHARED_SUFFIX = ".shared"
MIG_PREFIX = "nvidia.com/mig-"
PRESENT_LABEL = "nvidia.com/gpu.present"
CONFIG_PATH = "/config/config.yaml"
FEATURES_DIR = "/etc/kubernetes/node-feature-discovery/features.d"
MPS_ROOT = "/run/nvidia/mps"
# The MPS pipes and the daemon's shared memory as NVIDIA's binaries see them: mps.ContainerRoot is "/mps", hard-coded
# (k8s-device-plugin v0.17.4, cmd/mps-control-daemon/mps/root.go; used by the daemon and by the plugin's health
# check, internal/plugin/mps.go), and "mount-shm" puts a tmpfs on /mps/shm (cmd/mps-control-daemon/mount/
# mount-shm.go) that the daemon and the plugin see as /dev/shm. The host folder is MPS_ROOT (the chart's mps.root).
MPS_CONTAINER_ROOT = "/mps"
SHM = "/dev/shm"  # noqa: S108 - the container's shared memory, backed by a host folder for MPS

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_RESOURCE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_IMAGE_PART = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/-]*$")


def role_defaults(path: Path = ROLE_DEFAULTS) -> dict[str, Any]:
    """The builder's settings and their defaults: the role's defaults without ``device_plugin_`` and ``ROLE_ONLY``."""
    values = yaml.safe_load(path.read_text())
    names = {name[len("device_plugin_") :]: value for name, value in values.items()}
    return {name: value for name, value in names.items() if name not in ROLE_ONLY}


DEFAULTS = role_defaults()


class DevicePluginError(ValueError):
    """A setting that cannot work; the message names the role variable."""


def _fail(key: str, msg: str) -> NoReturn:
    raise DevicePluginError(f"device_plugin_{key}: {msg}")


def _as_list(value: str | Iterable[Any] | None) -> list[Any]:
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    return list(value or [])


def _sharing(kind: str, raw: dict[str, Any] | None) -> dict[str, Any]:
    """Normalize ``time_slicing``/``mps``: ``{replicas, rename, rename_by_default,
    fail_requests_greater_than_one, resources}``; ``{}`` means off."""
    if not raw:
        return {}
    if not isinstance(raw, dict):
        _fail(kind, f"must be a dict such as {{replicas: 4}}, got {type(raw).__name__}")
    known = {"replicas", "rename", "rename_by_default", "fail_requests_greater_than_one", "resources"}
    unknown = sorted(set(raw) - known)
    if unknown:
        _fail(kind, f"unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    resources = raw.get("resources")
    if resources is None:
        resources = [{"name": GPU_RESOURCE, "replicas": raw.get("replicas"), "rename": raw.get("rename") or ""}]
    elif "replicas" in raw or "rename" in raw:
        _fail(kind, "give either replicas/rename (for nvidia.com/gpu) or a resources list, not both")
    out = []
    for index, res in enumerate(resources):
        where = f"{kind}.resources[{index}]"
        name = res.get("name", GPU_RESOURCE)
        replicas = res.get("replicas")
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 2:
            _fail(
                where,
                f"replicas must be an integer of at least 2 (got {replicas!r}); 1 means no sharing: leave "
                f"device_plugin_{kind} empty instead",
            )
        if not _RESOURCE_NAME.match(name) or not name.startswith("nvidia.com/"):
            _fail(
                where, f"name {name!r} is not an nvidia.com/ resource such as nvidia.com/gpu or nvidia.com/mig-1g.5gb"
            )
        entry = {"name": name, "replicas": replicas}
        rename = res.get("rename") or ""
        if rename:
            if not _RESOURCE_NAME.match(rename if "/" in rename else "x/" + rename):
                _fail(where, f"rename {rename!r} is not a valid resource name (such as nvidia.com/gpu.shared)")
            if rename != name + SHARED_SUFFIX:
                _fail(
                    where,
                    f"rename {rename!r} would be ignored: the pinned device plugin only renames a shared resource to "
                    f"<name>{SHARED_SUFFIX} ({name + SHARED_SUFFIX}), for every shared resource at once; set rename to "
                    f"{name + SHARED_SUFFIX} or use rename_by_default: true",
                )
        out.append(entry)
    names = [e["name"] for e in out]
    if len(set(names)) != len(names):
        _fail(kind, f"resource listed twice: {', '.join(sorted({n for n in names if names.count(n) > 1}))}")
    renamed = [bool(res.get("rename")) for res in resources]
    rename_by_default = bool(raw.get("rename_by_default", False))
    if any(renamed) and not all(renamed) and not rename_by_default:
        _fail(
            kind,
            "the pinned device plugin renames every shared resource or none: give rename to all of them, or set "
            "rename_by_default: true",
        )
    rename_by_default = rename_by_default or any(renamed)
    if rename_by_default:
        for entry in out:
            entry["rename"] = entry["name"] + SHARED_SUFFIX
    return {
        "rename_by_default": rename_by_default,
        "fail_requests_greater_than_one": bool(raw.get("fail_requests_greater_than_one", False)),
        "resources": out,
    }


def normalize(settings: dict[str, Any] | None) -> dict[str, Any]:
    """The settings with defaults filled in and every option checked."""
    unknown = sorted(set(settings or {}) - set(DEFAULTS))
    if unknown:
        raise DevicePluginError(f"unknown setting(s): {', '.join('device_plugin_' + k for k in unknown)}")
    s = copy.deepcopy(DEFAULTS)
    s.update({k: copy.deepcopy(v) for k, v in (settings or {}).items() if v is not None})
    if not _DNS_LABEL.match(str(s["namespace"])) or len(s["namespace"]) > 63:
        _fail("namespace", f"{s['namespace']!r} is not a DNS label (lower-case letters, digits, '-')")
    if s["mig_strategy"] not in MIG_STRATEGIES:
        _fail("mig_strategy", f"{s['mig_strategy']!r} is not one of {', '.join(MIG_STRATEGIES)}")
    strategies = _as_list(s["device_list_strategy"])
    if not strategies:
        _fail("device_list_strategy", f"must name at least one of {', '.join(DEVICE_LIST_STRATEGIES)}")
    for strategy in strategies:
        if strategy not in DEVICE_LIST_STRATEGIES:
            _fail("device_list_strategy", f"{strategy!r} is not one of {', '.join(DEVICE_LIST_STRATEGIES)}")
    if len(set(strategies)) != len(strategies):
        _fail("device_list_strategy", f"lists a strategy twice: {strategies}")
    s["device_list_strategy"] = strategies
    if s["device_id_strategy"] not in DEVICE_ID_STRATEGIES:
        _fail("device_id_strategy", f"{s['device_id_strategy']!r} is not one of {', '.join(DEVICE_ID_STRATEGIES)}")
    if s["container_engine"] not in ENGINES:
        _fail("container_engine", f"{s['container_engine']!r} is not one of {', '.join(ENGINES)}")
    s["time_slicing"] = _sharing("time_slicing", s["time_slicing"])
    s["mps"] = _sharing("mps", s["mps"])
    if s["time_slicing"] and s["mps"]:
        _fail(
            "mps",
            "time slicing and MPS cannot both be on: set one of device_plugin_time_slicing / device_plugin_mps to {}",
        )
    if s["mps"] and s["mig_strategy"] != "none":
        _fail(
            "mps",
            f"MPS sharing is not supported together with MIG (device_plugin_mig_strategy="
            f"{s['mig_strategy']}); use time slicing or set the MIG strategy to none",
        )
    if s["mps"] and s["device_id_strategy"] != "uuid":
        _fail("mps", "MPS sharing needs device_plugin_device_id_strategy=uuid")
    for key in ("image", "dcgm_exporter_image", "validate_image"):
        for part in ("registry", "repository", "tag"):
            value = str(s[f"{key}_{part}"])
            if not value or not _IMAGE_PART.match(value):
                _fail(f"{key}_{part}", f"{value!r} is not a valid image reference part")
    if s["image_pull_policy"] not in ("Always", "IfNotPresent", "Never"):
        _fail("image_pull_policy", f"{s['image_pull_policy']!r} is not Always, IfNotPresent or Never")
    if not isinstance(s["node_selector"], dict):
        _fail("node_selector", "must be a dict of label: value")
    s["node_selector"] = {str(k): str(v) for k, v in s["node_selector"].items()}
    if not isinstance(s["tolerations"], list) or not all(isinstance(t, dict) for t in s["tolerations"]):
        _fail("tolerations", "must be a list of Kubernetes toleration dicts")
    if s["runtime_class_name"] and not _DNS_LABEL.match(s["runtime_class_name"]):
        _fail("runtime_class_name", f"{s['runtime_class_name']!r} is not a DNS label")
    if s["dcgm_exporter_service_monitor"] and not s["dcgm_exporter_enabled"]:
        _fail("dcgm_exporter_service_monitor", "needs device_plugin_dcgm_exporter_enabled=true")
    port = s["dcgm_exporter_port"]
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        _fail("dcgm_exporter_port", f"{port!r} is not a TCP port")
    if not str(s["cdi_hook_path"]).startswith("/"):
        _fail("cdi_hook_path", f"{s['cdi_hook_path']!r} is not an absolute path")
    if not str(s["nvidia_driver_root"]).startswith("/"):
        _fail("nvidia_driver_root", f"{s['nvidia_driver_root']!r} is not an absolute path")
    s["image_pull_secrets"] = _as_list(s["image_pull_secrets"])
    s["validate_command"] = (
        _as_list(s["validate_command"])
        if isinstance(s["validate_command"], list)
        else (["sh", "-c", s["validate_command"]] if s["validate_command"] else [])
    )
    return s


def uses_cdi(s: dict[str, Any]) -> bool:
    return any(strategy in CDI_STRATEGIES for strategy in s["device_list_strategy"])


def image(s: dict[str, Any], key: str = "image") -> str:
    return f"{s[key + '_registry']}/{s[key + '_repository']}:{s[key + '_tag']}"


def _sharing_config(sharing: dict[str, Any], with_fail_flag: bool) -> dict[str, Any]:
    out = {"renameByDefault": sharing["rename_by_default"]}
    if with_fail_flag:
        out["failRequestsGreaterThanOne"] = sharing["fail_requests_greater_than_one"]
    out["resources"] = [dict(r) for r in sharing["resources"]]
    return out


def plugin_config(s: dict[str, Any]) -> dict[str, Any]:
    """The device plugin's and GFD's ``config.yaml`` (NVIDIA's ``version: v1`` format) as a dict."""
    strategies = s["device_list_strategy"]
    config = {
        "version": "v1",
        "flags": {
            "migStrategy": s["mig_strategy"],
            "failOnInitError": bool(s["fail_on_init_error"]),
            "nvidiaDriverRoot": s["nvidia_driver_root"],
            "plugin": {
                "passDeviceSpecs": bool(s["pass_device_specs"]),
                "deviceListStrategy": strategies[0] if len(strategies) == 1 else list(strategies),
                "deviceIDStrategy": s["device_id_strategy"],
            },
            "gfd": {
                "oneshot": False,
                "noTimestamp": False,
                "sleepInterval": s["gfd_sleep_interval"],
                "outputFile": FEATURES_DIR + "/gfd",
                "machineTypeFile": "/sys/class/dmi/id/product_name",
            },
        },
    }
    sharing = {}
    if s["time_slicing"]:
        sharing["timeSlicing"] = _sharing_config(s["time_slicing"], True)
    if s["mps"]:
        sharing["mps"] = _sharing_config(s["mps"], False)
    if sharing:
        config["sharing"] = sharing
    return config


def dump_config(config: dict[str, Any]) -> str:
    """The config as file text: JSON is YAML, so the plugin reads it; sorted for stable checksums."""
    return json.dumps(config, indent=2, sort_keys=True) + "\n"


def _labels(component: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": component, "app.kubernetes.io/part-of": "gpufleet-nvidia"}


def _meta(name: str, s: dict[str, Any], component: str, namespaced: bool = True) -> dict[str, Any]:
    meta = {"name": name, "labels": _labels(component)}
    if namespaced:
        meta["namespace"] = s["namespace"]
    return meta


def _host_path(name: str, path: str, kind: str | None = None) -> dict[str, Any]:
    volume = {"name": name, "hostPath": {"path": path}}
    if kind:
        volume["hostPath"]["type"] = kind
    return volume


def _pod_spec(
    s: dict[str, Any],
    containers: list[dict[str, Any]],
    volumes: list[dict[str, Any]],
    service_account: str | None = None,
) -> dict[str, Any]:
    spec = {
        "nodeSelector": dict(s["node_selector"]),
        "tolerations": copy.deepcopy(s["tolerations"]),
        "containers": containers,
        "volumes": volumes,
    }
    if s["priority_class_name"]:
        spec["priorityClassName"] = s["priority_class_name"]
    if s["runtime_class_name"]:
        spec["runtimeClassName"] = s["runtime_class_name"]
    if s["image_pull_secrets"]:
        spec["imagePullSecrets"] = [{"name": n} for n in s["image_pull_secrets"]]
    if service_account:
        spec["serviceAccountName"] = service_account
    else:
        spec["automountServiceAccountToken"] = False
    return spec


def _daemonset(
    name: str, s: dict[str, Any], component: str, pod_spec: dict[str, Any], annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    template_meta = {"labels": _labels(component)}
    if annotations:
        template_meta["annotations"] = annotations
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": _meta(name, s, component),
        "spec": {
            "selector": {"matchLabels": _labels(component)},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {"metadata": template_meta, "spec": pod_spec},
        },
    }


def _env(pairs: Iterable[tuple[str, object]]) -> list[dict[str, Any]]:
    return [{"name": k, "value": str(v)} for k, v in pairs]


def _field_env(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def _config_volume() -> dict[str, Any]:
    return {"name": "config", "configMap": {"name": "nvidia-device-plugin-config"}}


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


def node_name_ok(name: str | None) -> bool:
    return bool(name) and len(name) <= 253 and all(_DNS_LABEL.match(p) for p in name.split("."))


# The labels whose value GFD derives from the plugin's config or from MIG devices (k8s-device-plugin v0.17.4,
# internal/lm/resource.go baseLabeler: <resource>.product with "-SHARED" when shared and not renamed, .count,
# .replicas, .sharing-strategy; mig-strategy.go: under MIG "single" nvidia.com/gpu.* describe the MIG devices, under
# "mixed" nvidia.com/mig-<profile>.*; nvml.go: mps.capable).
_RESOURCE_LABELS = ("gpu.product", "gpu.count", "gpu.memory", "gpu.replicas", "gpu.sharing-strategy")


def node_labels(s: dict[str, Any], labels: dict[str, Any]) -> dict[str, str]:
    """The labels the role puts on a GPU node, never contradicting GFD's.

    With GFD on, ``nvidia.com/gpu.present``, which GFD never writes (the default node selector needs it), and labels
    outside ``nvidia.com/``: every other ``nvidia.com/`` label is GFD's (through NFD) and the role leaves it alone.
    With GFD off, ``gpu_facts``' labels with the config-dependent ones as GFD would write them: replicas, sharing
    strategy and the ``-SHARED`` product for a shared ``nvidia.com/gpu``, ``mps.capable``; under MIG the per-resource
    labels (which then describe MIG devices) are left out and ``nvidia.com/mig.strategy`` is set."""
    labels = {str(k): str(v) for k, v in (labels or {}).items()}
    if s["gfd_enabled"]:
        return {k: v for k, v in labels.items() if k == PRESENT_LABEL or not k.startswith("nvidia.com/")}
    if s["mig_strategy"] != "none":
        for key in _RESOURCE_LABELS:
            labels.pop("nvidia.com/" + key, None)
        labels["nvidia.com/mig.strategy"] = s["mig_strategy"]
        return labels
    if "nvidia.com/gpu.count" not in labels:
        return labels  # no GPU read (driver not loaded): GFD would write none of these either
    sharing = s["time_slicing"] or s["mps"]
    shared = next((r for r in (sharing or {}).get("resources", []) if r["name"] == GPU_RESOURCE), None)
    if shared:
        labels["nvidia.com/gpu.replicas"] = str(shared["replicas"])
        labels["nvidia.com/gpu.sharing-strategy"] = "mps" if s["mps"] else "time-slicing"
        if "nvidia.com/gpu.product" in labels and not shared.get("rename"):
            labels["nvidia.com/gpu.product"] = labels["nvidia.com/gpu.product"] + "-SHARED"
    else:
        labels["nvidia.com/gpu.replicas"] = "1"
        labels["nvidia.com/gpu.sharing-strategy"] = "none"
    labels["nvidia.com/mps.capable"] = "true" if s["mps"] else "false"
    return labels


def node_labels_doc(node: dict[str, Any], s: dict[str, Any] | None = None) -> dict[str, Any]:
    """A partial Node carrying the role's labels (``node_labels``): a merge patch for the API, a server-side apply for
    GitOps."""
    name = node["name"]
    labels = node.get("labels") or {}
    if s is not None:
        labels = node_labels(s, labels)
    if not node_name_ok(name):
        raise DevicePluginError(f"device_plugin_node_name: {name!r} is not a valid Kubernetes node name")
    return {
        "apiVersion": "v1",
        "kind": "Node",
        # Sorted: the same labels give the same file whatever order discovery listed them in.
        "metadata": {"name": name, "labels": {k: str(labels[k]) for k in sorted(labels)}},
    }


def validation_pod_name(node_name: str) -> str:
    digest = hashlib.sha256(node_name.encode()).hexdigest()[:8]
    base = re.sub(r"[^a-z0-9-]", "-", node_name.lower())[:40].strip("-")
    return f"gpufleet-validate-{base}-{digest}"


def node_mig_profiles(node: dict[str, Any]) -> list[str]:
    """The MIG profiles of a node's MIG devices (``gpu_facts``' ``gpus[].mig_devices[].profile``), in GPU order."""
    profiles = []
    for gpu in node.get("gpus") or []:
        for mig in (gpu or {}).get("mig_devices") or []:
            profile = (mig or {}).get("profile")
            if profile and profile not in profiles:
                profiles.append(str(profile))
    return profiles


def validation_resource(s: dict[str, Any], node: dict[str, Any]) -> str | None:
    """The resource the node advertises that the validation pod asks for one of; None when the render cannot know it.

    k8s-device-plugin v0.17.4 (internal/rm/rm.go, the MIG strategies' resources): with MIG ``none`` or ``single`` the
    GPUs (or their MIG devices) are ``nvidia.com/gpu``; with ``mixed`` each MIG profile is its own
    ``nvidia.com/mig-<profile>`` and a node whose GPUs are all in MIG mode has no ``nvidia.com/gpu``. With renaming a
    shared resource is advertised only as ``<name>.shared``."""
    if s["mig_strategy"] == "mixed":
        profiles = node_mig_profiles(node)
        if not profiles:
            return None
        name = MIG_PREFIX + profiles[0]
    else:
        name = GPU_RESOURCE
    sharing = s["time_slicing"] or s["mps"]
    if sharing and sharing["rename_by_default"] and any(r["name"] == name for r in sharing["resources"]):
        name += SHARED_SUFFIX
    return name


def validation_pod(s: dict[str, Any], node_name: str, resource: str = GPU_RESOURCE) -> dict[str, Any]:
    container = {
        "name": "gpu-check",
        "image": image(s, "validate_image"),
        "imagePullPolicy": s["image_pull_policy"],
        "resources": {"limits": {resource: 1}, "requests": {resource: 1}},
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
    }
    if s["validate_command"]:
        container["command"] = list(s["validate_command"])
    spec = {
        "restartPolicy": "Never",
        "nodeSelector": {"kubernetes.io/hostname": node_name},
        "tolerations": copy.deepcopy(s["tolerations"]),
        "containers": [container],
        "automountServiceAccountToken": False,
    }
    if s["runtime_class_name"]:
        spec["runtimeClassName"] = s["runtime_class_name"]
    if s["image_pull_secrets"]:
        spec["imagePullSecrets"] = [{"name": n} for n in s["image_pull_secrets"]]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": validation_pod_name(node_name),
            "namespace": s["namespace"],
            "labels": dict(_labels("gpufleet-validate"), **{"gpufleet.nvidia/node": node_name[:63].strip("-_.")}),
        },
        "spec": spec,
    }


def documents(
    settings: dict[str, Any] | None,
    nodes: Iterable[dict[str, Any]] = (),
    dump: Callable[[dict[str, Any]], str] = dump_config,
) -> list[tuple[str, str, list[dict[str, Any]]]]:
    """``[(group, file_name, [documents])]`` in apply order; groups are ``cluster``, ``nodes`` and
    ``validation``. ``nodes`` is a list of ``{name, labels}``; ``dump`` turns the config into file text
    (JSON here; the controller's filter writes YAML)."""
    s = normalize(settings)
    config_text = dump(plugin_config(s))
    checksum = hashlib.sha256(config_text.encode()).hexdigest()
    out = []
    if s["create_namespace"]:
        out.append(
            (
                "cluster",
                "00-namespace.yaml",
                [
                    {
                        "apiVersion": "v1",
                        "kind": "Namespace",
                        "metadata": {"name": s["namespace"], "labels": _labels("gpufleet-nvidia")},
                    }
                ],
            )
        )
    if s["runtime_class_name"] and s["runtime_class_create"]:
        out.append(("cluster", "01-runtimeclass.yaml", [runtime_class(s)]))
    out.append(
        (
            "cluster",
            "10-device-plugin-config.yaml",
            [
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": _meta("nvidia-device-plugin-config", s, "nvidia-device-plugin"),
                    "data": {"config.yaml": config_text},
                }
            ],
        )
    )
    out.append(("cluster", "11-device-plugin.yaml", [device_plugin_daemonset(s, checksum)]))
    if s["mps"]:
        out.append(("cluster", "12-mps-control-daemon.yaml", [mps_daemonset(s, checksum)]))
    if s["gfd_enabled"]:
        docs = gfd_rbac(s) if s["gfd_node_feature_api"] else []
        out.append(("cluster", "20-gpu-feature-discovery.yaml", [*docs, gfd_daemonset(s, checksum)]))
    if s["dcgm_exporter_enabled"]:
        out.append(("cluster", "30-dcgm-exporter.yaml", dcgm_exporter_docs(s)))
    seen = set()
    for node in nodes:
        if node["name"] in seen:
            raise DevicePluginError(f"device_plugin_node_name: node {node['name']!r} is named by two hosts")
        seen.add(node["name"])
        if s["node_labels"]:
            out.append(("nodes", f"node-{node['name']}.yaml", [node_labels_doc(node, s)]))
    # Validation pods last: they need the plugin running and, without NFD/GFD, the labels in place.
    # With MIG "mixed" and no MIG device in the node's facts there is no resource to ask for: no pod, no false failure.
    if s["validate"]:
        for node in nodes:
            resource = validation_resource(s, node)
            if resource:
                out.append(("validation", f"validate-{node['name']}.yaml", [validation_pod(s, node["name"], resource)]))
    return out


def helm_values(settings: dict[str, Any] | None, dump: Callable[[dict[str, Any]], str] = dump_config) -> dict[str, Any]:
    """Values for NVIDIA's ``nvidia-device-plugin`` chart carrying the same settings as the manifests."""
    s = normalize(settings)
    values = {
        "image": {
            "repository": f"{s['image_registry']}/{s['image_repository']}",
            "tag": s["image_tag"],
            "pullPolicy": s["image_pull_policy"],
        },
        "config": {"map": {"default": dump(plugin_config(s))}, "default": "default"},
        "nodeSelector": dict(s["node_selector"]),
        "tolerations": copy.deepcopy(s["tolerations"]),
        "priorityClassName": s["priority_class_name"],
        "nvidiaDriverRoot": s["nvidia_driver_root"],
        # Explicit, as in the manifests: the chart would derive the same from the config map today
        # (requiresCapSysAdmin is true whenever config.map is set), but not for every way of naming a config.
        "securityContext": plugin_security(s),
        "gfd": {"enabled": bool(s["gfd_enabled"]), "securityContext": copy.deepcopy(GFD_SECURITY)},
        # NVIDIA's chart deploys node-feature-discovery (its dependency, chart 0.15.3 in chart 0.17.4's Chart.lock)
        # when nfd.enabled, else when gfd.enabled (Chart.yaml condition "nfd.enabled,gfd.enabled"): GFD's labels
        # reach the node only through NFD. enableNodeFeatureApi goes to GFD (GFD_USE_NODE_FEATURE_API), its RBAC
        # (templates/role.yml) and NFD's master alike (values.yaml nfd.enableNodeFeatureApi).
        "nfd": {
            "enabled": bool(s["gfd_enabled"] and s["nfd_enabled"]),
            "enableNodeFeatureApi": bool(s["gfd_node_feature_api"]),
        },
        "cdi": {"nvidiaHookPath": s["cdi_hook_path"] if uses_cdi(s) else None},
        "devicePlugin": {"enabled": True},
    }
    if s["runtime_class_name"]:
        values["runtimeClassName"] = s["runtime_class_name"]
    if s["image_pull_secrets"]:
        values["imagePullSecrets"] = [{"name": n} for n in s["image_pull_secrets"]]
    return values


def toolkit_problems(toolkit: dict[str, Any] | None, strategies: Sequence[str]) -> list[str]:
    """Why the device requests the node's runtime honours (the ``toolkit`` role's ``gpufleet_toolkit`` fact) and the
    plugin's device list strategies do not fit together; ``[]`` when they do, or when the fact says nothing."""
    if not toolkit:
        return []
    envvar = toolkit.get("accept_envvar_unprivileged")
    mounts = toolkit.get("accept_volume_mounts")
    nvidia = toolkit.get("provider") == "nvidia"
    chosen = f"device_plugin_device_list_strategy {list(strategies)}"
    problems = []
    if "volume-mounts" in strategies and mounts is False:
        fix = (
            "run nvidia-ctk config --in-place --set accept-nvidia-visible-devices-as-volume-mounts=true "
            "--set accept-nvidia-visible-devices-envvar-when-unprivileged=false (the toolkit role does not edit "
            "NVIDIA's /etc/nvidia-container-runtime/config.toml)"
            if nvidia
            else "set toolkit_accept_volume_mounts: true and run the toolkit stage (it is the default on Kubernetes "
            "nodes: is this host in device_plugin_node_group?)"
        )
        problems.append(
            f"{chosen} has volume-mounts, but gpufleet_toolkit.accept_volume_mounts is false on this node: its "
            "nvidia runtime would not read the plugin's device mounts (and would take the "
            f"NVIDIA_VISIBLE_DEVICES={VOLUME_MOUNTS_ROOT} the plugin sets with them for a device); {fix}, or choose "
            "another device_plugin_device_list_strategy"
        )
    cdi = [x for x in strategies if x in CDI_STRATEGIES]
    if cdi and toolkit.get("provider") == "native":
        problems.append(
            f"{chosen} has {', '.join(cdi)}: the device plugin then writes its own CDI spec, whose hooks run NVIDIA's "
            "nvidia-cdi-hook (device_plugin_cdi_hook_path), which the native toolkit provider does not install, so "
            "every GPU pod would fail to start; choose device_plugin_device_list_strategy: [volume-mounts] (the "
            "default), or toolkit_provider: nvidia"
        )
    if list(strategies) == ["envvar"] and envvar is False:
        fix = (
            "accept-nvidia-visible-devices-envvar-when-unprivileged = true in /etc/nvidia-container-runtime/config.toml"
            if nvidia
            else "toolkit_accept_envvar_unprivileged: true"
        )
        problems.append(
            f"{chosen} passes devices only through NVIDIA_VISIBLE_DEVICES, but gpufleet_toolkit."
            "accept_envvar_unprivileged is false on this node: its nvidia runtime ignores that variable from "
            "unprivileged containers, so pods would get no GPU; set device_plugin_device_list_strategy: "
            "[volume-mounts] (the default) or a CDI strategy (cdi-annotations, cdi-cri), or, to let any "
            f"container's own NVIDIA_VISIBLE_DEVICES take GPUs past the device plugin again, {fix}"
        )
    return problems


def runtime_problems(runtime: dict[str, Any] | None, engine: str, strategies: Iterable[str]) -> list[str]:
    """Why the ``runtime`` role's facts (``gpufleet_runtime``) say this node cannot run the plugin;
    ``[]`` when it can."""
    if not runtime:
        return [
            "gpufleet_runtime is not set on this host and gpu_facts found no container engine there: run the runtime "
            "stage first (site.yml --tags runtime) so "
            f"{engine} has the nvidia runtime, or set device_plugin_check_runtime=false if it is managed elsewhere"
        ]
    facts = (runtime.get("engines") or {}).get(engine)
    if not facts:
        return [
            f"gpufleet_runtime.engines has no {engine}: the runtime role did not find {engine} on this Kubernetes node"
        ]
    problems = []
    if not facts.get("registered"):
        problems.append(
            f"{engine} does not have the nvidia runtime registered (gpufleet_runtime.engines.{engine}.registered "
            f"is false{': ' + facts['message'] if facts.get('message') else ''}); run the runtime role for {engine} "
            "first"
        )
    cdi = [x for x in strategies if x in CDI_STRATEGIES]
    if cdi and not facts.get("cdi"):
        problems.append(
            f"device_plugin_device_list_strategy {', '.join(cdi)} needs CDI in {engine}, but "
            f"gpufleet_runtime.engines.{engine}.cdi is false ({engine} too old for CDI, such as containerd 1.6, or "
            "runtime_cdi: false): nothing would apply the plugin's CDI devices, and the nvidia runtime does not "
            "take them from a pod's cdi.k8s.io/ annotations on a Kubernetes node "
            "(toolkit_accept_cdi_annotations_unprivileged is false there: any pod could set one and take every GPU); "
            "set runtime_cdi: true on "
            "containerd 1.7+ or CRI-O, or choose device_plugin_device_list_strategy: [volume-mounts] (the default)"
        )
    return problems
