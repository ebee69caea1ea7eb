# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What a container asks for (NVIDIA_* variables, CDI annotations, docker --gpus) and how the edits land."""

import copy

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.hostprog.oci import (
    cdi_annotation_devices,
    check_requirements,
    env_dict,
    gpu_request,
    parse_visible_devices,
)
from ansible_collections.gpufleet.nvidia.plugins.module_utils.hostprog.oci_config import RequestError, check_config
from ansible_collections.gpufleet.nvidia.plugins.module_utils.hostprog.oci_edits import (
    INJECTED_ANNOTATION,
    apply_edits,
    has_legacy_hook,
    inject,
    remove_legacy_hook,
)

UVM_MAJOR = 507
NODES = {
    "/dev/nvidia0": (195, 0),
    "/dev/nvidia1": (195, 1),
    "/dev/nvidiactl": (195, 255),
    "/dev/nvidia-uvm": (UVM_MAJOR, 0),
    "/dev/nvidia-uvm-tools": (UVM_MAJOR, 1),
    "/dev/nvidia-caps/nvidia-cap21": (238, 21),
}


def fake_stat(path):
    if path not in NODES:
        raise FileNotFoundError(2, "No such file or directory")
    return NODES[path]


def _mount(host, container):
    return {"hostPath": host, "containerPath": container, "options": ["ro", "nosuid", "nodev", "bind"]}


HOOK = {
    "hookName": "createContainer",
    "path": "/usr/local/bin/gpufleet-cdi-hook",
    "args": ["gpufleet-cdi-hook", "apply"],
}
INDEX = {
    "gpufleetIndex": 1,
    "kind": "nvidia.com/gpu",
    "driverVersion": "535.261.03",
    "cudaVersion": "12.2",
    "capabilities": ["utility", "compute", "video", "graphics", "display", "ngx", "compat32"],
    "devices": {
        "0": {"deviceNodes": [{"path": "/dev/nvidia0"}]},
        "GPU-aaaa": {"deviceNodes": [{"path": "/dev/nvidia0"}]},
        "1": {"deviceNodes": [{"path": "/dev/nvidia1"}]},
        "GPU-bbbb": {"deviceNodes": [{"path": "/dev/nvidia1"}]},
        "1:0": {"deviceNodes": [{"path": "/dev/nvidia1"}, {"path": "/dev/nvidia-caps/nvidia-cap21"}]},
        "MIG-cccc": {"deviceNodes": [{"path": "/dev/nvidia1"}, {"path": "/dev/nvidia-caps/nvidia-cap21"}]},
        "all": {"deviceNodes": [{"path": "/dev/nvidia0"}, {"path": "/dev/nvidia1"}]},
    },
    "aliases": {},
    "containerEdits": {
        "deviceNodes": [{"path": "/dev/nvidiactl"}, {"path": "/dev/nvidia-uvm"}, {"path": "/dev/nvidia-uvm-tools"}],
        "mounts": [
            _mount("/usr/lib/x86_64-linux-gnu/libcuda.so.535", "/usr/lib/x86_64-linux-gnu/libcuda.so.535"),
            _mount("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.535", "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.535"),
            _mount("/usr/lib/x86_64-linux-gnu/libGLX_nvidia.so.535", "/usr/lib/x86_64-linux-gnu/libGLX_nvidia.so.535"),
            _mount("/usr/bin/nvidia-smi", "/usr/bin/nvidia-smi"),
        ],
        "hooks": [HOOK],
    },
    "mountCapabilities": {
        "/usr/lib/x86_64-linux-gnu/libcuda.so.535": ["compute"],
        "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.535": ["utility"],
        "/usr/lib/x86_64-linux-gnu/libGLX_nvidia.so.535": ["graphics"],
        "/usr/bin/nvidia-smi": ["utility"],
    },
}


