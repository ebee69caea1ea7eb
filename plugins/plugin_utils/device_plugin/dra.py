# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""NVIDIA's DRA driver (kubernetes-sigs/dra-driver-nvidia-gpu v0.4.1) instead of the device plugin: its documents for
``apply`` and ``render_only``, its Helm values, and the cluster version it needs (pure functions).

Facts, read 2026-11-28 at tag v0.4.1 (2026-06-30) of github.com/kubernetes-sigs/dra-driver-nvidia-gpu,
``deployments/helm/dra-driver-nvidia-gpu`` (Chart.yaml version and appVersion 0.4.1, kubeVersion ">=1.32.0-0"):

* ``templates/deviceclass-{gpu,mig,vfio-gpu}.yaml``: three DeviceClasses with ``resources.gpus.enabled``; the GPU
  class carries ``extendedResourceName: nvidia.com/gpu`` on ``resource.k8s.io/v1``;
  ``deviceclass-compute-domain-{daemon,default-channel}.yaml`` two more with ``resources.computeDomains.enabled``.
* ``templates/kubeletplugin.yaml``: DaemonSet ``<name>-kubelet-plugin``, init container ``init-container``
  (kubelet-plugin-prestart.sh), container ``gpus`` (gpu-kubelet-plugin) and, with ComputeDomains,
  ``compute-domains``; both privileged, mounting the kubelet's plugin folders, ``/var/run/cdi`` and the driver root;
  affinity on NFD's NVIDIA PCI labels or ``nvidia.com/gpu.present=true``; toleration ``nvidia.com/gpu``.
* ``templates/rbac-kubeletplugin.yaml``: ServiceAccount ``<fullname>-service-account-kubeletplugin``, its
  ClusterRole (computedomains, resourceclaims, resourceslices, nodes, pods) and Role (computedomaincliques).
* ``templates/validatingadmissionpolicy*.yaml``: ResourceSlice writes by the driver's service account only for its
  own node.
* ``templates/validation.yaml``: the render fails with ``resources.gpus.enabled`` unless
  ``gpuResourcesEnabledOverride`` (the DRA driver and the device plugin must not both serve GPUs on a node);
  ``values.yaml``: ``nvidiaDriverRoot`` "/", ``nvidiaCDIHookPath`` "", ``logVerbosity`` "4", image
  ``registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu`` tag ``v<appVersion>``.
* the driver's prerequisites page: Kubernetes v1.34.2 or later.

