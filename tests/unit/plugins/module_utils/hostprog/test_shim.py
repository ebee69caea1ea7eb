# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""gpufleet-container-runtime and nvidia-container-runtime-hook, run as installed (launchers + flat package)."""

import json
import os
import subprocess
import sys

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.hostprog import install as _host_programs
from ansible_collections.gpufleet.nvidia.plugins.module_utils.hostprog.shim import _VALUE_FLAGS, bundle_of, parse_args

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

    def run(
        args,
        env=(),
        prestart=None,
        annotations=None,
        *,
        program="gpufleet-container-runtime",
        stdin=None,
        raw=None,
        extra=None,
        timeout=60,
    ):
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
        config.update(extra or {})
        (bundle / "config.json").write_text(json.dumps(config) if raw is None else raw)
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
            timeout=timeout,
        )
        ran = args_file.read_text().split("\n")[:-1] if args_file.exists() else None
        written = (bundle / "config.json").read_text()
        return proc, ran, (json.loads(written) if raw is None else written)

    def configure(**values):
        (tmp_path / "runtime.json").write_text(
            json.dumps({"runtime": str(runtime), "index": str(tmp_path / "index.json"), **values})
        )

    run.bundle = bundle
    run.tmp = tmp_path
    run.configure = configure
    (bundle / "rootfs").mkdir()
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
    assert "hooks" not in config  # the CDI hook's work was done by the shim itself
    assert config["annotations"]["gpufleet.nvidia/injected"] == "1"
    assert os.stat(str(toolkit.bundle / "config.json")).st_mode & 0o777 == 0o600  # mode kept
    assert sorted(os.listdir(str(toolkit.bundle))) == ["config.json", "rootfs"]  # no temp file left


def test_create_uses_cwd_when_no_bundle_flag(toolkit):
    proc, _ran, config = toolkit(["create", "id"], env=["NVIDIA_VISIBLE_DEVICES=0"])
    assert proc.returncode == 0, proc.stderr
    assert [d["path"] for d in config["linux"]["devices"]] == ["/dev/nvidiactl", "/dev/nvidia0"]


def test_docker_gpus_legacy_hook_is_replaced(toolkit):
    hook = {"path": "/usr/bin/nvidia-container-runtime-hook", "args": ["nvidia-container-runtime-hook", "prestart"]}
    proc, _ran, config = toolkit(["create", "id"], env=["NVIDIA_VISIBLE_DEVICES=all"], prestart=[hook])
    assert proc.returncode == 0, proc.stderr
    assert "prestart" not in config.get("hooks", {})
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
    # the refusal names both ways out: the flag, and the role variable that makes nvidia docker's default again
    assert "--runtime=nvidia" in proc.stderr and "runtime_set_as_default: true" in proc.stderr


def test_launchers_are_isolated_pythons():
    text = _host_programs.launcher("gpufleet-cdi-hook", "/usr/local/lib/gpufleet")
    assert text.startswith("#!/usr/bin/python3 -IS\n")
    assert "from gpufleet_nvidia.hostprog.cdi_hook import main" in text
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
    assert calls == ("python\n" if python else "runtime {}\n".format(" ".join(args)))


# ---------------------------------------------------------------- the hook's work done by the shim

LIBDIR = "/usr/lib/x86_64-linux-gnu"


def _hook_config(tmp_path, mounted=("libcuda.so.535.1",)):
    bundle = tmp_path / "bundle"
    (bundle / "rootfs" / LIBDIR.lstrip("/")).mkdir(parents=True, exist_ok=True)
    args = ["gpufleet-cdi-hook", "apply", "--folder", LIBDIR]
    args += ["--library", f"x86_64::libcuda.so.1::{LIBDIR}/libcuda.so.535.1"]
    args += ["--library", f"x86_64::libnvidia-ml.so.1::{LIBDIR}/libnvidia-ml.so.535.1"]
    args += ["--link", f"libcuda.so.1::{LIBDIR}/libcuda.so"]
    config = {
        "root": {"path": "rootfs"},
        "mounts": [{"destination": f"{LIBDIR}/{m}", "source": "/x", "options": ["ro", "bind"]} for m in mounted],
        "hooks": {"createContainer": [{"path": "/usr/local/bin/gpufleet-cdi-hook", "args": args, "timeout": 10}]},
    }
    return bundle, config


