# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The fleet one full ``site.yml`` converged, shared by ``test_cri_pods.py``, ``test_guide_commands.py``,
``test_stages_alone.py`` and ``test_ee_runner.py`` (fixture ``converged_fleet``): one bring-up and one converge for
all four (CI time is limited).

Four GPU nodes, ``driver_packages: true``, 2 GPUs each, the default engines of each suite, and a CPU-only node:

* ``cri-bookworm``: docker 20.10, containerd 1.6 (config v2);
* ``cri-trixie``: docker 26, containerd 1.7, podman 5.4;
* ``cri-sid``: docker 28, containerd 2.1 (config v3);
* ``cri-kube`` (trixie) in the inventory group ``kube_nodes``: the toolkit role tells the shim to ignore an
  unprivileged container's ``NVIDIA_VISIBLE_DEVICES`` there and to take the device plugin's volume mounts
  (docs/security.md); the device plugin stage renders its documents (``render_only``);
* ``cri-cpu`` (bookworm, docker and containerd, no GPU): discovered and reported, never changed. Its configuration
  trees and packages are recorded (``_host_state.snapshot``) right before ``site.yml`` and right after it, for
  ``test_stages_alone.py``.

Before ``tests/sim/playbooks/prepare.yml`` and ``site.yml`` (defaults, apart from where the report and the device
plugin documents go) each node gets what a Kubernetes site would have and the collection does not make: the sandbox
("pause") image that containerd names in its configuration, under that name, in the ``k8s.io`` namespace (no registry
is reachable; it is the node's mini image with a process that waits for SIGTERM), and ``restrict_oom_score_adj =
true`` in the CRI table of ``/etc/containerd/config.toml`` (the nodes run without CAP_SYS_RESOURCE, tests/sim/README.md,
and a sandbox asks for oom_score_adj -998; the runtime role's drop-in carries that setting over).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

from tests.integration._host_state import snapshot

REPO = Path(__file__).resolve().parents[2]
SITE = REPO / "playbooks" / "site.yml"
PREPARE = REPO / "tests" / "sim" / "playbooks" / "prepare.yml"
FLEET = {
    "nodes": [
        {"name": name, "suite": suite, "driver_state": "loaded", "driver_packages": True, "gpus": 2}
        for name, suite in (
            ("cri-bookworm", "bookworm"),
            ("cri-trixie", "trixie"),
            ("cri-sid", "sid"),
            ("cri-kube", "trixie"),
        )
    ]
    + [{"name": "cri-cpu", "suite": "bookworm", "engines": ["docker", "containerd"], "gpus": []}]
}
KUBE = "cri-kube"
# Slurm from Debian's packages on cri-bookworm, controller and GPU node in one (the other GPU nodes run trixie's or
# sid's Slurm, which bookworm's slurmctld 22.05 cannot serve): installed before site.yml with the admin's slurm.conf,
# which includes the node lines the slurm stage writes; the daemons start when the stage restarts them.
SLURM = "cri-bookworm"
SLURM_CONF = """ClusterName=gpufleet-sim
SlurmctldHost={node}
AuthType=auth/munge
ProctrackType=proctrack/cgroup
TaskPlugin=task/cgroup
SelectType=select/cons_tres
GresTypes=gpu
ReturnToService=2
SlurmdSpoolDir=/var/lib/slurm/slurmd
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
Include /etc/slurm/gpufleet-nodes.conf
PartitionName=gpu Nodes=ALL Default=YES State=UP MaxTime=INFINITE
"""
SLURM_PREP = rf"""
set -eu
export DEBIAN_FRONTEND=noninteractive
printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
apt-get update -qq
apt-get install -y -qq --no-install-recommends munge slurmd slurmctld slurm-client >/dev/null
rm -f /usr/sbin/policy-rc.d
cat > /etc/slurm/slurm.conf <<'CONF'
{SLURM_CONF.format(node=SLURM)}CONF
systemctl restart munge
"""
CPU = "cri-cpu"
IMAGE = "gpufleet-sim/cri:latest"
MINI = "gpufleet-sim/mini:latest"
WAIT = "import signal, sys; signal.signal(signal.SIGTERM, lambda *a: sys.exit(0)); signal.pause()"
# containerd 2.1 gives every pod sandbox 2 CPU shares, unconditionally (internal/cri/server/podsandbox/
# sandbox_run_linux.go:180 at v2.1.9, 2026-06-18), and runc then writes cpu.weight, which a sid node on a cgroup v1
# host cannot have (its cgroup2 directory has no controllers, tests/sim/README.md). On such a node only, /usr/bin/runc
# (Debian's link to /usr/sbin/runc, the one the shim runs) becomes this wrapper, which drops the shares from the
# bundle and runs /usr/sbin/runc: what `ctr run --cpu-shares 0` does for the sid node elsewhere in the tests.
RUNC_WRAPPER = """#!/usr/bin/python3
# gpufleet-sim (tests only): this node's cgroup has no cpu controller; drop the CPU shares a bundle asks for.
import json, os, sys
args = sys.argv[1:]
if "create" in args or "run" in args:
    bundle = "."
    for i, arg in enumerate(args):
        if arg in ("--bundle", "-b") and i + 1 < len(args):
            bundle = args[i + 1]
        elif arg.startswith("--bundle="):
            bundle = arg.split("=", 1)[1]
    path = os.path.join(bundle, "config.json")
    try:
        with open(path) as f:
            spec = json.load(f)
        cpu = spec.get("linux", {}).get("resources", {}).get("cpu") or {}
        if "shares" in cpu:
            del cpu["shares"]
            with open(path, "w") as f:
                json.dump(spec, f)
    except (OSError, ValueError):
        pass
os.execv("/usr/sbin/runc", ["runc", *args])
"""
# On each node, before site.yml (NODE_PREP, which starts with CRI_PREP): the CRI table of config.toml gets
# restrict_oom_score_adj; the mini image (with Python) goes into the engines (so prepare.yml finds it there), and into
# containerd's k8s.io namespace as IMAGE and under the sandbox image name containerd's configuration gives
# (sandbox_image in v2, pinned_images.sandbox in v3).
# CRI_PREP, which test_nonroot_gpu's podman-only node shares: restrict_oom_score_adj, containerd restarted, $sandbox
# named, the mini image (with Python) built and loaded into the node's engines.
CRI_PREP = rf"""
set -eu
cri='\[plugins."io.containerd.grpc.v1.cri"\]'
sed -i "s/^\( *\)$cri\$/&\n\1  restrict_oom_score_adj = true/" /etc/containerd/config.toml
grep -q 'restrict_oom_score_adj = true' /etc/containerd/config.toml
systemctl restart containerd
sandbox=$(containerd config dump | sed -n "s/^ *\(sandbox_image\|sandbox\) = [\"']\([^\"']*\)[\"'].*/\2/p" | head -1)
test -n "$sandbox"
gpufleet-sim-mini-image {MINI} --python >/dev/null
"""
NODE_PREP = (
    CRI_PREP
    + rf"""cid=$(docker create {MINI} /bin/true)
docker export "$cid" | docker import -c 'ENTRYPOINT ["/usr/bin/python3", "-c", "{WAIT}"]' - "$sandbox" >/dev/null
docker rm "$cid" >/dev/null
docker tag "$sandbox" {IMAGE}
docker save "$sandbox" {IMAGE} | ctr -n k8s.io images import - >/dev/null
if [ -f /sys/fs/cgroup/cgroup.controllers ] && ! grep -qw cpu /sys/fs/cgroup/cgroup.controllers; then
  cat > /usr/bin/runc.gpufleet-sim <<'WRAPPER'
{RUNC_WRAPPER}WRAPPER
  chmod 755 /usr/bin/runc.gpufleet-sim
  mv -f /usr/bin/runc.gpufleet-sim /usr/bin/runc
fi
echo "$sandbox"
"""
)


def converge(fleet: Any, tmp: Path) -> None:
    """Prepare each node, then run prepare.yml and site.yml on the fleet; the report lands in ``tmp/report``.

    Sets ``fleet.converged``: ``kube_inventory`` (the second inventory source, with ``kube_nodes``), ``settings`` (the
    extra vars of the run: where the report and the device plugin's documents went), ``site`` (the CompletedProcess
    of site.yml), ``cpu_before_site`` and ``cpu_after_site`` (the CPU-only node's snapshots)."""
    start = time.monotonic()
    with ThreadPoolExecutor(len(fleet.nodes)) as pool:
        prep = {n: NODE_PREP + (SLURM_PREP if n == SLURM else "") for n in fleet.nodes}
        preps = dict(zip(fleet.nodes, pool.map(lambda n: fleet.node(n).run(prep[n], timeout=600), fleet.nodes)))
    for name, res in preps.items():
        assert res.rc == 0, f"{name}: node preparation failed\n{res.stdout}\n{res.stderr}"
    kube = tmp / "kube.yml"
    kube.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "children": {
                        "kube_nodes": {"hosts": {KUBE: None}},
                        "slurm_controllers": {"hosts": {SLURM: {"slurm_constrain_devices": True}}},
                    }
                }
            }
        )
    )
    settings = {
        "device_plugin_mode": "render_only",
        "device_plugin_render_dir": str(tmp / "gitops"),
        "report_dir": str(tmp / "report"),
    }
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO / ".cache" / "collections"), ANSIBLE_FORCE_COLOR="0")
    fleet.converged = {"kube_inventory": kube, "settings": settings}
    for playbook in (PREPARE, SITE):
        if playbook == SITE:
            fleet.converged["cpu_before_site"] = snapshot(fleet.node(CPU))
        cmd = [str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", str(fleet.inventory), "-i", str(kube)]
        proc = subprocess.run(
            [*cmd, "-e", json.dumps(settings), str(playbook)],
            capture_output=True,
            text=True,
            cwd=REPO,
            env=env,
            check=False,
        )
        why = f"rc={proc.returncode}\n{proc.stdout[-6000:]}\n{proc.stderr[-2000:]}"
        assert proc.returncode == 0, f"{playbook.name}: {why}"
    fleet.converged["site"] = proc
    fleet.converged["cpu_after_site"] = snapshot(fleet.node(CPU))
    fleet.timings["converge"] = time.monotonic() - start
    print(f"[converged] fleet {fleet.prefix} prepared and converged in {fleet.timings['converge']:.0f}s")