def config(env=(), annotations=None, prestart=None):
    doc = {
        "ociVersion": "1.0.2-dev",
        "process": {"env": ["PATH=/usr/bin:/bin", *env], "args": ["sh"]},
        "root": {"path": "rootfs"},
        "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}],
        "linux": {"resources": {"devices": [{"allow": False, "access": "rwm"}]}},
    }
    if annotations is not None:
        doc["annotations"] = annotations
    if prestart is not None:
        doc["hooks"] = {"prestart": prestart}
    return doc


DOCKER_GPUS_HOOK = {
    "path": "/usr/bin/nvidia-container-runtime-hook",
    "args": ["nvidia-container-runtime-hook", "prestart"],
}


# ---------------------------------------------------------------- NVIDIA_VISIBLE_DEVICES


@pytest.mark.parametrize(
    "value, expected",
    [
        (None, None),
        ("", None),
        ("  ", None),
        ("void", None),
        ("none", []),
        ("all", ["all"]),
        ("0", ["0"]),
        ("0,1", ["0", "1"]),
        (" 1 , 0 ,1", ["1", "0"]),
        ("GPU-aaaa", ["GPU-aaaa"]),
        ("MIG-cccc", ["MIG-cccc"]),
        ("1:0", ["1:0"]),
        ("0,all", ["all"]),
    ],
)
def test_parse_visible_devices(value, expected):
    assert parse_visible_devices(value) == expected


def test_none_with_names_is_an_error():
    with pytest.raises(RequestError, match="'none' cannot be combined"):
        parse_visible_devices("0,none")


def test_env_last_occurrence_wins():
    assert env_dict(["A=1", "B=x=y", "A=2", "junk", 5]) == {"A": "2", "B": "x=y"}


# ---------------------------------------------------------------- NVIDIA_REQUIRE_*


@pytest.mark.parametrize(
    "env, ok",
    [
        ({"NVIDIA_REQUIRE_CUDA": "cuda>=12.2"}, True),
        ({"NVIDIA_REQUIRE_CUDA": "cuda>=12.3"}, False),
        ({"NVIDIA_REQUIRE_CUDA": "cuda>=12.3 cuda>=11.0"}, True),  # space: OR
        ({"NVIDIA_REQUIRE_CUDA": "cuda>=12.0,driver>=540"}, False),  # comma: AND
        ({"NVIDIA_REQUIRE_CUDA": "cuda>=12.0,driver>=535.200"}, True),
        ({"NVIDIA_REQUIRE_CUDA": "cuda<12.2"}, False),
        ({"NVIDIA_REQUIRE_CUDA": "cuda=12.2"}, True),
        ({"NVIDIA_REQUIRE_CUDA": "cuda!=12.2"}, False),
        ({"NVIDIA_REQUIRE_CUDA": "driver>535.261.02"}, True),
        ({"NVIDIA_REQUIRE_CUDA": "cuda>=12.3", "NVIDIA_DISABLE_REQUIRE": "true"}, True),
        ({"NVIDIA_REQUIRE_CUDA": "cuda>=12.3", "NVIDIA_DISABLE_REQUIRE": "1"}, True),
        ({"NVIDIA_REQUIRE_CUDA": "cuda>=12.3", "NVIDIA_DISABLE_REQUIRE": "false"}, False),
        ({"NVIDIA_REQUIRE_CUDA": "cuda>=12.0", "NVIDIA_REQUIRE_DRIVER": "driver>=550"}, False),  # every variable
        # the real nvidia/cuda:12.2 image's value: brand constraints cannot be checked here and hold
        ({"NVIDIA_REQUIRE_CUDA": "cuda>=12.2 brand=tesla,driver>=470,driver<471 brand=unknown,driver>=470"}, True),
        ({"NVIDIA_REQUIRE_CUDA": "brand=tesla,driver>=470,driver<471"}, False),
        ({"NVIDIA_REQUIRE_CUDA": ""}, True),
        ({}, True),
    ],
)
def test_requirements(env, ok):
    if ok:
        check_requirements(env, "12.2", "535.261.03")
    else:
        with pytest.raises(RequestError, match="unsatisfied requirement NVIDIA_REQUIRE_"):
            check_requirements(env, "12.2", "535.261.03")


