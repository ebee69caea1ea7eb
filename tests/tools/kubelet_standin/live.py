# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""``make k8s-live``: NVIDIA's device plugin and GFD, built from source, under the kubelet stand-in on a simulated node.

The binaries come from ``GPUFLEET_K8S_LIVE_BIN`` (a folder with ``nvidia-device-plugin`` and
``gpu-feature-discovery``; bench/k8s-live/README.md says how to build them). The simulated node is this machine in a
private mount namespace (root and ``unshare`` needed): the NVML stub as ``libnvidia-ml.so.1``, the simulated node's
sysfs PCI tree (tests/sim/pcitree.py, with each GPU's NUMA node) on /sys/bus/pci/devices, a tmpfs for kubelet's
device-plugins folder and, for MIG, the driver's MIG capability files on /proc/driver. Each scenario runs the plugin
with the config the device_plugin role renders and the environment of the role's DaemonSet, and asserts what the
issue lists; the result goes to bench/k8s-live/<UTC time>.{json,md}. Then (unless ``GPUFLEET_K8S_LIVE_CRI=0``) the
plugin runs once per simulated Kubernetes node of ``live_cri.py`` (containerd 1.7 and 2.1) with that node's GPUs, and
the stand-in's pods run as real containerd sandboxes there.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
RESULTS = ROOT / "bench" / "k8s-live"
KLOG_ERROR = re.compile(r"^[EF]\d{4} ", re.M)
NOT_RUN = [
    "the role's validation pod's own image and command (NVIDIA's CUDA vectoradd sample: no registry and no CUDA "
    "here); on containerd it runs with the node's local image, nvidia-smi -L by exec",
    "MIG capability nodes: the simulated nodes have no /proc/driver/nvidia-caps/mig-minors, so the CDI spec gives a "
    "MIG device its parent GPU's node and no /dev/nvidia-caps node, and a MIG pod is checked to see exactly that; "
    "nvidia-smi -L in a MIG pod is recorded, not checked (the NVML stub does not list MIG devices by the capability "
    "nodes a container can open, as NVIDIA's NVML does)",
    "an MPS server and MPS clients: NVIDIA's MPS control daemon (Debian's nvidia-cuda-mps 550.163.01) runs and "
    "answers, but a CUDA client, which would start the server, needs a GPU and its kernel driver; without "
    "nvidia-smi and nvidia-cuda-mps-control beside the binaries the daemon stops at setting the compute mode and the "
    "plugin offers no replicas (the MPS checks then say so)",
    "MPS pods through containerd (the MPS Allocate answer is checked in the namespace)",
    "GFD's labels through NFD (the file GFD writes is checked, as NFD's local source reads it): no Debian package "
    "carries node-feature-discovery, and its source at v0.19.0 has no vendored modules, so it cannot be built "
    "without the Go module proxy, which is not reachable here",
]


def _node() -> dict[str, Any]:
    from tests.sim.model import validate_fleet

    gpus = [{"model": "A100-SXM4-40GB", "numa_node": 0}, {"model": "A100-SXM4-40GB", "numa_node": 1}]
    return validate_fleet({"nodes": [{"name": "k8s-live", "gpus": gpus}]})[0]


def _stub_config(node: dict[str, Any], mig: bool) -> dict[str, Any]:
    from tests.sim.model import node_config

    config = {**node_config(node), "all_devices": 1}
    if mig:
        for i, gpu in enumerate(config["gpus"]):
            gpu["mig_mode"] = 1
            gpu["mig_devices"] = [
                {
                    "slot": k,
                    "name": f"{gpu['name']} MIG 1g.5gb",
                    "uuid": f"MIG-{gpu['uuid'][4:12]}-{k:04d}-0000-0000-{i:012d}",
                    "gi_id": 7 + 2 * k,
                    "ci_id": 0,
                    "memory_total": 4864 * 1024 * 1024,
                }
                for k in range(2)
            ]
    return config


def _render(settings: dict[str, Any]) -> dict[str, Any]:
    from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.device_plugin.render import render

    # The node's MIG devices as gpu_facts gives them (the validation pod of MIG "mixed" asks for their profile).
    gpus = [{"mig_devices": [{"profile": "1g.5gb"}] * 2}] * 2 if settings.get("mig_strategy", "none") != "none" else []
    return render(settings, [{"name": "k8s-live", "labels": {}, "gpus": gpus}])


def _container_env(rendered: dict[str, Any], daemonset: str, config_file: str) -> dict[str, str]:
    """The plain environment of the rendered DaemonSet's program container, its config file moved here."""
    ds = next(d for d in rendered["documents"] if d["kind"] == "DaemonSet" and d["metadata"]["name"] == daemonset)
    spec = ds["spec"]["template"]["spec"]
    main = next(c for c in spec["containers"] if c["command"] != ["config-manager"])
    env = {e["name"]: e["value"] for e in main.get("env", []) if "value" in e}
    env["CONFIG_FILE"] = config_file
    return env


SCENARIOS = [
    {"name": "default", "settings": {}, "resource": "nvidia.com/gpu", "allocatable": 2, "gfd": True},
    {
        "name": "time-slicing-4-packed",
        "settings": {"time_slicing": {"replicas": 4}, "allocation_policy": "packed"},
        "resource": "nvidia.com/gpu",
        "allocatable": 8,
    },
    {"name": "mig-single", "settings": {"mig_strategy": "single"}, "resource": "nvidia.com/gpu", "allocatable": 4},
    {
        "name": "mig-mixed",
        "settings": {"mig_strategy": "mixed"},
        "resource": "nvidia.com/mig-1g.5gb",
        "allocatable": 4,
    },
]


def _cri_nodes(work: Path, binaries: Path, nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per simulated Kubernetes node: the plugin on that node's GPUs (its stub configuration and PCI tree) with the
    role's default config and live_cri.node_checks's pods, then with time slicing and MIG ``single``/``mixed`` and
    live_sharing's pods, each on the node's containerd."""
    from tests.sim import pcitree

    results = []
    for node in nodes:
        sysfs = work / f"pci-{node['name']}"
        pcitree.write_tree(pcitree.pci_tree(node["gpus"], "loaded", {}), sysfs)
        subprocess.run(["mount", "--bind", str(sysfs), "/sys/bus/pci/devices"], check=True)
        stub = work / f"stub-{node['name']}"
        stub.mkdir()
        (stub / "gpus.json").write_text(json.dumps({**node["config"], "all_devices": 1}))
        try:
            results.extend(_cri_node(work, binaries, node, stub))
        finally:
            subprocess.run(["umount", "/sys/bus/pci/devices"], check=False)
    return results


def _cri_node(work: Path, binaries: Path, node: dict[str, Any], stub: Path) -> list[dict[str, Any]]:
    from tests.tools.kubelet_standin import live_cri, live_sharing
    from tests.tools.kubelet_standin.devicemanager import AdmissionError

    rendered = _render({})
    phase = {"rendered": rendered, "tag": "default", "resource": "nvidia.com/gpu", "count": len(node["gpus"])}
    checks = _cri_phase(
        work, binaries, node, stub, phase, pods=lambda dm: live_cri.node_checks(node, dm, rendered, AdmissionError)
    )
    results = [{"scenario": f"containerd-{node['name']}", "settings": {}, "checks": checks}]
    settings = {"time_slicing": {"replicas": 4}, "allocation_policy": "packed"}
    phase = {"rendered": _render(settings), "tag": "time-slicing", "resource": "nvidia.com/gpu",
             "count": 4 * len(node["gpus"])}  # fmt: skip
    checks = _cri_phase(
        work, binaries, node, stub, phase, pods=lambda dm: live_sharing.pod_checks(node, dm, "nvidia.com/gpu", None)
    )
    scenario = f"containerd-{node['name']}-time-slicing-4-packed"
    results.append({"scenario": scenario, "settings": settings, "checks": checks})
    return results + _cri_mig(work, binaries, node, stub)


def _cri_mig(work: Path, binaries: Path, node: dict[str, Any], stub: Path) -> list[dict[str, Any]]:
    """MIG ``single`` and ``mixed`` on the node: its GPUs laid out (two 1g.5gb each), the plugin on a copy of the
    node's stub state, the pods on containerd; the layout taken off after."""
    from tests.tools.kubelet_standin import live_sharing

    results = []
    try:
        laid = live_sharing.set_mig(node, live_sharing.MIG_LAYOUT)
        state = live_sharing.mig_state(node)
        (stub / "mig-state").write_text(state)
        parents = live_sharing.mig_parents(state, node["gpus"])
        mig = {"parents": parents, "cdi": live_sharing.cdi_mig_nodes(node)}
        laid_ok = not laid.get("failed") and len(parents) == 4 and set(parents) <= set(mig["cdi"])
        for strategy, resource in (("single", "nvidia.com/gpu"), ("mixed", "nvidia.com/mig-1g.5gb")):
            settings = {"mig_strategy": strategy}
            checks: list[dict[str, Any]] = []
            detail = {"layout": laid.get("msg") or laid.get("changed"), "parents": parents, "cdi": mig["cdi"]}
            _check(checks, "the node's GPUs laid out (two 1g.5gb each) and its CDI spec lists them", laid_ok, detail)
            if laid_ok:
                phase = {"rendered": _render(settings), "tag": f"mig-{strategy}", "resource": resource, "count": 4}
                checks += _cri_phase(
                    work,
                    binaries,
                    node,
                    stub,
                    phase,
                    pods=lambda dm, r=resource: live_sharing.pod_checks(node, dm, r, mig),
                )
            scenario = f"containerd-{node['name']}-mig-{strategy}"
            results.append({"scenario": scenario, "settings": settings, "checks": checks})
    finally:
        off = live_sharing.set_mig(node, live_sharing.MIG_OFF)
        live_sharing.docker_exec(node["container"], "rm", "-f", "/etc/gpufleet-sim/mig-state")
        live_sharing.docker_exec(node["container"], "gpufleet-cdi-refresh", "--force")
        (stub / "mig-state").unlink(missing_ok=True)
        if off.get("failed"):
            print(f"k8s-live: {node['name']}: MIG off failed: {off.get('msg')}", file=sys.stderr)
    return results


def _cri_phase(work: Path, binaries: Path, node: dict, stub: Path, phase: dict, *, pods: Any) -> list[dict[str, Any]]:
    """NVIDIA's plugin with the phase's rendered config and DaemonSet environment on the node's stub state,
    registered with a fresh device manager; its devices checked, then ``pods(dm)``'s checks, then its log."""
    from tests.tools.kubelet_standin.devicemanager import DeviceManager

    checks: list[dict[str, Any]] = []
    resource, count = phase["resource"], phase["count"]
    config = work / f"config-{node['name']}-{phase['tag']}.yaml"
    config.write_text(phase["rendered"]["config_text"])
    env = dict(os.environ, LD_LIBRARY_PATH=str(work / "lib"), GPUFLEET_SIM_GPUS_JSON=str(stub / "gpus.json"))
    env.update(_container_env(phase["rendered"], "nvidia-device-plugin", str(config)))
    log_path = work / f"plugin-{node['name']}-{phase['tag']}.log"
    dm = DeviceManager("/var/lib/kubelet/device-plugins")
    dm.start()
    with log_path.open("w") as log:
        proc = subprocess.Popen([str(binaries / "nvidia-device-plugin")], env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        listed = sorted(dm.wait_for(resource, timeout=60).devices)
        if phase["tag"] == "default":
            want = sorted(g["uuid"] for g in node["gpus"])
            _check(checks, "plugin lists the node's GPU UUIDs", listed == want, listed)
        else:
            _check(checks, f"allocatable {resource} is {count}", dm.allocatable() == {resource: count}, listed)
        checks.extend(pods(dm))
    except Exception as exc:
        _check(checks, "pods on containerd", False, f"{type(exc).__name__}: {exc}")
    finally:
        proc.terminate()
        proc.wait(15)
        dm.stop()
        with contextlib.suppress(FileNotFoundError):
            os.unlink("/var/lib/kubelet/device-plugins/kubelet.sock")
    text = log_path.read_text()
    errors = KLOG_ERROR.findall(text) + re.findall(r".*not yet supported.*", text)
    _check(checks, "plugin log has no error and no ignored setting", not errors, errors[:3])
    return checks


def _inner(work: Path, binaries: Path) -> dict[str, Any]:
    """Inside the mount namespace: every scenario, its checks."""
    from tests.sim import pcitree
    from tests.tools.kubelet_standin.devicemanager import AdmissionError, DeviceManager

    node = _node()
    subprocess.run(["mount", "-t", "tmpfs", "none", "/var/lib"], check=True)
    os.makedirs("/var/lib/kubelet/device-plugins")
    sysfs = work / "pci"
    pcitree.write_tree(pcitree.pci_tree(node["gpus"], "loaded", {}), sysfs)
    subprocess.run(["mount", "--bind", str(sysfs), "/sys/bus/pci/devices"], check=True)
    mig_files = _mig_proc(work)
    results = []
    for scenario in SCENARIOS:
        mig = scenario["settings"].get("mig_strategy", "none") != "none"
        checks: list[dict[str, Any]] = []
        results.append({"scenario": scenario["name"], "settings": scenario["settings"], "checks": checks})
        if mig and not mig_files:
            checks.append({"check": "run", "pass": None, "detail": "/proc/driver is not there to hold MIG files"})
            continue
        gpus = work / f"gpus-{scenario['name']}.json"
        gpus.write_text(json.dumps(_stub_config(node, mig)))
        rendered = _render(scenario["settings"])
        config = work / f"config-{scenario['name']}.yaml"
        config.write_text(rendered["config_text"])
        env = dict(os.environ, LD_LIBRARY_PATH=str(work / "lib"), GPUFLEET_SIM_GPUS_JSON=str(gpus))
        env.update(_container_env(rendered, "nvidia-device-plugin", str(config)))
        log_path = work / f"plugin-{scenario['name']}.log"
        dm = DeviceManager("/var/lib/kubelet/device-plugins")
        dm.start()
        with log_path.open("w") as log:
            proc = subprocess.Popen(
                [str(binaries / "nvidia-device-plugin")], env=env, stdout=log, stderr=subprocess.STDOUT
            )
        try:
            _plugin_checks(scenario, dm, proc, checks, AdmissionError)
            checks.extend(_validation_pod_checks(dm, rendered, scenario["resource"]))
        finally:
            proc.terminate()
            proc.wait(15)
            dm.stop()
            with contextlib.suppress(FileNotFoundError):
                os.unlink("/var/lib/kubelet/device-plugins/kubelet.sock")
        text = log_path.read_text()
        errors = KLOG_ERROR.findall(text) + re.findall(r".*not yet supported.*", text)
        checks.append(
            {"check": "plugin log has no error and no ignored setting", "pass": not errors, "detail": errors[:3]}
        )
        if scenario.get("gfd"):
            checks.extend(_gfd_checks(work, binaries, env, rendered))
    from tests.tools.kubelet_standin import live_mps

    mps = live_mps.checks(work, binaries, _container_env, _render, DeviceManager)
    results.append({"scenario": "mps", "settings": live_mps.SETTINGS, "checks": mps})
    nodes = work / "cri-nodes.json"
    if nodes.exists():
        results.extend(_cri_nodes(work, binaries, json.loads(nodes.read_text())))
    return {"scenarios": results}


def _check(checks: list[dict[str, Any]], name: str, ok: bool, detail: Any = None) -> bool:
    checks.append({"check": name, "pass": bool(ok), "detail": detail})
    return bool(ok)


def _plugin_checks(scenario, dm, proc, checks, admission_error) -> None:
    resource, count = scenario["resource"], scenario["allocatable"]
    try:
        endpoint = dm.wait_for(resource, timeout=60)
    except TimeoutError as exc:
        _check(checks, "plugin registers and lists its devices", False, str(exc))
        return
    _check(checks, "plugin registers and lists its devices", True, dm.events[:2])
    _check(checks, f"allocatable {resource} is {count}", dm.allocatable() == {resource: count}, dm.allocatable())
    numa = sorted({n for d in endpoint.devices.values() for n in d["numa"]})
    _check(checks, "devices carry their NUMA node", numa == [0, 1], numa)
    pods = min(count, 4 if scenario["name"].startswith("time-slicing") else 2)
    given = []
    for i in range(pods):
        got = dm.allocate(f"pod-{i}", "c", {resource: 1})[resource]
        given.append(got)
    ids = [g["ids"][0] for g in given]
    response = given[0]["response"]
    # One mount per physical device: a time-sliced replica "<uuid>::<n>" is mounted as its GPU's <uuid>.
    mounts_ok = all(
        g["response"]["mounts"]
        == [
            {
                "container_path": "/var/run/nvidia-container-devices/" + g["ids"][0].split("::")[0],
                "host_path": "/dev/null",
                "read_only": False,
            }
        ]
        for g in given
    )
    _check(
        checks,
        "each pod's Allocate answer is /dev/null on /var/run/nvidia-container-devices/<GPU> (volume-mounts)",
        mounts_ok and response["envs"].get("NVIDIA_VISIBLE_DEVICES") == "/var/run/nvidia-container-devices",
        response,
    )
    if scenario["name"].startswith("time-slicing"):
        gpus = {i.split("::")[0] for i in ids}
        _check(checks, "4 pods share one GPU (packed)", len(ids) == 4 and len(gpus) == 1, ids)
    else:
        _check(checks, "two pods get different devices", len(set(ids)) == len(ids), ids)
    if pods == count:
        try:
            dm.allocate("pod-extra", "c", {resource: 1})
            _check(checks, "a pod beyond the free devices is refused (stays pending)", False)
        except admission_error as exc:
            _check(checks, "a pod beyond the free devices is refused (stays pending)", True, str(exc))
        dm.pod_ended("pod-0")
        again = dm.allocate("pod-extra", "c", {resource: 1})[resource]["ids"]
        _check(checks, "an ended pod's device goes to the next pod", again == [ids[0]], again)
    _check(checks, "plugin still running after the allocations", proc.poll() is None, proc.poll())


def _validation_pod_checks(dm: Any, rendered: dict[str, Any], resource: str) -> list[dict[str, Any]]:
    """The role's rendered validation pod admitted by the stand-in and turned into its CRI container config."""
    from tests.tools.kubelet_standin import pods

    pod = next((d for d in rendered["documents"] if d["kind"] == "Pod"), None)
    if pod is None:
        return [{"check": "the role's validation pod is admitted", "pass": None, "detail": "no validation pod"}]
    for key in [k for k in dm.pod_devices if k[0] != "validation"]:
        dm.pod_ended(key[0])
    spec = pod["spec"]["containers"][0]
    allocated = dm.allocate("validation", spec["name"], pods.limits(spec))
    config, handler = pods.sandbox(pod)
    container = pods.container_config(spec, [a["response"] for a in allocated.values()])
    ok = (
        list(allocated) == [resource]
        and handler == "nvidia"
        and any(m.container_path.startswith("/var/run/nvidia-container-devices/") for m in container.mounts)
    )
    detail = {"handler": handler, "mounts": [m.container_path for m in container.mounts], "pod": config.name}
    return [
        {
            "check": "the role's validation pod is admitted with its GPU mount and the nvidia handler",
            "pass": ok,
            "detail": detail,
        }
    ]


def _gfd_checks(work: Path, binaries: Path, env: dict[str, str], rendered: dict[str, Any]) -> list[dict[str, Any]]:
    gfd_env = dict(env)
    gfd_env.update(_container_env(rendered, "gpu-feature-discovery", env["CONFIG_FILE"]))
    gfd_env.update(NODE_NAME="k8s-live", NAMESPACE="nvidia-device-plugin")
    labels_file, machine = work / "gfd-labels", work / "product_name"
    machine.write_text("gpufleet simulated node\n")
    res = subprocess.run(
        [
            str(binaries / "gpu-feature-discovery"),
            "--oneshot",
            f"--output-file={labels_file}",
            f"--machine-type-file={machine}",
        ],
        env=gfd_env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    labels = dict(line.split("=", 1) for line in labels_file.read_text().splitlines()) if labels_file.exists() else {}
    want = [
        "nvidia.com/gpu.product",
        "nvidia.com/gpu.count",
        "nvidia.com/gpu.memory",
        "nvidia.com/mig.capable",
        "nvidia.com/cuda.driver-version.full",
        "nvidia.com/cuda.driver-version.major",
    ]
    out = [
        {"check": "GFD runs once with the rendered config", "pass": res.returncode == 0, "detail": res.returncode},
        {
            "check": "GFD writes the labels users schedule on",
            "pass": all(k in labels for k in want) and labels.get("nvidia.com/gpu.count") == "2",
            "detail": {k: labels.get(k) for k in want},
        },
    ]
    return out


def _mig_proc(work: Path) -> bool:
    """The driver's MIG capability files on a tmpfs over /proc/driver (NVIDIA's plugin reads
    /proc/driver/nvidia/capabilities/gpu<N>/mig/gi<G>/access and /proc/driver/nvidia-caps/mig-minors)."""
    if not os.path.isdir("/proc/driver"):
        return False
    subprocess.run(["mount", "-t", "tmpfs", "none", "/proc/driver"], check=True)
    caps = Path("/proc/driver/nvidia-caps")
    caps.mkdir()
    lines, minor = ["config 1", "monitor 2"], 3
    for gpu in range(2):
        for gi in range(15):
            lines.append(f"gpu{gpu}/gi{gi}/access {minor}")
            minor += 1
            for ci in range(8):
                lines.append(f"gpu{gpu}/gi{gi}/ci{ci}/access {minor}")
                minor += 1
            base = Path(f"/proc/driver/nvidia/capabilities/gpu{gpu}/mig/gi{gi}/ci0")
            base.mkdir(parents=True)
            access = "DeviceFileMinor: 1\nDeviceFileMode: 292\nDeviceFileModify: 1\n"
            (base.parent / "access").write_text(access)
            (base / "access").write_text(access)
    (caps / "mig-minors").write_text("\n".join(lines) + "\n")
    return True


def _write_result(result: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y-%m-%dT%H%M%SZ", time.gmtime())
    path = RESULTS / f"{stamp}.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    lines = [
        f"# make k8s-live, {stamp}",
        "",
        f"Plugin: `{result['plugin_version']}`; GFD: `{result['gfd_version']}`; runtime: {result['runtime']}.",
        "",
        "| scenario | check | result |",
        "| --- | --- | --- |",
    ]
    for s in result["scenarios"]:
        for c in s["checks"]:
            mark = {True: "pass", False: "FAIL", None: "not run"}[c["pass"]]
            lines.append(f"| {s['scenario']} | {c['check']} | {mark} |")
    lines += ["", "Not run here:", ""] + [f"* {n}" for n in result["not_run"]]
    path.with_suffix(".md").write_text("\n".join(lines) + "\n")
    return path


def main() -> int:
    binaries = Path(os.environ.get("GPUFLEET_K8S_LIVE_BIN", ""))
    if not (binaries / "nvidia-device-plugin").is_file() or not (binaries / "gpu-feature-discovery").is_file():
        print(
            "k8s-live: GPUFLEET_K8S_LIVE_BIN must name a folder with NVIDIA's nvidia-device-plugin and "
            "gpu-feature-discovery built from source (bench/k8s-live/README.md)",
            file=sys.stderr,
        )
        return 2
    if os.geteuid() != 0 or not shutil.which("unshare"):
        print("k8s-live: needs root and unshare (a private mount namespace)", file=sys.stderr)
        return 2
    from tests.sim.fleet import build_stub

    with tempfile.TemporaryDirectory(prefix="k8s-live-", dir="/tmp") as tmp:
        work = Path(tmp)
        (work / "lib").mkdir()
        build_stub(work / "lib" / "libnvidia-ml.so.1")
        out = work / "result.json"
        fleet = None
        if os.environ.get("GPUFLEET_K8S_LIVE_CRI") != "0":
            from tests.tools.kubelet_standin import live_cri

            start = time.monotonic()
            fleet = live_cri.bring_up(work)
            nodes = live_cri.describe(fleet)
            (work / "cri-nodes.json").write_text(json.dumps(nodes))
            print(f"k8s-live: {len(nodes)} Kubernetes nodes up and converged in {time.monotonic() - start:.0f} s")
        try:
            code = subprocess.run(
                [
                    "unshare",
                    "-m",
                    "--propagation",
                    "private",
                    sys.executable,
                    __file__,
                    "--inner",
                    str(work),
                    str(binaries),
                    str(out),
                ],
                check=False,
            ).returncode
        finally:
            if fleet is not None:
                fleet.down()
        if code != 0 or not out.exists():
            print(f"k8s-live: the run in the namespace failed ({code})", file=sys.stderr)
            return 1
        result = json.loads(out.read_text())
        for name in ("nvidia-device-plugin", "gpu-feature-discovery"):
            version = subprocess.run([str(binaries / name), "--version"], capture_output=True, text=True, check=False)
            key = "plugin_version" if name == "nvidia-device-plugin" else "gfd_version"
            text = (version.stdout or version.stderr).strip()
            result[key] = text.splitlines()[0] if text else "?"
        result["runtime"] = (
            ", ".join(f"containerd {n['containerd']} ({n['name']})" for n in nodes)
            if fleet is not None
            else "none (kubelet stand-in admissions only; GPUFLEET_K8S_LIVE_CRI=0)"
        )
        result["not_run"] = NOT_RUN
        path = _write_result(result)
    failed = [(s["scenario"], c["check"]) for s in result["scenarios"] for c in s["checks"] if c["pass"] is False]
    print(path.with_suffix(".md").read_text())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.path[:0] = [str(ROOT), str(ROOT / ".cache" / "collections")]
    if len(sys.argv) > 1 and sys.argv[1] == "--inner":
        work, binaries, out = (Path(a) for a in sys.argv[2:5])
        Path(out).write_text(json.dumps(_inner(work, binaries)))
        sys.exit(0)
    sys.exit(main())
