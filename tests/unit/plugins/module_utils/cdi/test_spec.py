# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""CDI spec generation on the real Debian 535 tree and on fixtures; schema, version rules, stable bytes."""

import json
import os

import pytest
import yaml

from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi.devices import node_fingerprint
from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi.driver_files import DriverFile
from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi.spec import (
    CDI_VERSION,
    DRIVER_VERSION_ANNOTATION,
    build_spec,
    cuda_version_for,
    gather,
    render,
    render_json,
    render_yaml,
)

SCHEMA = os.path.join(os.path.dirname(__file__), "fixtures", "cdi-spec.schema.json")
LIB = "/usr/lib/x86_64-linux-gnu"

GPUS = [
    {"index": 1, "minor": 1, "uuid": "GPU-22222222-2222-2222-2222-222222222222", "name": "NVIDIA A100"},
    {
        "index": 0,
        "minor": 0,
        "uuid": "GPU-11111111-1111-1111-1111-111111111111",
        "name": "NVIDIA A100",
        "mig_mode": "Enabled",
        "mig_devices": [{"index": 0, "uuid": "MIG-33333333-3333-3333-3333-333333333333", "gi": 1, "ci": 0}],
    },
]
MIG_MINORS = {"gpu0/gi1/access": 21, "gpu0/gi1/ci0/access": 22}


def validate(spec):
    jsonschema = pytest.importorskip("jsonschema")
    with open(SCHEMA, encoding="utf-8") as f:
        jsonschema.validate(spec, json.load(f))


def minimum_version(spec):
    """The CDI version rules (specs-go/version.go), restated for the features this project could use."""
    edits = [spec.get("containerEdits") or {}] + [d["containerEdits"] for d in spec["devices"]]
    if any(e.get("intelRdt") or e.get("additionalGids") for e in edits):
        return "0.7.0"
    if spec.get("annotations") or any(d.get("annotations") for d in spec["devices"]):
        return "0.6.0"
    if "." in spec["kind"].split("/")[1]:
        return "0.6.0"
    if any(not d["name"][0].isalpha() for d in spec["devices"]):
        return "0.5.0"
    if any(n.get("hostPath") for e in edits for n in e.get("deviceNodes") or ()):
        return "0.5.0"
    if any(m.get("type") for e in edits for m in e.get("mounts") or ()):
        return "0.4.0"
    return "0.3.0"


@pytest.fixture
def debian(debian_driver_tree):
    root, version = debian_driver_tree
    found, kwargs = gather(driver_root=root, dev_root="/nonexistent-dev-root", gpus=GPUS)
    assert found == version
    kwargs["mig_minors"] = MIG_MINORS
    return root, version, kwargs


def test_spec_from_the_debian_tree(debian):
    root, version, kwargs = debian
    spec, index = build_spec(**kwargs)
    validate(spec)
    assert spec["cdiVersion"] == CDI_VERSION == minimum_version(spec)
    assert spec["kind"] == "nvidia.com/gpu"
    assert spec["annotations"] == {
        DRIVER_VERSION_ANNOTATION: version,
        "gpufleet.nvidia/cuda-version": "12.2",
        "gpufleet.nvidia/device-nodes": node_fingerprint([]),  # no node under the dev root
    }
    names = [d["name"] for d in spec["devices"]]
    assert names == [
        "0",
        "GPU-11111111-1111-1111-1111-111111111111",
        "0:0",
        "MIG-33333333-3333-3333-3333-333333333333",
        "1",
        "GPU-22222222-2222-2222-2222-222222222222",
        "all",
    ]
    by_name = {d["name"]: d["containerEdits"] for d in spec["devices"]}
    dev = "/nonexistent-dev-root/dev/"
    assert by_name["1"] == {"deviceNodes": [{"path": "/dev/nvidia1", "hostPath": dev + "nvidia1"}]}
    assert [n["path"] for n in by_name["0:0"]["deviceNodes"]] == [
        "/dev/nvidia0",
        "/dev/nvidia-caps/nvidia-cap21",
        "/dev/nvidia-caps/nvidia-cap22",
    ]
    assert [n["path"] for n in by_name["all"]["deviceNodes"]] == ["/dev/nvidia0", "/dev/nvidia1"]

    common = spec["containerEdits"]
    assert [n["path"] for n in common["deviceNodes"]] == ["/dev/nvidiactl"]
    mounts = {m["containerPath"]: m for m in common["mounts"]}
    cuda = mounts[LIB + "/libcuda.so." + version]
    assert cuda["options"] == ["ro", "nosuid", "nodev", "bind"]
    assert cuda["hostPath"].startswith(root + "/")
    assert os.path.isfile(cuda["hostPath"]) and not os.path.islink(cuda["hostPath"])
    assert os.path.basename(cuda["hostPath"]) == "libcuda.so." + version
    assert LIB + "/libnvidia-ml.so." + version in mounts
    assert LIB + "/libGLX_nvidia.so." + version in mounts  # capabilities default to all
    assert "/usr/bin/nvidia-smi" in mounts
    assert "/etc/OpenCL/vendors/nvidia.icd" in mounts
    assert f"/lib/firmware/nvidia/{version}/gsp_ga10x.bin" in mounts
    for mount in common["mounts"]:
        assert os.path.exists(mount["hostPath"]), mount
    (hook,) = common["hooks"]
    assert hook["hookName"] == "createContainer"
    assert hook["path"] == "/usr/local/bin/gpufleet-cdi-hook"
    assert hook["env"] == ["PATH=/usr/sbin:/usr/bin:/sbin:/bin"]
    assert hook["timeout"] == 10  # every hook has a timeout: a hook stuck on the image must not hang the start
    args = hook["args"]
    assert args[:4] == ["gpufleet-cdi-hook", "apply", "--folder", LIB] and "--ldconfig" not in args
    libraries = [args[i + 1] for i, a in enumerate(args) if a == "--library"]
    assert f"x86_64::libcuda.so.1::{LIB}/libcuda.so.{version}" in libraries
    assert f"x86_64::libnvidia-ml.so.1::{LIB}/libnvidia-ml.so.{version}" in libraries
    # one per library mount, each naming the file the spec mounts there
    assert sorted(lib.split("::")[2] for lib in libraries) == sorted(m for m in mounts if m.startswith(LIB + "/"))
    links = [args[i + 1] for i, a in enumerate(args) if a == "--link"]
    assert f"libcuda.so.1::{LIB}/libcuda.so" in links
    assert f"libGLX_nvidia.so.0::{LIB}/libGLX_indirect.so.0" in links
    assert f"libnvidia-opticalflow.so.1::{LIB}/libnvidia-opticalflow.so" in links

    assert index["driverVersion"] == version and index["cudaVersion"] == "12.2"
    assert index["mountCapabilities"][LIB + "/libcuda.so." + version] == ["compute"]
    assert index["mountCapabilities"]["/usr/bin/nvidia-smi"] == ["utility"]
    assert set(index["mountCapabilities"]) == set(mounts)
    assert index["devices"]["1"] == by_name["1"]


