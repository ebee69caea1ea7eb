# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The device_plugin role on the controller, no cluster: render_only writes exactly what the filter
builds; the apply and Helm paths, run against a stand-in kubernetes.core that records each call, send
exactly those documents (and the same values); a second run changes nothing, check mode writes nothing,
a node whose containerd lacks the nvidia runtime fails early, a failed validation pod fails its node."""

import json
import sys
from pathlib import Path

import pytest
import yaml

from ansible_collections.gpufleet.nvidia.plugins.filter.device_plugin_manifests import render
from ansible_collections.gpufleet.nvidia.tests.controller.playbook import COLLECTIONS, run_playbook

pytestmark = pytest.mark.controller
REPO = Path(__file__).resolve().parents[3]
ROLE = REPO / "roles" / "device_plugin"
LABELS = {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.count": "2", "nvidia.com/gpu.product": "NVIDIA-A100"}
SETTINGS = {"mig_strategy": "single", "time_slicing": {"replicas": 4}, "dcgm_exporter_enabled": True}

PLAY = """
- hosts: all
  gather_facts: false
  roles:
    - role: gpufleet.nvidia.device_plugin
      device_plugin_mode: render_only
      device_plugin_render_dir: "{render_dir}"
      device_plugin_mig_strategy: single
      device_plugin_time_slicing: {{replicas: 4}}
      device_plugin_dcgm_exporter_enabled: true
"""


def inventory(tmp_path, runtime, toolkit=None):
    gpu = {"pci_gpu_count": 2, "labels": LABELS}
    inv = {
        "all": {
            "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable},
            "children": {
                "kube_nodes": {
                    "hosts": {
                        "node-a": {
                            "device_plugin_node_name": "gpu-a",
                            "device_plugin_gpu_facts": gpu,
                            "gpufleet_runtime": runtime,
                            **({"gpufleet_toolkit": toolkit} if toolkit else {}),
                        },
                        "node-b": {
                            "device_plugin_node_name": "gpu-b",
                            "device_plugin_gpu_facts": gpu,
                            "gpufleet_runtime": {"engines": {"containerd": {"registered": True, "cdi": True}}},
                        },
                        "cpu-in-cluster": {"device_plugin_gpu_facts": {"pci_gpu_count": 0, "labels": {}}},
                    }
                },
                "standalone": {"hosts": {"gpu-docker-only": {"device_plugin_gpu_facts": gpu}}},
            },
        }
    }
    path = tmp_path / "inventory.yml"
    path.write_text(yaml.safe_dump(inv))
    return path


def run_play(tmp_path, runtime, *args, toolkit=None):
    render_dir = tmp_path / "gitops"
    play = tmp_path / "play.yml"
    play.write_text(PLAY.format(render_dir=render_dir))
    # The facts each host publishes, read back from a JSON callback-free dump.
    dump = tmp_path / "facts.yml"
    play.write_text(
        play.read_text()
        + f"""
- hosts: all
  gather_facts: false
  tasks:
    - name: Dump the published facts
      ansible.builtin.copy:
        content: >-
          {{{{ dict(ansible_play_hosts | zip(ansible_play_hosts
               | map('extract', hostvars, 'gpufleet_device_plugin'))) | to_json }}}}
        dest: "{dump}"
        mode: "0644"
      run_once: true
      delegate_to: localhost
      check_mode: false
