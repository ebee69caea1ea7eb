# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The problem checks of discovery/problems.py one by one: for each, a host it fires on (with the codes it gives)
and a host it stays quiet on; the tables list every check once, in the order the problems are reported."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery import (
    gpu_watch_state,
    mig_boot_check,
    next_boot,
    problems,
)
from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery.imex import imex_problems
from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery.problems import Host

DRIVER = "550.54.14"


def _facts(driver: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "driver": {"installed_version": None, "loaded_version": None, "loaded": False, **(driver or {})},
        "pci_gpu_count": 0,
        "gpu_count": 0,
        "gpus": [],
        "device_nodes": [],
        **extra,
    }


def _loaded(**driver: Any) -> dict[str, Any]:
    return {"installed_version": DRIVER, "loaded_version": DRIVER, "loaded": True, **driver}


def _write(root: Path, inner: str, text: str = "", mode: int = 0o644) -> None:
    path = root / inner.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    os.chmod(path, mode)


def _node(path: str, char_link_present: bool = True) -> dict[str, Any]:
    return {
        "path": path,
        "major": 195,
        "minor": 0,
        "char_link": "/dev/char/195:0",
        "char_link_present": char_link_present,
    }


def _spec(path: str, priority: int) -> dict[str, Any]:
    return {"path": path, "priority": priority, "kind": "nvidia.com/gpu", "devices": ["0", "all"], "ours": False}


def _uvm_spec(root: Path, with_uvm: bool) -> dict[str, Any]:
    nodes = "  - path: /dev/nvidia0\n" + ("  - path: /dev/nvidia-uvm\n" if with_uvm else "")
    _write(root, "/etc/cdi/nvidia.yaml", f"cdiVersion: 0.6.0\ncontainerEdits:\n  deviceNodes:\n{nodes}")
    return _facts(_loaded(uvm_loaded=True), device_nodes=[_node("/dev/nvidia-uvm"), _node("/dev/nvidia-uvm-tools")])


def _stale_spec(root: Path, stamp: str) -> dict[str, Any]:
    _write(root, "/etc/cdi/nvidia.yaml", f'annotations:\n  gpufleet.nvidia/driver-version: "{stamp}"\n')
    return _facts(_loaded())


def _runtime(root: Path, present: bool) -> dict[str, Any]:
    if present:
        _write(root, "/usr/bin/nvidia-container-runtime", "#!/bin/sh\n", 0o755)
    docker = {
        "config_path": "/etc/docker/daemon.json",
        "default_runtime": "nvidia",
        "runtime_paths": {"nvidia": "/usr/bin/nvidia-container-runtime"},
    }
    return _facts(engines={"docker": docker})


UNIT_FLAG = {"flag": "--add-runtime nvidia=/usr/bin/x", "option": "runtimes", "file": "/etc/default/docker"}
XID = {"pci_bus_id": "0000:07:00.0", "count": 1, "last_message": "GPU has fallen off the bus."}
ETC, RUN = "/etc/cdi/nvidia.yaml", "/var/run/cdi/nvidia.yaml"
SICK_GPUS = [
    {"index": 0, "health": {"ecc_uncorrected_volatile": 1, "remapped_rows": {"pending": True}}},
    {"index": 1, "health": {"retired_pages_pending": True}},
]
SHADOWED = [("/usr/local/bin/nvidia-container-runtime-hook", "/usr/bin/nvidia-container-runtime-hook")]

# (check, host it fires on -> the codes it gives, host it stays quiet on): each a function of the host root.
HostCase = Callable[[Path], Host]


def _next_boot(state: str, **facts: Any) -> dict[str, Any]:
    """``next_boot`` facts of a host whose next kernel is 6.8.0-45-generic (discovery/next_boot.py makes them)."""
    base = {"kernel": "6.8.0-45-generic", "source": "/boot/grub/grubenv saved_entry", "running_kernel": None}
    return {**base, "module": "/lib/modules/6.8.0-45-generic/updates/dkms/nvidia.ko", "state": state, **facts}


