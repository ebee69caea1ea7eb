# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""validate_plan / validate_images / validate_result: what the validate role runs per engine, what it loads or pulls
first, and how it judges the output."""

import subprocess

import pytest

from ansible_collections.gpufleet.nvidia.plugins.filter.validate import FilterModule
from ansible_collections.gpufleet.nvidia.plugins.module_utils.validate.plan import (
    BEGIN,
    CHECK_SCRIPT,
    END,
    containerd_ref,
    fabric_manager_problem,
    fabric_manager_wait,
    gpu_uuids,
    host_driver_version,
    required_device_nodes,
    validate_images,
    validate_plan,
)
from ansible_collections.gpufleet.nvidia.plugins.module_utils.validate.result import (
    device_problems,
    dlopen_problem,
    library_problems,
    nvidia_smi_gpus,
    nvidia_smi_problem,
    open_status,
    parse_output,
    validate_result,
)

IMAGE = "gpufleet-sim/mini:latest"


def _engine(version, runtimes=("runc",), cdi=False, installed=True):
    return {"installed": installed, "version": version, "runtimes": list(runtimes), "cdi_enabled": cdi}


def _nvidia(**engines):
    base = {e: {"installed": False} for e in ("docker", "containerd", "crio", "podman")}
    base.update(engines)
    return {
        "engines": base,
        "gpus": [{"minor": 0}, {"minor": 3}],
        "device_nodes": [{"path": "/dev/nvidiactl"}, {"path": "/dev/nvidia-uvm"}],
    }


# Two GPUs as Debian's nvidia-smi 535 lists them on a simulated node (tests/integration/test_nvidia_smi_e2e.py).
UUIDS = ["GPU-6fbb13f4-2023-5f31-9d6f-12c3ec57dd4e", "GPU-111a541b-740c-5c69-b75e-c20a56896779"]


def _smi_l(uuids):
    return [f"GPU {i}: NVIDIA A100-SXM4-40GB (UUID: {u})" for i, u in enumerate(uuids)]


VERSION = "535.247.01"
LIBDIR = "/usr/lib/x86_64-linux-gnu"


def _lib(soname, version=VERSION, directory=LIBDIR):
    """A ``LIB`` line of the check script: the ld cache entry and the file it resolves to."""
    return f"LIB {soname} {directory}/{soname} = {directory}/{soname.split('.so')[0]}.so.{version}"


def _out(devices, libcuda=True, files=(), *, smi=tuple(UUIDS), smi_lines=None, smi_rc=0, opens=None, libs=None,
         dlopen="ok"):  # fmt: skip
    """What the check script prints in a container: each device node seen (opened: ``ok`` unless ``opens`` says what
    the shell answered), the driver libraries' ld cache entries (``libs``: lines; by default libcuda unless
    ``libcuda=False``, and libnvidia-ml, both of VERSION), the dlopen answer and nvidia-smi -L."""
    lines = [BEGIN]
    for d in devices:
        lines += ["DEV " + d, f"OPEN {d} " + (opens or {}).get(d, "ok")]
    lines += ["FILE " + f for f in files]
    if libs is None:
        libs = ([_lib("libcuda.so.1")] if libcuda else []) + [_lib("libnvidia-ml.so.1")]
    lines += libs
    if dlopen is not None:
        lines.append("DLOPEN " + dlopen)
    lines += ["NVSMI", *(_smi_l(smi) if smi_lines is None else smi_lines), f"NVSMI-RC {smi_rc}"]
    return "\n".join([*lines, END]) + "\n"


ALL = ["/dev/nvidiactl", "/dev/nvidia0", "/dev/nvidia3", "/dev/nvidia-uvm"]


def test_filters_registered():
    filters = FilterModule().filters()
    assert set(filters) == {
        "validate_plan",
        "validate_images",
        "validate_result",
        "validate_failure_message",
        "validate_device_nodes",
        "validate_gpu_uuids",
        "validate_driver_version",
        "engine_reads_cdi",
        "validate_fabric_manager_wait",
        "validate_fabric_manager_problem",
    }
    # the runtime role's CDI decision is the module_utils rule itself, not a copy
    assert filters["engine_reads_cdi"]("containerd", "1.7.24~ds1") is True
    assert filters["engine_reads_cdi"]("containerd", "1.6.20~ds1") is False


def test_docker_20_runtime_only_docker_26_with_cdi_also():
    old = validate_plan(_nvidia(docker=_engine("20.10.24", ["nvidia", "runc"])), image=IMAGE)
    assert [(c["engine"], c["mode"]) for c in old] == [("docker", "runtime")]
    argv = old[0]["argv"]
    assert argv[:3] == ["timeout", "--kill-after=10", "120"]
    assert argv[3:9] == ["docker", "run", "--rm", "--network", "none", "--pull"] and argv[9] == "missing"
    assert argv[argv.index("--runtime") + 1] == "nvidia" and "NVIDIA_VISIBLE_DEVICES=all" in argv
    assert argv[-4:] == [IMAGE, "sh", "-c", CHECK_SCRIPT]
    new = validate_plan(_nvidia(docker=_engine("26.1.5", cdi=True)), image=IMAGE, pull="never")
    assert [c["mode"] for c in new] == ["runtime", "cdi"]
    assert new[1]["argv"][new[1]["argv"].index("--device") + 1] == "nvidia.com/gpu=all"
    assert "never" in new[1]["argv"]
    # docker 26 without CDI enabled: runtime only; the runtime fact's cdi wins over discovery's.
    assert [c["mode"] for c in validate_plan(_nvidia(docker=_engine("26.1.5")), image=IMAGE)] == ["runtime"]
    runtime = {"engines": {"docker": {"registered": True, "cdi": True, "version": "26.1.5"}}}
    assert [c["mode"] for c in validate_plan(_nvidia(docker=_engine("26.1.5")), runtime, image=IMAGE)] == [
        "runtime",
        "cdi",
    ]


def test_podman_cdi_containerd_ctr_runc_binary_crio_skipped():
    nv = _nvidia(
        podman=_engine("5.4.2"), containerd=_engine("1.7.24"), crio=_engine("1.30"), docker=_engine("26.1", cdi=True)
    )
    plan = validate_plan(nv, toolkit={"runtime_path": "/usr/bin/nvidia-container-runtime"}, image="busybox:glibc")
    assert [(c["engine"], c["mode"]) for c in plan] == [
        ("docker", "runtime"),
        ("docker", "cdi"),
        ("podman", "cdi"),
        ("containerd", "runtime"),
        ("crio", "none"),
    ]
    podman = plan[2]
    assert podman["argv"][3] == "podman" and "nvidia.com/gpu=all" in podman["argv"]
    assert podman["present_argv"] == ["podman", "image", "exists", "busybox:glibc"]
    ctr = plan[3]
    assert ctr["argv"][3:8] == ["ctr", "-n", "default", "run", "--rm"]
    assert ctr["argv"][ctr["argv"].index("--runc-binary") + 1] == "/usr/bin/nvidia-container-runtime"
    assert ctr["argv"][ctr["argv"].index("--cpu-shares") + 1] == "0"  # no cpu controller needed (sid nodes)
    assert ctr["image"] == "docker.io/library/busybox:glibc" and ctr["image"] in ctr["argv"]
    assert ctr["pull_argv"] == ["ctr", "-n", "default", "images", "pull", "docker.io/library/busybox:glibc"]
    assert ctr["present_rc0"] is False
    assert plan[4]["skipped"] and plan[4]["argv"] is None and "crictl" in plan[4]["message"]
    only = validate_plan(nv, image=IMAGE, engines=["containerd"], pull="never", suffix="x1")
    assert [c["engine"] for c in only] == ["containerd"] and only[0]["pull_argv"] is None
    assert "gpufleet-validate-containerd-x1" in only[0]["argv"]


K8S = {"runtime_path": "/usr/local/bin/gpufleet-container-runtime", "accept_envvar_unprivileged": False}


@pytest.mark.parametrize(
    ("toolkit", "docker", "ctr"),
    [
        # NVIDIA's behaviour (docker hosts, and a fact without the settings): the variable
        ({}, ["-e", "NVIDIA_VISIBLE_DEVICES=all"], ["--env", "NVIDIA_VISIBLE_DEVICES=all"]),
        (
            {"accept_envvar_unprivileged": True, "accept_volume_mounts": False},
            ["-e", "NVIDIA_VISIBLE_DEVICES=all"],
            ["--env", "NVIDIA_VISIBLE_DEVICES=all"],
        ),
        # a Kubernetes node: the device plugin's volume mounts, as a pod gets them
        (
            {**K8S, "accept_volume_mounts": True},
            [
                "-e",
                "NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices",
                "-v",
                "/dev/null:/var/run/nvidia-container-devices/all:ro",
            ],
            [
                "--env",
                "NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices",
                "--mount",
                "type=bind,src=/dev/null,dst=/var/run/nvidia-container-devices/all,options=rbind:ro",
            ],
        ),
        # neither honoured: the variable from a container the runtime counts as privileged
        (
            {**K8S, "accept_volume_mounts": False},
            ["--cap-add", "SYS_ADMIN", "-e", "NVIDIA_VISIBLE_DEVICES=all"],
            ["--cap-add", "CAP_SYS_ADMIN", "--env", "NVIDIA_VISIBLE_DEVICES=all"],
        ),
    ],
)
def test_runtime_mode_asks_the_way_the_hosts_runtime_trusts(toolkit, docker, ctr):
    nv = _nvidia(docker=_engine("26.1.5", cdi=True), containerd=_engine("1.6.20"))
    plan = {c["engine"] + "/" + c["mode"]: c["argv"] for c in validate_plan(nv, toolkit=toolkit, image=IMAGE)}
    run = plan["docker/runtime"]
    start = run.index("--runtime") + 2
    assert run[start - 1] == "nvidia" and run[start : start + len(docker)] == docker
    assert run[start + len(docker)] == IMAGE
    assert "NVIDIA_VISIBLE_DEVICES=all" not in plan["docker/cdi"]  # CDI asks by device name, trusted everywhere
    argv = plan["containerd/runtime"]
    start = argv.index("--runc-binary") + 2
    assert argv[start : start + len(ctr)] == ctr and argv[start + len(ctr)] == "docker.io/gpufleet-sim/mini:latest"


def test_engine_from_runtime_fact_only_and_bad_options():
    plan = validate_plan(_nvidia(), {"engines": {"podman": {"registered": False, "cdi": True}}}, image=IMAGE)
    assert [c["engine"] for c in plan] == ["podman"]
    assert validate_plan(_nvidia(), image=IMAGE) == []
    with pytest.raises(ValueError, match="image"):
        validate_plan(_nvidia(), image="")
    with pytest.raises(ValueError, match="pull"):
        validate_plan(_nvidia(), image=IMAGE, pull="sometimes")


@pytest.mark.parametrize(
    "image,ref",
    [
        ("busybox", "docker.io/library/busybox:latest"),
        ("gpufleet-sim/mini:latest", "docker.io/gpufleet-sim/mini:latest"),
        ("registry.local:5000/cuda/base:12", "registry.local:5000/cuda/base:12"),
        ("localhost/x", "localhost/x:latest"),
        ("nvcr.io/nvidia/cuda@sha256:abc", "nvcr.io/nvidia/cuda@sha256:abc"),
    ],
)
def test_containerd_ref(image, ref):
    assert containerd_ref(image) == ref


def test_required_device_nodes():
    assert required_device_nodes(_nvidia()) == ALL
    assert required_device_nodes({"gpus": [{"minor": 1}], "device_nodes": []}) == ["/dev/nvidiactl", "/dev/nvidia1"]
    # validate_device_nodes, when it names any, wins; an empty list means discovered
    assert required_device_nodes(_nvidia(), ["/dev/nvidia7"]) == ["/dev/nvidia7"]
    assert required_device_nodes(_nvidia(), []) == ALL


def test_required_device_nodes_ask_for_uvm_when_the_driver_provides_it():
    """The uvm module is loaded but /dev/nvidia-uvm is missing on the host: still required, so validate fails."""
    no_uvm_node = {"gpus": [{"minor": 0}], "device_nodes": [{"path": "/dev/nvidia0"}], "driver": {"uvm_loaded": True}}
    assert required_device_nodes(no_uvm_node) == ["/dev/nvidiactl", "/dev/nvidia0", "/dev/nvidia-uvm"]
    assert required_device_nodes(dict(no_uvm_node, driver={"uvm_loaded": False})) == ["/dev/nvidiactl", "/dev/nvidia0"]


def test_a_container_without_uvm_fails_with_the_fix():
    plan = [{"engine": "docker", "mode": "cdi", "image": "img", "argv": ["docker", "run"], "skipped": False}]
    seen = _out(["/dev/nvidiactl", "/dev/nvidia0"])
    result = validate_result(
        plan,
        [{"rc": 0, "stdout": seen, "stderr": "", "delta": "0:00:01.0"}],
        device_nodes=["/dev/nvidiactl", "/dev/nvidia0", "/dev/nvidia-uvm"],
        nvidia_smi=False,  # the uvm rule alone decides
    )
    assert result["passed"] is False and result["failed_engines"] == ["docker"]
    message = result["engines"]["docker"]["message"]
    assert "device node(s) not visible: /dev/nvidia-uvm" in message and "gpufleet-nvidia-devices" in message
    with_uvm = _out(["/dev/nvidiactl", "/dev/nvidia0", "/dev/nvidia-uvm"])
    passed = validate_result(
        plan,
        [{"rc": 0, "stdout": with_uvm, "stderr": "", "delta": "0:00:01.0"}],
        device_nodes=["/dev/nvidiactl", "/dev/nvidia0", "/dev/nvidia-uvm"],
        nvidia_smi=False,
    )
    assert passed["passed"] is True


def _present(plan, answers):
    """What the role's "Is the image there" loop registers: one result per check with a present_argv."""
    results = []
    for check in plan:
        if check["present_argv"]:
            rc, stdout = answers[check["engine"]]
            results.append({"item": check, "rc": rc, "stdout": stdout})
    return results