@pytest.mark.parametrize("cuda", [None, "", "Not Found", "[N/A]", "N/A", "12", "twelve.two"])
@pytest.mark.parametrize("expression", ["cuda>=11", "cuda<12", "cuda<99", "cuda!=12.2", "cuda>=11 cuda<12"])
def test_requirement_against_unknown_cuda_version_fails(cuda, expression):
    """``cuda<12`` once held against nvidia-smi's ``Not Found`` (read as version 0): every CUDA constraint
    fails against a CUDA version that is unknown or no version, with a message that says so."""
    with pytest.raises(RequestError, match="CUDA unknown"):
        check_requirements({"NVIDIA_REQUIRE_CUDA": expression}, cuda, "535.261.03")
    check_requirements({"NVIDIA_REQUIRE_CUDA": expression, "NVIDIA_DISABLE_REQUIRE": "true"}, cuda, "535.261.03")


def test_requirement_against_an_unknown_driver_version_fails():
    with pytest.raises(RequestError, match="driver unknown"):
        check_requirements({"NVIDIA_REQUIRE_DRIVER": "driver<600"}, "12.2", "Not Found")
    check_requirements({"NVIDIA_REQUIRE_CUDA": "cuda<12.3"}, "12.2", "Not Found")  # no driver constraint


def test_unparsable_requirement_is_an_error():
    with pytest.raises(RequestError, match="cannot parse constraint"):
        check_requirements({"NVIDIA_REQUIRE_CUDA": "cuda~12"}, "12.2", "535.261.03")


# ---------------------------------------------------------------- CDI annotations and legacy hook


def test_cdi_annotations_keep_our_kind_only():
    annotations = {
        "cdi.k8s.io/b": "nvidia.com/gpu=1, vendor.com/fpga=0",
        "nvidia.cdi.k8s.io/a": "nvidia.com/gpu=GPU-aaaa,nvidia.com/gpu=1",
        "io.kubernetes.cri.sandbox-id": "nvidia.com/gpu=0",
    }
    assert cdi_annotation_devices(annotations) == ["1", "GPU-aaaa"]


def test_malformed_cdi_name_is_an_error():
    with pytest.raises(RequestError, match="malformed"):
        cdi_annotation_devices({"cdi.k8s.io/x": "nvidia.com/gpu"})


def test_legacy_hook_removed_other_hooks_kept():
    other = {"path": "/usr/libexec/other-hook"}
    doc = config(prestart=[other, DOCKER_GPUS_HOOK])
    assert has_legacy_hook(doc)
    assert remove_legacy_hook(doc)
    assert doc["hooks"]["prestart"] == [other]
    assert not remove_legacy_hook(doc)
    only = config(prestart=[DOCKER_GPUS_HOOK])
    remove_legacy_hook(only)
    assert "prestart" not in only["hooks"]


# ---------------------------------------------------------------- requests


@pytest.mark.parametrize(
    "doc, devices, capabilities",
    [
        (config(), None, None),
        (config(["NVIDIA_VISIBLE_DEVICES=void"]), None, None),
        (config(["NVIDIA_VISIBLE_DEVICES="]), None, None),
        (config(["NVIDIA_VISIBLE_DEVICES=none"]), [], ("utility", "compute")),
        (config(["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=all"]), ["all"], None),
        (config(["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=utility"]), ["0"], ("utility",)),
        (config(["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES="]), ["0"], ("utility", "compute")),
        (config(["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=video"]), ["0"], ("compute", "video")),
        # docker --gpus appends after the image's own value: the last one wins
        (config(["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_VISIBLE_DEVICES=1"], prestart=[DOCKER_GPUS_HOOK]), ["1"], None),
        (config(["NVIDIA_VISIBLE_DEVICES=void"], annotations={"cdi.k8s.io/x": "nvidia.com/gpu=0"}), ["0"], None),
    ],
)
def test_gpu_request(doc, devices, capabilities):
    request = gpu_request(doc)
    if devices is None:
        assert request is None
        return
    assert request.devices == devices
    if capabilities is not None:
        assert request.capabilities == capabilities


