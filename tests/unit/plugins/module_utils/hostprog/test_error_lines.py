# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Every error of every host program is one line, whatever the names it carries.

A file name in a container image, an ``NVIDIA_*`` value, an annotation key, an admin's ``--root`` can hold a newline
or other control characters. Each program is run here as installed (launchers + flat package, as the engines run
them) through each error path that can carry such a name, with a name that holds ``\\n``, ``\\r``, ESC, NUL-free C1
and U+2028 and a forged log line after the newline; the program must write exactly one line on stderr (and one entry
in runc's ``--log``, text and json), in which the forged text never starts a line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.base.oneline import MAX_LINE
from ansible_collections.gpufleet.nvidia.plugins.module_utils.hostprog import install as _host_programs

FORGED = 'time="2026-01-01T00:00:00Z" level=info msg="FORGED-ENTRY"'
EVIL = "gf\n" + FORGED + "\r\x1b[2K\x85\u2028x"
BREAKS = ("\n", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029")

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the device nodes and /dev/char need root")


def one_line(text: str, program: str) -> str:
    """The single line of ``text`` (a program's stderr), checked: nothing forged, nothing raw, bounded."""
    assert text.endswith("\n") and text.count("\n") == 1, repr(text)
    line = text[:-1]
    assert not any(b in line for b in BREAKS) and "\x1b" not in line, repr(line)
    assert line.startswith(program + ": ") or line.startswith(program + " "), line
    assert "Traceback" not in line and len(line) <= MAX_LINE
    return line


@pytest.fixture
def installed(tmp_path):
    bindir, libdir = tmp_path / "bin", tmp_path / "lib"
    runtime = tmp_path / "fake-runc"
    runtime.write_text("#!/bin/sh\nexit 0\n")
    runtime.chmod(0o755)
    _host_programs.install(str(bindir), str(libdir), python=sys.executable, runtime=str(runtime))

    def run(program, args=(), *, env=None, stdin=None, cwd=None, timeout=30):
        environ = {"PATH": "/usr/bin:/bin", **(env or {})}
        return subprocess.run(
            [str(bindir / program), *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=environ,
            cwd=cwd or str(tmp_path),
            check=False,
            timeout=timeout,
            errors="surrogateescape",
        )

    run.tmp = tmp_path
    run.runtime = runtime
    return run


# ---------------------------------------------------------------- the runtime shim: stderr and runc's --log


def _shim_setup(installed, name):
    """A bundle in a folder named ``name`` and the shim's configuration (index with GPU 0)."""
    tmp = installed.tmp
    dev = tmp / "dev"
    dev.mkdir(exist_ok=True)
    if not (dev / "nvidia0").exists():
        os.mknod(str(dev / "nvidia0"), 0o666 | 0o020000, os.makedev(195, 0))
    index = {
        "driverVersion": "535.261.03",
        "cudaVersion": "12.2",
        "capabilities": ["utility", "compute"],
        "devices": {"0": {"deviceNodes": [{"path": "/dev/nvidia0", "hostPath": str(dev / "nvidia0")}]}},
    }
    (tmp / "index.json").write_text(json.dumps(index))
    (tmp / "runtime.json").write_text(json.dumps({"runtime": str(installed.runtime), "index": str(tmp / "index.json")}))
    bundle = tmp / name
    (bundle / "rootfs").mkdir(parents=True, exist_ok=True)
    return bundle


SHIM_CASES = {
    # what the config.json holds -> a text the error line must carry (escaped)
    "env-key": (
        {"process": {"env": ["NVIDIA_VISIBLE_DEVICES=0", f"NVIDIA_REQUIRE_{EVIL}=cuda>=99"]}},
        "NVIDIA_REQUIRE_gf\\ntime: cannot parse constraint",
    ),
    "device-name": ({"process": {"env": [f"NVIDIA_VISIBLE_DEVICES={EVIL}"]}}, "unknown GPU 'gf\\ntime="),
    "annotation-key": (
        {"annotations": {f"cdi.k8s.io/{EVIL}": "nvidia.com/gpu"}},
        "CDI annotation cdi.k8s.io/gf\\ntime=",
    ),
    "capability": (
        {"process": {"env": ["NVIDIA_VISIBLE_DEVICES=0", f"NVIDIA_DRIVER_CAPABILITIES=compute,{EVIL}"]}},
        "unknown driver capability 'gf\\ntime=",
    ),
    "hook-phase": ({"process": {"env": ["NVIDIA_VISIBLE_DEVICES=0"]}, "hooks": {EVIL: {}}}, "hooks.gf\\ntime="),
}


@pytest.mark.parametrize("log_format", ["text", "json"])
@pytest.mark.parametrize("case", sorted(SHIM_CASES))
def test_shim_error_is_one_line_on_stderr_and_one_runc_log_entry(installed, case, log_format):
    content, shown = SHIM_CASES[case]
    bundle = _shim_setup(installed, "bundle")
    config = {"ociVersion": "1.0.2", "root": {"path": "rootfs"}, "process": {"env": []}, **content}
    (bundle / "config.json").write_text(json.dumps(config))
    log = installed.tmp / "runc.log"
    args = ["--log", str(log), "--log-format", log_format, "create", "--bundle", str(bundle), "c1"]
    proc = installed(
        "gpufleet-container-runtime", args, env={"GPUFLEET_RUNTIME_CONFIG": str(installed.tmp / "runtime.json")}
    )
    assert proc.returncode == 1
    line = one_line(proc.stderr, "gpufleet-container-runtime")
    assert shown in line, line
    logged = log.read_text()
    assert logged.count("\n") == 1 and not any(b in logged[:-1] for b in BREAKS), repr(logged)
    assert not any(row.startswith(("time=", "FORGED", '{"level": "info"')) for row in logged.splitlines()[1:])
    if log_format == "json":
        assert json.loads(logged)["msg"] == line
    else:
        assert logged.startswith('time="') and ' level=error msg="gpufleet-container-runtime: ' in logged


def test_shim_error_names_a_bundle_folder_with_a_newline_in_one_line(installed):
    bundle = _shim_setup(installed, EVIL.replace("/", "_"))
    (bundle / "config.json").write_text('{"process": {"env": ["NVIDIA_VISIBLE_DEVICES=0"]')  # truncated
    log = installed.tmp / "runc.log"
    args = ["--log", str(log), "create", "--bundle", str(bundle), "c1"]
    proc = installed(
        "gpufleet-container-runtime", args, env={"GPUFLEET_RUNTIME_CONFIG": str(installed.tmp / "runtime.json")}
    )
    assert "gf\\ntime=" in one_line(proc.stderr, "gpufleet-container-runtime")
    assert log.read_text().count("\n") == 1


def test_huge_capabilities_are_one_short_line(installed):
    bundle = _shim_setup(installed, "bundle")
    env = ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=" + "compute," * (1 << 17)]  # 1 MiB
    (bundle / "config.json").write_text(json.dumps({"root": {"path": "rootfs"}, "process": {"env": env}}))
    proc = installed(
        "gpufleet-container-runtime",
        ["create", "--bundle", str(bundle), "c1"],
        env={"GPUFLEET_RUNTIME_CONFIG": str(installed.tmp / "runtime.json")},
        timeout=10,
    )
    line = one_line(proc.stderr, "gpufleet-container-runtime")
    assert "NVIDIA_DRIVER_CAPABILITIES is longer than 65536 bytes (1048576)" in line and len(line) < 200


def test_many_unknown_capabilities_are_one_short_line(installed):
    bundle = _shim_setup(installed, "bundle")
    caps = ",".join(f"cap{i:05d}" for i in range(7000))  # under 64 KiB: refused by name, not by size
    env = ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=" + caps]
    (bundle / "config.json").write_text(json.dumps({"root": {"path": "rootfs"}, "process": {"env": env}}))
    proc = installed(
        "gpufleet-container-runtime",
        ["create", "--bundle", str(bundle), "c1"],
        env={"GPUFLEET_RUNTIME_CONFIG": str(installed.tmp / "runtime.json")},
    )
    line = one_line(proc.stderr, "gpufleet-container-runtime")
    assert "unknown driver capability 'cap00000'" in line and "and 6995 more" in line and len(line) < 400


def test_legacy_hook_message_is_one_line(installed):
    proc = installed("nvidia-container-runtime-hook", ["prestart"], stdin="{}")
    assert proc.returncode == 1
    one_line(proc.stderr, "nvidia-container-runtime-hook")


# ---------------------------------------------------------------- the CDI hook: a name from the image


def test_cdi_hook_error_naming_an_image_file_is_one_line(installed):
    """The image's library folder is a link to a FILE whose name holds a newline: the hook reports that name."""
    bundle = installed.tmp / "bundle"
    rootfs = bundle / "rootfs"
    (rootfs / "usr/lib").mkdir(parents=True)
    (rootfs / EVIL.replace("/", "_")).write_text("not a folder\n")
    os.symlink("/" + EVIL.replace("/", "_"), str(rootfs / "usr/lib/x86_64-linux-gnu"))
    lib = "/usr/lib/x86_64-linux-gnu/libcuda.so.535.1"
    (bundle / "config.json").write_text(
        json.dumps({"root": {"path": "rootfs"}, "mounts": [{"destination": lib, "source": "/dev/null"}]})
    )
    state = json.dumps({"ociVersion": "1.0.2", "id": "c1", "status": "creating", "pid": 1, "bundle": str(bundle)})
    args = ["apply", "--library", f"x86_64::libcuda.so.1::{lib}"]
    proc = installed("gpufleet-cdi-hook", args, stdin=state)
    assert proc.returncode == 1
    assert "gf\\ntime=" in one_line(proc.stderr, "gpufleet-cdi-hook")


def test_cdi_hook_error_with_a_bundle_path_holding_a_newline_is_one_line(installed):
    state = json.dumps({"bundle": "/nonexistent/" + EVIL})
    proc = installed("gpufleet-cdi-hook", ["apply"], stdin=state)
    assert proc.returncode == 1
    one_line(proc.stderr, "gpufleet-cdi-hook")


# ---------------------------------------------------------------- nvidia-container-cli: admin-named files


def test_container_cli_ldcache_fifo_with_a_newline_is_one_line_and_never_blocks(installed):
    folder = installed.tmp / EVIL.replace("/", "_")
    folder.mkdir()
    os.mkfifo(str(folder / "cache"))  # nobody writes it: an open or read that blocks never returns
    proc = installed("nvidia-container-cli", ["--ldcache", str(folder / "cache"), "info"], timeout=20)
    assert proc.returncode == 1
    line = one_line(proc.stderr, "nvidia-container-cli")
    assert "is a FIFO, not a regular file" in line and "gf\\ntime=" in line


def test_container_cli_unknown_option_with_a_newline_is_one_line(installed):
    proc = installed("nvidia-container-cli", ["--" + EVIL, "info"])
    assert proc.returncode == 1
    one_line(proc.stderr, "nvidia-container-cli")


# ---------------------------------------------------------------- the boot programs: admin paths, driver values


def test_nvidia_devices_malformed_values_in_a_proc_folder_with_a_newline(installed):
    proc_dir = installed.tmp / EVIL.replace("/", "_")
    info = proc_dir / "driver/nvidia/gpus/0000:17:00.0"
    info.mkdir(parents=True)
    (info / "information").write_text(f"Device Minor: 99999999999{EVIL}\n")
    (proc_dir / "driver/nvidia/params").write_text(f"DeviceFileUID: {EVIL}\n")
    (proc_dir / "devices").write_text("Character devices:\n195 nvidia\n")
    (installed.tmp / "dev").mkdir()
    proc = installed(
        "gpufleet-nvidia-devices", ["--proc", str(proc_dir), "--dev-root", str(installed.tmp), "--dry-run"]
    )
    assert proc.returncode == 1
    lines = proc.stderr.splitlines(keepends=True)
    assert len(lines) == 2, proc.stderr  # one per malformed value
    for text in lines:
        assert "gf\\ntime=" in one_line(text, "gpufleet-nvidia-devices")
    report = json.loads(proc.stdout)
    assert report["nodes"] == ["/dev/nvidiactl"] and len(report["malformed"]) == 2


def test_dev_char_links_refusal_with_a_newline_in_the_root_is_one_line(installed):
    root = installed.tmp / EVIL.replace("/", "_")
    (root / "dev").mkdir(parents=True)
    os.mknod(str(root / "dev/nvidia0"), 0o666 | 0o020000, os.makedev(195, 0))
    os.symlink(str(installed.tmp), str(root / "dev/char"))
    proc = installed("gpufleet-dev-char-links", ["--dev-root", str(root)])
    assert proc.returncode == 1
    assert "is a symbolic link" in one_line(proc.stderr, "gpufleet-dev-char-links")


def test_cdi_refresh_error_naming_its_configuration_is_one_line(installed):
    config = installed.tmp / EVIL.replace("/", "_")
    config.write_text("[]")
    proc = installed("gpufleet-cdi-refresh", ["--config", str(config)])
    assert proc.returncode == 1
    assert "gf\\ntime=" in one_line(proc.stderr, "gpufleet-cdi-refresh")


def test_nvidia_docker_missing_client_with_a_newline_is_one_line(installed):
    # NV_DOCKER is split on blanks (a newline is one), as NVIDIA's script does: the other controls stay in the name
    proc = installed("nvidia-docker", ["ps"], env={"NV_DOCKER": "/nonexistent/gf\x1b[2K\x07\x9bx"})
    assert proc.returncode == 127
    assert "gf\\x1b[2K\\x07\\x9bx" in one_line(proc.stderr, "nvidia-docker")


# ---------------------------------------------------------------- the last except of each program


@pytest.mark.parametrize(
    ("module", "patched"),
    [
        ("shim", "_config"),
        ("cdi_hook", "parse_args"),
        ("container_cli", "parse_options"),
        ("dev_nodes", "apply"),
        ("dev_char", "apply"),
        ("cdi_refresh", "refresh"),
    ],
)
def test_an_unexpected_exception_is_one_line(monkeypatch, capsys, module, patched):
    import importlib

    mod = importlib.import_module(f"ansible_collections.gpufleet.nvidia.plugins.module_utils.hostprog.{module}")

    def boom(*_args, **_kwargs):
        raise RuntimeError(EVIL)

    monkeypatch.setattr(mod, patched, boom)
    monkeypatch.setattr(sys, "stdin", open(os.devnull))  # noqa: SIM115
    argv = {"shim": ["x", "create", "c1"], "cdi_refresh": ["x", "--config", os.devnull]}.get(module, ["x", "info"])
    if module in ("dev_nodes", "dev_char"):
        argv = ["x", "--dry-run"]
    saved = dict(os.environ)  # the hook's main replaces the process's environment (sanitize_environment)
    try:
        code = mod.main(argv)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    assert code == 1
    err = capsys.readouterr().err
    assert "gf\\ntime=" in one_line(err, err.partition(":")[0])