def test_inline_hook_does_the_work_and_drops_the_hook(tmp_path):
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi.ldcache import read_ld_so_cache
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.hostprog.shim import inline_hook

    bundle, config = _hook_config(tmp_path)
    assert inline_hook(config, str(bundle)) is True
    assert "hooks" not in config  # runc runs no hook for the GPU
    lib = bundle / "rootfs" / LIBDIR.lstrip("/")
    assert (bundle / "rootfs/etc/ld.so.conf.d/00-gpufleet-nvidia.conf").read_text().endswith(LIBDIR + "\n")
    assert os.readlink(str(lib / "libcuda.so.1")) == "libcuda.so.535.1"  # dangling until runc mounts the file
    assert os.readlink(str(lib / "libcuda.so")) == "libcuda.so.1"
    assert not os.path.lexists(str(lib / "libnvidia-ml.so.1"))  # not mounted into this container
    entries = read_ld_so_cache(str(bundle / "rootfs/etc/ld.so.cache"))
    assert [(e.soname, e.path) for e in entries] == [("libcuda.so.1", f"{LIBDIR}/libcuda.so.1")]


def test_inline_hook_stays_inside_a_root_with_planted_links(tmp_path):
    """CVE-2024-0132 class: /etc and the library folder are links out of the root; nothing lands outside."""
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.hostprog.shim import inline_hook

    outside = tmp_path / "outside"
    outside.mkdir()
    bundle, config = _hook_config(tmp_path)
    rootfs = bundle / "rootfs"
    os.symlink(str(outside), str(rootfs / "etc"))
    (rootfs / "usr/lib/x86_64-linux-gnu").rmdir()
    os.symlink(str(outside), str(rootfs / "usr/lib/x86_64-linux-gnu"))
    assert inline_hook(config, str(bundle)) is True
    assert os.listdir(str(outside)) == []  # resolved inside the root instead
    inside = rootfs / str(outside).lstrip("/")
    assert (inside / "ld.so.conf.d" / "00-gpufleet-nvidia.conf").exists() and (inside / "ld.so.cache").exists()


def test_inline_hook_leaves_other_hooks_and_a_foreign_hook_alone(tmp_path):
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.hostprog.shim import inline_hook

    bundle, config = _hook_config(tmp_path)
    other = {"path": "/usr/bin/other-hook", "args": ["other-hook"]}
    config["hooks"]["createContainer"].append(other)
    assert inline_hook(config, str(bundle)) is True
    assert config["hooks"] == {"createContainer": [other]}
    assert inline_hook({"hooks": {"createContainer": [other]}}, str(bundle)) is False


def test_inline_hook_keeps_the_hook_when_the_root_is_not_there(tmp_path):
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.hostprog.shim import inline_hook

    bundle, config = _hook_config(tmp_path)
    config["root"]["path"] = "missing"
    before = json.loads(json.dumps(config["hooks"]))
    assert inline_hook(config, str(bundle)) is False
    assert config["hooks"] == before


def test_gpu_start_through_the_shim_leaves_runc_no_hook(toolkit):
    """The installed shim on a GPU create: devices and mounts injected, the hook's work done, no hook left."""
    proc, ran, config = toolkit(["create", "c1"], env=["NVIDIA_VISIBLE_DEVICES=0"])
    assert proc.returncode == 0, proc.stderr
    assert ran == ["create", "c1"]
    assert "hooks" not in config and config["annotations"]["gpufleet.nvidia/injected"] == "0"


# ---------------------------------------------------------------- hostile or broken input: one line, exit 1


