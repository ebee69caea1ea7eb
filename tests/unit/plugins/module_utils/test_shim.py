"""gpufleet-container-runtime and nvidia-container-runtime-hook, run as installed (launchers + flat package)."""

import json
import os
import subprocess
import sys

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils import _host_programs
from ansible_collections.gpufleet.nvidia.plugins.module_utils._shim import _VALUE_FLAGS, bundle_of, parse_args

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture
def toolkit(tmp_path):
    bindir, libdir = tmp_path / "bin", tmp_path / "lib"
    runtime = tmp_path / "fake-runc"
    _host_programs.install(str(bindir), str(libdir), python=sys.executable, runtime=str(runtime))
    dev = tmp_path / "dev"
    dev.mkdir()
    for name, minor in (("nvidia0", 0), ("nvidia1", 1), ("nvidiactl", 255)):
        os.mknod(str(dev / name), 0o666 | 0o020000, os.makedev(195, minor))
    index = {
        "gpufleetIndex": 1,
        "driverVersion": "535.261.03",
        "cudaVersion": "12.2",
        "capabilities": ["utility", "compute"],
        "devices": {
            "0": {"deviceNodes": [{"path": "/dev/nvidia0", "hostPath": str(dev / "nvidia0")}]},
            "1": {"deviceNodes": [{"path": "/dev/nvidia1", "hostPath": str(dev / "nvidia1")}]},
            "all": {
                "deviceNodes": [{"path": "/dev/nvidia%d" % i, "hostPath": str(dev / ("nvidia%d" % i))} for i in (0, 1)]
            },
        },
        "aliases": {},
        "containerEdits": {
            "deviceNodes": [{"path": "/dev/nvidiactl", "hostPath": str(dev / "nvidiactl")}],
            "mounts": [
                {
                    "hostPath": "/usr/lib/os-release",
                    "containerPath": "/usr/lib/x86_64-linux-gnu/libcuda.so.535",
                    "options": ["ro", "nosuid", "nodev", "bind"],
                }
            ],
            "hooks": [
                {
                    "hookName": "createContainer",
                    "path": str(bindir / "gpufleet-cdi-hook"),
                    "args": ["gpufleet-cdi-hook", "apply"],
                }
            ],
        },
        "mountCapabilities": {"/usr/lib/x86_64-linux-gnu/libcuda.so.535": ["compute"]},
    }
    (tmp_path / "index.json").write_text(json.dumps(index))
    runtime.write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$FAKE_RUNC_ARGS"\n')
    runtime.chmod(0o755)
    (tmp_path / "runtime.json").write_text(json.dumps({"runtime": str(runtime), "index": str(tmp_path / "index.json")}))
    bundle = tmp_path / "bundle"
    bundle.mkdir()

    def run(args, env=(), prestart=None, annotations=None, *, program="gpufleet-container-runtime", stdin=None):
        config = {
            "ociVersion": "1.0.2-dev",
            "process": {"env": ["PATH=/bin", *env], "args": ["sh"]},
            "root": {"path": "rootfs"},
            "linux": {"resources": {"devices": [{"allow": False, "access": "rwm"}]}},
        }
        if prestart:
            config["hooks"] = {"prestart": prestart}
        if annotations:
            config["annotations"] = annotations
        (bundle / "config.json").write_text(json.dumps(config))
        os.chmod(str(bundle / "config.json"), 0o600)
        args_file = tmp_path / "runc-args"
        if args_file.exists():
            args_file.unlink()
        environ = {
            "PATH": "/usr/bin:/bin",
            "GPUFLEET_RUNTIME_CONFIG": str(tmp_path / "runtime.json"),
            "FAKE_RUNC_ARGS": str(args_file),
        }
        proc = subprocess.run(
            [str(bindir / program), *args],
            env=environ,
            input=stdin,
            capture_output=True,
            text=True,
            cwd=str(bundle),
            check=False,
        )
        ran = args_file.read_text().split("\n")[:-1] if args_file.exists() else None
        return proc, ran, json.loads((bundle / "config.json").read_text())

    run.bundle = bundle
    run.tmp = tmp_path
    return run