def _images_plan(pull="missing"):
    nvidia = _nvidia(
        docker=_engine("27.3.1", cdi=True), podman=_engine("5.2.0"), containerd=_engine("1.7.24"), crio=_engine("1.31")
    )
    return validate_plan(nvidia, image=IMAGE, pull=pull)


@pytest.mark.parametrize(
    ("pull", "archive", "answers", "expected"),
    [
        # docker lacks it (rc 1, both its modes probe), containerd lacks it (empty ls -q), podman has it
        ("missing", "", {"docker": (1, ""), "podman": (0, ""), "containerd": (0, "")}, (["docker", "containerd"], [],
         ["containerd"])),
        # an archive is loaded instead of pulling, once per engine
        ("missing", "/tmp/img.tar", {"docker": (1, ""), "podman": (0, ""), "containerd": (0, "")},
         (["docker", "containerd"], ["docker", "containerd"], [])),
        # containerd has it: nothing to pull under missing; always pulls regardless
        ("missing", "", {"docker": (0, ""), "podman": (0, ""), "containerd": (0, "sha256:1")}, ([], [], [])),
        ("always", "", {"docker": (0, ""), "podman": (0, ""), "containerd": (0, "sha256:1")}, ([], [], ["containerd"])),
        ("never", "", {"docker": (0, ""), "podman": (125, ""), "containerd": (0, "")}, (["podman", "containerd"], [],
         [])),
    ],
)  # fmt: skip
def test_validate_images(pull, archive, answers, expected):
    missing, load, pulled = expected
    plan = _images_plan(pull)
    got = validate_images(plan, _present(plan, answers), pull=pull, archive=archive)
    assert sorted(got["missing"]) == sorted(missing)
    assert [c["engine"] for c in got["load"]] == load
    assert [c["engine"] for c in got["pull"]] == pulled
    assert all(c["load_argv"] for c in got["load"]) and all(c["pull_argv"] for c in got["pull"])


