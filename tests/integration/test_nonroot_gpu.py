# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Non-root containers get their GPUs on hosts whose driver makes the device files 0660 for a group.

A common hardening sets the nvidia module's ``options nvidia NVreg_DeviceFileGID=44 NVreg_DeviceFileMode=0660`` in
``/etc/modprobe.d`` (group ``video``): only root and that group may open ``/dev/nvidia*``. The collection then gives
the container's GPU nodes the host's owner, group and mode, and the container's process the group
(``additionalGids``): through the shim's edit (docker --gpus, CRI pods on the ``nvidia`` runtime) and through the CDI
spec, at cdiVersion 0.7.0, where every CDI engine on the host reads it (docker 26, podman 5.4, containerd 1.7.24 on
trixie); where one does not (Debian 12's podman 4.3: 0.5.0) the spec stays as before and its containers get the
nodes as the engine makes them by default (0666, the container's user), so their GPU keeps working too.

One fleet of this file's own (two nodes; CI time is limited): ``nr-bookworm`` (docker 20.10, containerd 1.6, podman
4.3) and ``nr-trixie`` (docker 26, containerd 1.7, podman 5.4), ``driver_packages: true``, one GPU each,
``device_files: {gid: 44, mode: "0660"}`` (the simulated node writes the modprobe.d line and the driver's
``params``, and makes the nodes root:44 0660; its NVML stub, like NVIDIA's library, fails with "Insufficient
Permissions" when a process may not open them). The nodes get what a Kubernetes site has for CRI pods
(``_fleet_converged.NODE_PREP``), then ``prepare.yml`` and ``site.yml`` with the defaults.

Every command runs as ``--user 1000:1000`` (a uid and gid the image does not know, so no group of the image's
``/etc/group`` helps). The one command expected to fail uses a copy of the spec with ``additionalGids`` taken out,
under a kind of its own: it shows that the group is what makes the GPU usable, so these tests can fail.
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
import yaml

from tests.integration import _fleet_converged
from tests.integration.conftest import _ansible_playbook
from tests.sim.cri import Container, Cri, CriError, NodeSocket, Pod

pytestmark = pytest.mark.integration

if os.environ.get("CI") != "true":
    pytest.importorskip("grpc", reason="grpcio (requirements/dev.in) is needed for the CRI client: make setup")

GROUP = 44
FLEET = {
    "nodes": [
        {
            "name": "nr-bookworm",
            "suite": "bookworm",
            "driver_packages": True,
            "engines": ["docker", "containerd", "podman"],
            "gpus": 1,
            "device_files": {"gid": GROUP, "mode": "0660"},
        },
        {
            "name": "nr-trixie",
            "suite": "trixie",
            "driver_packages": True,
            "gpus": 1,
            "device_files": {"gid": GROUP, "mode": "0660"},
        },
        {
            "name": "nr-cdi07",
            "suite": "trixie",
            "driver_packages": True,
            "engines": ["containerd", "podman"],
            "gpus": 1,
            "device_files": {"gid": GROUP, "mode": "0660"},
        },
    ]
}
BOOKWORM, TRIXIE, CDI07 = "nr-bookworm", "nr-trixie", "nr-cdi07"
# The node without docker gets _fleet_converged.CRI_PREP, then through podman what NODE_PREP does with docker: the
# mini image also in containerd's default namespace (for the validate stage), the sandbox image under the name
# containerd's configuration gives and the pod image, in containerd's k8s.io namespace.
PODMAN_PREP = (
    _fleet_converged.CRI_PREP
    + rf"""mini={_fleet_converged.MINI}
podman save --format docker-archive "$mini" | ctr -n default images import - >/dev/null
src=$(ctr -n default images ls -q | grep "/$mini\$" | head -1)
[ "$src" = "docker.io/$mini" ] || ctr -n default images tag "$src" "docker.io/$mini" >/dev/null
cid=$(podman create {_fleet_converged.MINI} /bin/true)
entrypoint='ENTRYPOINT ["/usr/bin/python3", "-c", "{_fleet_converged.WAIT}"]'
podman export "$cid" | podman import -c "$entrypoint" - "$sandbox" >/dev/null
podman rm "$cid" >/dev/null
podman save --format docker-archive "$sandbox" | ctr -n k8s.io images import - >/dev/null
ctr -n k8s.io images tag "$sandbox" docker.io/{_fleet_converged.IMAGE} >/dev/null
echo "$sandbox"
"""
)
IMAGE = _fleet_converged.MINI
CRI_IMAGE = _fleet_converged.IMAGE
USER = ["--user", "1000:1000"]
SMI = ["nvidia-smi", "-L"]
# The GPU of a node as nvidia-smi -L prints it: "GPU 0: <name> (UUID: GPU-...)"
LISTED = "GPU 0: "
TEST_KIND = "gpufleet-test.example/gpu"
NO_GROUPS_SPEC = "/etc/cdi/gpufleet-test-no-groups.yaml"


def _why(res) -> str:
    return f"rc={res.rc}\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"


@pytest.fixture(scope="module")
def fleet(sim_fleet_factory, tmp_path_factory):
    """The two hardened nodes after the node preparation, prepare.yml and one site.yml with the defaults."""
    start = time.monotonic()
    fleet = sim_fleet_factory(FLEET, name="nonroot")
    with ThreadPoolExecutor(len(fleet.nodes)) as pool:
        preps = dict(
            zip(
                fleet.nodes,
                pool.map(
                    lambda n: fleet.node(n).run(PODMAN_PREP if n == CDI07 else _fleet_converged.NODE_PREP, timeout=600),
                    fleet.nodes,
                ),
            )
        )
    for name, res in preps.items():
        assert res.rc == 0, f"{name}: node preparation failed\n{_why(res)}"
    report = tmp_path_factory.mktemp("nonroot") / "report"
    for playbook in (_fleet_converged.PREPARE, _fleet_converged.SITE):
        proc = _ansible_playbook(fleet.inventory, playbook, "-e", json.dumps({"report_dir": str(report)}))
        assert proc.returncode == 0, (
            f"{playbook.name}: rc={proc.returncode}\n{proc.stdout[-6000:]}\n{proc.stderr[-2000:]}"
        )
    print(f"[nonroot] fleet {fleet.prefix} prepared and converged in {time.monotonic() - start:.0f}s", file=sys.stderr)
    return fleet


def _stat(node, *paths: str) -> dict[str, str]:
    out = node.run(["stat", "-c", "%n %a %u %g", *paths], check=True).stdout
    return {line.split()[0]: " ".join(line.split()[1:]) for line in out.splitlines()}


def test_the_nodes_simulate_the_hardening_and_the_collection_keeps_it(fleet):
    """The simulated driver's parameters, the modprobe.d line and the nodes; after site.yml the collection's boot
    unit (gpufleet-nvidia-devices) makes a lost node again with the group and mode of the parameters, not 0666."""
    for name in fleet.nodes:
        node = fleet.node(name)
        conf = node.run(["cat", "/etc/modprobe.d/gpufleet-sim-nvidia.conf"], check=True).stdout
        assert f"NVreg_DeviceFileGID={GROUP} NVreg_DeviceFileMode=0660" in conf
        params = node.run(["cat", "/run/gpufleet-sim/proc/driver/nvidia/params"], check=True).stdout
        assert f"DeviceFileGID: {GROUP}\n" in params and "DeviceFileMode: 432\n" in params
        assert _stat(node, "/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm") == {
            "/dev/nvidia0": f"660 0 {GROUP}",
            "/dev/nvidiactl": f"660 0 {GROUP}",
            "/dev/nvidia-uvm": "666 0 0",
        }
    node = fleet.node(TRIXIE)
    node.run(["rm", "-f", "/dev/nvidiactl", "/dev/nvidia0"], check=True)
    res = node.run(["systemctl", "restart", "gpufleet-nvidia-devices.service"])
    assert res.rc == 0, _why(res)
    assert _stat(node, "/dev/nvidia0", "/dev/nvidiactl") == {
        "/dev/nvidia0": f"660 0 {GROUP}",
        "/dev/nvidiactl": f"660 0 {GROUP}",
    }


def test_the_spec_follows_the_engines(fleet):
    """Without docker (podman 5.4, containerd 1.7) the spec is 0.7.0 with the group; docker 26 reads 0.7.0 but drops
    the group, so it holds the trixie node's spec at 0.6.0, and Debian 12's podman 4.3 holds bookworm's at 0.5.0: those
    specs are as before. Every index (the shim's) carries the group."""
    for name, version in ((CDI07, "0.7.0"), (TRIXIE, "0.6.0"), (BOOKWORM, "0.5.0")):
        node = fleet.node(name)
        spec = yaml.safe_load(node.run(["cat", "/etc/cdi/nvidia.yaml"], check=True).stdout)
        index = json.loads(node.run(["cat", "/etc/gpufleet/cdi-nvidia.json"], check=True).stdout)
        assert spec["cdiVersion"] == version, name
        assert index["containerEdits"]["additionalGids"] == [GROUP], name
        assert (spec["containerEdits"].get("additionalGids") == [GROUP]) == (version == "0.7.0"), name


@pytest.mark.parametrize(
    ("name", "argv"),
    [
        # docker 20.10 has no CDI: --gpus goes through runtime nvidia, the shim
        (BOOKWORM, ["docker", "run", "--rm", *USER, "--gpus", "all", IMAGE, "nvidia-smi", "-L"]),
        # docker 26: --gpus through the shim, --device through docker's own CDI (runc, no shim)
        (TRIXIE, ["docker", "run", "--rm", *USER, "--gpus", "all", IMAGE, "nvidia-smi", "-L"]),
        (
            TRIXIE,
            ["docker", "run", "--rm", "--runtime", "runc", *USER, "--device", "nvidia.com/gpu=all", IMAGE, *SMI],
        ),
        # podman 5.4 with the 0.7.0 spec (the group) and with the 0.6.0 spec docker 26 holds back (as before); podman
        # 4.3 with the 0.5.0 spec, as before
        (CDI07, ["podman", "run", "--rm", *USER, "--device", "nvidia.com/gpu=all", IMAGE, "nvidia-smi", "-L"]),
        (TRIXIE, ["podman", "run", "--rm", *USER, "--device", "nvidia.com/gpu=all", IMAGE, "nvidia-smi", "-L"]),
        (BOOKWORM, ["podman", "run", "--rm", *USER, "--device", "nvidia.com/gpu=all", IMAGE, "nvidia-smi", "-L"]),
    ],
    ids=[
        "docker20-shim",
        "docker26-shim",
        "docker26-cdi-0.6",
        "podman54-cdi-0.7",
        "podman54-cdi-0.6",
        "podman43-cdi-0.5",
    ],
)
def test_a_non_root_container_lists_its_gpu(fleet, name, argv):
    res = fleet.node(name).run(argv, timeout=180)
    assert res.rc == 0 and LISTED in res.stdout, _why(res)


STAT = (
    "import os\nfor p in ('/dev/nvidiactl', '/dev/nvidia0'):\n"
    "    st = os.stat(p); print(p, '%o' % (st.st_mode & 0o777), st.st_uid, st.st_gid)"
)


@pytest.mark.parametrize(
    ("name", "argv", "owner"),
    [
        # the shim: the host's group and mode, owned by the container's user (an exec'd process has no group)
        (TRIXIE, ["docker", "run", "--rm", *USER, "--gpus", "all"], 1000),
        # the 0.7.0 spec: the host's owner, group and mode
        (CDI07, ["podman", "run", "--rm", *USER, "--device", "nvidia.com/gpu=all"], 0),
    ],
    ids=["shim", "cdi-0.7"],
)
def test_the_container_has_the_hosts_group_and_mode(fleet, name, argv, owner):
    """What the user sees in the container: the group among its groups, the nodes with the host's group and mode."""
    res = fleet.node(name).run([*argv, IMAGE, "sh", "-c", f'id -G; python3 -c "{STAT}"'])
    assert res.rc == 0, _why(res)
    groups, *nodes = res.stdout.splitlines()
    assert groups.split() == ["1000", str(GROUP)]
    assert nodes == [f"/dev/nvidiactl 660 {owner} {GROUP}", f"/dev/nvidia0 660 {owner} {GROUP}"]


@pytest.mark.parametrize(
    ("name", "label"),
    [(TRIXIE, "env"), (CDI07, "env"), (CDI07, "cdi")],
    ids=["shim-0.6", "shim-0.7", "containerd-cdi-0.7"],
)
def test_a_non_root_cri_pod_lists_its_gpu(fleet, name, label):
    """A pod through containerd 1.7's CRI with runAsUser 1000: with only NVIDIA_VISIBLE_DEVICES (the device plugin's
    envvar strategy; containerd's default runtime is the shim), or naming the CDI device (containerd's own CDI). The
    GPU is listed by a process the CRI execs into the container, which starts from containerd's copy of the spec."""
    extra = {"env": {"envs": {"NVIDIA_VISIBLE_DEVICES": "all"}}, "cdi": {"cdi_devices": ["nvidia.com/gpu=all"]}}[label]
    node = fleet.node(name)
    with NodeSocket(node.container) as target, Cri(target) as cri:
        deadline = time.monotonic() + 120
        while True:
            try:
                cri.version()
                break
            except CriError:  # containerd still loading its CRI plugin after site.yml's restart
                if time.monotonic() > deadline:
                    raise
                time.sleep(3)
        pod = Pod(name=f"nonroot-{uuid.uuid4().hex[:8]}", uid=uuid.uuid4().hex)
        sandbox = cri.run_pod_sandbox(pod)
        try:
            container = Container(
                name="gpu",
                image=CRI_IMAGE,
                command=["python3", "-c", _fleet_converged.WAIT],
                run_as_user=1000,
                run_as_group=1000,
                **extra,
            )
            cid = cri.create_container(sandbox, container, pod)
            cri.start_container(cid)
            rc, out, err = cri.exec_sync(cid, ["nvidia-smi", "-L"], timeout=60)
            assert rc == 0 and LISTED in out.decode(), f"rc={rc}\n{out.decode()}\n{err.decode()}"
            rc, out, _err = cri.exec_sync(cid, ["id", "-u"], timeout=60)
            assert out.decode().strip() == "1000"
        finally:
            cri.stop_pod_sandbox(sandbox)
            cri.remove_pod_sandbox(sandbox)


def test_without_the_group_the_same_command_fails(fleet):
    """The control: the node's own spec with ``additionalGids`` taken out, under a kind of its own, makes the same
    non-root podman command fail with NVML's "Insufficient Permissions", and the same spec with the group works."""
    node = fleet.node(CDI07)
    spec = yaml.safe_load(node.run(["cat", "/etc/cdi/nvidia.yaml"], check=True).stdout)
    assert spec["containerEdits"].pop("additionalGids") == [GROUP]
    spec["kind"] = TEST_KIND
    node.put(NO_GROUPS_SPEC, json.dumps(spec))  # JSON is YAML; CDI loads *.yaml by their content
    try:
        argv = ["podman", "run", "--rm", *USER, "--device", f"{TEST_KIND}=all", IMAGE, "nvidia-smi", "-L"]
        res = node.run(argv, timeout=180)
        assert res.rc != 0 and LISTED not in res.stdout, _why(res)
        assert "Insufficient Permissions" in res.stdout + res.stderr, _why(res)
        spec["containerEdits"]["additionalGids"] = [GROUP]
        node.put(NO_GROUPS_SPEC, json.dumps(spec))
        res = node.run(argv, timeout=180)
        assert res.rc == 0 and LISTED in res.stdout, _why(res)
    finally:
        node.run(["rm", "-f", NO_GROUPS_SPEC])