"""
    )
    proc = run_playbook(
        "-i",
        inventory(tmp_path, runtime, toolkit),
        play,
        *args,
        ANSIBLE_FORCE_COLOR="0",
        ANSIBLE_STDOUT_CALLBACK="default",
    )
    facts = json.loads(dump.read_text()) if dump.exists() else {}
    return proc, render_dir, facts


def recap(output):
    return {line.split()[0]: line for line in output.splitlines() if " : ok=" in line}


NFD = "https://github.com/kubernetes-sigs/node-feature-discovery/deployment/overlays/default?ref=v0.19.0"
GOOD = {"engines": {"containerd": {"registered": True, "cdi": False}}}


def test_render_only_writes_what_the_apply_path_sends_and_second_run_changes_nothing(tmp_path):
    (tmp_path / "gitops" / "cluster").mkdir(parents=True)
    stale = tmp_path / "gitops" / "cluster" / "99-old.yaml"
    stale.write_text("kind: Old\n")
    proc, render_dir, facts = run_play(tmp_path, GOOD)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    nodes = [{"name": "gpu-a", "labels": LABELS}, {"name": "gpu-b", "labels": LABELS}]
    expected = render(SETTINGS, nodes)
    written = sorted(str(p.relative_to(render_dir)) for p in render_dir.rglob("*.yaml"))
    assert written == sorted(f["path"] for f in expected["files"])  # the stale file is gone
    for f in expected["files"]:
        assert (render_dir / f["path"]).read_text() == f["content"], f["path"]
    # What apply.yml sends: each file's content parsed (from_yaml_all), in file order; nfd/ holds a Kustomization.
    sent = [
        d
        for f in expected["files"]
        if f["group"] != "nfd"
        for d in yaml.safe_load_all((render_dir / f["path"]).read_text())
    ]
    assert sent == expected["documents"]
    assert yaml.safe_load((render_dir / "nfd" / "kustomization.yaml").read_text()) == {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [NFD],
    }
    assert facts["node-a"]["mode"] == "render_only"
    assert facts["node-a"]["node_name"] == "gpu-a"
    assert facts["cpu-in-cluster"]["mode"] == "skipped" and "pci_gpu_count is 0" in facts["cpu-in-cluster"]["reason"]
    assert facts["gpu-docker-only"]["mode"] == "skipped" and "kube_nodes" in facts["gpu-docker-only"]["reason"]

    again = run_play(tmp_path, GOOD)[0]
    assert again.returncode == 0, again.stdout
    assert all("changed=0" in line for line in recap(again.stdout).values()), again.stdout


def test_check_mode_writes_nothing(tmp_path):
    proc, render_dir, _facts = run_play(tmp_path, GOOD, "--check")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not list(render_dir.rglob("*.yaml"))


def test_node_without_the_nvidia_runtime_fails_early_and_is_left_out(tmp_path):
    bad = {"engines": {"containerd": {"registered": False, "cdi": False, "message": "no config.toml"}}}
    proc, render_dir, _facts = run_play(tmp_path, bad)
    assert proc.returncode != 0
    assert "containerd does not have the nvidia runtime registered" in proc.stdout
    assert "no config.toml" in proc.stdout
    assert recap(proc.stdout)["node-a"].split("failed=")[1].startswith("1")
    # The other node goes on: the render names gpu-b only.
    assert (render_dir / "nodes" / "node-gpu-b.yaml").is_file()
    assert not (render_dir / "nodes" / "node-gpu-a.yaml").exists()


K8S_TOOLKIT = {"provider": "native", "accept_envvar_unprivileged": False, "accept_volume_mounts": True}


def test_envvar_alone_fails_a_node_whose_runtime_ignores_the_variable_from_unprivileged_containers(tmp_path):
    proc, render_dir, _facts = run_play(
        tmp_path, GOOD, "-e", '{"device_plugin_device_list_strategy": ["envvar"]}', toolkit=K8S_TOOLKIT
    )
    assert proc.returncode != 0
    assert "gpufleet.nvidia.device_plugin on node-a: device_plugin_device_list_strategy ['envvar']" in proc.stdout
    assert "gpufleet_toolkit.accept_envvar_unprivileged is false on this node" in proc.stdout
    assert recap(proc.stdout)["node-a"].split("failed=")[1].startswith("1")
    assert (render_dir / "nodes" / "node-gpu-b.yaml").is_file()  # node-b has no toolkit fact: not checked
    assert not (render_dir / "nodes" / "node-gpu-a.yaml").exists()


def test_the_default_volume_mounts_strategy_suits_a_kubernetes_node(tmp_path):
    proc, render_dir, _facts = run_play(tmp_path, GOOD, toolkit=K8S_TOOLKIT)
    assert proc.returncode == 0, proc.stdout[-3000:]
    config = yaml.safe_load((render_dir / "cluster" / "10-device-plugin-config.yaml").read_text())
    assert yaml.safe_load(config["data"]["config.yaml"])["flags"]["plugin"]["deviceListStrategy"] == "volume-mounts"
    assert (render_dir / "nodes" / "node-gpu-a.yaml").is_file()


def test_apply_path_sends_the_parsed_file_contents_of_the_same_render():
    """Every kubernetes.core.k8s task of the apply path takes its definition from the render's files."""
    for name in ("apply.yml", "validate.yml"):
        for task in yaml.safe_load((ROLE / "tasks" / name).read_text()):
            module = task.get("kubernetes.core.k8s")
            if module is None:
                continue
            if "other choice" in task["name"] and "node-feature-discovery" in task["name"]:
                assert "__device_plugin_rendered.other.nfd" in task["when"], task["name"]
                continue
            if "other choice" in task["name"]:
                # A switch of device_plugin_gpu_allocation: what the render says the other choice deployed.
                assert module["definition"] == "{{ [item] }}", task["name"]
                assert "__device_plugin_rendered.other." in task["loop"], task["name"]
                continue
            if "node-feature-discovery" in task["name"]:
                # The same kustomization the render's nfd/kustomization.yaml names, built on the controller.
                lookup = "lookup('kubernetes.core.kustomize', dir=__device_plugin_settings.nfd_kustomization)"
                assert lookup in module["definition"], task["name"]
                assert "selectattr('group', 'eq', 'nfd')" in " ".join(task["when"]), task["name"]
                continue
            assert module["definition"] == "{{ item.content | ansible.builtin.from_yaml_all | list }}", task["name"]
            assert "__device_plugin_rendered.files" in task["loop"], task["name"]
    tasks = yaml.safe_load((ROLE / "tasks" / "apply.yml").read_text())
    check, deploy = tasks[0], next(t for t in tasks if t["name"] == "Deploy NVIDIA's chart with the same values")
    # Helm mode stops first when the chart cannot carry a setting (render's helm_unsupported).
    assert "__device_plugin_rendered.helm_unsupported" in check["ansible.builtin.assert"]["that"]
    assert deploy["kubernetes.core.helm"]["values"] == "{{ __device_plugin_rendered.helm_values }}"