def test_validate_images_ignores_skipped_probes():
    plan = _images_plan()
    assert validate_images(plan, [{"skipped": True, "item": plan[0]}, {"changed": False}])["missing"] == []
    assert validate_images(plan, None) == {"missing": [], "load": [], "pull": []}


def test_parse_output_ldcache_file_and_incomplete():
    parsed = parse_output(_out(ALL))
    assert parsed == {
        "complete": True,
        "device_nodes": sorted(ALL),
        "opens": dict.fromkeys(ALL, "ok"),
        "files": [],
        "libs": {
            "libcuda.so.1": [{"path": f"{LIBDIR}/libcuda.so.1", "resolved": f"{LIBDIR}/libcuda.so.{VERSION}"}],
            "libnvidia-ml.so.1": [
                {"path": f"{LIBDIR}/libnvidia-ml.so.1", "resolved": f"{LIBDIR}/libnvidia-ml.so.{VERSION}"}
            ],
        },
        "ldconfig": True,
        "libcuda": True,
        "libcuda_path": f"{LIBDIR}/libcuda.so.1",
        "dlopen": "ok",
        "nvidia_smi_rc": 0,
        "nvidia_smi_gpus": UUIDS,
        "nvidia_smi_output": _smi_l(UUIDS),
    }
    # a file alone is not libcuda in the container: the loader finds it through the ld cache
    by_file = parse_output(_out(ALL, libcuda=False, files=["/usr/lib64/libcuda.so.1"]))
    assert (
        not by_file["libcuda"] and by_file["libcuda_path"] is None and by_file["files"] == ["/usr/lib64/libcuda.so.1"]
    )
    assert not parse_output(BEGIN + "\nDEV /dev/nvidia0\n")["complete"]
    # A "DEV" line inside nvidia-smi's output is not a device.
    assert parse_output(_out([], smi_lines=["DEV /dev/nvidia9"]))["device_nodes"] == []
    # an entry whose file is missing, one readlink could not resolve, and a LIB line of another library
    odd = parse_output(
        _out(
            ALL,
            libs=[
                "LIB libcuda.so.1 /usr/lib64/libcuda.so.1 missing",
                "LIB libnvidia-ml.so.1 /usr/lib64/libnvidia-ml.so.1 = ",
                "LIB libc.so.6 /lib/libc.so.6 = /lib/libc.so.6",
            ],
            dlopen=None,
        )
    )
    assert odd["libs"] == {
        "libcuda.so.1": [{"path": "/usr/lib64/libcuda.so.1", "resolved": None}],
        "libnvidia-ml.so.1": [{"path": "/usr/lib64/libnvidia-ml.so.1", "resolved": ""}],
    }
    assert odd["dlopen"] is None