CASES: list[tuple[Callable, HostCase, list[str], HostCase]] = [
    (
        next_boot.next_boot_problems,
        lambda r: Host(_facts(_loaded(), next_boot=_next_boot("no_module", detail="none")), str(r)),
        ["next_boot_no_nvidia_module"],
        lambda r: Host(_facts(_loaded(), next_boot=_next_boot("ok")), str(r)),
    ),
    (
        next_boot.next_boot_problems,
        lambda r: Host(_facts(_loaded(), next_boot=_next_boot("version_mismatch", version="570.1")), str(r)),
        ["next_boot_module_version_mismatch"],
        lambda r: Host(_facts(next_boot=_next_boot("version_mismatch", version="570.1")), str(r)),
    ),
    (
        next_boot.next_boot_problems,
        lambda r: Host(_facts(_loaded(), next_boot=_next_boot("untrusted", signer="X", sig_key="01")), str(r)),
        ["next_boot_module_untrusted"],
        lambda r: Host(_facts(_loaded(), next_boot=_next_boot("unknown")), str(r)),
    ),
    (
        next_boot.next_boot_problems,
        lambda r: Host(_facts(_loaded(), next_boot=_next_boot("enrolment_pending", signer="X")), str(r)),
        ["next_boot_mok_enrolment_pending"],
        lambda r: Host(_facts(_loaded(), next_boot=_next_boot("ok", trusted_by="enrolled MOK")), str(r)),
    ),
    (
        problems.nouveau_loaded,
        lambda r: Host(_facts(), str(r), nouveau_loaded=True),
        ["nouveau_loaded"],
        lambda r: Host(_facts(), str(r)),
    ),
    (
        problems.driver_not_installed,
        lambda r: Host(_facts(pci_gpu_count=1), str(r)),
        ["driver_not_installed"],
        lambda r: Host(_facts({"installed_version": DRIVER}, pci_gpu_count=1), str(r)),
    ),
    (
        problems.driver_not_loaded,
        lambda r: Host(_facts({"installed_version": DRIVER}), str(r)),
        ["driver_not_loaded"],
        lambda r: Host(_facts(_loaded()), str(r)),
    ),
    (
        problems.driver_not_loaded,
        lambda r: Host(_facts({"installed_version": DRIVER}), str(r), secure_boot=True),
        ["secure_boot_module_not_loaded"],
        lambda r: Host(_facts(_loaded()), str(r), secure_boot=True),
    ),
    (
        problems.unsigned_module_loaded,
        lambda r: Host(_facts(_loaded()), str(r), secure_boot=True, nvidia_taint="OE"),
        ["unsigned_module_loaded"],
        lambda r: Host(_facts(_loaded()), str(r), secure_boot=True, nvidia_taint="O"),
    ),
    (
        problems.driver_version_mismatch,
        lambda r: Host(_facts(_loaded(loaded_version="535.183.01")), str(r)),
        ["driver_version_mismatch"],
        lambda r: Host(_facts(_loaded()), str(r)),
    ),
    (
        problems.device_char_links_missing,
        lambda r: Host(_facts(device_nodes=[_node("/dev/nvidia0", char_link_present=False)]), str(r)),
        ["device_char_links_missing"],
        lambda r: Host(_facts(device_nodes=[_node("/dev/nvidia0")]), str(r)),
    ),
    (
        problems.uvm_device_missing,
        lambda r: Host(_facts(_loaded(uvm_loaded=True), device_nodes=[_node("/dev/nvidia-uvm")]), str(r)),
        ["uvm_device_missing"],
        lambda r: Host(_facts(_loaded(uvm_loaded=False)), str(r)),
    ),
    (
        problems.cdi_spec_uvm_missing,
        lambda r: Host(_uvm_spec(r, with_uvm=False), str(r)),
        ["cdi_spec_uvm_missing"],
        lambda r: Host(_uvm_spec(r, with_uvm=True), str(r)),
    ),
    (
        problems.gpus_not_visible,
        lambda r: Host(_facts(_loaded(), pci_gpu_count=2), str(r)),
        ["no_gpu_visible"],
        lambda r: Host(_facts(pci_gpu_count=2), str(r)),  # no driver loaded: driver_not_installed's case
    ),
    (
        problems.gpus_not_visible,
        lambda r: Host(_facts(_loaded(), pci_gpu_count=2, gpu_count=1), str(r)),
        ["gpus_not_visible"],
        lambda r: Host(_facts(_loaded(), pci_gpu_count=2, gpu_count=2), str(r)),
    ),
    (
        problems.gpu_lost,
        lambda r: Host(_facts(gpus=[{"pci_bus_id": "0000:07:00.0", "minor": 0, "lost": True}]), str(r)),
        ["gpu_lost"],
        lambda r: Host(_facts(gpus=[{"pci_bus_id": "0000:07:00.0", "minor": 0, "lost": False}]), str(r)),
    ),
    (
        problems.docker_unit_runtime_flag,
        lambda r: Host(_facts(engines={"docker": {"unit_flags": [UNIT_FLAG, UNIT_FLAG]}}), str(r)),
        ["docker_unit_runtime_flag", "docker_unit_runtime_flag"],
        lambda r: Host(_facts(engines={"docker": {"unit_flags": []}}), str(r)),
    ),
    (
        problems.fabric_manager_down,
        lambda r: Host(_facts(fabric_manager={"nvswitch_count": 4, "state": "failed"})),
        ["fabric_manager_down"],
        lambda r: Host(_facts(fabric_manager={"nvswitch_count": 4, "state": "active"})),
    ),
    (
        problems.gpu_xids,
        lambda r: Host(_facts(xid_events=[{**XID, "xid": 79}, {**XID, "xid": 13}, {**XID, "xid": 48}])),
        ["gpu_xid_79", "gpu_xid_48"],
        lambda r: Host(_facts(xid_events=[{**XID, "xid": 13}, {**XID, "xid": 43}])),  # the application's to handle
    ),
    (
        problems.gpus_health,
        lambda r: Host(_facts(gpus=SICK_GPUS)),
        ["gpu_ecc_uncorrectable", "gpu_row_remap_pending", "gpu_retired_pages_pending"],
        lambda r: Host(_facts(gpus=[{"index": 0, "health": {"ecc_uncorrected_volatile": 0}}, {"index": 1}])),
    ),
    (
        problems.cdi_spec_conflicts,
        lambda r: Host(_facts(nvidia_toolkit={"cdi_specs": [_spec(ETC, 0), _spec("/etc/cdi/nvidia-ctk.yaml", 0)]})),
        ["cdi_spec_conflict"],
        lambda r: Host(_facts(nvidia_toolkit={"cdi_specs": [_spec(ETC, 0)]})),
    ),
    (
        problems.cdi_spec_conflicts,
        lambda r: Host(_facts(nvidia_toolkit={"cdi_specs": [_spec(ETC, 0), _spec(RUN, 1)]})),
        ["cdi_spec_shadowed"],
        lambda r: Host(_facts(nvidia_toolkit={"cdi_specs": [_spec(RUN, 1)]})),
    ),
    (
        problems.nvidia_program_shadowed,
        lambda r: Host(_facts(), str(r), shadowed=SHADOWED),
        ["nvidia_program_shadowed"],
        lambda r: Host(_facts(), str(r)),
    ),
    (
        problems.runtime_program_missing,
        lambda r: Host(_runtime(r, present=False), str(r)),
        ["runtime_program_missing"],
        lambda r: Host(_runtime(r, present=True), str(r)),
    ),
    (
        problems.cdi_spec_stale,
        lambda r: Host(_stale_spec(r, "535.183.01"), str(r)),
        ["cdi_spec_stale"],
        lambda r: Host(_stale_spec(r, DRIVER), str(r)),
    ),
]