With ComputeDomains the chart also runs a controller Deployment with its CRDs and RBAC; the role renders those only
through Helm (``dra_compute_domains`` in ``apply``/``render_only`` is refused, naming Helm mode).
"""

from __future__ import annotations

import copy
import re
from typing import Any

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.device_plugin.labels import PRESENT_LABEL
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.device_plugin.settings import DevicePluginError

CHART = "dra-driver-nvidia-gpu"
CHART_VERSION = "0.4.1"
# The chart's and image's name; with the release named as the chart, Helm's fullname is the same (_helpers.tpl).
NAME = CHART
SERVICE_ACCOUNT = f"{NAME}-service-account"
KUBELET_SA = f"{SERVICE_ACCOUNT}-kubeletplugin"
COMPONENT_LABEL = f"{NAME}-component"
RESOURCE_API = "resource.k8s.io/v1"
# the driver's prerequisites page at v0.4.1: "Kubernetes v1.34.2 or later".
MIN_KUBERNETES = (1, 34, 2)
PREREQUISITES = "https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/blob/v0.4.1/docs/prerequisites.md"
KUBELET_REGISTRAR = "/var/lib/kubelet/plugins_registry"
KUBELET_PLUGINS = "/var/lib/kubelet/plugins"
# values.yaml kubeletPlugin.affinity at v0.4.1: any of these labels makes a node a GPU node for the kubelet plugin.
AFFINITY_LABELS = (
    ("feature.node.kubernetes.io/pci-10de.present", "true"),
    ("feature.node.kubernetes.io/pci-0302_10de.present", "true"),
    ("feature.node.kubernetes.io/pci-0300_10de.present", "true"),
    ("feature.node.kubernetes.io/cpu-model.vendor_id", "NVIDIA"),
    (PRESENT_LABEL, "true"),
)
GPU_CLASSES = (("gpu.nvidia.com", "gpu"), ("mig.nvidia.com", "mig"), ("vfio.gpu.nvidia.com", "vfio"))
CD_CLASSES = (
    (
        "compute-domain-daemon.nvidia.com",
        "device.driver == 'compute-domain.nvidia.com' && "
        "device.attributes['compute-domain.nvidia.com'].type == 'daemon'",
    ),
    (
        "compute-domain-default-channel.nvidia.com",
        "device.driver == 'compute-domain.nvidia.com' && device.attributes['compute-domain.nvidia.com'].type == "
        "'channel' && device.attributes['compute-domain.nvidia.com'].id == 0",
    ),
)
COMPUTE_DOMAINS_HELM_ONLY = (
    "device_plugin_dra_compute_domains: ComputeDomains (IMEX) need the DRA driver's controller, CRDs and their RBAC, "
    "which this role deploys only through NVIDIA's chart: use device_plugin_mode=helm, or set "
    "device_plugin_dra_compute_domains=false"
)
_MASK_SCRIPT = (
    "# Conditionally mask the params file to prevent this container from\n"
    "# recreating any missing GPU device nodes.\n"
    'if [ "${MASK_NVIDIA_DRIVER_PARAMS}" = "true" ]; then\n'
    "  cp /proc/driver/nvidia/params /root/gpu-params\n"
    "  sed -i 's/^ModifyDeviceFiles: 1$/ModifyDeviceFiles: 0/' /root/gpu-params\n"
    "  mount --bind /root/gpu-params /proc/driver/nvidia/params\n"
    "fi\n"
    "gpu-kubelet-plugin -v $(LOG_VERBOSITY)"
)


def version_problem(version: Any) -> str:
    """Why a cluster at ``version`` (the API server's gitVersion, such as ``v1.34.2`` or ``v1.34.2-eks-1``) cannot run
    the DRA driver v0.4.1; ``""`` when it can."""
    text = str(version or "").strip()
    match = re.match(r"^v?(\d+)\.(\d+)(?:\.(\d+))?", text)
    if not match:
        return (
            f"device_plugin_gpu_allocation=dra: the cluster's Kubernetes version {text!r} cannot be read; the DRA "
            f"driver {CHART_VERSION} needs v1.34.2 or later ({PREREQUISITES})"
        )
    found = tuple(int(part or 0) for part in match.groups())
    if found >= MIN_KUBERNETES:
        return ""
    return (
        f"device_plugin_gpu_allocation=dra: the cluster runs Kubernetes {text}, and NVIDIA's DRA driver "
        f"{CHART_VERSION} needs v1.34.2 or later ({PREREQUISITES}; DynamicResourceAllocation and resource.k8s.io/v1 "
        "are on by default from 1.34). Fix: upgrade the control plane and kubelets to 1.34.2 or later, or keep "
        "device_plugin_gpu_allocation=device_plugin"
    )


def compute_domains(s: dict[str, Any], nodes: list[dict[str, Any]]) -> bool:
    """ComputeDomains on: ``dra_compute_domains`` when set, else whether a node of the play is an IMEX domain member
    (gpu_facts' ``imex.domain``, passed as the node's ``imex_domain``)."""
    value = s["dra_compute_domains"]
    if value is None:
        return any(bool(n.get("imex_domain")) for n in nodes)
    return bool(value)


def hook_path(s: dict[str, Any], nodes: list[dict[str, Any]]) -> str:
    """``nvidiaCDIHookPath``: the host's ``nvidia-cdi-hook`` (``cdi_hook_path``, as the device plugin names it) where
    every node runs NVIDIA's toolkit (the node's ``toolkit_provider``, from the toolkit role's fact), else ``""``:
    then the kubelet plugin copies the hook from its image into the kubelet's plugin folder and names that
    (cmd/gpu-kubelet-plugin and cmd/compute-domain-kubelet-plugin main.go setNvidiaCDIHookPath at v0.4.1), which
    works with the collection's native toolkit, which has no nvidia-cdi-hook."""
    if nodes and all(n.get("toolkit_provider") == "nvidia" for n in nodes):
        return str(s["cdi_hook_path"])
    return ""


def image(s: dict[str, Any]) -> str:
    return f"{s['dra_image_registry']}/{s['dra_image_repository']}:{s['dra_image_tag']}"


def _labels(component: str | None = None) -> dict[str, str]:
    out = {
        "app.kubernetes.io/name": NAME,
        "app.kubernetes.io/instance": NAME,
        "app.kubernetes.io/version": CHART_VERSION,
        "app.kubernetes.io/part-of": "gpufleet-nvidia",
    }
    if component:
        out[COMPONENT_LABEL] = component
    return out


def _meta(name: str, s: dict[str, Any] | None = None) -> dict[str, Any]:
    meta = {"name": name, "labels": _labels()}
    if s is not None:
        meta["namespace"] = s["dra_namespace"]
    return meta


def device_classes(cd: bool) -> list[dict[str, Any]]:
    out = []
    for name, kind in GPU_CLASSES:
        spec = {
            "selectors": [
                {
                    "cel": {
                        "expression": f"device.driver == 'gpu.nvidia.com' && "
                        f"device.attributes['gpu.nvidia.com'].type == '{kind}'"
                    }
                }
            ]
        }
        if kind == "gpu":
            spec["extendedResourceName"] = "nvidia.com/gpu"
        out.append({"apiVersion": RESOURCE_API, "kind": "DeviceClass", "metadata": _meta(name), "spec": spec})
    if cd:
        for name, expression in CD_CLASSES:
            out.append(
                {
                    "apiVersion": RESOURCE_API,
                    "kind": "DeviceClass",
                    "metadata": _meta(name),
                    "spec": {"selectors": [{"cel": {"expression": expression}}]},
                }
            )
    return out


def kubelet_rbac(s: dict[str, Any]) -> list[dict[str, Any]]:
    role = f"{NAME}-clusterrole-kubeletplugin"
    subject = [{"kind": "ServiceAccount", "name": KUBELET_SA, "namespace": s["dra_namespace"]}]
    rbac = "rbac.authorization.k8s.io"
    return [
        {
            "apiVersion": f"{rbac}/v1",
            "kind": "ClusterRole",
            "metadata": _meta(role),
            "rules": [
                {
                    "apiGroups": ["resource.nvidia.com"],
                    "resources": ["computedomains"],
                    "verbs": ["get", "list", "watch"],
                },
                {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": ["get", "list", "watch"]},
                {
                    "apiGroups": ["resource.k8s.io"],
                    "resources": ["resourceslices"],
                    "verbs": ["get", "list", "watch", "create", "update", "delete"],
                },
                {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch", "update"]},
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
            ],
        },
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(KUBELET_SA, s)},
        {
            "apiVersion": f"{rbac}/v1",
            "kind": "ClusterRoleBinding",
            "metadata": _meta(f"{NAME}-clusterrole-binding-kubeletplugin"),
            "subjects": subject,
            "roleRef": {"kind": "ClusterRole", "name": role, "apiGroup": rbac},
        },
        {
            "apiVersion": f"{rbac}/v1",
            "kind": "Role",
            "metadata": _meta(f"{NAME}-role-kubeletplugin", s),
            "rules": [{"apiGroups": ["resource.nvidia.com"], "resources": ["computedomaincliques"], "verbs": ["get"]}],
        },
        {
            "apiVersion": f"{rbac}/v1",
            "kind": "RoleBinding",
            "metadata": _meta(f"{NAME}-role-binding-kubeletplugin", s),
            "subjects": subject,
            "roleRef": {"kind": "Role", "name": f"{NAME}-role-kubeletplugin", "apiGroup": rbac},
        },
    ]


def admission_policy(s: dict[str, Any]) -> list[dict[str, Any]]:
    """The chart's ValidatingAdmissionPolicy and binding as v0.4.1 has them (the user it restricts is the chart's
    ``<fullname>-service-account``)."""
    name = f"resourceslices-policy-{NAME}"
    obj = '(request.operation == "DELETE" ? oldObject : object)'
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": _meta(name),
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": ["resource.k8s.io"],
                            "apiVersions": ["v1", "v1beta1", "v1beta2"],
                            "operations": ["CREATE", "UPDATE", "DELETE"],
                            "resources": ["resourceslices"],
                        }
                    ]
                },
                "matchConditions": [
                    {
                        "name": "isRestrictedUser",
                        "expression": f'request.userInfo.username == "system:serviceaccount:{s["dra_namespace"]}:'
                        f'{SERVICE_ACCOUNT}"',
                    }
                ],
                "variables": [
                    {
                        "name": "userNodeName",
                        "expression": "request.userInfo.extra[?'authentication.kubernetes.io/node-name'][0]"
                        ".orValue('')",
                    },
                    {"name": "objectNodeName", "expression": f'{obj}.spec.?nodeName.orValue("")'},
                    {"name": "nodeSelectorValue", "expression": f"{obj}.spec.?nodeSelector.orValue(null)"},
                    {"name": "allNodesValue", "expression": f"{obj}.spec.?allNodes.orValue(false)"},
                ],
                "validations": [
                    {
                        "expression": 'variables.userNodeName != ""',
                        "message": "no node association found for user, this user must run in a pod on a node and "
                        "ServiceAccountTokenPodNodeInfo must be enabled",
                    },
                    {
                        "expression": "variables.userNodeName == variables.objectNodeName || "
                        "variables.allNodesValue == true || variables.nodeSelectorValue != null",
                        "messageExpression": '"this user running on node \'"+variables.userNodeName+"\' may not '
                        'modify cluster or node resourceslices"',
                    },
                ],
            },
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": _meta(name),
            "spec": {"policyName": name, "validationActions": ["Deny"]},
        },
    ]