def test_the_builder_takes_its_defaults_from_the_role():
    """The builder's defaults are the role's defaults/main.yml (test_argument_specs.py, next to this file, holds those
    to the specs and the README); vars/main.yml hands the builder every setting it knows."""
    from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.device_plugin.settings import DEFAULTS, ROLE_ONLY

    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    assert {"device_plugin_" + key: value for key, value in DEFAULTS.items()} == {
        name: value for name, value in defaults.items() if name[len("device_plugin_") :] not in ROLE_ONLY
    }
    assert {name[len("device_plugin_") :] for name in defaults} > ROLE_ONLY
    settings = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())["__device_plugin_settings"]
    assert set(settings) == set(DEFAULTS)


# A stand-in kubernetes.core, found before the real one (ANSIBLE_COLLECTIONS_PATH order): each module
# appends the arguments it got to $STUB_LOG and answers like the API server would for a pod that ended
# in $STUB_PHASE. So the apply and Helm paths run for real up to the API call.
STUB = """#!/usr/bin/python
import json, os
from ansible.module_utils.basic import AnsibleModule

NAME = "{name}"
ARGS = dict(kubeconfig=dict(type="raw"), context=dict(type="str"), definition=dict(type="raw"), apply=dict(type="bool"),
            state=dict(type="str"), merge_type=dict(type="str"), wait=dict(type="bool"), kind=dict(type="str"),
            namespace=dict(type="str"), name=dict(type="str"), binary_path=dict(type="str"),
            chart_repo_url=dict(type="str"), chart_ref=dict(type="str"), chart_version=dict(type="str"),
            release_name=dict(type="str"), release_namespace=dict(type="str"), create_namespace=dict(type="bool"),
            values=dict(type="raw"))
module = AnsibleModule(argument_spec=ARGS, supports_check_mode=True)
params = {{k: v for k, v in module.params.items() if v is not None}}
with open(os.environ["STUB_LOG"], "a") as log:
    log.write(json.dumps({{"module": NAME, "params": params}}) + "\\n")
if NAME == "k8s_info":
    module.exit_json(changed=False, resources=[{{"status": {{"phase": os.environ.get("STUB_PHASE", "Succeeded")}}}}])
if NAME == "k8s_cluster_info":
    version = {{"server": {{"kubernetes": {{"gitVersion": os.environ["STUB_K8S_VERSION"]}}}}}}
    module.exit_json(changed=False, version=version)
if NAME == "k8s_log":
    module.exit_json(changed=False, log_lines=["[Vector addition of 50000 elements]", "Test PASSED"])
module.exit_json(changed=True)
"""