def test_parse_runc_command_lines():
    args = [
        "--root",
        "/run/docker/runtime-runc/moby",
        "--log",
        "/x/log.json",
        "--log-format=json",
        "--systemd-cgroup",
        "create",
        "--bundle",
        "/b",
        "id",
    ]
    command, at, flags = parse_args(args)
    assert command == "create" and args[at] == "create"
    assert flags == {
        "--root": "/run/docker/runtime-runc/moby",
        "--log": "/x/log.json",
        "--log-format": "json",
        "--systemd-cgroup": True,
    }
    assert bundle_of(args[at + 1 :]) == "/b"
    assert bundle_of(["-b", "/c", "id"]) == "/c"
    assert bundle_of(["--bundle=/d", "id"]) == "/d"
    assert parse_args(["--version"])[0] is None


def test_pass_through_execs_the_runtime_with_the_same_arguments(toolkit):
    proc, ran, config = toolkit(["--root", "/r", "state", "abc"], env=["NVIDIA_VISIBLE_DEVICES=0"])
    assert proc.returncode == 0, proc.stderr
    assert ran == ["--root", "/r", "state", "abc"]
    assert "devices" not in config["linux"]  # not create: config.json untouched


def test_create_without_gpus_leaves_config_untouched(toolkit):
    proc, ran, config = toolkit(["create", "--bundle", str(toolkit.bundle), "id"], env=["NVIDIA_VISIBLE_DEVICES=void"])
    assert proc.returncode == 0 and ran[0] == "create"
    assert "devices" not in config["linux"]


def test_create_injects_then_execs(toolkit):
    proc, ran, config = toolkit(
        ["--log-format", "json", "create", "--bundle", str(toolkit.bundle), "--pid-file", "p", "id"],
        env=["NVIDIA_VISIBLE_DEVICES=1"],
    )
    assert proc.returncode == 0, proc.stderr
    assert ran == ["--log-format", "json", "create", "--bundle", str(toolkit.bundle), "--pid-file", "p", "id"]
    assert [d["path"] for d in config["linux"]["devices"]] == ["/dev/nvidiactl", "/dev/nvidia1"]
    assert {"allow": True, "type": "c", "major": 195, "minor": 1, "access": "rwm"} in config["linux"]["resources"][
        "devices"
    ]
    assert config["mounts"][0]["destination"] == "/usr/lib/x86_64-linux-gnu/libcuda.so.535"
    assert config["hooks"]["createContainer"][0]["args"] == ["gpufleet-cdi-hook", "apply"]
    assert config["annotations"]["gpufleet.nvidia/injected"] == "1"
    assert os.stat(str(toolkit.bundle / "config.json")).st_mode & 0o777 == 0o600  # mode kept
    assert not [n for n in os.listdir(str(toolkit.bundle)) if n != "config.json"]  # no temp file left


def test_create_uses_cwd_when_no_bundle_flag(toolkit):
    proc, _ran, config = toolkit(["create", "id"], env=["NVIDIA_VISIBLE_DEVICES=0"])
    assert proc.returncode == 0, proc.stderr
    assert [d["path"] for d in config["linux"]["devices"]] == ["/dev/nvidiactl", "/dev/nvidia0"]


def test_docker_gpus_legacy_hook_is_replaced(toolkit):
    hook = {"path": "/usr/bin/nvidia-container-runtime-hook", "args": ["nvidia-container-runtime-hook", "prestart"]}
    proc, _ran, config = toolkit(["create", "id"], env=["NVIDIA_VISIBLE_DEVICES=all"], prestart=[hook])
    assert proc.returncode == 0, proc.stderr
    assert "prestart" not in config["hooks"]
    assert [d["path"] for d in config["linux"]["devices"]] == ["/dev/nvidiactl", "/dev/nvidia0", "/dev/nvidia1"]


@pytest.mark.parametrize(
    "env, reason",
    [
        (["NVIDIA_VISIBLE_DEVICES=7"], "unknown GPU '7' requested (this node has: 0, 1, all)"),
        (["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_CUDA=cuda>=12.4"], "unsatisfied requirement NVIDIA_REQUIRE_CUDA"),
        (["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=compute,gpu"], "unknown driver capability 'gpu'"),
    ],
)
def test_unsatisfiable_request_fails_with_one_line(toolkit, env, reason):
    log = toolkit.tmp / "log.json"
    proc, ran, config = toolkit(["--log", str(log), "--log-format", "json", "create", "id"], env=env)
    assert proc.returncode == 1
    assert ran is None  # the runtime never ran
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("gpufleet-container-runtime: ")
    assert reason in proc.stderr
    entry = json.loads(log.read_text())
    assert entry["level"] == "error" and reason in entry["msg"]
    assert "devices" not in config["linux"]


