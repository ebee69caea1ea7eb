# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The gpu_facts module: argument handling, check mode and the facts it exits with."""

import json

import pytest

from ansible_collections.gpufleet.nvidia.plugins.modules import gpu_facts
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils.discovery.discovery_tree import (
    HostTree,
    gpu_host,
)

pytestmark = pytest.mark.controller

try:
    from ansible.module_utils.testing import patch_module_args
except ImportError:  # ansible-core < 2.19
    import contextlib
    from unittest import mock

    from ansible.module_utils import basic

    @contextlib.contextmanager
    def patch_module_args(args):
        with mock.patch.object(basic, "_ANSIBLE_ARGS", json.dumps({"ANSIBLE_MODULE_ARGS": args}).encode()):
            yield


def run_module(capsys, args):
    with patch_module_args(args), pytest.raises(SystemExit) as exit_info:
        gpu_facts.main()
    result = json.loads(capsys.readouterr().out)
    return exit_info.value.code, result


def test_facts_of_a_fixture_root(tmp_path, capsys):
    tree = gpu_host(tmp_path, 2)
    rc, result = run_module(capsys, {"root": tree.root, "_ansible_check_mode": True})
    assert rc == 0 and result["changed"] is False
    nvidia = result["ansible_facts"]["nvidia"]
    assert (nvidia["gpu_count"], nvidia["pci_gpu_count"]) == (2, 2)
    assert [g["pci_bus_id"] for g in nvidia["gpus"]] == ["0000:05:00.0", "0000:06:00.0"]
    assert nvidia["labels"]["nvidia.com/gpu.count"] == "2"
    assert nvidia["driver"]["loaded"] is True


def test_empty_root_is_not_a_failure(tmp_path, capsys):
    rc, result = run_module(capsys, {"root": str(tmp_path), "sources": ["sysfs"]})
    assert rc == 0 and result["ansible_facts"]["nvidia"]["gpu_count"] == 0


def test_nvidia_smi_goes_through_run_command(tmp_path, capsys, monkeypatch):
    tree = HostTree(tmp_path).module().nvidia_smi()
    calls = []

    def fake_run_command(self, args, **kwargs):
        calls.append(args)
        return 9, "", "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."

    monkeypatch.setattr(gpu_facts.AnsibleModule, "run_command", fake_run_command)
    rc, result = run_module(capsys, {"root": tree.root, "sources": ["nvidia-smi", "sysfs"]})
    assert rc == 0
    assert calls == [[tree.path("/usr/bin/nvidia-smi"), "-q", "-x"]]
    assert "couldn't communicate" in result["ansible_facts"]["nvidia"]["warnings"][0]


def test_unknown_source_fails(tmp_path, capsys):
    rc, result = run_module(capsys, {"root": str(tmp_path), "sources": ["gpu"]})
    assert rc == 1 and result["failed"] is True and "sources" in result["msg"]