# The stand-in kubernetes.core.kustomize lookup: logs the kustomization it was asked to build, answers as
# ``kustomize build`` of NFD's default overlay would (two of its objects).
STUB_KUSTOMIZE = """
import json, os
from ansible.plugins.lookup import LookupBase

class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        with open(os.environ["STUB_LOG"], "a") as log:
            log.write(json.dumps({"module": "kustomize", "params": kwargs}) + "\\n")
        return [os.environ["STUB_NFD"]]
"""
NFD_DOCS = [
    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "node-feature-discovery"}},
    {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "nfd-worker", "namespace": "node-feature-discovery"},
    },
]


def stub_kubernetes_core(tmp_path):
    root = tmp_path / "stub" / "ansible_collections" / "kubernetes" / "core"
    (root / "plugins" / "modules").mkdir(parents=True)
    (root / "plugins" / "lookup").mkdir()
    (root / "plugins" / "lookup" / "kustomize.py").write_text(STUB_KUSTOMIZE)
    (root / "meta").mkdir()
    (root / "meta" / "runtime.yml").write_text("requires_ansible: '>=2.15.0'\n")
    for name in ("k8s", "k8s_info", "k8s_log", "helm", "k8s_cluster_info"):
        (root / "plugins" / "modules" / f"{name}.py").write_text(STUB.format(name=name))
    return tmp_path / "stub"


def run_apply(tmp_path, mode, phase, *extra, k8s_version="v1.34.2", runtime=None):
    log = tmp_path / "api.jsonl"
    inv = inventory(tmp_path, GOOD if runtime is None else runtime)
    play = tmp_path / "apply.yml"
    play.write_text(
        PLAY.format(render_dir="-")
        .replace("device_plugin_mode: render_only", f"device_plugin_mode: {mode}")
        .replace('device_plugin_render_dir: "-"', "device_plugin_kubeconfig: /nonexistent/kubeconfig")
    )
    proc = run_playbook(
        "-i",
        inv,
        play,
        "-e",
        "device_plugin_validate_timeout=5",
        *extra,
        collections=f"{stub_kubernetes_core(tmp_path)}:{COLLECTIONS}",
        STUB_LOG=str(log),
        STUB_PHASE=phase,
        STUB_K8S_VERSION=k8s_version,
        STUB_NFD=yaml.safe_dump_all(NFD_DOCS),
    )
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return proc, calls


