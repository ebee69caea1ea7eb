# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The DRA readiness verdict: each check both ways, at the edges of the pinned release's rules."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery import dra

GPU = "GPU-11111111-2222-3333-4444-555555555555"
MIG = "MIG-66666666-7777-8888-9999-000000000000"
SPEC = f"cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: '0'\n- name: {GPU}\n- name: {MIG}\n"


def _facts(**over: Any) -> dict[str, Any]:
    facts = {
        "gpu_node": True,
        "driver": {"loaded": True, "loaded_version": "580.95.05"},
        "gpus": [{"uuid": GPU, "mig_devices": [{"uuid": MIG}]}],
        "cdi_spec": {"path": "/etc/cdi/nvidia.yaml", "driver_version": "580.95.05"},
        "engines": {"containerd": {"installed": True, "version": "2.1.9", "cdi_enabled": True}},
        "mig_boot": {"layout": None, "status": None},
        "imex": {"present": False, "channels": [], "domain": None},
        "problems": [],
    }
    for key, value in over.items():
        facts[key] = value
    return facts


def _check(result: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in result["checks"] if c["name"] == name)


def test_ready_host_has_every_check_ok_and_no_fix():
    result = dra.verdict(_facts(), SPEC)
    assert result["ready"] is True and result["release"] == "v0.4.1"
    assert [c["name"] for c in result["checks"]] == ["driver", "cdi_spec", "runtime_cdi"]
    assert all(c["ok"] and c["fix"] == "" for c in result["checks"])


@pytest.mark.parametrize(
    ("version", "ok"),
    [
        ("565.57.01", True),
        ("565.00", True),
        ("564.99.99", False),
        ("550.163.01", False),
        ("535.261.03", False),
        ("580.95.05", True),
        (None, False),
    ],
)
def test_driver_565_or_later(version, ok):
    result = dra.verdict(_facts(driver={"loaded": version is not None, "loaded_version": version}), SPEC)
    check = _check(result, "driver")
    assert check["ok"] is ok and result["ready"] is ok
    assert ("driver_branch: '580'" in check["fix"]) is (not ok)


def test_driver_installed_but_not_loaded_is_not_ready():
    check = _check(dra.verdict(_facts(driver={"loaded": False, "loaded_version": "580.95.05"}), SPEC), "driver")
    assert not check["ok"] and check["found"] == "no NVIDIA driver loaded"


def test_no_spec_stale_spec_and_a_device_missing_from_it():
    assert not _check(dra.verdict(_facts(cdi_spec=None), None), "cdi_spec")["ok"]
    stale = _facts(problems=[{"code": "cdi_spec_stale", "message": "generated for driver 570", "fix": "x"}])
    check = _check(dra.verdict(stale, SPEC), "cdi_spec")
    assert not check["ok"] and "generated for driver 570" in check["found"] and "--tags runtime" in check["fix"]
    check = _check(dra.verdict(_facts(), SPEC.replace(MIG, "MIG-other")), "cdi_spec")
    assert not check["ok"] and MIG in check["found"]
    gpus = [{"uuid": GPU, "mig_devices": []}, {"uuid": "GPU-second", "mig_devices": []}]
    assert not _check(dra.verdict(_facts(gpus=gpus), SPEC), "cdi_spec")["ok"]


