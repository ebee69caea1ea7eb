# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Device plugin <-> DRA driver on the Kubernetes node of the shared ``converged_fleet`` (``cri-kube``, trixie,
containerd 1.7; the device_plugin stage renders its documents, ``render_only``): ``device_plugin_gpu_allocation=dra``
through ``site.yml --tags toolkit,device_plugin`` replaces the device plugin's documents by the DRA driver's and
the shim stops honouring the device plugin's volume mounts (``/etc/gpufleet/runtime.json``); switching back restores
the documents and the host's files exactly as they were, nothing left over.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.integration._fleet_converged import KUBE

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
SITE = REPO / "playbooks" / "site.yml"
HOST_FILES = "cat /etc/gpufleet/runtime.json; ls -la --time-style=+ /etc/cdi /etc/containerd /etc/containerd/conf.d"


def _tree(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): p.read_text(encoding="utf-8") for p in sorted(folder.rglob("*")) if p.is_file()}


def _site(fleet, allocation: str, report_dir: Path) -> subprocess.CompletedProcess:
    # The report goes elsewhere: the converged run's report is read by other tests of this fleet.
    settings = dict(fleet.converged["settings"], device_plugin_gpu_allocation=allocation, report_dir=str(report_dir))
    cmd = [str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", str(fleet.inventory), "-i",
           str(fleet.converged["kube_inventory"]), "--limit", KUBE, "--tags", "toolkit,runtime,device_plugin",
           "-e", json.dumps(settings), str(SITE)]  # fmt: skip
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO / ".cache" / "collections"), ANSIBLE_FORCE_COLOR="0")
    return subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env, check=False, timeout=900)


def test_device_plugin_to_dra_and_back(converged_fleet, tmp_path):
    fleet = converged_fleet
    gitops = Path(fleet.converged["settings"]["device_plugin_render_dir"])
    node = fleet.node(KUBE)
    documents_before = _tree(gitops)
    host_before = node.run(HOST_FILES, check=True).stdout
    assert json.loads(node.run("cat /etc/gpufleet/runtime.json", check=True).stdout)["accept_volume_mounts"] is True
    assert "nvidia/k8s-device-plugin" in "".join(documents_before.values())

    to_dra = _site(fleet, "dra", tmp_path / "report-dra")
    assert to_dra.returncode == 0, to_dra.stdout[-6000:]
    documents = _tree(gitops)
    text = "".join(documents.values())
    assert "kind: DeviceClass" in text and "gpu.nvidia.com" in text and "dra-driver-nvidia-gpu" in text
    assert "nvidia/k8s-device-plugin" not in text  # neither the plugin nor GFD (the same image)
    config = json.loads(node.run("cat /etc/gpufleet/runtime.json", check=True).stdout)
    assert config["accept_volume_mounts"] is False and config["accept_envvar_unprivileged"] is False
    assert node.run(HOST_FILES, check=True).stdout != host_before

    back = _site(fleet, "device_plugin", tmp_path / "report-back")
    assert back.returncode == 0, back.stdout[-6000:]
    assert _tree(gitops) == documents_before
    assert node.run(HOST_FILES, check=True).stdout == host_before