def _one_line(proc):
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    return proc.stderr


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ('{"process": {"env": ["NVIDIA_VISIBLE_DEVICES=0"]', "invalid JSON"),
        ('{"process": {"env": ["NVIDIA_VISIBLE_DEVICES=0"], "x": "unterminated', "invalid JSON"),
        ('["NVIDIA_VISIBLE_DEVICES"]', "not a JSON object"),
        ('"NVIDIA_VISIBLE_DEVICES"', "not a JSON object"),
        ('{"NVIDIA_VISIBLE_DEVICES": ' + "[" * 100000 + "]" * 100000 + "}", "nested too deeply"),
        ('{"process": ["NVIDIA_VISIBLE_DEVICES=0"]}', "process is not an object"),
        ('{"process": {"env": ["NVIDIA_VISIBLE_DEVICES=0", 5]}}', "process.env holds an element"),
        ('{"process": {"env": "NVIDIA_VISIBLE_DEVICES=0"}}', "process.env is not an array"),
        ('{"process": {"env": ["NVIDIA_VISIBLE_DEVICES=0"]}, "mounts": {}}', "mounts is not an array"),
        ('{"process": {"env": ["NVIDIA_VISIBLE_DEVICES=0"]}, "mounts": [1]}', "mounts holds an element"),
        ('{"process": {"env": ["NVIDIA_VISIBLE_DEVICES=0"]}, "hooks": []}', "hooks is not an object"),
        ('{"process": {"env": ["NVIDIA_VISIBLE_DEVICES=0"]}, "hooks": {"prestart": {}}}', "hooks.prestart"),
        ('{"process": {"env": ["NVIDIA_VISIBLE_DEVICES=0"]}, "linux": "x"}', "linux is not an object"),
        ('{"process": {"env": ["NVIDIA_VISIBLE_DEVICES=0"]}, "linux": {"devices": {}}}', "linux.devices"),
        ('{"process": {"env": ["NVIDIA_VISIBLE_DEVICES=0"]}, "root": []}', "root is not an object"),
        ('{"annotations": {"cdi.k8s.io/x": 5}}', "annotation cdi.k8s.io/x is not a string"),
        ('{"process": {"env": ["NVIDIA_VISIBLE_DEVICES=0"], "capabilities": {"bounding": "CAP_SYS_ADMIN"}}}',
         "capabilities.bounding"),
    ],
)  # fmt: skip
def test_malformed_config_json_is_one_line_also_in_runc_log(toolkit, raw, reason):
    log = toolkit.tmp / "runc.log"
    proc, ran, _config = toolkit(["--log", str(log), "--log-format", "json", "create", "c1"], raw=raw)
    assert reason in _one_line(proc) and ran is None
    line = json.loads(log.read_text())
    assert line["level"] == "error" and reason in line["msg"]


def test_runc_log_in_text_format(toolkit):
    log = toolkit.tmp / "runc.log"
    proc, _ran, _config = toolkit(["--log", str(log), "create", "c1"], raw='{"NVIDIA_VISIBLE_DEVICES": ')
    _one_line(proc)
    assert log.read_text().startswith('time="') and ' level=error msg="gpufleet-container-runtime: ' in log.read_text()


@pytest.mark.parametrize(
    ("env", "reason"),
    [
        (["NVIDIA_VISIBLE_DEVICES=" + ",".join(f"GPU-{i:08d}" for i in range(40000))], "longer than 65536 bytes"),
        (["NVIDIA_VISIBLE_DEVICES=" + ",".join(str(i) for i in range(5000))], "more than 1024 devices"),
        (["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_CUDA=" + "cuda>=1 " * 20000], "NVIDIA_REQUIRE_CUDA is longer"),
    ],
)
def test_oversized_requests_are_refused_quickly(toolkit, env, reason):
    proc, ran, _config = toolkit(["create", "c1"], env=env, timeout=20)  # quadratic parsing took minutes here
    assert reason in _one_line(proc) and ran is None


def test_oversized_annotation_is_refused(toolkit):
    names = ",".join(f"nvidia.com/gpu=GPU-{i:08d}" for i in range(40000))
    proc, ran, _config = toolkit(["create", "c1"], annotations={"cdi.k8s.io/x": names}, timeout=20)
    assert "CDI annotation cdi.k8s.io/x is longer" in _one_line(proc) and ran is None


def test_large_image_env_is_fine(toolkit):
    env = [f"VAR{i}={'x' * 200}" for i in range(1300)] + ["NVIDIA_VISIBLE_DEVICES=0"]  # ~256 KiB
    proc, ran, config = toolkit(["create", "c1"], env=env, timeout=20)
    assert proc.returncode == 0, proc.stderr
    assert ran == ["create", "c1"] and len(config["process"]["env"]) > 1300


def test_oversized_config_json_is_refused(toolkit):
    raw = json.dumps({"process": {"env": ["NVIDIA_VISIBLE_DEVICES=0"]}, "pad": "x" * (17 << 20)})
    proc, ran, _config = toolkit(["create", "c1"], raw=raw, timeout=30)
    assert "larger than" in _one_line(proc) and ran is None


