# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The device_plugin role's settings: its defaults and the checks on every setting.

Settings are the role's variables without the ``device_plugin_`` prefix. Every check raises
``DevicePluginError`` whose message names the variable and what to set instead.

The defaults (the images' real, published NGC tags among them) are the role's ``defaults/main.yml``, read
here: one home for each value, which ``meta/argument_specs.yml`` and the README's table are tested against.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any, Iterable, NoReturn

import yaml

from ansible_collections.gpufleet.nvidia.plugins.module_utils.runtime.registry import CRI

ROLE_DEFAULTS = Path(__file__).resolve().parents[3] / "roles" / "device_plugin" / "defaults" / "main.yml"
# The role's variables that steer the role itself (where to send the documents, which hosts), not the documents.
ROLE_ONLY = frozenset(
    {
        "api_delegate_to",
        "check_runtime",
        "context",
        "dra_helm_chart_ref",
        "dra_helm_chart_version",
        "dra_helm_release_name",
        "enabled",
        "gpu_facts",
        "helm_binary",
        "helm_chart_ref",
        "helm_chart_repo_url",
        "helm_chart_version",
        "helm_release_name",
        "kubeconfig",
        "kubernetes_version",
        "mode",
        "node_group",
        "node_config",
        "node_name",
        "render_dir",
        "state",
        "validate_keep_pods",
        "validate_timeout",
    }
)

MIG_STRATEGIES = ("none", "single", "mixed")
# Who serves the GPUs of the Kubernetes nodes to pods: NVIDIA's device plugin (extended resource nvidia.com/gpu) or
# NVIDIA's DRA driver (ResourceClaims; device_plugin/dra.py). Never both on a node.
GPU_ALLOCATIONS = ("device_plugin", "dra")
DEVICE_LIST_STRATEGIES = ("envvar", "volume-mounts", "cdi-annotations", "cdi-cri")
CDI_STRATEGIES = ("cdi-annotations", "cdi-cri")
DEVICE_ID_STRATEGIES = ("uuid", "index")
# How the plugin picks among replicas of shared GPUs and among MIG devices (k8s-device-plugin v0.20.0, 2026-08-19:
# api/config/v1/consts.go AllocationPolicyDistributed/Packed, internal/rm/allocate.go; flag
# shared-devices-allocation-policy, default distributed, in cmd/nvidia-device-plugin/main.go; CHANGELOG v0.20.0 #1621).
ALLOCATION_POLICIES = ("distributed", "packed")
# The settings a named configuration (device_plugin_configs) may change from the role's own: what NVIDIA's chart
# documents per-node configurations for (values.yaml config.map: one config per MIG strategy; sharing).
NODE_CONFIG_KEYS = ("mig_strategy", "time_slicing", "allocation_policy")
# The label NVIDIA's config-manager reads to pick a node's configuration (k8s-device-plugin v0.20.0, deployments/helm/
# nvidia-device-plugin/templates/daemonset-device-plugin.yml NODE_LABEL).
NODE_CONFIG_LABEL = "nvidia.com/device-plugin.config"
# The default configuration's key in the ConfigMap (the chart's config.default and fallback strategy "named").
DEFAULT_CONFIG = "default"
ENGINES = CRI  # the Kubernetes CRI engines of the engine registry
GPU_RESOURCE = "nvidia.com/gpu"
# Renaming in k8s-device-plugin v0.20.0 (re-read 2026-11-27; api/config/v1/config.go DisableResourceNamingInConfig,
# replicas.go disableResoureRenaming): a sharing resource's "rename" is dropped with a warning unless renameByDefault is
# true, and then every shared resource is renamed to <name>.shared (ResourceName.DefaultSharedRename), whatever "rename"
# says.
SHARED_SUFFIX = ".shared"
# Label values (Kubernetes: at most 63 characters, alphanumeric at both ends, '-', '_', '.' inside).
_LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")

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
    if s["allocation_policy"] not in ALLOCATION_POLICIES:
        _fail("allocation_policy", f"{s['allocation_policy']!r} is not one of {', '.join(ALLOCATION_POLICIES)}")
    for key in ("health_disabled_xids", "health_enabled_xids"):
        s[key] = _xids(key, s[key])
    if s["gpu_allocation"] not in GPU_ALLOCATIONS:
        _fail("gpu_allocation", f"{s['gpu_allocation']!r} is not one of {', '.join(GPU_ALLOCATIONS)}")
    if not _DNS_LABEL.match(str(s["dra_namespace"])) or len(str(s["dra_namespace"])) > 63:
        _fail("dra_namespace", f"{s['dra_namespace']!r} is not a DNS label (lower-case letters, digits, '-')")
    if s["dra_compute_domains"] not in (None, True, False):
        _fail("dra_compute_domains", f"{s['dra_compute_domains']!r} is not true, false or null (derived)")
    for key in ("image", "dcgm_exporter_image", "validate_image", "dra_image"):
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
    kustomization = str(s["nfd_kustomization"])
    # A remote kustomization (kustomize's remote targets: a Git repository URL, a folder in it and ?ref=): what both
    # a rendered kustomization.yaml and the apply path's kustomize build can reach.
    if s["gfd_enabled"] and s["nfd_enabled"] and not re.match(r"^(https|ssh|git|file)://\S+$", kustomization):
        _fail(
            "nfd_kustomization",
            f"{kustomization!r} is not the URL of a kustomization in a Git repository, such as NFD's "
            "https://github.com/kubernetes-sigs/node-feature-discovery/deployment/overlays/default?ref=v0.19.0 "
            "(a mirror of it where GitHub cannot be reached)",
        )
    s["configs"] = _configs(s)
    if s["configs"] and s["mps"]:
        _fail(
            "configs",
            "per-node configurations cannot be combined with device_plugin_mps: the role runs the MPS control daemon "
            "on every plugin node with one configuration; set device_plugin_mps to {} or device_plugin_configs to {}",
        )
    s["image_pull_secrets"] = _as_list(s["image_pull_secrets"])
    s["validate_command"] = (
        _as_list(s["validate_command"])
        if isinstance(s["validate_command"], list)
        else (["sh", "-c", s["validate_command"]] if s["validate_command"] else [])
    )
    return s


def _xids(key: str, value: Any) -> list[str]:
    """XIDs for the plugin's health check: numbers, or ``all``; a comma-separated string is what a survey sends.
    NVIDIA's plugin reads them from DP_DISABLE_HEALTHCHECKS / DP_ENABLE_HEALTHCHECKS and skips a malformed value with
    a log line only (k8s-device-plugin v0.20.0, internal/rm/health.go newHealthCheckXIDs), so it is refused here."""
    out = []
    for item in _as_list(value if not isinstance(value, int) or isinstance(value, bool) else [value]):
        text = str(item).strip().lower()
        if text != "all" and not (text.isdigit() and not isinstance(item, bool)):
            _fail(key, f"{item!r} is not an XID number or 'all' (for example [48, 79] or ['all'])")
        out.append(text)
    return out


def _configs(s: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``device_plugin_configs``: name -> the settings with that configuration's changes, each checked as the role's
    own. A node picks one with the ``nvidia.com/device-plugin.config`` label (``device_plugin_node_config``)."""
    raw = s["configs"] or {}
    if not isinstance(raw, dict):
        _fail("configs", f"must be a dict of name: {{setting: value}}, got {type(raw).__name__}")
    out = {}
    for key, changes in raw.items():
        name = str(key)
        if name == DEFAULT_CONFIG or not _LABEL_VALUE.match(name):
            _fail(
                "configs",
                f"{name!r} cannot name a configuration: it must be a label value (letters, digits, '-', '_', '.', at "
                f"most 63) other than {DEFAULT_CONFIG!r}, which is the role's own settings",
            )
        if not isinstance(changes, dict) or not changes:
            _fail(f"configs.{name}", "must be a non-empty dict of settings such as {mig_strategy: mixed}")
        unknown = sorted(set(changes) - set(NODE_CONFIG_KEYS))
        if unknown:
            _fail(
                f"configs.{name}",
                f"{', '.join(unknown)} cannot differ per node; a configuration may set {', '.join(NODE_CONFIG_KEYS)}",
            )
        merged = {k: v for k, v in s.items() if k in DEFAULTS and k != "configs"}
        merged.update(changes)
        merged["time_slicing"] = changes.get("time_slicing", raw_sharing(s["time_slicing"]))
        merged["mps"] = raw_sharing(s["mps"])
        merged["configs"] = {}
        try:
            out[name] = normalize(merged)
        except DevicePluginError as exc:
            raise DevicePluginError(f"device_plugin_configs.{name}: {exc}") from None
    return out


def raw_sharing(sharing: dict[str, Any]) -> dict[str, Any]:
    """A normalized sharing setting in the form ``_sharing`` reads again (for a configuration that keeps it)."""
    if not sharing:
        return {}
    return {
        "rename_by_default": sharing["rename_by_default"],
        "fail_requests_greater_than_one": sharing["fail_requests_greater_than_one"],
        "resources": [{"name": r["name"], "replicas": r["replicas"]} for r in sharing["resources"]],
    }


def node_settings(s: dict[str, Any], config: str | None) -> dict[str, Any]:
    """The settings a node runs with: its named configuration's, else the role's own."""
    if not config or config == DEFAULT_CONFIG:
        return s
    if config not in s["configs"]:
        known = ", ".join(sorted(s["configs"])) or "none"
        _fail("node_config", f"{config!r} is not a configuration of device_plugin_configs (known: {known})")
    return s["configs"][config]


def uses_cdi(s: dict[str, Any]) -> bool:
    return any(strategy in CDI_STRATEGIES for strategy in s["device_list_strategy"])


def image(s: dict[str, Any], key: str = "image") -> str:
    return f"{s[key + '_registry']}/{s[key + '_repository']}:{s[key + '_tag']}"
