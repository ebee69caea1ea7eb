# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""A storm of GPU container starts while the CDI spec and index are rewritten and the runtime re-registered.

The small storm of ``make test``: 14 starts on each node of the session's ``e2e_fleet`` (bookworm: docker 20.10 and
containerd 1.6; trixie: docker 26, containerd 1.7, podman 5.4; sid: docker 28, containerd 2.1), 6 at a time per node,
all nodes at once, the mix of ``_storm.py`` (docker through the shim by ``--gpus`` and ``NVIDIA_VISIBLE_DEVICES``,
docker's native CDI, ``ctr run --runc-binary <shim>``, podman's CDI; all GPUs, one by index, one by UUID, none), while
``gpufleet-cdi-refresh --force`` rewrites the spec and the index in a loop on every node and ansible-playbook runs
``gpufleet.nvidia.cdi_spec`` and ``gpufleet.nvidia.container_runtime`` again and again from the controller. Zero failed
starts, each container's ``/dev/nvidia<N>`` exactly the requested GPUs'. The spec, the index and ``daemon.json`` are
put back as they were (the fleet is shared). The full storm (at least 200 starts) is ``make bench``'s (``storm``).
"""

from __future__ import annotations

import hashlib
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration import _storm

pytestmark = [pytest.mark.integration]

REPO = Path(__file__).resolve().parents[2]
PER_NODE, PARALLEL = 14, 6
ENGINES = {
    "bookworm": ["docker", "containerd"],  # podman 4.3 reads no cdiVersion 0.6.0 spec (test_cdi_e2e's xfail)
    "trixie": ["docker", "containerd", "podman"],
    "sid": ["docker", "containerd"],
}


def _playbook(inventory: Path, playbook: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO / ".cache" / "collections"), ANSIBLE_FORCE_COLOR="0")
    cmd = [str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", str(inventory), str(playbook)]
    return subprocess.run(cmd, check=False, capture_output=True, text=True, cwd=REPO, env=env, timeout=600)


def _state(node) -> dict[str, str]:
    return {
        path: hashlib.sha256(node.run(["cat", path], check=True).stdout.encode()).hexdigest()
        for path in _storm.STATE_FILES
    }


def test_start_storm_while_the_spec_is_rewritten(e2e_fleet, tmp_path):
    nodes = {name: e2e_fleet.node(name) for name in e2e_fleet.nodes}
    before = {name: _state(node) for name, node in nodes.items()}
    playbook = tmp_path / "regenerate.yml"
    playbook.write_text(_storm.REGENERATE_PLAYBOOK)
    tag = "storm" + secrets.token_hex(3)
    plan = {
        name: {
            "container": node.container,
            "suite": node.desc["suite"],
            "engines": ENGINES[node.desc["suite"]],
            "count": PER_NODE,
            "parallel": PARALLEL,
            "docker_cdi": node.desc["suite"] != "bookworm",
            "tag": tag,
        }
        for name, node in nodes.items()
    }
    result = _storm.storm(plan, lambda: _playbook(e2e_fleet.inventory, playbook))
    starts = _storm.starts(result)
    dist = _storm.distribution([s["seconds"] for s in starts]) if starts else {}
    print(
        f"[storm] {len(starts)} starts in {result['wall']:.0f}s, {len(result['regenerations'])} playbook runs, "
        f"refreshes {[n['refreshes']['ok'] for n in result['nodes'].values()]}, "
        f"{sum(1 for s in starts if s.get('output_lost'))} outputs lost by the client and run again; start time (s): "
        + ", ".join(f"{k} {v:.2f}" for k, v in dist.items() if k != "n"),
        file=sys.stderr,
    )
    assert not _storm.failures(result), "\n".join(_storm.failures(result))
    assert len(starts) == PER_NODE * len(nodes)
    # Every kind of request ran, on every engine.
    kinds = {(s["engine"], s["request"]) for s in starts}
    assert {e for e, _r in kinds} == {"docker", "docker-cdi", "containerd", "podman"}, kinds
    assert {r for _e, r in kinds} >= {"--gpus all", "NVIDIA_VISIBLE_DEVICES=uuid", "NVIDIA_VISIBLE_DEVICES=none"}
    for name, node in result["nodes"].items():
        refreshes = node["refreshes"]
        assert refreshes["ok"] >= 1 and refreshes["failed"] == 0, (name, refreshes)
    assert result["regenerations"], "no playbook run overlapped the storm"
    assert all(r["rc"] == 0 for r in result["regenerations"]), result["regenerations"]
    final = result["final"]
    assert final.returncode == 0, final.stdout[-3000:]
    assert {name: _state(node) for name, node in nodes.items()} == before