def test_apply_path_sends_exactly_the_rendered_documents(tmp_path):
    proc, calls = run_apply(tmp_path, "apply", "Succeeded")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    expected = render(SETTINGS, [{"name": "gpu-a", "labels": LABELS}, {"name": "gpu-b", "labels": LABELS}])
    sent = [
        d
        for c in calls
        if c["module"] == "k8s" and c["params"]["state"] in ("present", "patched")
        for d in c["params"]["definition"]
    ]
    # NFD first (built from its kustomization, the one the render names), then exactly the rendered documents.
    assert sent == NFD_DOCS + expected["documents"]
    assert [c["params"] for c in calls if c["module"] == "kustomize"] == [{"dir": NFD}]
    patched = [c for c in calls if c["module"] == "k8s" and c["params"]["state"] == "patched"]
    assert [c["params"]["definition"][0]["kind"] for c in patched] == ["Node", "Node"]
    assert all(c["params"]["kubeconfig"] == "/nonexistent/kubeconfig" for c in calls if c["module"] != "kustomize")
    # Validation pods: removed before, started, waited for, logs read, removed after.
    pods = {d["metadata"]["name"] for d in expected["documents"] if d["kind"] == "Pod"}
    assert {c["params"]["name"] for c in calls if c["module"] == "k8s_info"} == pods
    removed = [c for c in calls if c["module"] == "k8s" and c["params"]["state"] == "absent"]
    # First the DRA driver's documents go (never both: a switch leaves nothing behind), then the pods' rounds.
    dra_docs = [c["params"]["definition"][0] for c in removed[: len(expected["other"]["documents"])]]
    assert dra_docs == expected["other"]["documents"] and dra_docs[0]["kind"] == "DaemonSet"
    assert len(removed) == len(dra_docs) + 2 * len(pods)
    assert "helm" not in {c["module"] for c in calls}
    assert "k8s_cluster_info" not in {c["module"] for c in calls}  # the version check is the DRA driver's


def test_helm_path_uses_the_same_values_and_a_failed_validation_fails_the_node(tmp_path):
    proc, calls = run_apply(tmp_path, "helm", "Failed")
    expected = render(SETTINGS, [{"name": "gpu-a", "labels": LABELS}, {"name": "gpu-b", "labels": LABELS}])
    uninstall, *helm = [c["params"] for c in calls if c["module"] == "helm"]
    # The DRA driver's release goes first (a no-op where it is not installed), then NVIDIA's device plugin chart.
    assert uninstall["state"] == "absent" and uninstall["release_name"] == "dra-driver-nvidia-gpu"
    assert len(helm) == 1
    assert helm[0]["values"] == expected["helm_values"]
    assert helm[0]["chart_version"] == "0.20.0"
    # The chart carries the plugin, its config and GFD; the RuntimeClass and the DCGM exporter go as documents.
    kinds = [
        d["kind"]
        for c in calls
        if c["module"] == "k8s" and c["params"]["state"] == "present"
        for d in c["params"]["definition"]
    ]
    assert "ConfigMap" not in kinds
    assert kinds.count("RuntimeClass") == 1 and kinds.count("Service") == 1
    # NFD comes with NVIDIA's chart (helm_values nfd.enabled), not from the kustomization.
    assert helm[0]["values"]["nfd"] == {"enabled": True}
    assert "kustomize" not in {c["module"] for c in calls} and "Namespace" not in kinds[1:]
    assert proc.returncode != 0
    assert "ended Failed" in proc.stdout and "Test PASSED" in proc.stdout
    assert recap(proc.stdout)["node-a"].split("failed=")[1].startswith("1")


def test_helm_mode_refuses_xid_settings_before_any_api_call(tmp_path):
    proc, calls = run_apply(tmp_path, "helm", "Succeeded", "-e", '{"device_plugin_health_disabled_xids": [48]}')
    assert proc.returncode != 0
    assert "NVIDIA's chart has no value for the plugin's XID health settings" in proc.stdout
    assert calls == []


