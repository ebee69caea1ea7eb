# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""``nvml_mig.Session.profiles`` over a real H100's NVML answers, replayed.

``fixtures/nvml-mig-profiles-h100-580.json`` holds what NVML answered on a real NVIDIA H100 80GB HBM3 (driver
580.159.04, 2026-11-27, MIG disabled: the queries were read only), and ``fixtures/nvidia-smi-mig-lgip-h100-580.txt``
what NVIDIA's own ``nvidia-smi mig -lgip`` printed on the same host. The profiles the collection reads from those
answers carry nvidia-smi's names, profile ids and instance counts, and equal the MIG user guide's H100-80GB table
(``static_profiles``) row for row.
"""

from __future__ import annotations

import json
import os
import re

from ansible_collections.gpufleet.nvidia.plugins.module_utils.mig import nvml_mig
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils.mig import static_profiles as static

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")


def _load(name):
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as f:
        return f.read()


class ReplayedNvml:
    """The NVML entry points ``Session.profiles`` calls, answering as the real H100 did."""

    def __init__(self, gpu):
        self.gpu = gpu
        self.rows = {row["enum"]: row for row in gpu["gi_profiles"]}
        self.by_id = {row["id"]: row for row in gpu["gi_profiles"] if row["rc"] == 0}
        for name in dir(self):  # as plain functions: the caller sets ``restype`` on each, as on a CDLL's
            if name.startswith("nvml"):
                setattr(self, name, self._plain(getattr(self, name)))

    @staticmethod
    def _plain(method):
        def call(*args):
            return method(*args)

        return call

    def nvmlInit_v2(self):
        return 0

    def nvmlShutdown(self):
        return 0

    def nvmlDeviceGetHandleByUUID(self, _uuid, handle):
        handle._obj.value = 1
        return 0

    def nvmlDeviceGetMemoryInfo(self, _handle, memory):
        memory._obj.total = self.gpu["memory_total"]
        return 0

    def nvmlDeviceGetGpuInstanceProfileInfo(self, _handle, enum, info):
        row = self.rows[enum.value]
        if row["rc"]:
            return row["rc"]
        for name, _type in nvml_mig.GpuInstanceProfileInfo._fields_:
            setattr(info._obj, name, row[name])
        return 0

    def nvmlDeviceGetGpuInstancePossiblePlacements_v2(self, _handle, profile_id, array, count):
        row = self.by_id[profile_id.value]
        if row["placements_rc"]:
            return row["placements_rc"]
        places = row["placements"]
        assert len(places) <= count._obj.value
        for k, (start, size) in enumerate(places):
            array[k].start, array[k].size = start, size
        count._obj.value = len(places)
        return 0


def _profiles():
    (gpu,) = json.loads(_load("nvml-mig-profiles-h100-580.json"))["gpus"]
    with nvml_mig.Session("unused", cdll=ReplayedNvml(gpu)) as session:
        return gpu, session.profiles(session.handle("GPU-real-h100"))


def _nvidia_smi_rows():
    """(name, profile id, instances total, memory GiB) per profile nvidia-smi listed."""
    pattern = re.compile(r"^\|\s+\d+\s+MIG (\S+)\s+(\d+)\s+\d+/(\d+)\s+([\d.]+)\s", re.M)
    return [(name, int(pid), int(total), float(gib)) for name, pid, total, gib in pattern.findall(
        _load("nvidia-smi-mig-lgip-h100-580.txt"))]  # fmt: skip


def test_the_names_are_the_ones_nvidia_smi_printed_on_the_same_gpu():
    gpu, profiles = _profiles()
    smi = _nvidia_smi_rows()
    assert len(smi) == 7
    assert sorted(profiles) == sorted(name for name, _pid, _total, _gib in smi)
    ids = {row["enum"]: row["id"] for row in gpu["gi_profiles"] if row["rc"] == 0}
    for name, profile_id, total, _gib in smi:
        enum, _slices, _memory, _starts, instances = profiles[name]
        assert (ids[enum], instances) == (profile_id, total), name


def test_the_profiles_are_the_user_guides_h100_80gb_table():
    gpu, profiles = _profiles()
    assert static.MODEL_BY_PCI_ID[gpu["pci_device_id"]] == "H100-80GB"
    assert profiles == static.PROFILES_BY_MODEL["H100-80GB"]
