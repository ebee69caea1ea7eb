# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The CDI spec ``cdi/generate.py`` wrote on a real GPU host (NVIDIA H200, driver 580.159.04, 2026-11-27).

That host keeps its driver in a read-only ``/usr/local/nvidia`` (``lib64``, ``bin``) listed in its ld.so.cache, with
shell wrappers in ``/usr/bin``. The spec (``fixtures/cdi-h200-580.yaml``) was written there with the default options,
and a container started through the runtime shim with it ran ``nvidia-smi`` and created a CUDA context, as root and
as uid 1000 (``bench/results/2026-11-27-real-gpu-h200.md``). Held here: the spec is valid CDI, reads back as the
same bytes, names the GPU by index, UUID and ``all``, and puts every driver library where the container's loader
looks, whatever directory the host keeps it in. ``cdi-h200-580-driver-root.yaml`` is the spec written on the same
kind of host (a later VM) with ``driver_root: /usr/local/nvidia``.
"""

import json
import os

import pytest
import yaml

from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi.generate import HEADER
from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi.spec import render_yaml

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")
UUID = "GPU-a969803b-5c16-d2c0-c979-d94ecead0b71"


@pytest.fixture(scope="module")
def real():
    with open(os.path.join(FIXTURES, "cdi-h200-580.yaml"), encoding="utf-8") as f:
        text = f.read()
    return text, yaml.safe_load(text)


@pytest.mark.parametrize("name", ["cdi-h200-580.yaml", "cdi-h200-580-driver-root.yaml", "cdi-h100-580.yaml"])
def test_the_real_specs_are_valid_cdi_and_byte_stable(name):
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as f:
        text = f.read()
    spec = yaml.safe_load(text)
    jsonschema = pytest.importorskip("jsonschema")
    with open(os.path.join(FIXTURES, "cdi-spec.schema.json"), encoding="utf-8") as f:
        jsonschema.validate(spec, json.load(f))
    assert render_yaml(spec, header=HEADER) == text


def test_the_real_spec_names_the_gpu_three_ways(real):
    _text, spec = real
    assert [d["name"] for d in spec["devices"]] == ["0", UUID, "all"]
    assert {n["path"] for d in spec["devices"] for n in d["containerEdits"]["deviceNodes"]} == {"/dev/nvidia0"}
    assert spec["annotations"]["gpufleet.nvidia/driver-version"] == "580.159.04"
    assert spec["annotations"]["gpufleet.nvidia/cuda-version"] == "13.0"


def test_libraries_from_a_nonstandard_driver_directory_land_in_the_containers_library_directory(real):
    _text, spec = real
    mounts = spec["containerEdits"]["mounts"]
    libraries = [m for m in mounts if ".so." in os.path.basename(m["hostPath"])]
    assert {"libcuda.so.580.159.04", "libnvidia-ml.so.580.159.04"} <= {
        os.path.basename(m["hostPath"]) for m in libraries
    }
    for mount in libraries:
        assert mount["hostPath"].startswith("/usr/local/nvidia/lib64/"), mount
        assert mount["containerPath"] == "/usr/lib/x86_64-linux-gnu/" + os.path.basename(mount["hostPath"]), mount
        assert "ro" in mount["options"], mount


def test_the_driver_tree_as_driver_root_gives_the_same_libraries_and_the_real_binaries(real):
    """``driver_root: /usr/local/nvidia`` on the same kind of host (no ld.so.cache in that tree: its library
    directories searched) gave every library the host's cache gave, and the binaries themselves instead of the
    host's wrappers in /usr/bin."""
    _text, by_cache = real
    with open(os.path.join(FIXTURES, "cdi-h200-580-driver-root.yaml"), encoding="utf-8") as f:
        by_search = yaml.safe_load(f)

    def mounts(spec, kind):
        found = {}
        for m in spec["containerEdits"]["mounts"]:
            is_library = ".so." in os.path.basename(m["hostPath"])
            if (kind == "library") == is_library and (kind != "binary" or "/bin/" in m["hostPath"]):
                found[m["containerPath"]] = m["hostPath"]
        return found

    assert mounts(by_search, "library") == mounts(by_cache, "library")
    binaries = mounts(by_search, "binary")
    assert binaries["/usr/bin/nvidia-smi"] == "/usr/local/nvidia/bin/nvidia-smi"
    assert set(binaries) == set(mounts(by_cache, "binary"))