def test_capabilities_limit_the_spec(debian):
    _root, version, kwargs = debian
    spec, index = build_spec(**dict(kwargs, capabilities=("utility",)))
    mounts = [m["containerPath"] for m in spec["containerEdits"]["mounts"]]
    assert LIB + "/libnvidia-ml.so." + version in mounts
    assert LIB + "/libcuda.so." + version not in mounts
    assert "--link" not in spec["containerEdits"]["hooks"][0]["args"]
    assert index["capabilities"] == ["utility"]
    validate(spec)


@pytest.mark.parametrize(
    "strategy, names, aliases",
    [
        (("index",), ["0", "0:0", "1", "all"], {"GPU-a": "0", "MIG-m": "0:0", "GPU-b": "1"}),
        (("uuid",), ["GPU-a", "MIG-m", "GPU-b", "all"], {"0": "GPU-a", "0:0": "MIG-m", "1": "GPU-b"}),
        (("index", "uuid"), ["0", "GPU-a", "0:0", "MIG-m", "1", "GPU-b", "all"], {}),
    ],
)
def test_device_name_strategy(strategy, names, aliases):
    gpus = [
        {
            "index": 0,
            "minor": 0,
            "uuid": "GPU-a",
            "mig_mode": "Enabled",
            "mig_devices": [{"index": 0, "uuid": "MIG-m"}],
        },
        {"index": 1, "minor": 1, "uuid": "GPU-b", "mig_mode": "Disabled", "mig_devices": [{"index": 0}]},
    ]
    spec, index = build_spec(gpus, [], ["/dev/nvidiactl"], "535.1", device_name_strategy=strategy)
    assert [d["name"] for d in spec["devices"]] == names
    assert index["aliases"] == aliases
    validate(spec)


def test_unknown_strategy_is_an_error():
    with pytest.raises(ValueError, match="unknown serial"):
        build_spec([], [], [], "535.1", device_name_strategy=("serial",))


def test_no_gpus_still_a_valid_spec_for_none():
    spec, _index = build_spec([], [], ["/dev/nvidiactl"], "535.1")
    assert spec["devices"] == []  # nothing to ask for but driver files: the module refuses to write this
    spec["devices"] = [{"name": "x", "containerEdits": {"env": ["A=1"]}}]
    validate(spec)


def test_compat32_libraries_only_with_compat32():
    files = [
        DriverFile("library", "compute", "libcuda.so.1", "/l/libcuda.so.1", "/l/libcuda.so.535.1", "x86_64"),
        DriverFile("library", "compute", "libcuda.so.1", "/l32/libcuda.so.1", "/l32/libcuda.so.535.1", "i386"),
    ]
    spec, index = build_spec([{"index": 0, "minor": 0}], files, [], "535.1", capabilities=("compute",))
    assert [m["containerPath"] for m in spec["containerEdits"]["mounts"]] == [LIB + "/libcuda.so.535.1"]
    spec, index = build_spec([{"index": 0, "minor": 0}], files, [], "535.1", capabilities=("compute", "compat32"))
    assert index["mountCapabilities"]["/usr/lib/i386-linux-gnu/libcuda.so.535.1"] == ["compute", "compat32"]
    args = spec["containerEdits"]["hooks"][0]["args"]
    assert args.count("--folder") == 2
    assert "libcuda.so.1::/usr/lib/i386-linux-gnu/libcuda.so" in args


