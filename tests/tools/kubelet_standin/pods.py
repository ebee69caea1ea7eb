# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A pod spec turned into containerd CRI calls as the kubelet turns it, on the GPU path.

Sources (kubernetes, read 2026-11-27 from the code index; no release tag can be named for them here, for the reasons
``devicemanager.py`` gives):

* ``pkg/kubelet/cm/devicemanager/pod_devices.go`` ``deviceRunContainerOptions``: the Allocate answers of a
  container's resources merged: environment (a variable two answers set differently keeps the first), mounts and
  device specs by container path (first kept), annotations (first kept), CDI devices (each once).
* ``pkg/kubelet/kubelet_pods.go`` ``GenerateRunContainerOptions``: the device manager's options come first, the
  container's own ``env`` is appended after them (``opts.Envs = append(opts.Envs, envs...)``), and the runtime applies
  the list in order, so a pod's own variable of the same name wins over the plugin's. Here ``cri.Container.envs`` is a
  dict built in that order, which has the same result.
* ``pkg/kubelet/kuberuntime/kuberuntime_container.go`` ``generateContainerConfig``: command and args, the
  environment, the mounts, the annotations and CDI devices of the run options, ``securityContext.runAsUser`` /
  ``runAsGroup``; ``pkg/kubelet/kuberuntime/kuberuntime_sandbox.go``: the sandbox is run with the RuntimeClass's
  handler (``RunPodSandbox(config, runtimeHandler)``).

Resources are read from ``limits``, as the device manager does (extended resources: requests equal limits).
Device specs (``passDeviceSpecs``) are refused: ``tests/sim/cri.py`` does not encode CRI devices.
"""

from __future__ import annotations

import uuid
from typing import Any

from tests.sim.cri import Container, Mount, Pod

# The role's RuntimeClass: name -> handler (plugins/plugin_utils/device_plugin/daemonsets.py runtime_class).
RUNTIME_CLASSES = {"nvidia": "nvidia"}


def run_options(responses: list[dict[str, Any]]) -> dict[str, Any]:
    """pod_devices.go deviceRunContainerOptions over the container's Allocate answers, in resource order."""
    envs: dict[str, str] = {}
    mounts: dict[str, dict[str, Any]] = {}
    annotations: dict[str, str] = {}
    cdi: list[str] = []
    for r in responses:
        if r.get("devices"):
            raise ValueError("device specs (passDeviceSpecs) are not carried by tests/sim/cri.py")
        for k, v in r.get("envs", {}).items():
            envs.setdefault(k, v)
        for m in r.get("mounts", []):
            mounts.setdefault(m["container_path"], m)
        for k, v in r.get("annotations", {}).items():
            annotations.setdefault(k, v)
        cdi.extend(name for name in r.get("cdi_devices", []) if name not in cdi)
    return {"envs": envs, "mounts": list(mounts.values()), "annotations": annotations, "cdi_devices": cdi}


def limits(container: dict[str, Any]) -> dict[str, int]:
    return {k: int(v) for k, v in ((container.get("resources") or {}).get("limits") or {}).items()}


def sandbox(pod: dict[str, Any]) -> tuple[Pod, str]:
    """The sandbox config and the runtime handler of the pod's RuntimeClass ('' for the default runtime)."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    runtime_class = spec.get("runtimeClassName") or ""
    if runtime_class and runtime_class not in RUNTIME_CLASSES:
        raise ValueError(f"RuntimeClass {runtime_class!r} is unknown (known: {', '.join(RUNTIME_CLASSES)})")
    config = Pod(
        name=meta["name"],
        uid=meta.get("uid") or uuid.uuid4().hex,
        namespace=meta.get("namespace") or "default",
        annotations=dict(meta.get("annotations") or {}),
    )
    return config, RUNTIME_CLASSES.get(runtime_class, "")


def container_config(container: dict[str, Any], responses: list[dict[str, Any]]) -> Container:
    """kuberuntime_container.go generateContainerConfig for one container and its resources' Allocate answers."""
    options = run_options(responses)
    envs = dict(options["envs"])
    for e in container.get("env") or []:
        envs[e["name"]] = str(e.get("value", ""))  # the container's own, after the plugin's: it wins
    security = container.get("securityContext") or {}
    return Container(
        name=container["name"],
        image=container["image"],
        command=list(container.get("command") or []),
        args=list(container.get("args") or []),
        envs=envs,
        mounts=[Mount(m["container_path"], m["host_path"], bool(m.get("read_only"))) for m in options["mounts"]],
        annotations=options["annotations"],
        cdi_devices=options["cdi_devices"],
        run_as_user=security.get("runAsUser"),
        run_as_group=security.get("runAsGroup"),
    )


def probe_pod(
    name: str,
    image: str,
    wait: str,
    *,
    limits: dict | None = None,
    env: dict | None = None,
    runtime_class: str = "nvidia",
) -> dict[str, Any]:
    """A pod spec with one container that runs ``python3 -c wait`` in ``image``, asking for ``limits`` and setting
    ``env``; its name gets a random suffix and its uid is random, as the API server gives them."""
    container: dict[str, Any] = {"name": "probe", "image": image, "command": ["python3", "-c", wait]}
    if limits:
        container["resources"] = {"limits": limits}
    if env:
        container["env"] = [{"name": k, "value": v} for k, v in env.items()]
    return {
        "metadata": {"name": f"{name}-{uuid.uuid4().hex[:6]}", "uid": uuid.uuid4().hex},
        "spec": {"runtimeClassName": runtime_class, "containers": [container]},
    }
