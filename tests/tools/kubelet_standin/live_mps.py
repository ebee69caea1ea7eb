# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""``make k8s-live``'s MPS scenario: NVIDIA's ``mps-control-daemon`` and plugin with the role's MPS configuration.

Both run in ``live.py``'s mount namespace on the NVML stub with the environment of the role's rendered DaemonSets.
How far they get is the check, and where they stop is recorded with NVIDIA's own error:

* ``mps-control-daemon`` (NVIDIA's ``cmd/mps-control-daemon/main.go`` and ``mps/daemon.go`` at v0.20.0) loads the
  configuration, finds the devices shared with MPS through NVML and starts one daemon per resource: ``Start`` first
  sets each GPU's compute mode to ``EXCLUSIVE_PROCESS`` with ``nvidia-smi -i <uuid> -c``, then runs
  ``nvidia-cuda-mps-control -d``. Neither program exists on a machine without NVIDIA's driver, so it stops there.
* The plugin (``internal/plugin/server.go`` ``Start`` -> ``mps.go`` ``waitForDaemon``) asks the control daemon for
  ``get_default_active_thread_percentage`` before it registers; with no daemon it does not register its resource.

Checked: the daemon accepts the role's configuration (its log prints the configuration it runs with, MPS on
``nvidia.com/gpu`` with the role's replicas) and reaches the daemon start; the plugin does not offer MPS replicas
while no daemon answers. Not run: an MPS server (CUDA clients, the pipe and shm directories in use).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

SETTINGS = {"mps": {"replicas": 2}}
KLOG_LINE = re.compile(r"^[EF]\d{4} [^\]]*\] (.*)$", re.M)


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


def checks(work: Path, binaries: Path, env_of: Any, render: Any, dm_class: Any) -> list[dict[str, Any]]:
    """Run both programs with the role's MPS configuration; -> the checks (each with the program's own error)."""
    rendered = render(SETTINGS)
    config = work / "config-mps.yaml"
    config.write_text(rendered["config_text"])
    base = dict(os.environ, LD_LIBRARY_PATH=str(work / "lib"), GPUFLEET_SIM_GPUS_JSON=str(work / "gpus-default.json"))
    out: list[dict[str, Any]] = []
    daemon = work / "mps-control-daemon.log"
    env = {**base, **env_of(rendered, "nvidia-device-plugin-mps-control-daemon", str(config)), "NODE_NAME": "k8s-live"}
    with daemon.open("w") as log:
        proc = subprocess.Popen([str(binaries / "mps-control-daemon")], env=env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and "Failed to start" not in daemon.read_text() and proc.poll() is None:
        time.sleep(0.5)
    proc.terminate()
    proc.wait(15)
    text = daemon.read_text()
    replicas = mps_replicas(_config_run(text))
    errors = _errors(text)
    out.append(
        {
            "check": "mps-control-daemon loads the rendered MPS config (MPS on nvidia.com/gpu, 2 replicas) and starts "
            "its daemon; it stops where NVIDIA's driver programs are needed (recorded)",
            "pass": replicas == {"nvidia.com/gpu": 2} and any("error setting compute mode" in e for e in errors),
            "detail": {"replicas": replicas, "errors": errors[:3]},
        }
    )
    plugin = work / "plugin-mps.log"
    env = {**base, **env_of(rendered, "nvidia-device-plugin", str(config))}
    dm = dm_class("/var/lib/kubelet/device-plugins")
    dm.start()
    with plugin.open("w") as log:
        proc = subprocess.Popen([str(binaries / "nvidia-device-plugin")], env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and "error waiting for MPS daemon" not in plugin.read_text():
            time.sleep(0.5)
        time.sleep(1)
        registered = dm.allocatable()
    finally:
        proc.terminate()
        proc.wait(15)
        dm.stop()
        if os.path.exists("/var/lib/kubelet/device-plugins/kubelet.sock"):
            os.unlink("/var/lib/kubelet/device-plugins/kubelet.sock")
    text = plugin.read_text()
    waited = [line for line in text.splitlines() if "error waiting for MPS daemon" in line]
    out.append(
        {
            "check": "the plugin with the MPS config offers no replicas while no MPS control daemon answers",
            "pass": not registered and bool(waited),
            "detail": {"registered": registered, "error": waited[:1]},
        }
    )
    return out
