# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""``make k8s-live``'s shared and partitioned GPUs as real containerd pods (``live.py`` runs this per node).

Time slicing: NVIDIA's plugin with the role's time-slicing configuration (4 replicas, ``packed``) on the node's GPUs;
the stand-in admits 4 pods asking for ``nvidia.com/gpu: 1`` and runs them on the node's containerd. Each pod's
allocated replica is ``<GPU UUID>::<n>``; the container sees that GPU and only it (``nvidia-smi -L`` and
``/dev/nvidia<N>``), as the replicas share the one device.

MIG: the node's GPUs get a layout through the collection's ``mig_layout`` module (two ``1g.5gb`` per GPU, kept by the
NVML stub in ``/etc/gpufleet-sim/mig-state``), the node's CDI spec and the runtime shim's index are made again
(``gpufleet-cdi-refresh --force``, with the runtime role's recorded options), and the plugin runs with the role's
``single`` or ``mixed`` configuration on a copy of the node's stub state, so it lists the node's MIG UUIDs. Each pod
gets one MIG device; the container gets its parent GPU's device node only (not the other GPU's) and exactly the
``/dev/nvidia-caps`` nodes the node's CDI spec gives that MIG device. On the simulated nodes that is none: they have
no ``/proc/driver/nvidia-caps/mig-minors`` (tests/sim/README.md), so the spec names no GPU- or compute-instance
capability node, where a real node's names two. What the container's ``nvidia-smi -L`` prints is recorded, not
checked: NVIDIA's NVML in a container lists the MIG devices whose capability nodes it can open, the stub does not
look at them (it lists the parent GPU).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
MIG_LAYOUT = [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.5gb": 2}}]
MIG_OFF = [{"devices": "all", "mig-enabled": False}]
CAPS_PROBE = (
    "import os, json; d = '/dev/nvidia-caps'; print(json.dumps(sorted(os.listdir(d)) if os.path.isdir(d) else []))"
)


def module(inventory: str, host: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    """One collection module on ``host`` through ``ansible -m`` (json callback): its result."""
    env = dict(
        os.environ,
        ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".cache" / "collections"),
        ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
        ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json",
    )
    res = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "ansible"), "-i", inventory, host, "-m", f"gpufleet.nvidia.{name}",
         "-a", json.dumps(args)],
        check=False, capture_output=True, text=True, env=env, cwd=ROOT, timeout=300,
    )  # fmt: skip
    try:
        return json.loads(res.stdout)["plays"][0]["tasks"][0]["hosts"][host]
    except (ValueError, KeyError, IndexError):
        return {"failed": True, "msg": f"rc={res.returncode} {res.stdout[-2000:]} {res.stderr[-1000:]}"}


