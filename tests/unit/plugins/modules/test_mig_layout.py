# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The mig_layout module against the stub NVML (as this machine's libnvidia-ml.so.1 through LD_LIBRARY_PATH, one
process per run as Ansible runs it): check mode and diff, apply, a second run, a refused profile."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils.discovery.discovery_tree import (
    REPO,
    compile_nvml_stub,
    stub_config,
)

pytestmark = pytest.mark.controller

RUN = """
import json, sys
from ansible.module_utils.testing import patch_module_args
from ansible_collections.gpufleet.nvidia.plugins.modules import mig_layout
with patch_module_args(json.loads(sys.argv[1])):
    mig_layout.main()
"""


@pytest.fixture(scope="module")
def libdir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("nvml-lib")
    path = compile_nvml_stub(str(folder))
    if path is None:
        pytest.skip("no C compiler for the NVML stub")
    shutil.copy(path, folder / "libnvidia-ml.so.1")
    return folder


@pytest.fixture
def host(tmp_path, libdir):
    config = stub_config(count=1)
    config["gpus"][0].update(
        name="NVIDIA A100-SXM4-40GB",
        pci_device_id=0x20B010DE,
        mig_mode=0,
        max_mig_devices=7,
        memory_total=40960 * 1024 * 1024,
    )  # the profile names come from the GPU's memory
    (tmp_path / "gpus.json").write_text(json.dumps(config))
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, ".cache", "collections"), LD_LIBRARY_PATH=str(libdir),
               GPUFLEET_SIM_GPUS_JSON=str(tmp_path / "gpus.json"))  # fmt: skip

    def run(args):
        pytest.importorskip("ansible.module_utils.testing")
        proc = subprocess.run([sys.executable, "-c", RUN, json.dumps(args)], capture_output=True, text=True, env=env,
                              check=False, timeout=120)  # fmt: skip
        return json.loads(proc.stdout)

    return run


LAYOUT = [{"devices": "all", "mig-enabled": True, "mig-devices": {"2g.10gb": 3}}]


def test_check_mode_then_apply_then_nothing_to_do(host):
    check = host({"layout": LAYOUT, "_ansible_check_mode": True, "_ansible_diff": True})
    assert check["changed"] is True, check
    assert check["diff"]["before"].endswith(": MIG disabled\n")
    assert check["diff"]["after"].endswith(": MIG enabled: 2g.10gb x3\n")
    applied = host({"layout": LAYOUT})
    assert applied["changed"] is True and applied["gpus"][0]["after"] == "MIG enabled: 2g.10gb x3", applied
    again = host({"layout": LAYOUT, "_ansible_check_mode": True})
    assert again["changed"] is False and again["gpus"][0]["before"] == "MIG enabled: 2g.10gb x3"


def test_a_profile_not_offered_fails_with_the_offered_ones(host):
    out = host({"layout": [{"devices": [0], "mig-enabled": True, "mig-devices": {"1g.20gb": 1}}]})
    assert out["failed"] is True
    assert out["msg"] == (
        "mig_layout: GPU 0 (NVIDIA A100-SXM4-40GB) does not offer MIG profile(s) 1g.20gb; it offers 1g.5gb, "
        "1g.5gb+me, 1g.10gb, 2g.10gb, 3g.20gb, 4g.20gb, 7g.40gb"
    )