def test_unknown_capability_fails_the_request():
    with pytest.raises(RequestError, match="NVIDIA_DRIVER_CAPABILITIES: unknown driver capability 'gpu'"):
        gpu_request(config(["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=gpu"]))


# A pod's own annotation (CRI-O copies every pod annotation into every container's spec): an allocation only where
# accept_cdi_annotations_unprivileged is true (the default) or the container is privileged.
@pytest.mark.parametrize(
    "accept, privileged, env, devices, source",
    [
        (True, False, [], ["all", "0"], "CDI annotations"),  # the default: the rule as it was
        (False, False, [], None, None),  # a Kubernetes node: ignored
        (False, True, [], ["all", "0"], "CDI annotations"),  # privileged: honoured
        # ignored, the container's other requests go by their own rules: the image's variable where it is accepted
        (False, False, ["NVIDIA_VISIBLE_DEVICES=1"], ["1"], "NVIDIA_VISIBLE_DEVICES"),
    ],
)
def test_cdi_annotations_of_an_unprivileged_container_where_configured(accept, privileged, env, devices, source):
    doc = config(env, annotations={"cdi.k8s.io/x": "nvidia.com/gpu=all", "nvidia.cdi.k8s.io/y": "nvidia.com/gpu=0"})
    if privileged:
        doc["process"]["capabilities"] = copy.deepcopy(PRIVILEGED)
    request = gpu_request(doc, accept_cdi_annotations_unprivileged=accept)
    assert (request.devices, request.source) == (devices, source) if devices else request is None
    changed = inject(doc, INDEX, stat_node=fake_stat, accept_cdi_annotations_unprivileged=accept)
    assert changed is bool(devices) and ("gpufleet.nvidia/injected" in doc["annotations"]) is bool(devices)


def test_ignored_cdi_annotations_are_not_parsed():
    doc = config(annotations={"cdi.k8s.io/x": "nvidia.com/gpu="})
    assert gpu_request(doc, accept_cdi_annotations_unprivileged=False) is None
    with pytest.raises(RequestError, match="malformed device name"):
        gpu_request(doc)


# ---------------------------------------------------------------- injection


def _dests(doc):
    return [m["destination"] for m in doc["mounts"]]


def _device_paths(doc):
    return [d["path"] for d in doc["linux"].get("devices", [])]


def _allowed(doc):
    return [(a["type"], a["major"], a["minor"]) for a in doc["linux"]["resources"]["devices"] if a["allow"]]


def test_inject_one_gpu_by_index():
    doc = config(["NVIDIA_VISIBLE_DEVICES=0"])
    assert inject(doc, INDEX, stat_node=fake_stat)
    assert _device_paths(doc) == ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia0"]
    assert _allowed(doc) == [("c", 195, 255), ("c", UVM_MAJOR, 0), ("c", UVM_MAJOR, 1), ("c", 195, 0)]
    assert doc["linux"]["resources"]["devices"][0] == {"allow": False, "access": "rwm"}  # deny-all stays first
    node = doc["linux"]["devices"][-1]
    assert node == {
        "path": "/dev/nvidia0",
        "type": "c",
        "major": 195,
        "minor": 0,
        "fileMode": 0o666,
        "uid": 0,
        "gid": 0,
    }
    # default capabilities utility,compute: no graphics library
    assert _dests(doc) == [
        "/proc",
        "/usr/lib/x86_64-linux-gnu/libcuda.so.535",
        "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.535",
        "/usr/bin/nvidia-smi",
    ]
    assert doc["mounts"][1]["options"] == ["ro", "nosuid", "nodev", "bind"]
    assert doc["hooks"]["createContainer"] == [{"path": HOOK["path"], "args": HOOK["args"]}]
    assert doc["annotations"][INJECTED_ANNOTATION] == "0"


