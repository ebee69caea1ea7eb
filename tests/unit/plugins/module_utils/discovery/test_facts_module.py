# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The gpu_facts module's work (discovery/facts_module.py) without AnsibleModule: the request from the parameters,
the facts it returns, the commands it runs through the module and the failure of a bad source."""

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.base.runner import Failure
from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery import facts_module
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils.discovery.discovery_tree import HostTree


class FakeHost:
    check_mode = True

    def __init__(self):
        self.calls = []

    def run_command(self, argv, **kwargs):
        self.calls.append((argv, kwargs))
        return 127, "", "not found"


def _params(root, **extra):
    spec = facts_module.argspec()
    return {**{name: option.get("default") for name, option in spec.items()}, "root": str(root), **extra}


def test_the_request_is_discovers_arguments_and_the_facts_come_back_unchanged(tmp_path):
    tree = HostTree(tmp_path).module().nvidia_smi()
    host = FakeHost()
    request = facts_module.FactsRequest.from_params(_params(tree.root, sources=["nvidia-smi"]))
    assert (request.root, request.driver_root, request.kernel_log) == (tree.root, None, "/dev/kmsg")
    result = facts_module.run_gpu_facts(request, host)
    assert result.fields()["changed"] is False
    nvidia = result.fields()["ansible_facts"]["nvidia"]
    assert nvidia["sources"]["requested"] == ["nvidia-smi"]
    argv, kwargs = host.calls[0]
    assert argv[0].endswith("/nvidia-smi") and argv[1:] == ["-q", "-x"] and kwargs == {"check_rc": False}


def test_an_unknown_source_fails_naming_it(tmp_path):
    request = facts_module.FactsRequest.from_params(_params(tmp_path, sources=["gpu"]))
    with pytest.raises(Failure, match=r"^gpu_facts: unknown discovery source 'gpu'"):
        facts_module.run_gpu_facts(request, FakeHost())
