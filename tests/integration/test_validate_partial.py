# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The validate role catches a half-broken GPU container: each partial break of the injection, made on a
real node of the session's ``e2e_fleet`` (``_fleet_e2e.py``) and run through the real engine, fails the role with a
message naming what is missing; the same node unbroken passes.

Node ``e2e-bookworm``: docker 20.10 with runtime ``nvidia`` (the shim), which applies the edits of the CDI index
``/etc/gpufleet/cdi-nvidia.json`` that ``cdi_spec`` wrote; Debian's 535 userspace, the stub NVML; device nodes made
with ``mknod`` and no driver behind them, so an open that the device cgroup lets through answers ENXIO. The role runs
through ansible-playbook with ``validate_engines: [docker]`` (the shim's path; the CDI and containerd paths are the
same judgement, ``tests/controller/plugins/filter/test_validate.py``). Each break edits the index (and adds a file),
and a ``finally`` puts the original bytes back, so the shared fleet is left as it was:

* a library mount dropped: the index's mount of ``libnvidia-ml.so.<version>`` removed (the hook's ld cache entry for
  it then has no file and is left out);
* a device allow rule removed: ``/dev/nvidia1`` taken out of the ``all`` device's ``deviceNodes`` (the shim adds a
  device cgroup rule per device node) and bind-mounted instead, so the node is in the container and the cgroup
  denies it (EPERM). Debian's ``nvidia-smi`` over the stub NVML still lists both GPUs there, so a check by nvidia-smi
  alone passes this container;
* a wrong-version library: the index's ``libcuda`` mount and hook entry point at a copy named for another driver
  (``libcuda.so.470.182.03``), as an index left from an earlier driver would; the container's ``libcuda.so.1`` cache
  entry resolves to it. It loads and nvidia-smi runs, so a check by nvidia-smi alone passes it too.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration]

REPO = Path(__file__).resolve().parents[2]
NODE = "e2e-bookworm"
INDEX = "/etc/gpufleet/cdi-nvidia.json"
STALE_DIR = "/var/tmp/gpufleet-i22"
STALE_VERSION = "470.182.03"
PLAYBOOK = """
- hosts: all
  gather_facts: false
  tasks:
    - name: Validate
      ansible.builtin.include_role:
        name: gpufleet.nvidia.validate
"""


@pytest.fixture(scope="module")
def fleet(e2e_fleet, tmp_path_factory):
    work = tmp_path_factory.mktemp("i22-validate")
    (work / "validate.yml").write_text(PLAYBOOK)
    e2e_fleet.i22_playbook = work / "validate.yml"
    return e2e_fleet


@pytest.fixture(scope="module")
def run_role(fleet):
    """Run the validate role on NODE (docker only): -> (rc, the role's failure message or "", stdout)."""

    def run():
        cmd = [str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", str(fleet.inventory), "--limit", NODE]
        cmd += ["-e", json.dumps({"validate_engines": ["docker"]}), str(fleet.i22_playbook)]
        env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO / ".cache" / "collections"), ANSIBLE_FORCE_COLOR="0")
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env, check=False)
        m = re.search(r'"msg": "(GPU container validation failed on [^"]*)"', proc.stdout)
        return proc.returncode, (m.group(1) if m else ""), proc.stdout

    return run


def _drop_nvml_mount(index, node):
    mounts = index["containerEdits"]["mounts"]
    index["containerEdits"]["mounts"] = [m for m in mounts if "/libnvidia-ml.so." not in m["containerPath"]]
    assert len(index["containerEdits"]["mounts"]) == len(mounts) - 1


def _deny_nvidia1(index, node):
    device = index["devices"]["all"]
    assert {"path": "/dev/nvidia1"} in device["deviceNodes"]
    device["deviceNodes"] = [d for d in device["deviceNodes"] if d["path"] != "/dev/nvidia1"]
    device["mounts"] = [{"hostPath": "/dev/nvidia1", "containerPath": "/dev/nvidia1", "options": ["bind"]}]


def _stale_libcuda(index, node):
    version = index["driverVersion"]
    (mount,) = [m for m in index["containerEdits"]["mounts"] if "/libcuda.so." in m["containerPath"]]
    stale = f"{STALE_DIR}/libcuda.so.{STALE_VERSION}"
    node.run(["sh", "-c", f'mkdir -p {STALE_DIR} && cp "$1" {stale}', "sh", mount["hostPath"]], check=True)
    mount["hostPath"] = stale
    mount["containerPath"] = mount["containerPath"].replace(version, STALE_VERSION)
    for hook in index["containerEdits"]["hooks"]:
        hook["args"] = [a.replace(f"libcuda.so.{version}", f"libcuda.so.{STALE_VERSION}") for a in hook["args"]]


BREAKS = {
    "library-mount-dropped": (
        _drop_nvml_mount,
        ["libnvidia-ml.so.1 not in the container's ld cache (ldconfig -p)"],
    ),
    "device-rule-removed": (
        _deny_nvidia1,
        [
            "device node(s) present but denied to the container (no device cgroup rule allows them): "
            "/dev/nvidia1 (Operation not permitted)"
        ],
    ),
    "wrong-version-library": (
        _stale_libcuda,
        [
            f"libcuda.so.1 at /usr/lib/x86_64-linux-gnu/libcuda.so.1 is /usr/lib/x86_64-linux-gnu/libcuda.so."
            f"{STALE_VERSION}, not the host driver's version "
        ],
    ),
}


def test_the_unbroken_node_passes(fleet, run_role):
    node = fleet.node(NODE)
    rc, failure, out = run_role()
    assert rc == 0 and not failure, out[-4000:]
    version = node.desc["driver_version"]
    expected = (
        "docker (runtime): 6 device node(s), libcuda.so.1 at /usr/lib/x86_64-linux-gnu/libcuda.so.1 (dlopen ok), "
        f"libnvidia-ml.so.1 in the ld cache, both of driver {version}, nvidia-smi -L lists 2 GPU(s)"
    )
    assert expected in out, out[-4000:]


@pytest.mark.parametrize("name", list(BREAKS))
def test_a_partial_break_fails_validate_naming_it(fleet, run_role, name):
    node = fleet.node(NODE)
    original = node.run(["cat", INDEX], check=True).stdout
    edit, expected = BREAKS[name]
    try:
        index = json.loads(original)
        edit(index, node)
        node.put(INDEX, json.dumps(index))
        rc, failure, out = run_role()
    finally:
        node.put(INDEX, original)
        node.run(["rm", "-rf", STALE_DIR], check=True)
    print(f"[{name}] {failure}")
    assert rc == 2, out[-4000:]
    assert failure.startswith("GPU container validation failed on docker: docker (runtime): "), out[-4000:]
    for words in expected:
        assert words in failure, failure
    if name == "wrong-version-library":
        assert failure.split("not the host driver's version ")[1].startswith(node.desc["driver_version"])
    assert node.run(["cat", INDEX], check=True).stdout == original