def _plan():
    nv = _nvidia(docker=_engine("26.1.5", cdi=True), containerd=_engine("1.7.24"), crio=_engine("1.30"))
    return validate_plan(nv, image=IMAGE)


def _ok(stdout, rc=0, stderr="", delta="0:00:01.250000"):
    return {"rc": rc, "stdout": stdout, "stderr": stderr, "delta": delta, "changed": False}


def test_result_all_pass():
    plan = _plan()
    results = [_ok(_out(ALL)), _ok(_out(ALL)), _ok(_out(ALL), delta="0:00:00.500000"), {"skipped": True}]
    fact = validate_result(plan, results, device_nodes=ALL, gpu_uuids=UUIDS)
    assert fact["passed"] is True and fact["failed_engines"] == [] and fact["skipped"] is False
    assert fact["required_gpus"] == UUIDS
    docker = fact["engines"]["docker"]
    assert docker["passed"] and not docker["skipped"] and docker["libcuda"] and docker["seconds"] == 2.5
    assert [c["mode"] for c in docker["checks"]] == ["runtime", "cdi"]
    assert docker["device_nodes"] == sorted(ALL) and docker["image"] == IMAGE
    assert fact["engines"]["containerd"]["image"] == "docker.io/gpufleet-sim/mini:latest"
    assert fact["engines"]["crio"]["skipped"] and not fact["engines"]["crio"]["passed"]
    assert fact["message"] == "passed on: containerd, docker"
    assert docker["checks"][0]["nvidia_smi_gpus"] == UUIDS
    assert docker["checks"][0]["message"].endswith("nvidia-smi -L lists 2 GPU(s)")