def _env(s: dict[str, Any], hook: str) -> list[dict[str, Any]]:
    def field(name: str, path: str) -> dict[str, Any]:
        return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}

    env = [
        {"name": "HTTP_ENDPOINT", "value": ":8080"},
        {"name": "METRICS_PATH", "value": "/metrics"},
        {"name": "LOG_VERBOSITY", "value": "4"},
        {"name": "MASK_NVIDIA_DRIVER_PARAMS", "value": ""},
        {"name": "NVIDIA_DRIVER_ROOT", "value": s["nvidia_driver_root"]},
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"},
        {"name": "CDI_ROOT", "value": "/var/run/cdi"},
        {"name": "NVIDIA_MIG_CONFIG_DEVICES", "value": "all"},
        field("NODE_NAME", "spec.nodeName"),
        field("NAMESPACE", "metadata.namespace"),
        field("SERVICE_ACCOUNT_NAME", "spec.serviceAccountName"),
        {"name": "IMAGE_NAME", "value": image(s)},
        {"name": "KUBELET_REGISTRAR_DIRECTORY_PATH", "value": KUBELET_REGISTRAR},
        {"name": "KUBELET_PLUGINS_DIRECTORY_PATH", "value": KUBELET_PLUGINS},
        {"name": "HEALTHCHECK_PORT", "value": "51516"},
    ]
    if hook:
        env.insert(12, {"name": "NVIDIA_CDI_HOOK_PATH", "value": hook})
    return env