@pytest.mark.parametrize(
    "value, gpus",
    [
        ("all", ["/dev/nvidia0", "/dev/nvidia1"]),
        ("none", []),
        ("GPU-bbbb", ["/dev/nvidia1"]),
        ("0,GPU-bbbb", ["/dev/nvidia0", "/dev/nvidia1"]),
        ("1:0", ["/dev/nvidia1", "/dev/nvidia-caps/nvidia-cap21"]),
        ("MIG-cccc", ["/dev/nvidia1", "/dev/nvidia-caps/nvidia-cap21"]),
    ],
)
def test_inject_selects_exactly_the_requested_nodes(value, gpus):
    doc = config(["NVIDIA_VISIBLE_DEVICES=" + value])
    inject(doc, INDEX, stat_node=fake_stat)
    assert _device_paths(doc)[3:] == gpus
    if value == "1:0":
        assert ("c", 238, 21) in _allowed(doc)


def test_capabilities_filter_mounts():
    doc = config(["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=utility"])
    inject(doc, INDEX, stat_node=fake_stat)
    assert "/usr/lib/x86_64-linux-gnu/libcuda.so.535" not in _dests(doc)
    assert "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.535" in _dests(doc)
    doc = config(["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=all"])
    inject(doc, INDEX, stat_node=fake_stat)
    assert "/usr/lib/x86_64-linux-gnu/libGLX_nvidia.so.535" in _dests(doc)


def test_capability_the_spec_lacks_is_an_error():
    index = dict(INDEX, capabilities=["utility", "compute"])
    doc = config(["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=graphics"])
    with pytest.raises(RequestError, match="graphics requested but the CDI spec was generated without"):
        inject(doc, index, stat_node=fake_stat)
    inject(config(["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=all"]), index, stat_node=fake_stat)


def test_docker_gpus_config_replaces_the_legacy_hook():
    doc = config(
        ["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=compute,utility"],
        prestart=[DOCKER_GPUS_HOOK],
    )
    inject(doc, INDEX, stat_node=fake_stat)
    assert "prestart" not in doc["hooks"]
    assert _device_paths(doc)[3:] == ["/dev/nvidia0"]


def test_legacy_hook_removed_even_without_a_request():
    doc = config(prestart=[DOCKER_GPUS_HOOK])
    assert inject(doc, INDEX, stat_node=fake_stat)
    assert _device_paths(doc) == []
    assert not inject(config(), INDEX, stat_node=fake_stat)


def test_cdi_annotation_request():
    doc = config(annotations={"cdi.k8s.io/devices": "nvidia.com/gpu=GPU-aaaa"})
    inject(doc, INDEX, stat_node=fake_stat)
    assert _device_paths(doc)[3:] == ["/dev/nvidia0"]


@pytest.mark.parametrize("value", ["2", "GPU-zzzz", "0:0", "MIG-zzzz"])
def test_unknown_device_fails(value):
    with pytest.raises(RequestError, match=f"unknown GPU '{value}' requested \\(this node has: "):
        inject(config(["NVIDIA_VISIBLE_DEVICES=" + value]), INDEX, stat_node=fake_stat)


def test_alias_resolves_a_uuid_when_the_spec_names_by_index():
    index = copy.deepcopy(INDEX)
    del index["devices"]["GPU-aaaa"]
    index["aliases"] = {"GPU-aaaa": "0"}
    doc = config(["NVIDIA_VISIBLE_DEVICES=GPU-aaaa"])
    inject(doc, index, stat_node=fake_stat)
    assert _device_paths(doc)[3:] == ["/dev/nvidia0"]


def test_unmet_cuda_requirement_fails_and_disable_require_allows():
    with pytest.raises(RequestError, match="unsatisfied requirement"):
        inject(config(["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_CUDA=cuda>=12.4"]), INDEX, stat_node=fake_stat)
    doc = config(["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_CUDA=cuda>=12.4", "NVIDIA_DISABLE_REQUIRE=true"])
    assert inject(doc, INDEX, stat_node=fake_stat)


def test_missing_host_node_fails_rather_than_starting_without_gpu():
    index = copy.deepcopy(INDEX)
    index["devices"]["0"] = {"deviceNodes": [{"path": "/dev/nvidia0", "hostPath": "/nonexistent/nvidia0"}]}
    with pytest.raises(RequestError, match="/nonexistent/nvidia0 is missing"):
        inject(config(["NVIDIA_VISIBLE_DEVICES=0"]), index, stat_node=fake_stat)