def test_result_failures_named():
    plan = _plan()
    err = "docker: Error response from daemon: unknown or invalid runtime name: nvidia.\nSee 'docker run --help'."
    results = [
        _ok("", rc=125, stderr=err),
        _ok(_out(ALL[:2])),  # cdi: two device nodes missing
        _ok(_out(ALL, libcuda=False)),
        {"skipped": True},
    ]
    fact = validate_result(plan, results, device_nodes=ALL)
    assert fact["passed"] is False and fact["failed_engines"] == ["containerd", "docker"]
    docker = fact["engines"]["docker"]
    assert not docker["passed"]
    first = docker["checks"][0]["message"]
    assert "rc 125" in first and "invalid runtime name: nvidia" in first
    assert "not visible: /dev/nvidia3, /dev/nvidia-uvm" in docker["checks"][1]["message"]
    assert "libcuda.so.1 not in the container's ld cache" in fact["engines"]["containerd"]["message"]
    assert fact["message"] == "failed on: containerd, docker"
    timeout = validate_result(plan[:1], [_ok("", rc=124)], device_nodes=ALL)
    assert "timed out" in timeout["engines"]["docker"]["message"]
    truncated = validate_result(plan[:1], [_ok(BEGIN + "\nDEV /dev/nvidiactl\n")], device_nodes=ALL)
    assert "did not finish" in truncated["engines"]["docker"]["message"]


def test_result_check_mode_and_nothing_to_do():
    plan = _plan()
    fact = validate_result(plan, [{"skipped": True}] * 4, device_nodes=ALL, check_mode=True)
    assert fact["skipped"] and not fact["passed"] and fact["failed_engines"] == []
    assert all(e["skipped"] for e in fact["engines"].values())
    assert "check mode" in fact["engines"]["docker"]["message"]
    none = validate_result([], [], device_nodes=ALL)
    assert none["passed"] is False and none["message"] == "no container engine found to validate"


def test_docker_gpus_as_typed_where_nvidia_is_the_default_runtime():
    """`docker run --gpus all`, no --runtime: run where nvidia is docker's default (the runtime role's default)."""
    nv = _nvidia(docker=dict(_engine("20.10.24", ["nvidia", "runc"]), default_runtime="nvidia"))
    plan = validate_plan(nv, image=IMAGE)
    assert [c["mode"] for c in plan] == ["runtime", "gpus"]
    argv = plan[1]["argv"]
    assert "--runtime" not in argv and "NVIDIA_VISIBLE_DEVICES=all" not in " ".join(argv)
    assert argv[argv.index("--gpus") + 1] == "all" and argv[argv.index("--gpus") + 2] == IMAGE
    # the runtime fact's default wins over what discovery read before the runtime stage
    runtime = {"engines": {"docker": {"registered": True, "default": False, "version": "20.10.24"}}}
    assert [c["mode"] for c in validate_plan(nv, runtime, image=IMAGE)] == ["runtime"]
    runtime["engines"]["docker"]["default"] = True
    nv_before = _nvidia(docker=_engine("20.10.24"))
    assert [c["mode"] for c in validate_plan(nv_before, runtime, image=IMAGE)] == ["runtime", "gpus"]
    # a Kubernetes node: --gpus is an unprivileged container's variable there, so the check says why it is not run
    plan = validate_plan(nv, runtime, {**K8S, "accept_volume_mounts": True}, image=IMAGE)
    assert [(c["mode"], c["skipped"]) for c in plan] == [("runtime", False), ("gpus", True)]
    assert plan[1]["argv"] is None and "accept_envvar_unprivileged false" in plan[1]["message"]
    result = validate_result(plan, [{"rc": 0, "stdout": _out(ALL), "delta": "0:00:01.0"}, {"skipped": True}], ALL)
    assert result["engines"]["docker"]["passed"] and not result["engines"]["docker"]["skipped"]