def test_a_nodes_configuration_reaches_its_label_and_its_validation_pod(tmp_path):
    configs = '{"device_plugin_configs": {"ts": {"time_slicing": {"replicas": 4, "rename_by_default": true}}}}'
    proc, calls = run_apply(tmp_path, "apply", "Succeeded", "-e", configs, "-e", "device_plugin_node_config=ts")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    sent = [
        d for c in calls if c["module"] == "k8s" and c["params"]["state"] != "absent" for d in c["params"]["definition"]
    ]
    nodes = [d for d in sent if d["kind"] == "Node"]
    assert [n["metadata"]["labels"]["nvidia.com/device-plugin.config"] for n in nodes] == ["ts", "ts"]
    limits = [d["spec"]["containers"][0]["resources"]["limits"] for d in sent if d["kind"] == "Pod"]
    assert limits == [{"nvidia.com/gpu.shared": 1}] * 2
    config_map = next(d for d in sent if d["kind"] == "ConfigMap")
    assert sorted(config_map["data"]) == ["default", "ts"]


def test_absent_deletes_what_apply_sent_in_reverse_and_takes_the_labels_off(tmp_path):
    proc, calls = run_apply(tmp_path, "apply", "Succeeded", "-e", "device_plugin_state=absent")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    expected = render(SETTINGS, [{"name": "gpu-a", "labels": LABELS}, {"name": "gpu-b", "labels": LABELS}])
    assert not [c for c in calls if c["params"].get("state") == "present"]  # nothing deployed, no validation run
    assert [c["params"] for c in calls if c["module"] == "kustomize"] == [{"dir": NFD}]
    deleted = [
        d for c in calls if c["module"] == "k8s" and c["params"]["state"] == "absent" for d in c["params"]["definition"]
    ]
    cluster_docs = [d for f in expected["files"] if f["group"] == "cluster" for d in yaml.safe_load_all(f["content"])]
    pods = [d for d in expected["documents"] if d["kind"] == "Pod"]
    # The namespace, applied first, goes last of the role's; NFD, applied before them, after them (reversed too).
    assert deleted == pods + list(reversed(cluster_docs)) + list(reversed(NFD_DOCS))
    patched = [c["params"] for c in calls if c["module"] == "k8s" and c["params"]["state"] == "patched"]
    assert [p["definition"] for p in patched] == expected["node_unlabels"]
    assert all(p["merge_type"] == ["merge"] or p["merge_type"] == "merge" for p in patched)
    assert all(c["params"]["kubeconfig"] == "/nonexistent/kubeconfig" for c in calls if c["module"] != "kustomize")


def test_absent_with_helm_uninstalls_the_release(tmp_path):
    proc, calls = run_apply(tmp_path, "helm", "Succeeded", "-e", "device_plugin_state=absent")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    helm = [c["params"] for c in calls if c["module"] == "helm"]
    assert len(helm) == 1 and helm[0]["state"] == "absent" and helm[0]["release_name"] == "nvidia-device-plugin"
    deleted_kinds = [
        d["kind"]
        for c in calls
        if c["module"] == "k8s" and c["params"]["state"] == "absent"
        for d in c["params"]["definition"]
    ]
    assert "RuntimeClass" in deleted_kinds and "ConfigMap" not in deleted_kinds  # the chart's own go with the release


def test_absent_with_render_only_removes_the_rendered_files_and_runs_no_runtime_check(tmp_path):
    proc, render_dir, _facts = run_play(tmp_path, GOOD)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (render_dir / "README.md").write_text("the GitOps repository's own file\n")
    check, _dir, _facts = run_play(tmp_path, {"engines": {}}, "-e", "device_plugin_state=absent", "--check")
    # run_once: the change is counted on the first host of the play
    assert check.returncode == 0 and any("changed=0" not in line for line in recap(check.stdout).values()), check.stdout
    assert list(render_dir.rglob("*.yaml"))
    gone, _dir, facts = run_play(tmp_path, {"engines": {}}, "-e", "device_plugin_state=absent")
    assert gone.returncode == 0, gone.stdout + gone.stderr
    assert not list(render_dir.rglob("*.yaml")) and (render_dir / "README.md").exists()
    assert facts["node-a"]["state"] == "absent"
    again, _dir, _facts = run_play(tmp_path, {"engines": {}}, "-e", "device_plugin_state=absent")
    assert all("changed=0" in line for line in recap(again.stdout).values()), again.stdout