def _driver_root_parent(root: str) -> str:
    """The chart's ``dir (trimSuffix "/" nvidiaDriverRoot)``, ``/`` for ``/``."""
    if root == "/":
        return "/"
    parent = root.rstrip("/").rsplit("/", 1)[0]
    return parent or "/"


def kubelet_plugin(s: dict[str, Any], hook: str = "") -> dict[str, Any]:
    root = s["nvidia_driver_root"]
    probe = {"grpc": {"port": 51516, "service": "liveness"}, "timeoutSeconds": 10}
    init_mount = {"name": "driver-root-parent", "mountPath": "/driver-root-parent"}
    init_mount.update({"readOnly": True} if root == "/" else {"mountPropagation": "HostToContainer"})
    gpus = {
        "name": "gpus",
        "securityContext": {"privileged": True},
        "image": image(s),
        "imagePullPolicy": s["image_pull_policy"],
        "command": ["bash", "-c"],
        "args": [_MASK_SCRIPT],
        "startupProbe": {**copy.deepcopy(probe), "failureThreshold": 600, "periodSeconds": 1},
        "livenessProbe": {**copy.deepcopy(probe), "failureThreshold": 3, "periodSeconds": 30},
        "env": _env(s, hook),
        "volumeMounts": [
            {"name": "plugins-registry", "mountPath": KUBELET_REGISTRAR},
            {"name": "plugins", "mountPath": KUBELET_PLUGINS, "mountPropagation": "Bidirectional"},
            {"name": "cdi", "mountPath": "/var/run/cdi"},
            {"name": "driver-root", "mountPath": "/driver-root", "mountPropagation": "HostToContainer"},
        ],
    }
    init = {
        "name": "init-container",
        "image": image(s),
        "securityContext": {"privileged": True},
        "command": ["bash", "/usr/bin/kubelet-plugin-prestart.sh"],
        "env": [
            {"name": "NVIDIA_DRIVER_ROOT", "value": root},
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"},
            {"name": "KUBELET_REGISTRAR_DIRECTORY_PATH", "value": KUBELET_REGISTRAR},
            {"name": "KUBELET_PLUGINS_DIRECTORY_PATH", "value": KUBELET_PLUGINS},
        ],
        "volumeMounts": [init_mount],
    }
    terms = [{"matchExpressions": [{"key": k, "operator": "In", "values": [v]}]} for k, v in AFFINITY_LABELS]
    spec = {
        "priorityClassName": s["priority_class_name"] or "system-node-critical",
        "serviceAccountName": KUBELET_SA,
        "securityContext": {},
        "initContainers": [init],
        "containers": [gpus],
        "volumes": [
            {"name": "plugins-registry", "hostPath": {"path": KUBELET_REGISTRAR}},
            {"name": "plugins", "hostPath": {"path": KUBELET_PLUGINS}},
            {"name": "cdi", "hostPath": {"path": "/var/run/cdi"}},
            {
                "name": "driver-root-parent",
                "hostPath": {"path": _driver_root_parent(root), "type": "DirectoryOrCreate"},
            },
            {"name": "driver-root", "hostPath": {"path": root, "type": "DirectoryOrCreate"}},
        ],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}},
        "tolerations": copy.deepcopy(s["tolerations"]),
    }
    if s["image_pull_secrets"]:
        spec["imagePullSecrets"] = [{"name": n} for n in s["image_pull_secrets"]]
    selector = {COMPONENT_LABEL: "kubelet-plugin"}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": _meta(f"{NAME}-kubelet-plugin", s),
        "spec": {
            "selector": {"matchLabels": selector},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "100%"}},
            "template": {"metadata": {"labels": _labels("kubelet-plugin")}, "spec": spec},
        },
    }