def test_nvidia_smi_gpus_leaves_mig_devices_out():
    out = "\n".join(
        [
            *_smi_l(UUIDS[:1]),
            "  MIG 1g.5gb      Device  0: (UUID: MIG-0d0e4b2a-1111-5222-8333-944455556666)",
            *_smi_l(UUIDS)[1:],
            "No devices were found",
        ]
    )
    assert nvidia_smi_gpus(out) == UUIDS
    assert nvidia_smi_gpus(None) == [] and nvidia_smi_gpus("Failed to initialize NVML: Unknown Error") == []


def test_gpu_uuids_from_the_facts():
    nvidia = {"gpus": [{"uuid": UUIDS[1], "minor": 3}, {"minor": 0}, {"uuid": UUIDS[0]}, "junk"]}
    assert gpu_uuids(nvidia) == [UUIDS[1], UUIDS[0]]
    assert gpu_uuids(None) == [] and gpu_uuids({"gpus": None}) == []


def test_nvidia_smi_problem_each_way_it_fails():
    def problem(expected=tuple(UUIDS), **kw):
        return nvidia_smi_problem(parse_output(_out(ALL, **kw)), list(expected))

    assert problem() == ""
    # the container was given both GPUs but nvidia-smi sees one: the one missing is named
    one = problem(smi=UUIDS[:1])
    assert one.startswith("nvidia-smi -L lists 1 GPU(s), expected 2") and f"missing {UUIDS[1]}" in one
    # asked with a wrong list: the GPU listed and not expected is named too
    wrong = problem(expected=[UUIDS[0], "GPU-00000000-0000-0000-0000-000000000000"])
    assert "missing GPU-00000000-0000-0000-0000-000000000000" in wrong and f"not expected {UUIDS[1]}" in wrong
    assert "listed twice" in problem(smi=[UUIDS[0], UUIDS[0], UUIDS[1]])
    assert "not found in the container" in problem(smi_lines=["sh: 1: nvidia-smi: not found"], smi_rc=127)
    nvml = problem(smi_lines=["Failed to initialize NVML: Unknown Error"], smi_rc=255)
    assert nvml == "nvidia-smi -L failed (rc 255): Failed to initialize NVML: Unknown Error"
    # no UUIDs known (discovery without NVML): it must still run and list a GPU
    assert problem(expected=()) == ""
    assert problem(expected=(), smi=[]) == "nvidia-smi -L listed no GPU: no output"
    assert nvidia_smi_problem(parse_output(BEGIN + "\n"), UUIDS) == "nvidia-smi -L did not run"


def test_result_nvidia_smi_decides_unless_turned_off():
    plan = _plan()[:1]
    short = [_ok(_out(ALL, smi=UUIDS[:1]))]
    fact = validate_result(plan, short, device_nodes=ALL, gpu_uuids=UUIDS)
    assert fact["failed_engines"] == ["docker"]
    assert f"nvidia-smi -L lists 1 GPU(s), expected 2: missing {UUIDS[1]}" in fact["engines"]["docker"]["message"]
    off = validate_result(plan, short, device_nodes=ALL, gpu_uuids=UUIDS, nvidia_smi=False)
    assert off["passed"] and off["required_gpus"] == [] and "nvidia-smi" not in off["engines"]["docker"]["message"]


@pytest.mark.parametrize("present", [True, False])
def test_check_script_runs_nvidia_smi_in_posix_sh(tmp_path, present):
    """The script itself, through a real /bin/sh, with an nvidia-smi on PATH (or none)."""
    if present:
        smi = tmp_path / "nvidia-smi"
        smi.write_text('#!/bin/sh\n[ "$1" = -L ] || exit 3\n' + "".join(f"echo '{x}'\n" for x in _smi_l(UUIDS)))
        smi.chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}
    out = subprocess.run(["/bin/sh", "-c", CHECK_SCRIPT], capture_output=True, text=True, env=env, check=True).stdout
    parsed = parse_output(out)
    assert parsed["complete"]
    if present:
        assert parsed["nvidia_smi_rc"] == 0 and parsed["nvidia_smi_gpus"] == UUIDS
        assert nvidia_smi_problem(parsed, UUIDS) == ""
    else:
        assert parsed["nvidia_smi_rc"] == 127 and parsed["nvidia_smi_gpus"] == []
        assert "not found in the container" in nvidia_smi_problem(parsed, UUIDS)