def test_nfd_off_deploys_no_nfd_in_any_mode(tmp_path):
    """device_plugin_nfd_enabled false (a cluster with NFD already): no nfd/ file, no kustomize build, no chart NFD."""
    off = ("-e", "device_plugin_nfd_enabled=false")
    for sub in ("render", "apply", "helm"):
        (tmp_path / sub).mkdir()
    proc, render_dir, _facts = run_play(tmp_path / "render", GOOD, *off)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (render_dir / "cluster").is_dir() and not list(render_dir.glob("nfd/*"))
    proc, calls = run_apply(tmp_path / "apply", "apply", "Succeeded", *off)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    sent = [d for c in calls if c["module"] == "k8s" for d in c["params"].get("definition") or []]
    assert "kustomize" not in {c["module"] for c in calls} and "nfd-worker" not in {d["metadata"]["name"] for d in sent}
    proc, calls = run_apply(tmp_path / "helm", "helm", "Succeeded", *off)
    assert [c["params"]["values"]["nfd"] for c in calls if "values" in c["params"]] == [{"enabled": False}]


def test_nfd_kustomization_from_a_mirror_reaches_render_and_apply(tmp_path):
    mirror = "https://git.example.internal/mirrors/node-feature-discovery/deployment/overlays/default?ref=v0.19.0"
    extra = ("-e", f"device_plugin_nfd_kustomization={mirror}")
    for sub in ("render", "apply"):
        (tmp_path / sub).mkdir()
    proc, render_dir, _facts = run_play(tmp_path / "render", GOOD, *extra)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert yaml.safe_load((render_dir / "nfd" / "kustomization.yaml").read_text())["resources"] == [mirror]
    proc, calls = run_apply(tmp_path / "apply", "apply", "Succeeded", *extra)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [c["params"] for c in calls if c["module"] == "kustomize"] == [{"dir": mirror}]


# --- device_plugin_gpu_allocation: the device plugin or NVIDIA's DRA driver, never both -------------------------------
DRA = ("-e", "device_plugin_gpu_allocation=dra")
CDI = {"engines": {"containerd": {"registered": True, "cdi": True}}}
NODES = [{"name": "gpu-a", "labels": LABELS}, {"name": "gpu-b", "labels": LABELS}]


