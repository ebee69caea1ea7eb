# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""device_plugin_gpu_allocation=dra: NVIDIA's DRA driver v0.4.1 rendered from its chart's facts (kubernetes-sigs/
dra-driver-nvidia-gpu, deployments/helm/dra-driver-nvidia-gpu at v0.4.1, read 2026-11-28; each fact is in
plugins/plugin_utils/device_plugin/dra.py), the switch with the device plugin, the version gate, the node and toolkit
rules that follow the choice, and the preflight rules."""

import kubernetes_validate
import pytest

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils import role_specs
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.device_plugin.dra import version_problem
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.device_plugin.problems import node_problems
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.device_plugin.render import _key, render
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.toolkit import plan

NODES = [{"name": "gpu-1", "labels": {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": "NVIDIA-A100"}}]
DRA = {"gpu_allocation": "dra"}
# DeviceClass resource.k8s.io/v1 and its extendedResourceName exist from 1.34 (the driver's minimum 1.34.2).
VERSIONS = [f"1.{m}.0" for m in range(34, int(kubernetes_validate.utils.latest_version().split(".")[1]) + 1)]


@pytest.mark.parametrize(
    ("version", "ok"),
    [
        ("v1.34.2", True),
        ("v1.34.10", True),
        ("1.35.0", True),
        ("v1.36.1-eks-3", True),
        ("v2.0.0", True),
        ("v1.34.1", False),
        ("v1.33.9", False),
        ("v1.29.0", False),
        ("", False),
        ("garbage", False),
    ],
)
def test_the_version_gate_is_1_34_2(version, ok):
    problem = version_problem(version)
    assert (problem == "") is ok
    if not ok:
        assert repr(version) in problem or version in problem
        assert "1.34.2" in problem


@pytest.mark.parametrize("hook", [False, True])
def test_dra_documents_are_valid_in_strict_mode_from_1_34(hook):
    nodes = [{**n, "toolkit_provider": "nvidia" if hook else "native"} for n in NODES]
    docs = render(DRA, nodes)["documents"]
    assert {d["kind"] for d in docs} == {
        "Namespace",
        "DeviceClass",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "ClusterRole",
        "ServiceAccount",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "DaemonSet",
        "Node",
    }
    for doc in docs:
        for version in VERSIONS:
            kubernetes_validate.validate(doc, version, strict=True)
    assert len(VERSIONS) >= 4


def test_the_kubelet_plugin_is_the_charts():
    docs = {(d["kind"], d["metadata"]["name"]): d for d in render(DRA, NODES)["documents"]}
    classes = {n: d["spec"] for (k, n), d in docs.items() if k == "DeviceClass"}
    assert set(classes) == {"gpu.nvidia.com", "mig.nvidia.com", "vfio.gpu.nvidia.com"}
    assert classes["gpu.nvidia.com"]["extendedResourceName"] == "nvidia.com/gpu"
    pod = docs[("DaemonSet", "dra-driver-nvidia-gpu-kubelet-plugin")]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "dra-driver-nvidia-gpu-service-account-kubeletplugin"
    (gpus,) = pod["containers"]
    assert gpus["image"] == "registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu:v0.4.1"
    assert gpus["securityContext"] == {"privileged": True}
    assert {m["mountPath"] for m in gpus["volumeMounts"]} == {
        "/var/lib/kubelet/plugins_registry",
        "/var/lib/kubelet/plugins",
        "/var/run/cdi",
        "/driver-root",
    }
    env = {e["name"]: e.get("value") for e in gpus["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "void" and env["NVIDIA_DRIVER_ROOT"] == "/"
    assert "NVIDIA_CDI_HOOK_PATH" not in env  # the native toolkit has no nvidia-cdi-hook: the driver brings its own
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert {"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]} in [
        t["matchExpressions"][0] for t in terms
    ]
    with_nvidia = render(DRA, [{**NODES[0], "toolkit_provider": "nvidia"}])
    ds = next(d for d in with_nvidia["documents"] if d["kind"] == "DaemonSet")
    env = {e["name"]: e.get("value") for e in ds["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["NVIDIA_CDI_HOOK_PATH"] == "/usr/bin/nvidia-cdi-hook"
    assert with_nvidia["helm_values"]["nvidiaCDIHookPath"] == "/usr/bin/nvidia-cdi-hook"


def test_helm_values_promise_the_device_plugin_is_off_and_follow_imex():
    values = render({**DRA, "nvidia_driver_root": "/run/nvidia/driver"}, NODES)["helm_values"]
    assert values["gpuResourcesEnabledOverride"] is True and values["resources"]["gpus"] == {"enabled": True}
    assert values["resources"]["computeDomains"] == {"enabled": False}
    assert values["nvidiaDriverRoot"] == "/run/nvidia/driver" and values["nvidiaCDIHookPath"] == ""
    imex = render(DRA, [{**NODES[0], "imex_domain": True}])
    assert imex["helm_values"]["resources"]["computeDomains"] == {"enabled": True}
    assert imex["files"] == [] and "use device_plugin_mode=helm" in imex["render_unsupported"][0]
    off = render({**DRA, "dra_compute_domains": False}, [{**NODES[0], "imex_domain": True}])
    assert off["helm_values"]["resources"]["computeDomains"] == {"enabled": False} and off["render_unsupported"] == []


@pytest.mark.parametrize("settings", [{}, {"gfd_enabled": False, "dcgm_exporter_enabled": True}])
def test_each_choice_names_exactly_what_the_other_deployed(settings):
    plugin, dra = render(settings, NODES), render({**settings, **DRA}, NODES)
    assert {_key(d) for d in dra["other"]["documents"]} == {
        _key(d) for d in plugin["documents"] if d["kind"] not in ("Node", "Pod")
    } - {_key(d) for d in dra["documents"]}
    assert {_key(d) for d in plugin["other"]["documents"]} == {
        _key(d) for d in dra["documents"] if d["kind"] != "Node"
    } - {_key(d) for d in plugin["documents"]}
    assert dra["other"]["nfd"] is (settings == {}) and plugin["other"]["nfd"] is False
    # Namespaces last: what lives in them goes first.
    assert dra["other"]["documents"][-1]["kind"] == "Namespace"
    if settings:  # GFD off: the device plugin wrote gpu_facts' labels, which the DRA render takes off again
        assert dra["other"]["node_unlabels"][0]["metadata"]["labels"] == {"nvidia.com/gpu.product": None}


def test_dra_needs_cdi_and_no_toolkit_setting():
    no_cdi = {"engines": {"containerd": {"registered": True, "cdi": False}}}
    (problem,) = node_problems(
        no_cdi, "containerd", ["dra"], toolkit={"provider": "native", "accept_volume_mounts": False}
    )
    assert "device_plugin_gpu_allocation=dra needs CDI in containerd" in problem
    cdi = {"engines": {"containerd": {"registered": True, "cdi": True}}}
    assert (
        node_problems(cdi, "containerd", ["dra"], toolkit={"provider": "native", "accept_volume_mounts": False}) == []
    )
    assert node_problems(cdi, "containerd", ["volume-mounts"], toolkit={"accept_volume_mounts": False})


def test_the_toolkit_honours_volume_mounts_only_for_the_device_plugin():
    assert plan({}, kubernetes_node=True)["accept_volume_mounts"] is True
    dra = plan({}, kubernetes_node=True, gpu_allocation="dra")
    assert dra["accept_volume_mounts"] is False and dra["accept_envvar_unprivileged"] is False
    assert plan({}, kubernetes_node=False, gpu_allocation="dra")["accept_volume_mounts"] is False
    assert plan({"accept_volume_mounts": True}, kubernetes_node=True, gpu_allocation="dra")["accept_volume_mounts"]


def test_preflight_refuses_dra_without_cdi_or_on_an_old_cluster():
    problems = role_specs.problems({"device_plugin_gpu_allocation": "dra", "runtime_cdi": False})
    assert any("runtime_cdi=false" in p for p in problems)
    problems = role_specs.problems(
        {"device_plugin_gpu_allocation": "dra", "device_plugin_kubernetes_version": "v1.33.4"}
    )
    assert any("device_plugin_kubernetes_version='v1.33.4'" in p and "1.34.2" in p for p in problems)
    assert (
        role_specs.problems({"device_plugin_gpu_allocation": "dra", "device_plugin_kubernetes_version": "v1.34.2"})
        == []
    )
    assert any("gpu_allocation" in p for p in role_specs.problems({"device_plugin_gpu_allocation": "both"}))