@pytest.mark.parametrize(
    ("answer", "status"),
    [
        ("ok", "ok"),
        # dash, bash and busybox ash word it differently; strerror is the same (glibc and musl)
        ("/bin/sh: 1: cannot create /dev/nvidia0: No such device or address", "nodriver"),
        ("/bin/bash: line 1: /dev/nvidia0: Operation not permitted", "denied"),
        ("sh: can't create /dev/nvidia0: Permission denied", "denied"),
        ("/bin/sh: 1: cannot create /dev/nvidia0: No such file or directory", "error"),
        ("", "error"),
        (None, "error"),
    ],
)
def test_open_status(answer, status):
    assert open_status(answer) == status


def test_device_problems_open_denied_and_extra_gpus():
    enxio = "/bin/sh: 1: cannot create /dev/nvidia0: No such device or address"
    eperm = "/bin/sh: 1: cannot create /dev/nvidia3: Operation not permitted"
    # no driver behind the nodes (the simulated nodes, a host before the module loads): ENXIO passes
    assert device_problems(parse_output(_out(ALL, opens=dict.fromkeys(ALL, enxio))), ALL) == []
    # a node the container's device cgroup denies is named, with the error
    denied = device_problems(parse_output(_out(ALL, opens={"/dev/nvidia3": eperm})), ALL)
    assert denied == [
        "device node(s) present but denied to the container (no device cgroup rule allows them): "
        "/dev/nvidia3 (Operation not permitted)"
    ]
    # a required node that is not a character device (a file bind-mounted on it) cannot be opened as one
    lines = _out(ALL).replace("OPEN /dev/nvidia-uvm ok\n", "")
    assert device_problems(parse_output(lines), ALL) == [
        "device node(s) that cannot be opened: /dev/nvidia-uvm (not a character device)"
    ]
    # a node that is not required may be denied (nvidia-modeset): not validate's business
    modeset = parse_output(_out([*ALL, "/dev/nvidia-modeset"], opens={"/dev/nvidia-modeset": eperm}))
    assert device_problems(modeset, ALL) == []
    # a GPU the container was not given is counted and named; caps and uvm nodes are not GPUs
    extra = parse_output(_out([*ALL, "/dev/nvidia12", "/dev/nvidia1", "/dev/nvidia-caps/nvidia-cap1"]))
    assert device_problems(extra, ALL) == [
        "4 GPU device node(s) in the container, 2 requested; not requested: /dev/nvidia1, /dev/nvidia12"
    ]
    # required nodes configured without a GPU node (validate_device_nodes: [/dev/nvidiactl]): no GPU count
    assert device_problems(extra, ["/dev/nvidiactl"]) == []


def test_library_problems_cache_entry_and_version():
    ok = parse_output(_out(ALL))
    assert library_problems(ok, VERSION) == [] and library_problems(ok, None) == []
    # a file with no ld cache entry (injected without the hook's ldconfig): not loadable by soname
    no_cache = parse_output(_out(ALL, libcuda=False, files=[f"{LIBDIR}/libcuda.so.1"]))
    assert library_problems(no_cache, VERSION) == [
        "libcuda.so.1 not in the container's ld cache (ldconfig -p) although a file is at "
        f"{LIBDIR}/libcuda.so.1 (injected without an ld cache update)"
    ]
    # libnvidia-ml dropped from the injection
    no_nvml = parse_output(_out(ALL, libs=[_lib("libcuda.so.1")]))
    assert library_problems(no_nvml, VERSION) == ["libnvidia-ml.so.1 not in the container's ld cache (ldconfig -p)"]
    # another driver's libcuda in the cache (an image's own copy), next to the right one: named
    stale = parse_output(
        _out(
            ALL,
            libs=[
                _lib("libcuda.so.1", "470.182.03", "/usr/local/lib"),
                _lib("libcuda.so.1"),
                _lib("libnvidia-ml.so.1"),
            ],
        )
    )
    assert library_problems(stale, VERSION) == [
        "libcuda.so.1 at /usr/local/lib/libcuda.so.1 is /usr/local/lib/libcuda.so.470.182.03, "
        f"not the host driver's version {VERSION}"
    ]
    # a version that only ends or starts the same is another version
    assert len(library_problems(parse_output(_out(ALL)), "35.247.01")) == 2
    assert len(library_problems(parse_output(_out(ALL)), "535.247")) == 2
    broken = parse_output(
        _out(
            ALL,
            libs=[
                "LIB libcuda.so.1 /usr/lib64/libcuda.so.1 missing",
                "LIB libnvidia-ml.so.1 /usr/lib64/libnvidia-ml.so.1 = ",
            ],
        )
    )
    assert library_problems(broken, VERSION) == [
        "ldconfig -p names /usr/lib64/libcuda.so.1 for libcuda.so.1, which does not exist",
        "libnvidia-ml.so.1 at /usr/lib64/libnvidia-ml.so.1 could not be resolved (no readlink in the image)",
    ]


def test_library_problems_image_without_ldconfig():
    out = _out(ALL, libs=["NO-LDCONFIG"], files=[f"{LIBDIR}/libcuda.so.1"])
    assert library_problems(parse_output(out), VERSION) == [
        "the image has no ldconfig, so its ld cache cannot be read: use an image with ldconfig (validate_image)"
    ]


