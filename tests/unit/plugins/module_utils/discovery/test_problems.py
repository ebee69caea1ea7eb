# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Fabric Manager on NVSwitch hosts: a problem when the switches are on the bus, the module is loaded and no
nv-fabricmanager process runs (issue 23, item 9)."""

from __future__ import annotations

from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery.problems import (
    fabricmanager_problems,
    fabricmanager_running,
    nvswitch_count,
)

HGX = [
    {"class": "0x030200", "is_gpu": True},
    {"class": "0x068000", "is_gpu": False},
    {"class": "0x068000", "is_gpu": False},
]


def facts(pci, loaded=True):
    return {"pci_devices": pci, "driver": {"loaded": loaded, "loaded_version": "580.95.05" if loaded else None}}


def proc(root, comms):
    for pid, comm in enumerate(comms, start=100):
        d = root / "proc" / str(pid)
        d.mkdir(parents=True)
        (d / "comm").write_text(comm + "\n")


def test_nvswitch_without_fabric_manager_is_a_problem_naming_the_branch(tmp_path):
    proc(tmp_path, ["systemd", "nvidia-persistenced"])
    assert nvswitch_count(facts(HGX)) == 2
    assert not fabricmanager_running(str(tmp_path))
    (found,) = fabricmanager_problems(facts(HGX), str(tmp_path))
    assert found["code"] == "fabricmanager_not_running"
    assert "2 NVSwitch(es)" in found["message"]
    assert "nvidia-fabricmanager-580" in found["fix"]
    assert "systemctl enable --now nvidia-fabricmanager" in found["fix"]


def test_running_fabric_manager_or_no_switch_or_no_module_is_fine(tmp_path):
    proc(tmp_path, ["systemd", "nv-fabricmanager"])
    assert fabricmanager_problems(facts(HGX), str(tmp_path)) == []
    empty = tmp_path / "other"
    proc(empty, ["systemd"])
    assert fabricmanager_problems(facts(HGX[:1]), str(empty)) == []
    assert fabricmanager_problems(facts(HGX, loaded=False), str(empty)) == []