def test_apply_is_idempotent():
    doc = config(["NVIDIA_VISIBLE_DEVICES=0"])
    inject(doc, INDEX, stat_node=fake_stat)
    once = copy.deepcopy(doc)
    inject(doc, INDEX, stat_node=fake_stat)
    assert doc == once


def test_apply_edits_env_does_not_override_the_image():
    doc = config(["FOO=image"])
    apply_edits(doc, [{"env": ["FOO=spec", "BAR=spec"]}], ("utility",))
    assert doc["process"]["env"] == ["PATH=/usr/bin:/bin", "FOO=image", "BAR=spec"]


def test_explicit_major_minor_in_the_edit_is_used():
    doc = config()
    apply_edits(doc, [{"deviceNodes": [{"path": "/dev/x", "major": 1, "minor": 2}]}], ())
    assert _allowed(doc) == [("c", 1, 2)]


# ---------------------------------------------------------------- hostile config.json (crafted bundles): fuzzed

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=20,
)
_keys = st.sampled_from(["process", "env", "capabilities", "bounding", "mounts", "hooks", "linux", "devices",
                         "resources", "annotations", "root", "path", "source", "destination", "prestart",
                         "createContainer", "args", "cdi.k8s.io/x"])  # fmt: skip
_shaped = st.recursive(
    _json_values,
    lambda children: st.dictionaries(_keys, children, max_size=5) | st.lists(children, max_size=3),
    max_leaves=30,
)
_INDEX = {"devices": {"0": {"deviceNodes": [{"path": "/dev/null", "major": 1, "minor": 3}]}}, "capabilities": []}


def test_a_request_error_stays_one_line_when_a_name_in_the_config_has_a_line_break():
    for config, name in (({"hooks": {"pre\nstart": {}}}, "pre\\nstart"), ({"annotations": {"a\nb": 5}}, "a\\nb")):
        with pytest.raises(RequestError) as info:
            check_config(config)
        assert "\n" not in str(info.value) and name in str(info.value)


@settings(max_examples=400, deadline=None)
@given(_shaped, st.booleans(), st.booleans())
def test_any_config_is_checked_or_a_request_error(config, envvar, mounts):
    """Whatever JSON config.json holds: ``check_config`` refuses it with one line, or the whole inject path
    runs on it without any other exception."""
    process = config.get("process") if isinstance(config, dict) else None
    if isinstance(process, dict) and isinstance(process.get("env"), list):
        process["env"].append("NVIDIA_VISIBLE_DEVICES=0")  # make it a GPU request where the shape allows
    try:
        check_config(config)
        inject(config, _INDEX, accept_envvar_unprivileged=envvar, accept_volume_mounts=mounts)
    except RequestError as exc:
        assert "\n" not in str(exc)


# ---------------------------------------------------------------- MIG config/monitor, IMEX channels
# NVIDIA's meaning: nvidia-container-toolkit v1.20.0-27-gd34b3046 (2026-08-21), container_config.go getNvidiaConfig
# and cuda_image.go ImexChannelRequests; libnvidia-container nvc_mount.c (the capability nodes).

PRIVILEGED = {"bounding": ["CAP_CHOWN", "CAP_SYS_ADMIN"]}
SPECIAL_NODES = {
    "/dev/nvidia-caps/nvidia-cap1": (238, 1),
    "/dev/nvidia-caps/nvidia-cap2": (238, 2),
    "/dev/nvidia-caps-imex-channels/channel0": (234, 0),
    "/dev/nvidia-caps-imex-channels/channel7": (234, 7),
}


def special_stat(path):
    return SPECIAL_NODES[path] if path in SPECIAL_NODES else fake_stat(path)


@pytest.fixture
def mig_minors(tmp_path):
    path = tmp_path / "mig-minors"
    path.write_text("config 1\nmonitor 2\ngpu0/gi1/access 3\ngpu1/gi1/ci0/access 21\n")
    return str(path)