def test_driver_root_prefixes_host_paths():
    files = [DriverFile("library", "compute", "libcuda.so.1", "/l/libcuda.so.1", "/l/libcuda.so.535.1", "x86_64")]
    spec, _index = build_spec([{"index": 0, "minor": 0}], files, [], "535.1", driver_root="/run/nvidia/driver")
    assert spec["containerEdits"]["mounts"][0]["hostPath"] == "/run/nvidia/driver/l/libcuda.so.535.1"


@pytest.mark.parametrize(
    "driver, cuda",
    [("535.261.03", "12.2"), ("550.54.14", "12.4"), ("470.256.02", "11.4"), ("390.1", None), ("x", None)],
)
def test_cuda_version_for(driver, cuda):
    assert cuda_version_for(driver) == cuda


@pytest.mark.parametrize("cuda", ["Not Found", "N/A", "[Not Found]", "", "12"])
def test_a_cuda_version_that_is_no_version_is_refused(cuda):
    with pytest.raises(ValueError, match=r"cuda_version: .* is not a CUDA version"):
        build_spec([{"index": 0, "minor": 0}], [], [], "535.261.03", cuda_version=cuda)
    _spec, index = build_spec([{"index": 0, "minor": 0}], [], [], "535.261.03")
    assert index["cudaVersion"] == "12.2"  # left out: the driver branch's


def test_yaml_reads_back_identically_and_is_byte_stable(debian):
    _root, _version, kwargs = debian
    spec, index = build_spec(**kwargs)
    text = render_yaml(spec, header="Generated by gpufleet.nvidia.cdi_spec")
    assert text.startswith("# Generated by gpufleet.nvidia.cdi_spec\n---\n")
    assert yaml.safe_load(text) == spec
    spec2, _index2 = build_spec(**kwargs)
    assert render_yaml(spec2, header="Generated by gpufleet.nvidia.cdi_spec") == text
    assert json.loads(render_json(spec)) == spec
    assert json.loads(render_json(index, compact=True)) == index
    assert render(spec, "json") == render_json(spec)


def test_yaml_rendering_of_awkward_values():
    doc = {"a": "yes", "b": "0", "c": "", "d": [], "e": {}, "f": [{"x": ["1", 2]}, "s"], "g/h": "x: y", "i": True}
    text = render_yaml(doc)
    assert yaml.safe_load(text) == doc
    assert '"yes"' in text  # never read back as a boolean by YAML 1.1 parsers


def test_gather_reads_device_nodes_and_uvm(tmp_path, debian_driver_tree):
    root, _version = debian_driver_tree
    dev = tmp_path / "dev"
    dev.mkdir()
    for name, major, minor in (
        ("nvidia0", 195, 0),
        ("nvidia2", 195, 2),
        ("nvidiactl", 195, 255),
        ("nvidia-uvm", 500, 0),
    ):
        os.mknod(str(dev / name), 0o600 | 0o020000, os.makedev(major, minor))
    _version, kwargs = gather(driver_root=root, dev_root=str(tmp_path))
    assert kwargs["gpus"] == [{"index": 0, "minor": 0}, {"index": 1, "minor": 2}]
    assert kwargs["control"] == ["/dev/nvidiactl", "/dev/nvidia-uvm"]
    spec, _index = build_spec(**kwargs)
    assert spec["devices"][1] == {
        "name": "1",
        "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia2", "hostPath": str(dev / "nvidia2")}]},
    }
    validate(spec)


def test_gather_without_a_driver_is_an_error(tmp_path):
    with pytest.raises(
        ValueError, match=r"no NVIDIA driver userspace .* \(or, without one, in its library directories"
    ):
        gather(driver_root=str(tmp_path))  # no cache, and nothing in the directories searched instead
    (tmp_path / "etc").mkdir()
    with open("/etc/ld.so.cache", "rb") as src, open(str(tmp_path / "etc" / "ld.so.cache"), "wb") as dst:
        dst.write(src.read())  # this machine's cache: no NVIDIA library in it
    with pytest.raises(ValueError, match="no NVIDIA driver userspace"):
        gather(driver_root=str(tmp_path))


def test_mig_caps_nodes_from_discoverys_key_names():
    # gpu_facts names a MIG device's instance ids gi_id/ci_id (discovery/nvml.py): the caps nodes follow from them too.
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi import spec as _spec

    assert _spec._mig_nodes({"minor": 0}, {"index": 0, "gi_id": 1, "ci_id": 0}, MIG_MINORS) == [
        "/dev/nvidia-caps/nvidia-cap21",
        "/dev/nvidia-caps/nvidia-cap22",
    ]
    assert _spec._mig_nodes({"minor": 0}, {"index": 0, "gi": 1, "ci": 0}, MIG_MINORS) == [
        "/dev/nvidia-caps/nvidia-cap21",
        "/dev/nvidia-caps/nvidia-cap22",
    ]