def test_missing_index_fails_a_gpu_container_only(toolkit):
    os.unlink(str(toolkit.tmp / "index.json"))
    proc, ran, _config = toolkit(["create", "id"], env=["NVIDIA_VISIBLE_DEVICES=0"])
    assert proc.returncode == 1 and "run gpufleet.nvidia.cdi_spec" in proc.stderr and ran is None
    proc, ran, _config = toolkit(["create", "id"], env=["NVIDIA_VISIBLE_DEVICES=void"])
    assert proc.returncode == 0 and ran


def test_legacy_hook_entry_point(toolkit):
    state = json.dumps(
        {"ociVersion": "1.0.2", "id": "x", "bundle": "/b", "annotations": {"gpufleet.nvidia/injected": "0"}}
    )
    proc, _ran, _config = toolkit(["prestart"], program="nvidia-container-runtime-hook", stdin=state)
    assert proc.returncode == 0 and proc.stderr == ""
    proc, _ran, _config = toolkit(
        ["prestart"], program="nvidia-container-runtime-hook", stdin=json.dumps({"bundle": "/b"})
    )
    assert proc.returncode == 1
    assert "register gpufleet-container-runtime as the 'nvidia' runtime" in proc.stderr


def test_launchers_are_isolated_pythons():
    text = _host_programs.launcher("gpufleet-cdi-hook", "/usr/local/lib/gpufleet")
    assert text.startswith("#!/usr/bin/python3 -IS\n")
    assert "from gpufleet_nvidia._cdi_hook import main" in text
    shim = _host_programs.launcher("gpufleet-container-runtime", "/usr/local/lib/gpufleet", runtime="/usr/bin/crun")
    assert shim.startswith("#!/bin/sh\n") and 'GPUFLEET_RUNTIME="${GPUFLEET_RUNTIME:-/usr/bin/crun}"' in shim
    assert "/usr/bin/python3 -IS -c" in shim
    with pytest.raises(ValueError, match="plain absolute path"):
        _host_programs.launcher("gpufleet-container-runtime", "/l", runtime="/usr/bin/runc; rm -rf /")


def test_shell_fast_path_knows_the_same_value_flags():
    shim = _host_programs.launcher("gpufleet-container-runtime", "/l")
    case = next(line for line in shim.splitlines() if "skip=1" in line).strip()
    assert set(case.split(")")[0].split("|")) == set(_VALUE_FLAGS)


@pytest.mark.parametrize(
    "args, python",
    [
        (["--root", "create", "state", "x"], False),  # "create" is --root's value: a state call
        (["--log", "/l", "--log-format", "json", "delete", "create"], False),  # a container named create
        (["--debug", "--systemd-cgroup", "create", "--bundle", "GPU", "id"], True),
        (["create", "--bundle=GPU", "id"], True),
        (["create", "-b", "PLAIN", "id"], False),  # config.json without any GPU hint: no Python
        (["create", "--pid-file", "p", "id"], True),  # no --bundle: the current directory (GPU)
        (["run", "-b", "GPU", "id"], True),
        (["--version"], False),
    ],
)
def test_shell_fast_path_starts_python_only_for_a_gpu_create(tmp_path, args, python):
    fake_python = tmp_path / "python"
    fake_python.write_text('#!/bin/sh\necho python >> "%s"\n' % (tmp_path / "calls"))
    fake_python.chmod(0o755)
    runtime = tmp_path / "runc"
    runtime.write_text('#!/bin/sh\necho runtime "$@" >> "%s"\n' % (tmp_path / "calls"))
    runtime.chmod(0o755)
    for name, env in (("GPU", "NVIDIA_VISIBLE_DEVICES=0"), ("PLAIN", "PATH=/bin")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps({"process": {"env": [env]}}))
    shim = tmp_path / "shim"
    shim.write_text(_host_programs.launcher("gpufleet-container-runtime", "/l", str(fake_python), str(runtime)))
    shim.chmod(0o755)
    args = [a.replace("GPU", str(tmp_path / "GPU")).replace("PLAIN", str(tmp_path / "PLAIN")) for a in args]
    subprocess.run([str(shim), *args], check=True, env={"PATH": "/usr/bin:/bin"}, cwd=str(tmp_path / "GPU"))
    calls = (tmp_path / "calls").read_text()
    assert calls == ("python\n" if python else "runtime %s\n" % " ".join(args))


# ---------------------------------------------------------------- the hook's file work done by the shim

LIBDIR = "/usr/lib/x86_64-linux-gnu"
STATIC_LDCONFIG = "/sbin/ldconfig"