@pytest.mark.parametrize("target", ["runtime.json", "index.json", "fake-runc"])
@pytest.mark.parametrize("change", ["group-writable", "world-writable", "other-owner"])
def test_untrusted_files_are_refused(toolkit, target, change):
    path = toolkit.tmp / target
    if change == "other-owner":
        os.chown(str(path), 1234, 1234)
    else:
        os.chmod(str(path), os.stat(str(path)).st_mode | (0o020 if change == "group-writable" else 0o002))
    proc, ran, _config = toolkit(["create", "c1"], env=["NVIDIA_VISIBLE_DEVICES=0"])
    err = _one_line(proc)
    assert str(path) in err and ("chown root:root" in err or "chmod go-w" in err) and ran is None


def test_configuration_keys_are_checked(toolkit):
    gpu = ["NVIDIA_VISIBLE_DEVICES=0"]  # the launcher starts Python only for a GPU create
    toolkit.configure(accept_envvar=False)
    assert "unknown key 'accept_envvar'" in _one_line(toolkit(["create", "c1"], env=gpu)[0])
    toolkit.configure(accept_volume_mounts="yes")
    assert "accept_volume_mounts must be a boolean" in _one_line(toolkit(["create", "c1"], env=gpu)[0])
    toolkit.configure(accept_cdi_annotations_unprivileged="false")
    assert "accept_cdi_annotations_unprivileged must be a boolean" in _one_line(toolkit(["create", "c1"], env=gpu)[0])


# ---------------------------------------------------------------- who may ask for GPUs (Kubernetes nodes)

SYS_ADMIN = {"bounding": ["CAP_CHOWN", "CAP_SYS_ADMIN"]}


def test_env_request_of_an_unprivileged_container_is_ignored_where_configured(toolkit):
    toolkit.configure(accept_envvar_unprivileged=False, accept_volume_mounts=True)
    proc, ran, config = toolkit(["create", "c1"], env=["NVIDIA_VISIBLE_DEVICES=all"])
    assert proc.returncode == 0 and ran == ["create", "c1"]
    assert not config["linux"].get("devices") and "gpufleet.nvidia/injected" not in config.get("annotations", {})


def test_privileged_container_keeps_the_env_request(toolkit):
    toolkit.configure(accept_envvar_unprivileged=False)
    extra = {"process": {"env": ["NVIDIA_VISIBLE_DEVICES=1"], "capabilities": SYS_ADMIN}}
    proc, _ran, config = toolkit(["create", "c1"], extra=extra)
    assert proc.returncode == 0, proc.stderr
    assert [d["path"] for d in config["linux"]["devices"]] == ["/dev/nvidiactl", "/dev/nvidia1"]


def test_device_plugin_volume_mounts_are_the_allocation(toolkit):
    toolkit.configure(accept_envvar_unprivileged=False, accept_volume_mounts=True)
    mounts = [
        {"destination": "/var/run/nvidia-container-devices/1", "source": "/dev/null", "options": ["bind"]},
        {"destination": "/var/run/nvidia-container-devices/0", "source": "/tmp/not-dev-null", "options": ["bind"]},
    ]
    env = ["NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices"]
    proc, _ran, config = toolkit(["create", "c1"], env=env, extra={"mounts": mounts})
    assert proc.returncode == 0, proc.stderr
    assert [d["path"] for d in config["linux"]["devices"]] == ["/dev/nvidiactl", "/dev/nvidia1"]


def test_cdi_annotations_count_by_default(toolkit):
    # accept_cdi_annotations_unprivileged unset (true): docker/podman hosts keep the rule they had, even where
    # accept_envvar_unprivileged is false.
    toolkit.configure(accept_envvar_unprivileged=False)
    proc, _ran, config = toolkit(["create", "c1"], annotations={"cdi.k8s.io/dp": "nvidia.com/gpu=0"})
    assert proc.returncode == 0, proc.stderr
    assert [d["path"] for d in config["linux"]["devices"]] == ["/dev/nvidiactl", "/dev/nvidia0"]
    toolkit.configure(accept_envvar_unprivileged=False, accept_cdi_annotations_unprivileged=True)
    proc, _ran, config = toolkit(["create", "c1"], annotations={"nvidia.cdi.k8s.io/x": "nvidia.com/gpu=all"})
    assert proc.returncode == 0, proc.stderr
    assert [d["path"] for d in config["linux"]["devices"]] == ["/dev/nvidiactl", "/dev/nvidia0", "/dev/nvidia1"]