def _privileged(doc):
    doc["process"]["capabilities"] = copy.deepcopy(PRIVILEGED)
    return doc


@pytest.mark.parametrize(
    ("env", "nodes"),
    [
        (["NVIDIA_MIG_CONFIG_DEVICES=all"], ["/dev/nvidia-caps/nvidia-cap1"]),
        (["NVIDIA_MIG_MONITOR_DEVICES=all"], ["/dev/nvidia-caps/nvidia-cap2"]),
        (
            ["NVIDIA_MIG_CONFIG_DEVICES=1", "NVIDIA_MIG_MONITOR_DEVICES=all"],
            ["/dev/nvidia-caps/nvidia-cap1", "/dev/nvidia-caps/nvidia-cap2"],
        ),
        (["NVIDIA_MIG_CONFIG_DEVICES="], []),  # empty: not asked
    ],
)
def test_mig_config_and_monitor_give_the_capability_nodes_to_a_privileged_container(mig_minors, env, nodes):
    doc = _privileged(config(["NVIDIA_VISIBLE_DEVICES=0,1", *env]))
    assert inject(doc, INDEX, stat_node=special_stat, mig_minors=mig_minors)
    paths = _device_paths(doc)
    assert [p for p in paths if p.startswith("/dev/nvidia-caps/")] == nodes
    assert [a for a in _allowed(doc) if a[1] == 238] == [("c", 238, int(n[-1])) for n in nodes]


def test_mig_config_in_an_unprivileged_container_fails_the_start(mig_minors):
    doc = config(["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_MIG_CONFIG_DEVICES=all"])
    with pytest.raises(RequestError, match="NVIDIA_MIG_CONFIG_DEVICES is set but the container is not privileged"):
        inject(doc, INDEX, stat_node=special_stat, mig_minors=mig_minors)
    # not a GPU container: the variable means nothing (NVIDIA's hook returns before looking at it)
    assert gpu_request(config(["NVIDIA_MIG_MONITOR_DEVICES=all"])) is None


def test_mig_config_names_a_gpu_that_is_not_visible_or_the_driver_has_no_mig(mig_minors, tmp_path):
    doc = _privileged(config(["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_MIG_MONITOR_DEVICES=1"]))
    with pytest.raises(RequestError, match="1 not among the visible devices"):
        gpu_request(doc)
    doc = _privileged(config(["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_MIG_MONITOR_DEVICES=all"]))
    with pytest.raises(RequestError, match="no MIG monitor capability"):
        inject(doc, INDEX, stat_node=special_stat, mig_minors=str(tmp_path / "absent"))


@pytest.mark.parametrize(
    ("env", "privileged", "accept", "channels"),
    [
        (["NVIDIA_IMEX_CHANNELS=0"], False, True, ["0"]),
        (["NVIDIA_IMEX_CHANNELS=7, 0,7"], False, True, ["7", "0"]),
        (["NVIDIA_IMEX_CHANNELS=all"], True, True, []),  # NVIDIA ignores all from the variable
        (["NVIDIA_IMEX_CHANNELS=0"], False, False, []),  # a Kubernetes node: the variable is no allocation...
        (["NVIDIA_IMEX_CHANNELS=0"], True, False, ["0"]),  # ...unless the container is privileged
        ([], True, True, []),
    ],
)
def test_imex_channels_from_the_variable(env, privileged, accept, channels):
    doc = config(["NVIDIA_VISIBLE_DEVICES=0", *env])
    if privileged:
        _privileged(doc)
    assert inject(doc, INDEX, stat_node=special_stat, accept_envvar_unprivileged=True)
    request = gpu_request(doc, accept_envvar_unprivileged=accept)
    assert (list(request.imex_channels) if request else []) == channels
    if request is None:  # unprivileged on a Kubernetes node: no GPU request at all from the variables
        return
    doc = config(["NVIDIA_VISIBLE_DEVICES=0", *env])
    if privileged:
        _privileged(doc)
    inject(doc, INDEX, stat_node=special_stat, request=request)
    assert [p for p in _device_paths(doc) if "imex" in p] == [
        f"/dev/nvidia-caps-imex-channels/channel{c}" for c in channels
    ]