def _mig_boot(root: Path, ok: bool) -> Host:
    """A host whose MIG boot unit left its status of this boot (``/run/gpufleet/mig-boot.json``)."""
    status = root / "run" / "gpufleet" / "mig-boot.json"
    status.parent.mkdir(parents=True)
    status.write_text(json.dumps({"ok": ok, "message": "applied" if ok else "the layout could not be applied"}))
    return Host(_facts(_loaded()), str(root))


CASES.append((mig_boot_check.mig_boot_failed, lambda r: _mig_boot(r, False), ["mig_boot_failed"],
              lambda r: _mig_boot(r, True)))  # fmt: skip

WATCH = {"version": 1, "last_run": 1000.0, "interval_s": 60, "error": None, "nvml_up": True, "kmsg": {"lost": 0}}


def _watch(state: dict[str, Any], now: float) -> Host:
    """A host whose GPU watch state is ``state``, read at ``now``."""
    return Host(_facts(_loaded(), gpu_watch=gpu_watch_state.watch_facts(state, None, now)))


CASES.append((gpu_watch_state.gpu_watch_problems, lambda r: _watch(WATCH, 2000.0), ["gpu_watch_stale"],
              lambda r: _watch(WATCH, 1030.0)))  # fmt: skip
CASES.append((gpu_watch_state.gpu_watch_problems, lambda r: _watch({**WATCH, "error": "EROFS"}, 1030.0),
              ["gpu_watch_failed"], lambda r: _watch(WATCH, 1030.0)))  # fmt: skip

IMEX = {
    "domain": "nvl0",
    "mode": "host",
    "members": ["10.0.0.1"],
    "nodes_config": ["10.0.0.1"],
    "nodes_config_path": "/etc/nvidia-imex/nodes_config.cfg",
    "present": True,
    "channels": [0],
    "wanted_channels": [0],
    "service": {"installed": True, "active": True, "masked": False},
}
CASES.append((imex_problems, lambda r: Host({"imex": {**IMEX, "nodes_config": ["10.0.0.2"]}}),
              ["imex_nodes_config_mismatch"], lambda r: Host({"imex": IMEX})))  # fmt: skip

