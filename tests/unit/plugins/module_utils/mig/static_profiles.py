# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Test fixture: the MIG profiles of the models NVIDIA's MIG user guide lists (A30 to B200), written down by hand. The
collection reads each GPU's profiles from NVML (``nvml_mig.Session.profiles``); this table is what those reads are
compared against (the stub NVML's A100-40GB answers, tests/unit/plugins/module_utils/mig/test_nvml_mig.py) and what
the planner's tests plan with, so a planner test needs no NVML."""

from __future__ import annotations

from typing import Any

# nvml.h NVML_GPU_INSTANCE_PROFILE_*: 1_SLICE 0, 2_SLICE 1, 3_SLICE 2, 4_SLICE 3, 7_SLICE 4, 8_SLICE 5, 6_SLICE 6,
# 1_SLICE_REV1 7 (one slice with the media engines, "+me"), 2_SLICE_REV1 8 ("2g...+me", A30), 1_SLICE_REV2 9 (one
# compute slice with two memory slices). NVIDIA go-nvml gen/nvml/nvml.h (v0.12.4-1).
GI_1, GI_2, GI_3, GI_4, GI_7, GI_1_ME, GI_2_ME, GI_1_DOUBLE = 0, 1, 2, 3, 4, 7, 8, 9
COMPUTE_SLICES, MEMORY_SLICES = 7, 8  # every model here but the A30 (4 and 4)

# A profile's row: (NVML GPU-instance profile enum, compute slices, memory slices (placement size), placement starts
# (memory slices), instances at most on one GPU).


def _seven_slice(names: str) -> dict[str, Any]:
    """The profiles of a GPU with 7 compute and 8 memory slices (A100, H100, H200, B200), by their names on that model
    (``names``: the 1g, 1g with two memory slices, 2g, 3g, 4g and 7g profiles); placements as ``nvidia-smi mig -lgipp``
    lists them on an A100 (MIG user guide, "A100 MIG Profiles")."""
    one, double, two, three, four, seven = names.split()
    return {
        one: (GI_1, 1, 1, (0, 1, 2, 3, 4, 5, 6), 7),
        f"{one}+me": (GI_1_ME, 1, 1, (0, 1, 2, 3, 4, 5, 6), 1),
        double: (GI_1_DOUBLE, 1, 2, (0, 2, 4, 6), 4),
        two: (GI_2, 2, 2, (0, 2, 4), 3),
        three: (GI_3, 3, 4, (0, 4), 2),
        four: (GI_4, 4, 4, (0,), 1),
        seven: (GI_7, 7, 8, (0,), 1),
    }


# The MIG profiles each model offers: NVIDIA's MIG user guide, "Supported MIG Profiles"
# (https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html, read 2026-11-23: the tables for
# A30-24GB, A100-40GB (and the 80GB names it gives), H100-80GB, H100-94GB, H200-141GB, B200), with the instance counts
# NVIDIA's mig-parted ships for them (github.com/NVIDIA/mig-parted deployments/systemd/config-default.yaml at 1400787,
# which also gives the PCI device ids below). Keyed by PCI device id (discovery's ``pci_device_id``), so that a name
# such as "NVIDIA H100 NVL" (94GB) is never taken for an H100 80GB; ``MODEL_NAMES`` gives each table a name for
# messages and the fallback by product name.
_A30_24GB = {
    "1g.6gb": (GI_1, 1, 1, (0, 1, 2, 3), 4),
    "1g.6gb+me": (GI_1_ME, 1, 1, (0, 1, 2, 3), 1),
    "2g.12gb": (GI_2, 2, 2, (0, 2), 2),
    "2g.12gb+me": (GI_2_ME, 2, 2, (0, 2), 1),
    "4g.24gb": (GI_4, 4, 4, (0,), 1),
}
_A100_40GB = _seven_slice("1g.5gb 1g.10gb 2g.10gb 3g.20gb 4g.20gb 7g.40gb")
_80GB = _seven_slice("1g.10gb 1g.20gb 2g.20gb 3g.40gb 4g.40gb 7g.80gb")  # A100-80GB, H100-80GB
_H100_94GB = _seven_slice("1g.12gb 1g.24gb 2g.24gb 3g.47gb 4g.47gb 7g.94gb")  # H100 NVL
_H200_141GB = _seven_slice("1g.18gb 1g.35gb 2g.35gb 3g.71gb 4g.71gb 7g.141gb")  # H200, H200 NVL
_B200 = _seven_slice("1g.23gb 1g.45gb 2g.45gb 3g.90gb 4g.90gb 7g.180gb")

# model -> its profile table
PROFILES_BY_MODEL: dict[str, dict[str, Any]] = {
    "A30-24GB": _A30_24GB,
    "A100-SXM4-40GB": _A100_40GB,
    "A100-PCIE-40GB": _A100_40GB,
    "A100-80GB": _80GB,
    "H100-80GB": _80GB,
    "H100-94GB": _H100_94GB,
    "H200-141GB": _H200_141GB,
    "B200": _B200,
}
MODEL_BY_PCI_ID = {
    "0x20b710de": "A30-24GB",
    "0x20b010de": "A100-SXM4-40GB",
    "0x20b110de": "A100-PCIE-40GB",
    "0x20b210de": "A100-80GB",  # A100-SXM4-80GB
    "0x20b510de": "A100-80GB",  # A100 80GB PCIe
    "0x233010de": "H100-80GB",  # H100 SXM5 80GB
    "0x233110de": "H100-80GB",  # H100 PCIe
    "0x232210de": "H100-80GB",
    "0x232410de": "H100-80GB",
    "0x232110de": "H100-94GB",  # H100 NVL
    "0x233510de": "H200-141GB",  # H200 SXM
    "0x233b10de": "H200-141GB",  # H200 NVL
    "0x290110de": "B200",
}
# Product names (nvmlDeviceGetName) for a GPU whose PCI id discovery did not read; first match wins, so the longer
# names come first.
_NAME_FALLBACK = (
    ("A100-SXM4-40GB", "A100-SXM4-40GB"),
    ("A100-PCIE-40GB", "A100-PCIE-40GB"),
    ("A100-SXM4-80GB", "A100-80GB"),
    ("A100 80GB PCIe", "A100-80GB"),
    ("H100 NVL", "H100-94GB"),
    ("H100 80GB HBM3", "H100-80GB"),
    ("H100 PCIe", "H100-80GB"),
    ("H200", "H200-141GB"),
    ("B200", "B200"),
    ("A30", "A30-24GB"),
)


def model_of(gpu_name: str | None, pci_device_id: str | None = None) -> str | None:
    """The key of ``PROFILES_BY_MODEL`` for a GPU: by its PCI device id (``0x20b010de``), else by its product name
    (``NVIDIA A100-SXM4-40GB``); None when the collection has no table for it."""
    model = MODEL_BY_PCI_ID.get(str(pci_device_id or "").lower())
    if model:
        return model
    for needle, name in _NAME_FALLBACK:
        if gpu_name and needle in gpu_name:
            return name
    return None


def profiles_for(gpu_name: str | None, pci_device_id: str | None = None) -> dict[str, Any] | None:
    """The MIG profile table of a GPU (see ``model_of``), None when not known here."""
    model = model_of(gpu_name, pci_device_id)
    return PROFILES_BY_MODEL[model] if model else None