def test_imex_channels_from_the_device_plugins_mounts_and_bad_ones():
    doc = config(["NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices", "NVIDIA_IMEX_CHANNELS=0"])
    doc["mounts"] += [
        {"source": "/dev/null", "destination": "/var/run/nvidia-container-devices/0"},
        {"source": "/dev/null", "destination": "/var/run/nvidia-container-devices/imex/7"},
    ]
    request = gpu_request(doc, accept_envvar_unprivileged=False, accept_volume_mounts=True)
    assert request.devices == ["0"] and request.imex_channels == ("7",)  # the mount, not the variable
    with pytest.raises(RequestError, match="is not an IMEX channel number"):
        gpu_request(config(["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_IMEX_CHANNELS=../../nvidiactl"]))
    doc = config(["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_IMEX_CHANNELS=3"])
    with pytest.raises(RequestError, match="/dev/nvidia-caps-imex-channels/channel3 is missing"):
        inject(doc, INDEX, stat_node=special_stat)


# ---------------------------------------------------------------- the NVIDIA_* variables an image sets: generated
_ENV_NAMES = ["NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "NVIDIA_REQUIRE_CUDA", "NVIDIA_REQUIRE_X",
              "NVIDIA_DISABLE_REQUIRE", "NVIDIA_MIG_CONFIG_DEVICES", "NVIDIA_MIG_MONITOR_DEVICES",
              "NVIDIA_IMEX_CHANNELS", "LD_PRELOAD"]  # fmt: skip
_ENV_PARTS = ["0", "1", "all", "none", "void", "GPU-aaaa", "MIG-cccc", "1:0", "7", " ", ",", "", "utility", "compute",
              "cuda>=12.0", "cuda>=99", "driver<400", "brand=tesla", "arch=x", ">=", "=", "true", "\n", "é", "0" * 25,
              "99999999999", "-1"]  # fmt: skip
_env_values = st.one_of(st.lists(st.sampled_from(_ENV_PARTS), max_size=8).map("".join), st.text(max_size=30))
_envs = st.lists(st.tuples(st.sampled_from(_ENV_NAMES), _env_values).map("=".join) | st.text(max_size=20), max_size=8)


@settings(max_examples=150, deadline=None)
@given(_envs, st.booleans(), st.booleans())
def test_any_nvidia_environment_is_a_request_or_one_line_error(env, privileged, envvar):
    """Whatever the image's NVIDIA_* variables say: the request holds only devices the variable names (in order,
    once each), and injection gives only the index's nodes; or the start fails with one line."""
    doc = config(env)
    if privileged:
        doc["process"]["capabilities"] = copy.deepcopy(PRIVILEGED)
    visible = env_dict(doc["process"]["env"]).get("NVIDIA_VISIBLE_DEVICES")
    try:
        request = gpu_request(doc, accept_envvar_unprivileged=envvar)
        if request is None:
            assert not (envvar or privileged) or parse_visible_devices(visible) is None
            return
        named = [p.strip() for p in (visible or "").split(",") if p.strip()]
        if named == ["none"]:  # the driver without a GPU (NVIDIA's "none")
            assert request.devices == []
        else:
            assert request.devices == ["all"] if "all" in named else request.devices == list(dict.fromkeys(named))
        assert set(request.capabilities) <= set(INDEX["capabilities"])
        inject(doc, INDEX, stat_node=fake_stat, accept_envvar_unprivileged=envvar)
    except RequestError as exc:
        assert "\n" not in str(exc)
        return
    known = {n["path"] for d in INDEX["devices"].values() for n in d["deviceNodes"]}
    known |= {n["path"] for n in INDEX["containerEdits"]["deviceNodes"]}
    assert set(_device_paths(doc)) <= known
    assert not any(e.startswith("LD_PRELOAD=") for e in doc["process"]["env"] if e not in env)