def _hook_config(
    tmp_path, ldconfig=STATIC_LDCONFIG, link="libcuda.so.1::%s/libcuda.so" % LIBDIR, mount="libcuda.so.535.1"
):
    bundle = tmp_path / "bundle"
    (bundle / "rootfs" / LIBDIR.lstrip("/")).mkdir(parents=True)
    args = ["gpufleet-cdi-hook", "apply", "--ldconfig", ldconfig, "--folder", LIBDIR, "--link", link]
    config = {
        "root": {"path": "rootfs"},
        "mounts": [{"destination": "%s/%s" % (LIBDIR, mount), "source": "/x", "options": ["ro", "bind"]}],
        "hooks": {"createContainer": [{"path": "/usr/local/bin/gpufleet-cdi-hook", "args": args}]},
    }
    return bundle, config


def _is_static(path):
    from ansible_collections.gpufleet.nvidia.plugins.module_utils._cdi_hook import is_static_elf

    with open(path, "rb") as f:
        return is_static_elf(f.fileno())


needs_static_ldconfig = pytest.mark.skipif(
    not (os.path.exists(STATIC_LDCONFIG) and _is_static(STATIC_LDCONFIG)), reason="no static /sbin/ldconfig"
)


@needs_static_ldconfig
def test_inline_hook_writes_conf_and_link_and_leaves_runc_only_ldconfig(tmp_path):
    from ansible_collections.gpufleet.nvidia.plugins.module_utils._shim import inline_hook

    bundle, config = _hook_config(tmp_path)
    assert inline_hook(config, str(bundle)) is True
    root = str(bundle / "rootfs")
    hook = config["hooks"]["createContainer"][0]
    assert hook == {
        "path": STATIC_LDCONFIG,
        "args": ["ldconfig", "-r", root, LIBDIR],
        "env": ["LC_ALL=C", "PATH=/usr/sbin:/usr/bin:/sbin:/bin"],
    }
    assert (bundle / "rootfs/etc/ld.so.conf.d/00-gpufleet-nvidia.conf").read_text().endswith(LIBDIR + "\n")
    assert os.readlink(str(bundle / "rootfs" / LIBDIR.lstrip("/") / "libcuda.so")) == "libcuda.so.1"


@needs_static_ldconfig
def test_inline_hook_stays_inside_a_root_with_planted_links(tmp_path):
    """CVE-2024-0132 class: /etc and the library folder are links out of the root; nothing lands outside."""
    from ansible_collections.gpufleet.nvidia.plugins.module_utils._shim import inline_hook

    outside = tmp_path / "outside"
    outside.mkdir()
    bundle, config = _hook_config(tmp_path)
    rootfs = bundle / "rootfs"
    os.symlink(str(outside), str(rootfs / "etc"))
    (rootfs / "usr/lib/x86_64-linux-gnu").rmdir()
    os.symlink(str(outside), str(rootfs / "usr/lib/x86_64-linux-gnu"))
    assert inline_hook(config, str(bundle)) is True
    assert os.listdir(str(outside)) == []  # resolved inside the root instead
    assert (rootfs / str(outside).lstrip("/") / "ld.so.conf.d" / "00-gpufleet-nvidia.conf").exists()


@pytest.mark.parametrize(
    "change",
    ["no-root", "dynamic-ldconfig", "unpredictable-link", "image-file-wins"],
)
def test_inline_hook_falls_back_or_keeps_image_files(tmp_path, change):
    from ansible_collections.gpufleet.nvidia.plugins.module_utils._shim import inline_hook

    kwargs = {}
    if change == "dynamic-ldconfig":
        kwargs["ldconfig"] = sys.executable  # dynamically linked: the hook keeps its own handling
    if change == "unpredictable-link":
        kwargs["mount"] = "libnvidia-ml.so.535.1"  # nothing will make libcuda.so.1 there
    bundle, config = _hook_config(tmp_path, **kwargs)
    before = json.loads(json.dumps(config))
    if change == "no-root":
        config["root"]["path"] = "missing"
    if change == "image-file-wins":
        if not (os.path.exists(STATIC_LDCONFIG) and _is_static(STATIC_LDCONFIG)):
            pytest.skip("no static /sbin/ldconfig")
        (bundle / "rootfs" / LIBDIR.lstrip("/") / "libcuda.so").write_text("the image's own")
        assert inline_hook(config, str(bundle)) is True
        assert (bundle / "rootfs" / LIBDIR.lstrip("/") / "libcuda.so").read_text() == "the image's own"
        return
    assert inline_hook(config, str(bundle)) is False
    assert config["hooks"] == before["hooks"]