@pytest.mark.parametrize(
    ("engines", "ok", "fix"),
    [
        ({"containerd": {"installed": True, "version": "1.6.20~ds1", "cdi_enabled": None}}, False, "upgrade"),
        ({"containerd": {"installed": True, "version": "1.7.24~ds1", "cdi_enabled": False}}, False, "runtime_cdi"),
        ({"containerd": {"installed": True, "version": "1.7.24~ds1", "cdi_enabled": True}}, True, ""),
        ({"containerd": {"installed": True, "version": "2.0.0", "cdi_enabled": None}}, True, ""),
        ({"containerd": {"installed": True, "version": "2.1.9", "cdi_enabled": False}}, False, "runtime_cdi"),
        ({"crio": {"installed": True, "version": "1.27.0"}}, True, ""),
        ({"crio": {"installed": True, "version": "1.26.4"}}, False, "upgrade crio to 1.27"),
        ({"docker": {"installed": True, "version": "28.1.1"}}, False, "install"),
        ({}, False, "install"),
    ],
)
def test_runtime_reads_cdi(engines, ok, fix):
    check = _check(dra.verdict(_facts(engines=engines), SPEC), "runtime_cdi")
    assert check["ok"] is ok
    assert fix in check["fix"] if fix else check["fix"] == ""


def test_mig_layout_counts_only_where_one_is_asked_for():
    assert "mig_layout" not in [c["name"] for c in dra.verdict(_facts(), SPEC)["checks"]]
    applied = _facts(mig_boot={"layout": "all-1g", "status": {"ok": True}})
    assert _check(dra.verdict(applied, SPEC), "mig_layout")["ok"]
    failed = _facts(
        mig_boot={"layout": "all-1g", "status": {"ok": False, "message": "busy"}},
        problems=[{"code": "mig_boot_failed", "message": "m", "fix": "f"}],
    )
    result = dra.verdict(failed, SPEC)
    assert not result["ready"] and "--tags mig" in _check(result, "mig_layout")["fix"]


def test_imex_counts_only_in_an_nvlink_domain():
    assert "imex_channels" not in [c["name"] for c in dra.verdict(_facts(), SPEC)["checks"]]
    member = _facts(imex={"present": True, "channels": [0], "domain": "rack1"})
    result = dra.verdict(member, SPEC)
    assert result["ready"] and _check(result, "imex_channels")["ok"]
    assert _check(result, "driver_compute_domains")["ok"]
    no_channel = copy.deepcopy(member)
    no_channel["imex"]["channels"] = []
    assert "--tags imex" in _check(dra.verdict(no_channel, SPEC), "imex_channels")["fix"]
    old = copy.deepcopy(member)
    old["driver"]["loaded_version"] = "570.86.15"  # 565 or later for GPUs, below 570.158.01 for ComputeDomains
    result = dra.verdict(old, SPEC)
    assert _check(result, "driver")["ok"] and not _check(result, "driver_compute_domains")["ok"]
    assert not result["ready"]


def test_a_gpu_is_found_in_the_spec_by_its_device_node_whatever_the_naming():
    gpus = [{"index": 0, "minor": 1, "uuid": GPU, "mig_devices": [{"index": 0}]}]
    by_index = "devices:\n- name: '0'\n  deviceNodes: [{path: /dev/nvidia1}]\n- name: '0:0'\n"
    assert _check(dra.verdict(_facts(gpus=gpus), by_index), "cdi_spec")["ok"]
    other_node = by_index.replace("/dev/nvidia1}", "/dev/nvidia10}")
    check = _check(dra.verdict(_facts(gpus=gpus), other_node), "cdi_spec")
    assert not check["ok"] and GPU in check["found"]
    assert not _check(dra.verdict(_facts(gpus=gpus), by_index.replace("'0:0'", "'0:1'")), "cdi_spec")["ok"]


def test_host_verdict_reads_the_spec_found_and_skips_hosts_without_gpus(tmp_path):
    (tmp_path / "etc" / "cdi").mkdir(parents=True)
    (tmp_path / "etc" / "cdi" / "nvidia.yaml").write_text(SPEC)
    assert dra.host_verdict(_facts(), str(tmp_path))["ready"] is True
    (tmp_path / "etc" / "cdi" / "nvidia.yaml").write_text(SPEC.replace(GPU, "GPU-gone"))
    assert dra.host_verdict(_facts(), str(tmp_path))["ready"] is False
    assert dra.host_verdict(_facts(gpu_node=False), str(tmp_path)) is None
