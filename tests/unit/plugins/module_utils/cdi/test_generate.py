# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""cdi.generate: the spec stamp, and one rendering from cdi_spec's options over Debian's 535 userspace."""

import json
import os

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi import generate as _generate
from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi.spec import render

GPUS = [{"index": 0, "minor": 0, "uuid": "GPU-11111111-1111-1111-1111-111111111111"}]


@pytest.mark.parametrize("fmt", ["yaml", "json"])
def test_spec_stamp_reads_the_annotation_in_both_formats(fmt):
    doc = {"cdiVersion": "0.6.0", "annotations": {"gpufleet.nvidia/driver-version": "535.261.03"}, "devices": []}
    assert _generate.spec_stamp(render(doc, fmt, header="x")) == "535.261.03"


def test_spec_stamp_missing():
    assert _generate.spec_stamp(None) is None
    assert _generate.spec_stamp("cdiVersion: 0.6.0\nkind: nvidia.com/gpu\n") is None


def test_options_with_defaults_drops_unknown_and_null_keys():
    merged = _generate.options_with_defaults({"format": "json", "gpus": None, "state": "present"})
    assert merged == {**_generate.DEFAULTS, "format": "json"}


@pytest.fixture
def options(tmp_path, debian_driver_tree):
    root, _version = debian_driver_tree
    os.symlink(root, str(tmp_path / "drv"))
    return {"root": str(tmp_path), "driver_root": "/drv", "dev_root": "/nonexistent", "gpus": GPUS}


def test_generate_stamps_the_spec_and_points_the_index_at_it(options, debian_driver_tree):
    version, spec, spec_text, index, index_text = _generate.generate(options)
    assert version == debian_driver_tree[1] and _generate.spec_stamp(spec_text) == version
    assert spec_text.startswith("# " + _generate.HEADER) and spec["devices"]
    assert index["spec"] == "/etc/cdi/nvidia.yaml" and index["driverVersion"] == version
    assert json.loads(index_text) == index
    assert _generate.generate(options)[2] == spec_text  # byte-stable


def test_generate_without_gpus_names_the_dev_root(options):
    with pytest.raises(_generate.NoGpuError, match="no GPU found under /nonexistent/dev"):
        _generate.generate(dict(options, gpus=[]))


def test_cdi_0_5_0_keeps_the_stamps_in_comments(options, debian_driver_tree):
    """cdiVersion 0.5.0 (podman 4.3's CDI library reads no newer and refuses unknown keys): no annotations in the
    spec; the driver and node stamps are comment lines the refresh and discovery read as before."""
    version, spec, spec_text, index, _index_text = _generate.generate(dict(options, cdi_version="0.5.0"))
    assert spec["cdiVersion"] == "0.5.0" and "annotations" not in spec
    assert "annotations" not in spec_text.split("---", 1)[1]
    assert index["specAnnotations"]["gpufleet.nvidia/driver-version"] == version
    assert f"# gpufleet.nvidia/driver-version: {version}\n" in spec_text.split("---", 1)[0]
    assert _generate.spec_stamp(spec_text) == version
    newer = _generate.generate(options)
    assert newer[1]["cdiVersion"] == "0.6.0" and "specAnnotations" not in newer[3]
    assert _generate.spec_node_stamp(spec_text) == _generate.spec_node_stamp(newer[2])
    with pytest.raises(ValueError, match="JSON no comments"):
        _generate.generate(dict(options, cdi_version="0.5.0", format="json"))
    with pytest.raises(ValueError, match="cdi_version: 'auto' is not one"):
        _generate.generate(dict(options, cdi_version="auto"))