GPU_CASES: list[tuple[Callable, dict[str, Any], list[str], dict[str, Any]]] = [
    (
        problems.gpu_ecc_uncorrectable,
        {"ecc_uncorrected_volatile": 2, "ecc_uncorrected_aggregate": 5},
        ["gpu_ecc_uncorrectable"],
        {"ecc_uncorrected_volatile": 0, "ecc_uncorrected_aggregate": 5},
    ),
    (problems.gpu_row_remap, {"remapped_rows": {"failure": True, "pending": True}}, ["gpu_row_remap_failed"], {}),
    (
        problems.gpu_row_remap,
        {"remapped_rows": {"failure": False, "pending": True}},
        ["gpu_row_remap_pending"],
        {"remapped_rows": {"failure": False, "pending": False}},
    ),
    (
        problems.gpu_retired_pages_pending,
        {"retired_pages_pending": True},
        ["gpu_retired_pages_pending"],
        {"retired_pages_pending": False},
    ),
    (
        problems.gpu_clocks_throttled,
        {"clocks_event_reasons": ["gpu_idle", "hw_slowdown"]},
        ["gpu_clocks_throttled"],
        {"clocks_event_reasons": ["gpu_idle", "sw_power_cap"]},
    ),
]


def _codes(found: list[dict[str, str]]) -> list[str]:
    return [p["code"] for p in found]


@pytest.mark.parametrize(("check", "fires", "codes", "quiet"), CASES, ids=[f"{c[0].__name__}-{c[2][0]}" for c in CASES])
def test_each_check_fires_on_its_case_and_not_on_the_other(tmp_path, check, fires, codes, quiet):
    found = check(fires(tmp_path / "fires"))
    assert _codes(found) == codes
    assert all(p["message"] and p["fix"] for p in found)
    assert check(quiet(tmp_path / "quiet")) == []


@pytest.mark.parametrize(
    ("check", "health", "codes", "quiet"), GPU_CASES, ids=[f"{c[0].__name__}-{c[2][0]}" for c in GPU_CASES]
)
def test_each_gpu_check_fires_on_its_case_and_not_on_the_other(check, health, codes, quiet):
    gpu = {"index": 3, "pci_bus_id": "0000:07:00.0", "health": health}
    found = check(gpu)
    assert _codes(found) == codes
    assert found[0]["message"].startswith("GPU 3 (0000:07:00.0) ")
    assert check({"index": 3, "pci_bus_id": "0000:07:00.0", "health": quiet}) == []


def test_every_check_of_the_tables_has_its_cases():
    tested = {c[0] for c in CASES} | {c[0] for c in GPU_CASES}
    listed = {*problems.CHECKS, *problems.GPU_CHECKS}
    assert listed == tested
    assert len(problems.CHECKS) == len(set(problems.CHECKS))
    assert set(problems.HEALTH_CHECKS) | set(problems.TOOLKIT_CHECKS) <= set(problems.CHECKS)


def test_the_order_of_the_problems_is_the_tables(tmp_path):
    """Everything at once: the problems come check by check in CHECKS' order, health and toolkit in theirs."""
    _write(tmp_path, ETC, 'annotations:\n  gpufleet.nvidia/driver-version: "535.183.01"\n')
    facts = _facts(
        _loaded(loaded_version="535.183.01", uvm_loaded=True),
        pci_gpu_count=2,
        gpu_count=1,
        gpus=[{"index": 0, "pci_bus_id": "0000:07:00.0", "lost": True, "health": {"ecc_uncorrected_volatile": 1}}],
        device_nodes=[_node("/dev/nvidia0", char_link_present=False)],
        engines={"docker": {"unit_flags": [UNIT_FLAG], "runtime_paths": {"nvidia": "/nowhere"}}},
        fabric_manager={"nvswitch_count": 2, "state": "inactive"},
        xid_events=[{**XID, "xid": 79}],
        nvidia_toolkit={"cdi_specs": [_spec(ETC, 0), _spec(RUN, 1)]},
    )
    found = problems.check(
        facts, str(tmp_path), nouveau_loaded=True, secure_boot=True, nvidia_taint="E", shadowed=SHADOWED
    )
    assert _codes(found) == [
        "nouveau_loaded", "unsigned_module_loaded", "driver_version_mismatch", "device_char_links_missing",
        "uvm_device_missing", "cdi_spec_uvm_missing", "gpus_not_visible", "gpu_lost", "docker_unit_runtime_flag",
        "fabric_manager_down", "gpu_xid_79", "gpu_ecc_uncorrectable", "cdi_spec_shadowed", "nvidia_program_shadowed",
        "runtime_program_missing", "cdi_spec_stale",
    ]  # fmt: skip
    assert _codes(problems.health_problems(facts)) == ["fabric_manager_down", "gpu_xid_79", "gpu_ecc_uncorrectable"]
    toolkit = problems.toolkit_problems(facts, str(tmp_path), SHADOWED)
    assert _codes(toolkit) == ["cdi_spec_shadowed", "nvidia_program_shadowed", "runtime_program_missing"]
