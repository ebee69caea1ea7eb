# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Discovery's parsers on what real GPU hosts wrote: an NVIDIA H200 and an NVIDIA H100 80GB HBM3, driver 580.159.04
(open kernel modules).

The fixtures ``*-h200-580*`` and ``*-h100-580*`` were captured on those hosts on 2026-11-27 (see
``fixtures/README.md``): the real
``nvidia-smi -q -x``, ``/proc/driver/nvidia/version`` and the GPU's ``information`` file, and the facts
``discover()`` returned there with NVML alone and nvidia-smi alone (``discover-h200-580-<source>.json``). Two
things are held: the parsers still read the real documents as they did on the GPU, and the sources agree with each
other about the same GPU, so a fact does not change with the source that happened to answer.
"""

import json
import os

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery.nvidia_procfs import (
    gpu_from_information,
    parse_information,
    parse_version,
)
from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery.nvidia_smi import parse_xml

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")
BUS_ID = "0000:00:06.0"  # both hosts
# what each host's nvidia-smi said of its GPU
GPUS = {
    "h200": {"name": "NVIDIA H200", "pci_device_id": "0x233510de", "memory_mib": 143771},
    "h100": {"name": "NVIDIA H100 80GB HBM3", "pci_device_id": "0x233010de", "memory_mib": 81559},
}


def _text(name):
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as f:
        return f.read()


def _gpu(model, source):
    facts = json.loads(_text(f"discover-{model}-580-{source}.json"))
    assert facts["gpu_count"] == 1, source
    return facts["gpus"][0]


@pytest.mark.parametrize("model", sorted(GPUS))
def test_the_real_nvidia_smi_document_reads_as_it_did_on_the_gpu(model):
    smi = parse_xml(_text(f"nvidia-smi-{model}-580.xml"))
    assert smi["driver_version"] == "580.159.04"
    assert smi["cuda_version"] == "13.0"
    assert smi["attached_gpus"] == 1
    (gpu,) = smi["gpus"]
    reported = _gpu(model, "nvidia-smi")
    assert gpu == {key: reported[key] for key in gpu}
    assert {key: gpu[key] for key in GPUS[model]} == GPUS[model]
    assert gpu["architecture"] == "Hopper"
    assert gpu["mig_mode"] == gpu["mig_mode_pending"] == "disabled"


@pytest.mark.parametrize("model", sorted(GPUS))
def test_the_real_procfs_files_read_as_the_open_580_driver(model):
    version = parse_version(_text(f"proc-version-{model}-580.txt"))
    assert version == {"version": "580.159.04", "flavor": "open", "gcc": "gcc version 15.3.0 (GCC)"}
    gpu = gpu_from_information(parse_information(_text(f"proc-information-{model}-580.txt")), BUS_ID)
    smi = parse_xml(_text(f"nvidia-smi-{model}-580.xml"))["gpus"][0]
    # the VBIOS version too: the driver's file writes it in lower case (96.00.a5.00.1a), nvidia-smi in upper case
    for key in ("pci_bus_id", "name", "uuid", "minor", "vbios_version"):
        assert gpu[key] == smi[key], key
    assert gpu["excluded"] is False


@pytest.mark.parametrize("model", sorted(GPUS))
def test_nvml_reported_the_same_gpu_as_nvidia_smi(model):
    """The facts NVML gave on the real host equal nvidia-smi's, key for key, where both have one."""
    smi = _gpu(model, "nvidia-smi")
    nvml = {k: v for k, v in _gpu(model, "nvml").items() if v is not None}
    shared = sorted(set(smi) & set(nvml) - {"field_sources", "source", "health", "compute_capability"})
    assert {"uuid", "pci_bus_id", "minor", "name", "memory_mib", "mig_mode", "architecture"} <= set(shared)
    assert {k: nvml[k] for k in shared} == {k: smi[k] for k in shared}


@pytest.mark.parametrize("model", sorted(GPUS))
def test_nvml_knows_the_compute_capability_the_table_guesses(model):
    """On the real GPUs NVML answered 9.0 itself; nvidia-smi's XML has no compute capability, so that source falls
    back to the table, which must agree for an H200 and an H100."""
    assert _gpu(model, "nvml")["compute_capability"] == "9.0"
    assert _gpu(model, "nvml")["field_sources"]["compute_capability"] == "nvml"
    assert _gpu(model, "nvidia-smi")["compute_capability"] == "9.0"
    assert _gpu(model, "nvidia-smi")["field_sources"]["compute_capability"] == "table"