def tree(folder):
    return {str(p.relative_to(folder)): p.read_text() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_render_only_switches_to_the_dra_driver_and_back_with_nothing_left_over(tmp_path):
    proc, render_dir, facts = run_play(tmp_path, CDI)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    before = tree(render_dir)
    assert "cluster/11-device-plugin.yaml" in before

    proc, _dir, facts = run_play(tmp_path, CDI, *DRA)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    expected = render({**SETTINGS, "gpu_allocation": "dra"}, NODES)
    assert tree(render_dir) == {f["path"]: f["content"] for f in expected["files"]}
    kinds = {d["kind"] for d in expected["documents"]}
    assert "DeviceClass" in kinds and "RuntimeClass" not in kinds and "ConfigMap" not in kinds
    assert not any(p.startswith(("validation/", "nfd/")) for p in tree(render_dir))
    assert facts["node-a"]["gpu_allocation"] == "dra" and facts["node-a"]["namespace"] == "dra-driver-nvidia-gpu"

    again = run_play(tmp_path, CDI, *DRA)[0]
    assert all("changed=0" in line for line in recap(again.stdout).values()), again.stdout

    proc = run_play(tmp_path, CDI)[0]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert tree(render_dir) == before


def test_dra_needs_cdi_in_the_nodes_engine(tmp_path):
    proc, _render_dir, _facts = run_play(tmp_path, GOOD, *DRA)
    assert proc.returncode != 0
    assert "device_plugin_gpu_allocation=dra needs CDI in containerd" in proc.stdout
    assert recap(proc.stdout)["node-a"].split("failed=")[1].startswith("1")


def test_dra_compute_domains_are_refused_outside_helm_mode(tmp_path):
    proc = run_play(tmp_path, CDI, *DRA, "-e", "device_plugin_dra_compute_domains=true")[0]
    assert proc.returncode != 0
    assert "use device_plugin_mode=helm" in proc.stdout


def test_apply_refuses_the_dra_driver_on_a_cluster_older_than_1_34_2(tmp_path):
    proc, calls = run_apply(tmp_path, "apply", "Succeeded", *DRA, k8s_version="v1.34.1", runtime=CDI)
    assert proc.returncode != 0
    assert "the cluster runs Kubernetes v1.34.1" in proc.stdout and "upgrade the control plane" in proc.stdout
    assert [c["module"] for c in calls] == ["k8s_cluster_info"]  # nothing deployed or removed


def test_helm_mode_installs_the_dra_chart_after_uninstalling_the_device_plugin(tmp_path):
    proc, calls = run_apply(tmp_path, "helm", "Succeeded", *DRA, k8s_version="v1.35.0", runtime=CDI)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    expected = render({**SETTINGS, "gpu_allocation": "dra"}, NODES)
    assert calls[0]["module"] == "k8s_cluster_info"
    uninstall, install = [c["params"] for c in calls if c["module"] == "helm"]
    assert uninstall == {**uninstall, "state": "absent", "release_name": "nvidia-device-plugin"}
    assert install["chart_ref"] == "oci://registry.k8s.io/dra-driver-nvidia/charts/dra-driver-nvidia-gpu"
    assert install["chart_version"] == "0.4.1" and "chart_repo_url" not in install
    assert install["release_namespace"] == "dra-driver-nvidia-gpu"
    assert install["values"] == expected["helm_values"]
    assert install["values"]["gpuResourcesEnabledOverride"] is True
    # After the release, what the role applied besides NVIDIA's chart goes too (RuntimeClass, DCGM exporter).
    deleted = [
        d["kind"]
        for c in calls
        if c["module"] == "k8s" and c["params"]["state"] == "absent"
        for d in c["params"]["definition"]
    ]
    assert {"RuntimeClass", "DaemonSet", "Service"} <= set(deleted)
    assert not [c for c in calls if c["module"] == "k8s_info"]  # no device plugin validation pods


def test_dra_apply_sends_the_dra_documents_after_removing_the_device_plugin(tmp_path):
    proc, calls = run_apply(
        tmp_path, "apply", "Succeeded", *DRA, "-e", "device_plugin_kubernetes_version=v1.34.2", runtime=CDI
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    expected = render({**SETTINGS, "gpu_allocation": "dra"}, NODES)
    assert "k8s_cluster_info" not in {c["module"] for c in calls}  # the version given was checked instead
    sent = [
        d
        for c in calls
        if c["module"] == "k8s" and c["params"]["state"] in ("present", "patched")
        for d in c["params"]["definition"]
    ]
    # With GFD on the device plugin's only label is nvidia.com/gpu.present, which the DRA driver's affinity reads too:
    # it stays, and exactly the DRA documents are sent.
    assert sent == expected["documents"]
    assert expected["other"]["node_unlabels"] == []
    first_present = next(i for i, c in enumerate(calls) if c["params"].get("state") == "present")
    removed = [
        c["params"]["definition"][0]["kind"] for c in calls[:first_present] if c["params"].get("state") == "absent"
    ]
    assert "RuntimeClass" in removed and "ConfigMap" in removed and "Namespace" in removed
    assert [c for c in calls if c["module"] == "kustomize"]  # NFD, used only by the device plugin's GFD, removed