def documents(
    s: dict[str, Any], nodes: list[dict[str, Any]], cd: bool = False
) -> list[tuple[str, str, list[dict[str, Any]]]]:
    """``[(group, file_name, [documents])]`` of the DRA driver in apply order (``s`` normalized)."""
    if cd:
        raise DevicePluginError(COMPUTE_DOMAINS_HELM_ONLY)
    out = []
    if s["create_namespace"]:
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": s["dra_namespace"]}}
        namespace["metadata"]["labels"] = _labels()
        out.append(("cluster", "00-namespace.yaml", [namespace]))
    out.append(("cluster", "50-dra-device-classes.yaml", device_classes(False)))
    out.append(("cluster", "51-dra-admission-policy.yaml", admission_policy(s)))
    out.append(("cluster", "52-dra-kubelet-plugin.yaml", [*kubelet_rbac(s), kubelet_plugin(s, hook_path(s, nodes))]))
    seen = set()
    for node in nodes:
        if node["name"] in seen:
            raise DevicePluginError(f"device_plugin_node_name: node {node['name']!r} is named by two hosts")
        seen.add(node["name"])
        if s["node_labels"]:
            # The kubelet plugin's affinity accepts nvidia.com/gpu.present=true: the one label the role writes here.
            doc = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": node["name"], "labels": {PRESENT_LABEL: "true"}},
            }
            out.append(("nodes", f"node-{node['name']}.yaml", [doc]))
    return out


def helm_values(s: dict[str, Any], nodes: list[dict[str, Any]]) -> dict[str, Any]:
    """Values for the chart ``dra-driver-nvidia-gpu`` 0.4.1 carrying the role's settings."""
    values = {
        "nvidiaDriverRoot": s["nvidia_driver_root"],
        "nvidiaCDIHookPath": hook_path(s, nodes),
        # The role removes the device plugin (its DaemonSets, release or files) in the same run: the two never serve
        # GPUs on one node, which is what templates/validation.yaml asks the override to promise.
        "gpuResourcesEnabledOverride": True,
        "resources": {"gpus": {"enabled": True}, "computeDomains": {"enabled": compute_domains(s, nodes)}},
        "image": {
            "repository": f"{s['dra_image_registry']}/{s['dra_image_repository']}",
            "tag": s["dra_image_tag"],
            "pullPolicy": s["image_pull_policy"],
        },
        "kubeletPlugin": {"tolerations": copy.deepcopy(s["tolerations"])},
    }
    if s["image_pull_secrets"]:
        values["imagePullSecrets"] = [{"name": n} for n in s["image_pull_secrets"]]
    return values