# A pod's own annotation, as CRI-O copies every pod annotation into every container's spec (docs/security.md, "When
# CDI annotations are an allocation"); the Kubernetes-node runtime.json the toolkit role writes.
POD_ANNOTATION = {"cdi.k8s.io/x": "nvidia.com/gpu=all"}
KUBE_NODE = {
    "accept_envvar_unprivileged": False,
    "accept_volume_mounts": True,
    "accept_cdi_annotations_unprivileged": False,
}


@pytest.mark.parametrize("key", ["cdi.k8s.io/x", "nvidia.cdi.k8s.io/x"])
def test_pod_set_cdi_annotation_of_an_unprivileged_container_gets_no_gpu_where_configured(toolkit, key):
    toolkit.configure(**KUBE_NODE)
    proc, ran, config = toolkit(["create", "c1"], annotations={key: "nvidia.com/gpu=all"})
    assert proc.returncode == 0 and ran == ["create", "c1"], proc.stderr
    assert not config["linux"].get("devices") and "gpufleet.nvidia/injected" not in config["annotations"]
    assert "hooks" not in config and not config.get("mounts")
    # not parsed at all: a malformed one does not fail the start either
    proc, ran, config = toolkit(["create", "c1"], annotations={key: "nvidia.com/gpu="})
    assert proc.returncode == 0 and ran == ["create", "c1"] and not config["linux"].get("devices"), proc.stderr


def test_pod_set_cdi_annotation_does_not_widen_the_device_plugins_allocation(toolkit):
    toolkit.configure(**KUBE_NODE)
    mounts = [{"destination": "/var/run/nvidia-container-devices/1", "source": "/dev/null", "options": ["bind"]}]
    env = ["NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices"]
    proc, _ran, config = toolkit(["create", "c1"], env=env, annotations=POD_ANNOTATION, extra={"mounts": mounts})
    assert proc.returncode == 0, proc.stderr
    assert [d["path"] for d in config["linux"]["devices"]] == ["/dev/nvidiactl", "/dev/nvidia1"]


def test_privileged_container_keeps_the_cdi_annotation_request(toolkit):
    toolkit.configure(**KUBE_NODE)
    extra = {"process": {"env": ["PATH=/bin"], "args": ["sh"], "capabilities": SYS_ADMIN}}
    proc, _ran, config = toolkit(["create", "c1"], annotations=POD_ANNOTATION, extra=extra)
    assert proc.returncode == 0, proc.stderr
    assert [d["path"] for d in config["linux"]["devices"]] == ["/dev/nvidiactl", "/dev/nvidia0", "/dev/nvidia1"]
    assert config["annotations"]["gpufleet.nvidia/injected"] == "all"


@pytest.mark.parametrize("stdin", ['{"annotations": ', "[1, 2]", '{"annotations": []}', "\x00\x01"])
def test_legacy_hook_on_a_broken_state_fails_with_its_advice(toolkit, stdin):
    proc, _ran, _config = toolkit(["prestart"], program="nvidia-container-runtime-hook", stdin=stdin)
    line = _one_line(proc)
    assert "--runtime=nvidia" in line and "runtime_set_as_default" in line


# --------------------------------------------------------------------------------------------------
# ctr run --gpus N (containerd contrib/nvidia/nvidia.go): the shim injects, the hook goes.

CTR_CLI = "/usr/local/bin/nvidia-container-cli"
CTR_ALL_CAPS = ["--compute", "--compat32", "--graphics", "--utility", "--video", "--display"]


def ctr_hook(*configure_args, cli=CTR_CLI):
    args = ["containerd", "oci-hook", "--", cli, "--load-kmods", "configure", *configure_args]
    return {"path": "/usr/bin/containerd", "args": [*args, "--pid={{pid}}", "{{rootfs}}"], "env": ["PATH=/bin"]}


