# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""``make k8s-live``'s MPS scenario: NVIDIA's ``mps-control-daemon`` and plugin with the role's MPS configuration.

Both run in ``live.py``'s mount namespace on the NVML stub with the environment of the role's rendered DaemonSets,
the MPS root (the chart's ``mps.root``, here a folder of the run) on ``/mps`` as the DaemonSets mount it
(``mps.ContainerRoot`` is ``/mps`` in NVIDIA's binaries, hard-coded). What NVIDIA's programs do (v0.20.0):

* ``mps-control-daemon mount-shm`` (the init container) puts a tmpfs on ``/mps/shm``.
* ``mps-control-daemon`` (``cmd/mps-control-daemon/main.go``, ``mps/daemon.go``) loads the configuration, finds the
  devices shared with MPS through NVML and, per resource, sets each GPU's compute mode to ``EXCLUSIVE_PROCESS`` with
  ``nvidia-smi -i <uuid> -c``, runs ``nvidia-cuda-mps-control -d`` with the resource's pipe and log folders, sets the
  default pinned-memory limit per GPU and the active thread percentage (100 / replicas) through the control pipe, and
  writes ``/mps/<resource>/.started`` and ``/mps/.ready``; stopped, it quits the daemon and sets the mode back.
* The plugin (``internal/plugin/server.go`` ``Start`` -> ``mps.go`` ``waitForDaemon``) asks the control daemon for
  ``get_default_active_thread_percentage`` before it registers, and adds ``CUDA_MPS_PIPE_DIRECTORY`` and the pipe
  and shm mounts to each Allocate answer (``updateReponse``).

``nvidia-smi`` and ``nvidia-cuda-mps-control`` are NVIDIA's driver programs: Debian's ``nvidia-smi`` and
``nvidia-cuda-mps`` packages (550.163.01, non-free) carry them, and bench/k8s-live/README.md puts them beside the
built binaries. With them, the whole chain runs (the control daemon needs no GPU until a CUDA client connects, and
the stub NVML keeps the compute mode nvidia-smi sets); without them, the daemon stops at ``nvidia-smi`` and the plugin
does not register, which is what is checked then. Not run either way: an MPS server (a CUDA client, which needs a
GPU and its kernel driver).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

SETTINGS = {"mps": {"replicas": 2}}
RESOURCE = "nvidia.com/gpu"
MPS_ROOT = "/mps"  # mps.ContainerRoot
DRIVER_PROGRAMS = ("nvidia-smi", "nvidia-cuda-mps-control")
KLOG_LINE = re.compile(r"^[EF]\d{4} [^\]]*\] (.*)$", re.M)
SOCKET = "/var/lib/kubelet/device-plugins/kubelet.sock"


def _errors(text: str) -> list[str]:
    return [e for e in KLOG_LINE.findall(text) if e.strip()]


def _config_run(text: str) -> dict[str, Any] | None:
    """The configuration the daemon logs after 'Running with config:' (JSON), or None."""
    _head, found, tail = text.partition("Running with config:\n")
    if not found:
        return None
    depth, end = 0, 0
    for i, c in enumerate(tail):
        depth += {"{": 1, "}": -1}.get(c, 0)
        if depth == 0 and c == "}":
            end = i + 1
            break
    try:
        return json.loads(tail[:end])
    except ValueError:
        return None


def mps_replicas(config: dict[str, Any] | None) -> dict[str, int]:
    """Resource name -> replicas of the MPS sharing in a logged configuration."""
    resources = (((config or {}).get("sharing") or {}).get("mps") or {}).get("resources") or []
    return {r.get("name"): int(r.get("replicas", 0)) for r in resources}


def compute_modes(path: Path) -> dict[str, int]:
    """The stub NVML's ``compute-mode`` file: GPU UUID -> mode (3 Exclusive_Process) for GPUs not in Default."""
    if not path.exists():
        return {}
    return {u: int(m) for u, m in (line.split() for line in path.read_text().splitlines() if line.strip())}


def _wait(path: Path, words: tuple[str, ...], proc: subprocess.Popen, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and proc.poll() is None:
        if any(w in path.read_text() for w in words):
            return
        time.sleep(0.5)


def checks(work: Path, binaries: Path, env_of: Any, render: Any, dm_class: Any) -> list[dict[str, Any]]:
    """Run both programs with the role's MPS configuration; -> the checks (each with the programs' own errors)."""
    rendered = render(SETTINGS)
    config = work / "config-mps.yaml"
    config.write_text(rendered["config_text"])
    full = all((binaries / p).is_file() for p in DRIVER_PROGRAMS)
    path = f"{binaries}:{os.environ.get('PATH', '/usr/bin:/bin')}" if full else os.environ.get("PATH", "/usr/bin:/bin")
    stub = work / "stub-mps"
    stub.mkdir(exist_ok=True)
    (stub / "gpus.json").write_text((work / "gpus-default.json").read_text())
    base = dict(
        os.environ, PATH=path, LD_LIBRARY_PATH=str(work / "lib"), GPUFLEET_SIM_GPUS_JSON=str(stub / "gpus.json")
    )
    root = work / "mps-root"
    root.mkdir(exist_ok=True)
    made = not os.path.exists(MPS_ROOT)
    if made:
        os.mkdir(MPS_ROOT)  # the mount point; this namespace's mounts are private, the folder is not
    subprocess.run(["mount", "--bind", str(root), MPS_ROOT], check=True)
    try:
        return _run(work, binaries, rendered, config, base, stub, full, env_of, dm_class)
    finally:
        subprocess.run(["umount", "-R", MPS_ROOT], check=False)
        if made:
            with contextlib.suppress(OSError):
                os.rmdir(MPS_ROOT)


def _run(work, binaries, rendered, config, base, stub, full, env_of, dm_class) -> list[dict[str, Any]]:  # noqa: PLR0917
    out: list[dict[str, Any]] = []
    daemon_env = {**base, **env_of(rendered, "nvidia-device-plugin-mps-control-daemon", str(config))}
    daemon_env["NODE_NAME"] = "k8s-live"
    shm = subprocess.run([str(binaries / "mps-control-daemon"), "mount-shm"], env=daemon_env, capture_output=True,
                         text=True, check=False)  # fmt: skip
    out.append({"check": "mps-control-daemon mount-shm (the init container) puts a tmpfs on /mps/shm",
                "pass": shm.returncode == 0 and os.path.ismount(f"{MPS_ROOT}/shm"),
                "detail": (shm.stdout + shm.stderr)[-300:]})  # fmt: skip
    daemon_log = work / "mps-control-daemon.log"
    with daemon_log.open("w") as log:
        daemon = subprocess.Popen([str(binaries / "mps-control-daemon")], env=daemon_env, stdout=log,
                                  stderr=subprocess.STDOUT)  # fmt: skip
    _wait(daemon_log, ("Failed to start", "Starting log tailer"), daemon, 30)
    time.sleep(1)
    text = daemon_log.read_text()
    replicas, errors = mps_replicas(_config_run(text)), _errors(text)
    gpus = sorted(g["uuid"] for g in json.loads((stub / "gpus.json").read_text())["gpus"])
    modes = compute_modes(stub / "compute-mode")
    pipe = f"{MPS_ROOT}/{RESOURCE}/pipe"
    if full:
        asked = subprocess.run(["nvidia-cuda-mps-control"], input="get_default_active_thread_percentage\n",
                               env={**base, "CUDA_MPS_PIPE_DIRECTORY": pipe}, capture_output=True, text=True,
                               timeout=20, check=False)  # fmt: skip
        started = os.path.exists(f"{MPS_ROOT}/{RESOURCE}/.started") and os.path.exists(f"{MPS_ROOT}/.ready")
        ok = (replicas == {RESOURCE: 2} and not errors and started and modes == dict.fromkeys(gpus, 3)
              and asked.stdout.strip() == "50.0")  # fmt: skip
        name = ("mps-control-daemon starts NVIDIA's MPS control daemon with the rendered config (nvidia.com/gpu, 2 "
                "replicas): each GPU Exclusive_Process, 50% active threads, .started and .ready written")  # fmt: skip
        detail = {"replicas": replicas, "errors": errors[:3], "compute_modes": modes, "started": started,
                  "active_thread_percentage": asked.stdout.strip() or asked.stderr[-200:]}  # fmt: skip
    else:
        ok = replicas == {RESOURCE: 2} and any("error setting compute mode" in e for e in errors)
        name = ("mps-control-daemon loads the rendered MPS config (MPS on nvidia.com/gpu, 2 replicas) and stops where "
                "NVIDIA's driver programs are needed (no nvidia-smi, nvidia-cuda-mps-control; recorded)")  # fmt: skip
        detail = {"replicas": replicas, "errors": errors[:3]}
    out.append({"check": name, "pass": ok, "detail": detail})
    try:
        out.extend(_plugin(work, binaries, rendered, config, base, full, env_of, dm_class, len(gpus)))
    finally:
        daemon.terminate()
        daemon.wait(30)
    if full:
        after = compute_modes(stub / "compute-mode")
        out.append({"check": "stopping mps-control-daemon quits the MPS daemon and sets the GPUs back to Default",
                    "pass": after == {} and "Stopped MPS control daemon" in daemon_log.read_text(),
                    "detail": {"compute_modes": after}})  # fmt: skip
    return out


def _plugin(work, binaries, rendered, config, base, full, env_of, dm_class, gpus) -> list[dict[str, Any]]:  # noqa: PLR0917
    plugin_log = work / "plugin-mps.log"
    env = {**base, **env_of(rendered, "nvidia-device-plugin", str(config))}
    dm = dm_class("/var/lib/kubelet/device-plugins")
    dm.start()
    with plugin_log.open("w") as log:
        proc = subprocess.Popen([str(binaries / "nvidia-device-plugin")], env=env, stdout=log, stderr=subprocess.STDOUT)
    out: list[dict[str, Any]] = []
    try:
        if full:
            try:
                dm.wait_for(RESOURCE, timeout=30)
            except TimeoutError as exc:
                errors = _errors(plugin_log.read_text())[:3]
                return [
                    {"check": "the plugin registers its MPS replicas", "pass": False, "detail": [str(exc), *errors]}
                ]
            count = dm.allocatable().get(RESOURCE)
            answer = dm.allocate("mps-pod", "c", {RESOURCE: 1})[RESOURCE]["response"]
            host = env.get("MPS_ROOT", "")
            mounts = sorted((m["container_path"], m["host_path"]) for m in answer.get("mounts", []))
            want = [("/dev/shm", f"{host}/shm"), (f"{MPS_ROOT}/{RESOURCE}/pipe", f"{host}/{RESOURCE}/pipe")]
            name = f"the plugin registers once the MPS daemon answers: allocatable {RESOURCE} is {2 * gpus} (2 per GPU)"
            out.append({"check": name, "pass": count == 2 * gpus, "detail": dm.allocatable()})
            out.append({"check": "a pod's Allocate answer carries CUDA_MPS_PIPE_DIRECTORY and mounts the MPS root's "
                        "pipe and shm folders (MPS_ROOT of the rendered DaemonSet)",
                        "pass": answer["envs"].get("CUDA_MPS_PIPE_DIRECTORY") == f"{MPS_ROOT}/{RESOURCE}/pipe"
                        and all(w in mounts for w in want),
                        "detail": {"envs": answer["envs"], "mounts": mounts}})  # fmt: skip
        else:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and "error waiting for MPS daemon" not in plugin_log.read_text():
                time.sleep(0.5)
            time.sleep(1)
            waited = [line for line in plugin_log.read_text().splitlines() if "error waiting for MPS daemon" in line]
            registered = dm.allocatable()
            name = "the plugin with the MPS config offers no replicas while no MPS control daemon answers"
            detail = {"registered": registered, "error": waited[:1]}
            out.append({"check": name, "pass": not registered and bool(waited), "detail": detail})
    finally:
        proc.terminate()
        proc.wait(15)
        dm.stop()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(SOCKET)
    return out