def docker_exec(container: str, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", "exec", container, *argv], capture_output=True, text=True, check=False)


def set_mig(node: dict[str, Any], layout: list[dict[str, Any]]) -> dict[str, Any]:
    """The layout on the node, then its CDI spec and shim index made again; -> the module's result."""
    result = module(node["inventory"], node["name"], "mig_layout", {"layout": layout})
    refresh = docker_exec(node["container"], "gpufleet-cdi-refresh", "--force")
    if refresh.returncode != 0:
        result = {**result, "failed": True, "refresh": (refresh.stdout + refresh.stderr)[-1000:]}
    return result


def mig_state(node: dict[str, Any]) -> str:
    return docker_exec(node["container"], "cat", "/etc/gpufleet-sim/mig-state").stdout


def cdi_mig_nodes(node: dict[str, Any]) -> dict[str, list[str]]:
    """MIG UUID -> the device node paths the node's CDI spec gives that MIG device."""
    import yaml

    spec = yaml.safe_load(docker_exec(node["container"], "cat", "/etc/cdi/nvidia.yaml").stdout or "{}") or {}
    out: dict[str, list[str]] = {}
    for dev in spec.get("devices") or []:
        nodes = [n["path"] for n in (dev.get("containerEdits") or {}).get("deviceNodes") or []]
        names = {dev.get("name", "")} | set((dev.get("annotations") or {}).values())
        for name in names:
            if str(name).startswith("MIG-"):
                out[name] = nodes
    return out


def run_pods(kubelet: Any, resource: str, count: int, image: str, wait: str) -> list[dict[str, Any]]:
    """``count`` pods asking for one ``resource`` each, started on the node; what each was given and sees."""
    from tests.tools.kubelet_standin import pods

    seen = []
    for i in range(count):
        container, allocated = kubelet.start(pods.probe_pod(f"share-{i}", image, wait, limits={resource: 1}))
        got = kubelet.sees(container)
        rc, out, _err = kubelet.cri.exec_sync(container, ["python3", "-c", CAPS_PROBE], timeout=60)
        got["caps"] = json.loads(out) if rc == 0 else None
        seen.append({"allocated": allocated[resource]["ids"], **got})
    return seen


def time_slicing_ok(seen: list[dict[str, Any]], minor: dict[str, int]) -> bool:
    """4 replicas of one GPU, each container seeing that GPU (nvidia-smi -L and its /dev/nvidia<N>) and no other."""
    gpus = {s["allocated"][0].split("::")[0] for s in seen}
    if len(seen) != 4 or len(gpus) != 1 or len({s["allocated"][0] for s in seen}) != 4:
        return False
    gpu = gpus.pop()
    return all(s["uuids"] == [gpu] and s["dev"] == [f"nvidia{minor[gpu]}"] for s in seen)


def mig_ok(seen: list[dict[str, Any]], parents: dict[str, str], minor: dict[str, int], cdi: dict[str, list]) -> bool:
    """Distinct MIG devices, each container with its parent GPU's node only and exactly the capability nodes the
    node's CDI spec gives that MIG device (none on the simulated nodes, which have no
    ``/proc/driver/nvidia-caps/mig-minors``; a real node's spec names its GPU- and compute-instance nodes)."""
    ids = [s["allocated"][0] for s in seen]
    if len(set(ids)) != len(ids) or not all(i in parents and i in cdi for i in ids):
        return False
    for s, mig in zip(seen, ids):
        caps = sorted(os.path.basename(p) for p in cdi[mig] if p.startswith("/dev/nvidia-caps/"))
        if s["dev"] != [f"nvidia{minor[parents[mig]]}"] or s["caps"] != caps:
            return False
    return True


def mig_parents(state: str, gpus: list[dict[str, Any]]) -> dict[str, str]:
    """MIG UUID -> parent GPU UUID, as the NVML stub names the instances of its ``mig-state`` (the FNV-1a hash of the
    parent's UUID, the GPU instance id, the GPU's index): tests/sim/nvml/nvml_stub.c ``mig_rebuild``."""
    index = {g["uuid"]: g for g in gpus}
    out = {}
    for line in state.splitlines():
        parts = line.split()
        if len(parts) != 6 or parts[0] != "gi" or parts[1] not in index:
            continue
        parent, gi = parts[1], int(parts[2])
        h = 2166136261
        for c in parent.encode():
            h = ((h ^ c) * 16777619) & 0xFFFFFFFF
        out[f"MIG-{h:08x}-{gi:04x}-0000-0000-{int(index[parent]['index']):012x}"] = parent
    return out


def pod_checks(node: dict[str, Any], dm: Any, resource: str, mig: dict[str, Any] | None) -> list[dict]:
    """The pods of one sharing scenario on the node's containerd; the plugin is registered with ``dm``."""
    from tests.integration._fleet_converged import IMAGE, WAIT
    from tests.sim.cri import Cri, NodeSocket
    from tests.tools.kubelet_standin.live_cri import _Kubelet

    minor = {g["uuid"]: int(g["minor"]) for g in node["gpus"]}
    prefix = f"containerd {node['containerd']}"
    with NodeSocket(node["container"]) as target, Cri(target) as cri:
        kubelet = _Kubelet(dm, cri)
        try:
            if mig is None:
                seen = run_pods(kubelet, resource, 4, IMAGE, WAIT)
                name = "4 pods with nvidia.com/gpu: 1 get replicas of one GPU (packed) and each lists exactly it"
                return [{"check": f"{prefix}: {name}", "pass": time_slicing_ok(seen, minor), "detail": seen}]
            seen = run_pods(kubelet, resource, 2, IMAGE, WAIT)
            name = (
                f"2 pods with {resource}: 1 get different MIG devices, each sees its parent GPU's device node only "
                "and exactly the capability nodes the node's CDI spec gives that MIG device"
            )
            ok = mig_ok(seen, mig["parents"], minor, mig["cdi"])
            return [{"check": f"{prefix}: {name}", "pass": ok, "detail": seen}]
        finally:
            kubelet.clean()
            for key in list(dm.pod_devices):
                dm.pod_ended(key[0])