def test_dlopen_problem():
    assert dlopen_problem(parse_output(_out(ALL))) == ""
    assert dlopen_problem(parse_output(_out(ALL, dlopen="none"))) == ""
    failed = parse_output(_out(ALL, dlopen="failed libcuda.so.1: cannot open shared object file: No such file"))
    assert (
        dlopen_problem(failed)
        == "dlopen(libcuda.so.1) failed: libcuda.so.1: cannot open shared object file: No such file"
    )
    assert dlopen_problem(parse_output(_out(ALL, dlopen=None))) == "the libcuda dlopen probe gave no answer"


def test_result_names_each_partial_break():
    plan = _plan()[:1]
    eperm = "/bin/sh: 1: cannot create /dev/nvidia3: Operation not permitted"
    outputs = {
        "denied": _out(ALL, opens={"/dev/nvidia3": eperm}),
        "nvml": _out(ALL, libs=[_lib("libcuda.so.1")]),
        "version": _out(ALL, libs=[_lib("libcuda.so.1", "550.54.15"), _lib("libnvidia-ml.so.1")]),
        "dlopen": _out(ALL, dlopen="failed libcuda.so.1: undefined symbol: foo"),
    }
    expect = {
        "denied": "denied to the container (no device cgroup rule allows them): /dev/nvidia3 (Operation not permitted)",
        "nvml": "libnvidia-ml.so.1 not in the container's ld cache",
        "version": f"is {LIBDIR}/libcuda.so.550.54.15, not the host driver's version {VERSION}",
        "dlopen": "dlopen(libcuda.so.1) failed: libcuda.so.1: undefined symbol: foo",
    }
    for name, out in outputs.items():
        fact = validate_result(plan, [_ok(out)], device_nodes=ALL, gpu_uuids=UUIDS, driver_version=VERSION)
        assert fact["failed_engines"] == ["docker"], name
        assert expect[name] in fact["engines"]["docker"]["message"], (name, fact["engines"]["docker"]["message"])
    passed = validate_result(plan, [_ok(_out(ALL))], device_nodes=ALL, gpu_uuids=UUIDS, driver_version=VERSION)
    assert passed["passed"] and passed["driver_version"] == VERSION
    assert passed["engines"]["docker"]["message"] == (
        f"docker (runtime): 4 device node(s), libcuda.so.1 at {LIBDIR}/libcuda.so.1 (dlopen ok), libnvidia-ml.so.1 "
        f"in the ld cache, both of driver {VERSION}, nvidia-smi -L lists 2 GPU(s)"
    )
    no_python = validate_result(plan, [_ok(_out(ALL, dlopen="none"))], device_nodes=ALL, gpu_uuids=UUIDS)
    assert no_python["passed"] and "dlopen not tried: no python3 in the image" in no_python["message"] + str(
        no_python["engines"]["docker"]["message"]
    )


def test_host_driver_version():
    assert host_driver_version({"driver": {"loaded_version": "550.54.15", "installed_version": "550.90.07"}}) == (
        "550.54.15"
    )
    assert host_driver_version({"driver": {"loaded_version": None, "installed_version": VERSION}}) == VERSION
    assert host_driver_version({"driver": {}}) is None and host_driver_version(None) is None


def test_fabric_manager_wait_only_on_nvswitch_hosts_and_bounded():
    hgx = {"fabric_manager": {"nvswitch_count": 4, "state": "inactive"}}
    wait = fabric_manager_wait(hgx, timeout=300)
    assert wait["needed"] is True
    assert wait["argv"] == ["systemctl", "is-active", "nvidia-fabricmanager.service"]
    assert wait["delay"] * wait["retries"] == 300
    assert fabric_manager_wait(hgx, timeout=7)["retries"] == 2  # rounded up: never shorter than asked
    assert fabric_manager_wait(hgx, timeout=0)["retries"] == 1  # one read at least
    assert fabric_manager_wait({"fabric_manager": {"nvswitch_count": 0}})["needed"] is False
    assert fabric_manager_wait({})["needed"] is False  # facts of a gpu_facts without the key


def test_fabric_manager_problem_names_the_unit_state_and_fix():
    wait = fabric_manager_wait({"fabric_manager": {"nvswitch_count": 2}}, timeout=60)
    assert fabric_manager_problem(wait, "active\n") == ""
    for state, shown in (("failed\n", "is failed"), ("", "is unknown"), ("activating", "is activating")):
        message = fabric_manager_problem(wait, state)
        assert f"nvidia-fabricmanager.service {shown} after waiting 60 s" in message
        assert "systemctl enable --now nvidia-fabricmanager.service" in message
        assert "journalctl -u nvidia-fabricmanager.service" in message
    assert fabric_manager_problem(fabric_manager_wait({}), "failed") == ""
