# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""``make k8s-live``'s pods as real containerd sandboxes (``live.py`` runs this part after its scenarios).

Two simulated Kubernetes nodes, both in the inventory group ``kube_nodes`` (so the toolkit role makes the runtime
take the device plugin's volume mounts and ignore an unprivileged container's ``NVIDIA_VISIBLE_DEVICES``):
``k8s-trixie`` (containerd 1.7) and ``k8s-sid`` (containerd 2.1, config v3). Each is prepared as the converged
fleet's nodes are (``tests/integration/_fleet_converged.py`` ``NODE_PREP``: sandbox image, ``restrict_oom_score_adj``)
and converged with ``prepare.yml`` and ``site.yml`` (device plugin documents ``render_only``).

Per node, NVIDIA's plugin runs here (in ``live.py``'s mount namespace) on the NVML stub with that node's own GPU
configuration and PCI tree, so it lists the node's GPU UUIDs; the stand-in's device manager admits each pod, and
``pods.py`` turns the pod and the plugin's Allocate answer into CRI calls on the node's containerd (through
``docker exec``), with the ``nvidia`` RuntimeClass handler the runtime role registered. ``nvidia-smi -L`` runs in
each container (by ExecSync); it comes from the node's driver files the runtime injects, as on a real node.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
FLEET = {
    "nodes": [
        {"name": name, "suite": suite, "driver_state": "loaded", "driver_packages": True, "gpus": 2}
        for name, suite in (("k8s-trixie", "trixie"), ("k8s-sid", "sid"))
    ]
}
SMI_LINE = re.compile(r"^GPU \d+: .* \(UUID: (GPU-[0-9a-f-]+)\)$", re.M)
DEV_PROBE = (
    "import os, re, json; print(json.dumps(sorted(d for d in os.listdir('/dev') if re.fullmatch(r'nvidia\\d+', d))))"
)


def bring_up(work: Path) -> Any:
    """The two nodes up, prepared and converged; -> the Fleet (the caller takes it down)."""
    from tests.sim.fleet import Fleet

    fleet = Fleet.from_dict(FLEET, prefix=f"k8slive{os.getpid()}")
    fleet.up()
    try:
        _converge(fleet, work)
    except BaseException:
        fleet.down()
        raise
    return fleet


def _converge(fleet: Any, work: Path) -> None:
    import yaml

    from tests.integration._fleet_converged import NODE_PREP

    with ThreadPoolExecutor(len(fleet.nodes)) as pool:
        preps = dict(zip(fleet.nodes, pool.map(lambda n: fleet.node(n).run(NODE_PREP, timeout=600), fleet.nodes)))
    for name, res in preps.items():
        if res.rc != 0:
            raise RuntimeError(f"{name}: node preparation failed\n{res.stdout}\n{res.stderr}")
    kube = work / "kube.yml"
    kube.write_text(yaml.safe_dump({"all": {"children": {"kube_nodes": {"hosts": dict.fromkeys(fleet.nodes)}}}}))
    settings = {
        "device_plugin_mode": "render_only",
        "device_plugin_render_dir": str(work / "gitops"),
        "report_dir": str(work / "report"),
    }
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".cache" / "collections"), ANSIBLE_FORCE_COLOR="0")
    for playbook in ("tests/sim/playbooks/prepare.yml", "playbooks/site.yml"):
        cmd = [str(ROOT / ".venv" / "bin" / "ansible-playbook"), "-i", str(fleet.inventory), "-i", str(kube)]
        proc = subprocess.run(
            [*cmd, "-e", json.dumps(settings), playbook],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=env,
            check=False,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"{playbook}: rc={proc.returncode}\n{proc.stdout[-6000:]}\n{proc.stderr[-2000:]}")


def describe(fleet: Any) -> list[dict[str, Any]]:
    """What the namespace side needs of each node (JSON): container, stub configuration, GPUs, containerd version,
    the fleet's inventory."""
    out = []
    for node in fleet.nodes.values():
        version = node.run(["containerd", "--version"]).stdout.split()
        out.append(
            {
                "name": node.name,
                "container": node.container,
                "config": node.config,
                "gpus": node.desc["gpus"],
                "containerd": version[2] if len(version) > 2 else "?",
                "inventory": str(fleet.inventory),
            }
        )
    return out