def test_ctr_gpus_hook_becomes_the_request_and_goes(toolkit):
    other = {"path": "/usr/bin/true", "args": ["true"]}
    proc, ran, config = toolkit(["create", "id"], prestart=[ctr_hook("--device=1", *CTR_ALL_CAPS), other])
    assert proc.returncode == 0, proc.stderr
    assert ran[0] == "create"
    assert [d["path"] for d in config["linux"]["devices"]] == ["/dev/nvidiactl", "/dev/nvidia1"]
    assert config["hooks"] == {"prestart": [other]}  # only ctr's hook is dropped
    assert config["annotations"]["gpufleet.nvidia/injected"] == "1"
    # ctr asks for every capability; the spec has utility,compute: those are injected (libcuda mounted)
    assert config["mounts"][0]["destination"] == "/usr/lib/x86_64-linux-gnu/libcuda.so.535"


def test_ctr_2_createruntime_hook_is_recognised_too(toolkit):
    # containerd 2.1's ctr writes the same hook as createRuntime
    proc, _ran, config = toolkit(["create", "id"], extra={"hooks": {"createRuntime": [ctr_hook("--device=0")]}})
    assert proc.returncode == 0, proc.stderr
    assert [d["path"] for d in config["linux"]["devices"]] == ["/dev/nvidiactl", "/dev/nvidia0"]
    assert "hooks" not in config


def test_ctr_hook_with_a_uuid_list_and_requirement(toolkit):
    proc, _ran, config = toolkit(
        ["create", "id"], prestart=[ctr_hook("--device=0,1", "--utility", "--require=cuda>=12.0")]
    )
    assert proc.returncode == 0, proc.stderr
    assert [d["path"] for d in config["linux"]["devices"]] == ["/dev/nvidiactl", "/dev/nvidia0", "/dev/nvidia1"]
    assert not config["mounts"]  # utility only: no libcuda
    assert "hooks" not in config


def test_ctr_hook_requirement_not_met_fails_the_start(toolkit):
    proc, ran, _config = toolkit(
        ["create", "id"], prestart=[ctr_hook("--device=0", "--compute", "--require=cuda>=13.0")]
    )
    assert proc.returncode == 1 and ran is None
    assert _one_line(proc) and "unsatisfied requirement" in proc.stderr


@pytest.mark.parametrize(
    ("hook", "reason"),
    [
        # what a hand-made config.json could carry: none of it widens what is injected
        (ctr_hook("--device=0,/dev/sda", "--compute"), "unknown GPU '/dev/sda'"),
        (ctr_hook("--device=7", "--compute"), "unknown GPU '7'"),
        (ctr_hook("--device=0", "--ldconfig=@/tmp/evil", "--compute"), "does not write: '--ldconfig=@/tmp/evil'"),
        (ctr_hook("--device=0", "--mount=/:/host"), "does not write: '--mount=/:/host'"),
        (ctr_hook("--device=0", "--gpu"), "does not write: '--gpu'"),
        (
            {
                "path": "/usr/bin/containerd",
                "args": ["containerd", "oci-hook", "--", CTR_CLI, "--root=/", "configure", "r"],
            },
            "does not write: '--root=/'",
        ),
        (
            {"path": "/c", "args": ["containerd", "oci-hook", "--", CTR_CLI, "configure", "--device=0", "/r1", "/r2"]},
            "names 2 root file systems",
        ),
        (ctr_hook("--device=0", *(["--compute"] * 70)), "more than 64 arguments"),
        ({"path": "/c", "args": ["containerd", "oci-hook", "--", CTR_CLI, "info"]}, "does not run configure"),
    ],
)
def test_hostile_ctr_hook_fails_with_one_line(toolkit, hook, reason):
    proc, ran, config = toolkit(["create", "id"], prestart=[hook])
    assert proc.returncode == 1 and ran is None, proc.stderr
    assert _one_line(proc) and reason in proc.stderr, proc.stderr
    assert "devices" not in config["linux"]


def test_ctr_hook_lookalikes_are_not_requests(toolkit):
    # another program's hook that mentions the name, or a hook not run through containerd oci-hook
    hooks = [
        {"path": "/usr/bin/logger", "args": ["logger", "nvidia-container-cli"]},
        {"path": CTR_CLI, "args": ["nvidia-container-cli", "configure", "--device=0", "/r"]},
    ]
    proc, ran, config = toolkit(["create", "id"], prestart=hooks)
    assert proc.returncode == 0 and ran[0] == "create", proc.stderr
    assert "devices" not in config["linux"] and config["hooks"]["prestart"] == hooks


