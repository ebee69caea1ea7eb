# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""converge_check's main() in-process: a host that enters the stage plays gets this machine's platform and
distribution facts from Ansible's own collectors (what the driver role's setup would have gathered), a converged one
does not. Discovery is fixed facts (the route's logic: tests/unit/plugins/module_utils/validate/test_converged.py)."""

import platform
import sys

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery import converge
from ansible_collections.gpufleet.nvidia.plugins.modules import converge_check

pytestmark = pytest.mark.controller


def _os_release():
    values = {}
    with open("/etc/os-release", encoding="utf-8") as f:
        for line in f:
            key, sep, value = line.strip().partition("=")
            if sep:
                values[key] = value.strip('"')
    return values


@pytest.fixture
def params(tmp_path, monkeypatch):
    facts = {"gpu_node": True, "gpus": [], "mig_boot": {"layout": None}, "engines": {}}
    monkeypatch.setattr(converge, "discover", lambda **_kwargs: facts)

    def make(hold):
        return {
            "owner": "run-1",
            "lock": False,
            "lock_path": str(tmp_path / "site.lock"),
            "dir": str(tmp_path / "stamps"),
            "plan": {
                "fast_path": True,
                "hold": hold,
                "stages": [],
                "slurm_controller": False,
                "release_done": True,
                "validate": {"run": False},
            },
        }

    return make


def test_a_stale_host_gets_the_os_facts_setup_would_gather(call_main, params):
    code, result = call_main(converge_check, **params(hold=True))
    assert code == 0 and result["route"] == "stale", result
    facts = result["ansible_facts"]
    release = _os_release()
    assert facts["distribution"].lower() == release["ID"] and facts["os_family"] == "Debian"
    assert facts["distribution_major_version"] == release["VERSION_ID"].split(".")[0]
    assert facts["architecture"] == platform.machine() and facts["kernel"] == platform.release()
    assert facts["python"]["executable"] == sys.executable and facts["pkg_mgr"] == "apt"
    assert facts["nodename"] == platform.node() and "service_mgr" in facts
    assert facts["nvidia"]["gpu_node"] is True


def test_a_converged_host_gets_only_its_discovery(call_main, params):
    code, result = call_main(converge_check, **params(hold=False))
    assert code == 0 and result["route"] != "stale", result
    assert "distribution" not in result["ansible_facts"] and "python" not in result["ansible_facts"]