class _Kubelet:
    """The stand-in's two halves on one node: the device manager's admission, then the CRI calls."""

    def __init__(self, dm: Any, cri: Any) -> None:
        self.dm, self.cri, self.sandboxes = dm, cri, []

    def start(self, pod: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        from tests.tools.kubelet_standin import pods

        spec = pod["spec"]["containers"][0]
        allocated = self.dm.allocate(pod["metadata"]["uid"], spec["name"], pods.limits(spec))
        config, handler = pods.sandbox(pod)
        sandbox = self.cri.run_pod_sandbox(config, handler)
        self.sandboxes.append(sandbox)
        container = self.cri.create_container(
            sandbox, pods.container_config(spec, [a["response"] for a in allocated.values()]), config
        )
        self.cri.start_container(container)
        return container, allocated

    def sees(self, container: str) -> dict[str, Any]:
        """``nvidia-smi -L``'s UUIDs (its exit code and output too) and the /dev/nvidia<N> in the container."""
        from tests.sim.cri import CriError

        try:
            rc, out, err = self.cri.exec_sync(container, ["nvidia-smi", "-L"], timeout=60)
            smi = {"rc": rc, "out": (out + err).decode(errors="replace").strip()[-300:]}
        except CriError as exc:  # no nvidia-smi in a container the runtime did not give a GPU
            smi = {"rc": None, "out": str(exc)[-300:]}
        rc, out, err = self.cri.exec_sync(container, ["python3", "-c", DEV_PROBE], timeout=60)
        devices = json.loads(out) if rc == 0 else err.decode(errors="replace")
        return {"uuids": SMI_LINE.findall(smi["out"]), "smi": smi, "dev": devices}

    def clean(self) -> None:
        for sandbox in self.sandboxes:
            self.cri.stop_pod_sandbox(sandbox)
            self.cri.remove_pod_sandbox(sandbox)


def node_checks(node: dict[str, Any], dm: Any, rendered: dict[str, Any], admission_error: type) -> list[dict]:
    """The pods on one node's containerd; the device manager has NVIDIA's plugin registered for this node."""
    from tests.integration._fleet_converged import IMAGE, WAIT
    from tests.sim.cri import Cri, CriError, NodeSocket
    from tests.tools.kubelet_standin import pods

    checks: list[dict[str, Any]] = []

    def check(name: str, ok: bool, detail: Any) -> None:
        checks.append({"check": f"containerd {node['containerd']}: {name}", "pass": bool(ok), "detail": detail})

    minor = {g["uuid"]: int(g["minor"]) for g in node["gpus"]}
    with NodeSocket(node["container"]) as target, Cri(target) as cri:
        deadline = time.monotonic() + 120
        while True:
            try:
                version = cri.version()
                break
            except CriError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(3)
        kubelet = _Kubelet(dm, cri)
        try:
            seen = {}
            for name in ("gpu-a", "gpu-b"):
                container, allocated = kubelet.start(pods.probe_pod(name, IMAGE, WAIT, limits={"nvidia.com/gpu": 1}))
                seen[name] = {"allocated": allocated["nvidia.com/gpu"]["ids"], **kubelet.sees(container)}
            check(
                "two pods with nvidia.com/gpu: 1 each list exactly their allocated GPU in nvidia-smi -L (different)",
                all(
                    s["uuids"] == s["allocated"] and s["dev"] == [f"nvidia{minor[s['allocated'][0]]}"]
                    for s in seen.values()
                )
                and seen["gpu-a"]["allocated"] != seen["gpu-b"]["allocated"],
                {**seen, "runtime": version.get("runtime_version")},
            )
            try:
                kubelet.start(pods.probe_pod("gpu-c", IMAGE, WAIT, limits={"nvidia.com/gpu": 1}))
                check("a third pod stays pending", False, "admitted")
            except admission_error as exc:
                check("a third pod stays pending", True, str(exc))
            for name, pod in (
                ("a pod with no request sees no GPU", pods.probe_pod("none", IMAGE, WAIT)),
                (
                    "an unprivileged pod setting NVIDIA_VISIBLE_DEVICES=all sees no GPU",
                    pods.probe_pod("envvar-all", IMAGE, WAIT, env={"NVIDIA_VISIBLE_DEVICES": "all"}),
                ),
            ):
                container, _allocated = kubelet.start(pod)
                got = kubelet.sees(container)
                check(name, got["uuids"] == [] and got["dev"] == [], got)
            kubelet.clean()
            kubelet.sandboxes = []
            for key in list(dm.pod_devices):
                dm.pod_ended(key[0])
            check("the role's validation pod lists its one GPU", *_validation_pod(kubelet, rendered, IMAGE, WAIT))
        finally:
            kubelet.clean()
    return checks


def _validation_pod(kubelet: _Kubelet, rendered: dict[str, Any], image: str, wait: str) -> tuple[bool, Any]:
    """The role's rendered validation pod as rendered (RuntimeClass, limits, security context), with the node's local
    image and a waiting command instead of NVIDIA's CUDA sample (no registry, no CUDA here); nvidia-smi -L by exec."""
    pod = json.loads(json.dumps(next(d for d in rendered["documents"] if d["kind"] == "Pod")))
    pod["metadata"]["uid"] = uuid.uuid4().hex
    spec = pod["spec"]["containers"][0]
    spec.update(image=image, command=["python3", "-c", wait])
    container, allocated = kubelet.start(pod)
    got = kubelet.sees(container)
    return got["uuids"] == allocated["nvidia.com/gpu"]["ids"], {"allocated": allocated["nvidia.com/gpu"]["ids"], **got}