def test_cdi_annotations_win_over_the_ctr_hook_which_still_goes(toolkit):
    proc, _ran, config = toolkit(
        ["create", "id"],
        prestart=[ctr_hook("--device=1", "--compute", "--utility")],
        annotations={"cdi.k8s.io/x": "nvidia.com/gpu=0"},
    )
    assert proc.returncode == 0, proc.stderr
    assert [d["path"] for d in config["linux"]["devices"]] == ["/dev/nvidiactl", "/dev/nvidia0"]
    assert "hooks" not in config


# ---------------------------------------------------------------- the debug log (runtime.json debug_log)


def _log_lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_debug_log_one_line_per_gpu_start(toolkit):
    logdir = toolkit.tmp / "log"
    logdir.mkdir(mode=0o755)
    log = logdir / "gpufleet-runtime.log"
    toolkit.configure(debug_log=str(log))
    proc, ran, _config = toolkit(["create", "--bundle", str(toolkit.bundle), "c1"], env=["NVIDIA_VISIBLE_DEVICES=0"])
    assert proc.returncode == 0 and ran, proc.stderr
    proc, ran, _config = toolkit(["create", "c2"], env=["NVIDIA_VISIBLE_DEVICES=void"])  # no GPU: no line
    assert proc.returncode == 0 and ran
    proc, ran, _config = toolkit(["create", "c3"], env=["NVIDIA_VISIBLE_DEVICES=7"])  # a failed GPU start: its line
    assert proc.returncode == 1 and ran is None
    (first, failed) = _log_lines(log)
    assert {k: first[k] for k in ("program", "container", "request", "devices", "mounts")} == {
        "program": "gpufleet-container-runtime",
        "container": "c1",
        "request": "NVIDIA_VISIBLE_DEVICES",
        "devices": ["0"],
        "mounts": 1,
    }
    assert isinstance(first["ms"], float) and first["ms"] >= 0 and first["time"].endswith("Z") and "error" not in first
    assert failed["container"] == "c3" and "unknown GPU '7'" in failed["error"] and "mounts" not in failed
    assert oct(log.stat().st_mode & 0o777) == "0o600"


def test_debug_log_never_through_a_link_nor_into_an_open_folder(toolkit):
    logdir = toolkit.tmp / "log"
    logdir.mkdir(mode=0o755)
    target = toolkit.tmp / "elsewhere"
    target.write_text("")
    (logdir / "planted.log").symlink_to(target)
    toolkit.configure(debug_log=str(logdir / "planted.log"))
    proc, ran, _config = toolkit(["create", "c1"], env=["NVIDIA_VISIBLE_DEVICES=0"])
    assert proc.returncode == 0 and ran and target.read_text() == ""  # the start goes on; nothing written through
    opened = toolkit.tmp / "open"
    opened.mkdir()
    opened.chmod(0o777)
    toolkit.configure(debug_log=str(opened / "x.log"))
    proc, ran, _config = toolkit(["create", "c1"], env=["NVIDIA_VISIBLE_DEVICES=0"])
    assert proc.returncode == 0 and ran and not (opened / "x.log").exists()
    os.mkfifo(str(logdir / "fifo.log"))
    toolkit.configure(debug_log=str(logdir / "fifo.log"))
    proc, ran, _config = toolkit(["create", "c1"], env=["NVIDIA_VISIBLE_DEVICES=0"], timeout=20)
    assert proc.returncode == 0 and ran  # no reader: never blocks


def test_debug_log_must_be_a_string():
    assert _host_programs.render_runtime_config(True, False) == (
        '{\n  "accept_cdi_annotations_unprivileged": true,\n  "accept_envvar_unprivileged": true,\n'
        '  "accept_volume_mounts": false\n}\n'
    )
    assert (
        json.loads(_host_programs.render_runtime_config(False, True, "/var/log/gpufleet-runtime.log"))["debug_log"]
        == "/var/log/gpufleet-runtime.log"
    )
    with pytest.raises(ValueError, match="absolute path"):
        _host_programs.render_runtime_config(True, False, "relative.log")
