# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""nvidia-container-cli: NVIDIA's formats (libnvidia-container src/cli/info.c, list.c, main.c), options, errors."""

from __future__ import annotations

import os
import re

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi.driver_files import DriverFile
from ansible_collections.gpufleet.nvidia.plugins.module_utils.hostprog import container_cli as cli

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))))

A100 = {
    "index": 0,
    "minor": 0,
    "name": "NVIDIA A100-SXM4-40GB",
    "brand": "NVIDIA",
    "uuid": "GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c",
    "pci_bus_id": "0000:3b:00.0",
    "compute_capability": "8.0",
}
V100 = {
    "index": 1,
    "minor": 3,
    "name": "Tesla V100-SXM2-16GB",
    "brand": "Tesla",
    "uuid": "GPU-11111111-2222-3333-4444-555555555555",
    "pci_bus_id": "0001:af:1f.0",
    "compute_capability": "7.0",
}
DRIVER = {"driver_version": "535.161.08", "cuda_version": "12.2", "gpus": [A100, V100]}


def c_printf_info(nvrm, cuda, devices):
    """NVIDIA's info.c, transcribed: printf("%-15s %s\\n%-15s %s\\n", ...) and the per-device format."""
    out = "%-15s %s\n%-15s %s\n" % ("NVRM version:", nvrm, "CUDA version:", cuda)
    for i, (minor, model, brand, uuid, busid, arch) in enumerate(devices):
        out += "\n%-15s %d\n%-15s %u\n%-15s %s\n%-15s %s\n%-15s %s\n%-15s %s\n%-15s %s\n" % (
            "Device Index:", i, "Device Minor:", minor, "Model:", model, "Brand:", brand,
            "GPU UUID:", uuid, "Bus Location:", busid, "Architecture:", arch,
        )  # fmt: skip
    return out


def test_info_matches_nvidia_printf_format():
    expected = c_printf_info(
        "535.161.08",
        "12.2",
        [
            (0, A100["name"], "Unknown", A100["uuid"], "00000000:3b:00.0", "8.0"),
            (3, V100["name"], "Tesla", V100["uuid"], "00000001:af:1f.0", "7.0"),
        ],
    )
    assert cli.format_info(DRIVER) == expected
    assert "NVRM version:   535.161.08\nCUDA version:   12.2\n\nDevice Index:   0\nDevice Minor:   0\n" in expected


def test_info_csv_matches_nvidia():
    out = cli.format_info(DRIVER, csv=True)
    assert out.splitlines() == [
        "NVRM version,CUDA version",
        "535.161.08,12.2",
        "",
        "Device Index,Device Minor,Model,Brand,GPU UUID,Bus Location,Architecture",
        f"0,0,{A100['name']},Unknown,{A100['uuid']},00000000:3b:00.0,8.0",
        f"1,3,{V100['name']},Tesla,{V100['uuid']},00000001:af:1f.0,7.0",
    ]


@pytest.mark.parametrize(
    ("nvml_brand", "label"),
    [("Quadro", "Quadro"), ("Tesla", "Tesla"), ("NVS", "NVS"), ("GRID", "GRID"), ("GeForce", "GeForce"),
     ("Titan", "TITAN"), ("NVIDIA", "Unknown"), ("GeForce RTX", "Unknown"), (None, "Unknown")],
)  # fmt: skip
def test_brand_is_libnvidia_containers_table(nvml_brand, label):
    assert cli.device_fields(0, dict(A100, brand=nvml_brand))[3] == label


def test_unknown_values_print_unknown():
    fields = cli.device_fields(2, {"index": 2})
    assert fields == ("2", "Unknown", "Unknown", "Unknown", "Unknown", "Unknown", "Unknown")
    assert cli.format_info({"gpus": []}) == "NVRM version:   Unknown\nCUDA version:   Unknown\n"


def test_bus_location():
    assert cli.bus_location("0000:05:00.0") == "00000000:05:00.0"
    assert cli.bus_location("10000:c1:00.1") == "00010000:c1:00.0"
    assert cli.bus_location("garbage") == "Unknown"


def test_select_gpus():
    gpus = DRIVER["gpus"]
    assert cli.select_gpus(gpus, "all") == gpus
    assert cli.select_gpus(gpus, "1") == [V100]
    assert cli.select_gpus(gpus, f"{V100['uuid'].upper()},0") == gpus
    with pytest.raises(cli.CliError, match="device error: unknown device id: 7"):
        cli.select_gpus(gpus, "0,7")


FILES = [
    DriverFile("binary", "utility", "nvidia-smi", "/usr/bin/nvidia-smi", "/usr/lib/nvidia/nvidia-smi", "x86_64"),
    DriverFile("library", "utility", "libnvidia-ml.so.1", "/l/libnvidia-ml.so.1", "/l/libnvidia-ml.so.535", "x86_64"),
    DriverFile("library", "compute", "libcuda.so.1", "/l/libcuda.so.1", "/l/libcuda.so.535", "x86_64"),
    DriverFile("library", "compute", "libcuda.so.1", "/l32/libcuda.so.1", "/l32/libcuda.so.535", "i386"),
    DriverFile("ipc", "utility", "nvidia-persistenced", "/var/run/nvidia-persistenced/socket", "/run/x", None),
    DriverFile("firmware", "utility", "gsp.bin", "/lib/firmware/nvidia/5/gsp.bin", "/lib/firmware/nvidia/5/gsp.bin", None),  # noqa: E501
    DriverFile("config", "compute", "nvidia.icd", "/etc/OpenCL/vendors/nvidia.icd", "/etc/x", None),
]  # fmt: skip
NODES = ["/dev/nvidia-modeset", "/dev/nvidia-uvm", "/dev/nvidia0", "/dev/nvidia3", "/dev/nvidiactl"]
ALL = {"binaries": True, "libraries": True, "compat32": True, "ipcs": True, "firmwares": True}


def test_list_everything_in_nvidias_order():
    assert cli.list_paths(NODES, DRIVER["gpus"], FILES, ALL) == [
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia-modeset",
        "/dev/nvidia0",
        "/dev/nvidia3",
        "/usr/lib/nvidia/nvidia-smi",
        "/l/libnvidia-ml.so.535",
        "/l/libcuda.so.535",
        "/l32/libcuda.so.535",
        "/var/run/nvidia-persistenced/socket",
        "/lib/firmware/nvidia/5/gsp.bin",
    ]


def test_list_filters():
    assert cli.list_paths(NODES, [V100], FILES, {}) == [
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia-modeset",
        "/dev/nvidia3",
    ]
    assert cli.list_paths(NODES, None, FILES, {"libraries": True}) == ["/l/libnvidia-ml.so.535", "/l/libcuda.so.535"]
    only_compute = dict(ALL, capabilities={"compute"})
    assert cli.list_paths(NODES, None, FILES, only_compute) == ["/l/libcuda.so.535", "/l32/libcuda.so.535"]
    assert cli.list_paths(NODES, None, FILES, dict(ALL, no_ipc={"nvidia-persistenced"}))[-1].startswith("/lib/firmware")


def run(capsys, *args, argv0="/usr/local/bin/nvidia-container-cli"):
    rc = cli.main([argv0, *args])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--bogus", "info"], "nvidia-container-cli: unrecognized option '--bogus'"),
        (["-Z", "info"], "nvidia-container-cli: invalid option -- 'Z'"),
        (["--root"], "nvidia-container-cli: option '--root' requires an argument"),
        (["info", "--device=0"], "nvidia-container-cli info: unrecognized option '--device'"),
        (["list", "--libraries=yes"], "nvidia-container-cli list: option '--libraries' doesn't allow an argument"),
        (["list", "--device"], "nvidia-container-cli list: option '--device' requires an argument"),
        (["list", "extra"], "nvidia-container-cli list: too many arguments"),
        (["list", "--mig-config=0"], "nvidia-container-cli list: --mig-config is not supported"),
        (["frob"], "nvidia-container-cli: unknown command 'frob'"),
        ([], "nvidia-container-cli: no command given"),
    ],
)
def test_bad_usage_is_one_line_and_status_1(capsys, args, message):
    rc, out, err = run(capsys, *args)
    assert rc == 1 and out == ""
    assert err.startswith(message) and err.count("\n") == 1, err


def test_version_says_whose(capsys):
    rc, out, err = run(capsys, "--version")
    assert rc == 0 and err == ""
    lines = out.splitlines()
    assert lines[0] == f"cli-version: {cli.COLLECTION_VERSION} (gpufleet.nvidia)"
    assert lines[1].startswith(f"lib-version: {cli.COLLECTION_VERSION} (gpufleet.nvidia") and "not NVIDIA's" in lines[1]
    assert run(capsys, "-V")[1] == out


def test_help(capsys):
    rc, out, _err = run(capsys, "--help")
    assert rc == 0 and out.startswith("Usage: nvidia-container-cli [OPTION...] COMMAND [ARG...]\n")
    for word in ("--load-kmods", "--root=PATH", "info", "list", "configure", "gpufleet.nvidia"):
        assert word in out
    rc, out, _err = run(capsys, "list", "--help")
    assert rc == 0 and "--device=ID" in out and "--firmwares" in out and "--compute" in out


def test_configure_fails_with_the_working_command(capsys, tmp_path):
    shim = tmp_path / "gpufleet-container-runtime"
    shim.write_text("#!/bin/sh\n")
    shim.chmod(0o755)
    argv0 = str(tmp_path / "nvidia-container-cli")
    # containerd contrib/nvidia/nvidia.go: the args after `containerd oci-hook --`.
    hook = ["--load-kmods", "configure", "--device=1", "--compute", "--compat32", "--graphics", "--utility"]
    rc, out, err = run(capsys, *hook, "--video", "--display", "--pid=123", "/run/rootfs", argv0=argv0)
    assert rc == 1 and out == "" and err.count("\n") == 1
    assert err.startswith("nvidia-container-cli configure (gpufleet): ")
    assert f"ctr run --runc-binary {shim} --gpus 1 IMAGE ID" in err
    rc, _out, err = run(capsys, "configure", "--device=GPU-abc,GPU-def", "--pid=1", "/r", argv0="/nowhere/x")
    assert (
        rc == 1
        and "--runc-binary /usr/local/bin/gpufleet-container-runtime --env NVIDIA_VISIBLE_DEVICES=GPU-abc,GPU-def"
        in err
    )


def test_info_through_main(capsys, monkeypatch):
    monkeypatch.setattr(cli, "_cache_entries", lambda root, options: [])
    monkeypatch.setattr(cli, "query_driver", lambda root, entries: DRIVER)
    rc, out, err = run(capsys, "--load-kmods", "info")
    assert rc == 0 and err == "" and out == cli.format_info(DRIVER)
    rc, out, _err = run(capsys, "info", "--csv")
    assert rc == 0 and out == cli.format_info(DRIVER, csv=True)


def test_nvml_missing_is_nvidias_initialization_error(capsys, tmp_path):
    rc, out, err = run(capsys, "--root", str(tmp_path), "info")
    assert rc == 1 and out == ""
    assert err.startswith("nvidia-container-cli: initialization error: ") and err.count("\n") == 1


def test_list_on_debians_driver_tree(capsys, debian_driver_tree):
    root, version = debian_driver_tree
    rc, out, err = run(capsys, "--root", root, "list", "--libraries", "--binaries")
    assert rc == 0, err
    lines = out.splitlines()
    assert any(re.search(rf"/libcuda\.so\.{re.escape(version)}$", line) for line in lines), lines
    assert any(line.endswith("/libnvidia-ml.so." + version) for line in lines)
    assert all(line.startswith("/") and not line.startswith(root) for line in lines)
    assert not any("i386" in line for line in lines)  # no --compat32
    rc, out, _err = run(capsys, "--root", root, "list", "--libraries", "--utility")
    assert (
        rc == 0
        and out
        and all("libnvidia-ml" in line or "libnvidia-cfg" in line or "nscq" in line for line in out.splitlines())
    )


# ---------------------------------------------------------------- the DSO cache an admin names: bounded, regular only


@pytest.mark.parametrize("how", ["ldcache", "root"])
def test_a_fifo_as_the_dso_cache_fails_at_once_instead_of_hanging(capsys, tmp_path, how):
    (tmp_path / "etc").mkdir()
    os.mkfifo(str(tmp_path / "etc" / "ld.so.cache"))  # no writer: a blocking open never returns
    args = ["--ldcache", str(tmp_path / "etc" / "ld.so.cache")] if how == "ldcache" else ["--root", str(tmp_path)]
    rc, out, err = run(capsys, *args, "list", "--libraries")
    assert rc == 1 and out == "" and err.count("\n") == 1
    assert "cannot read the DSO cache" in err and "is a FIFO, not a regular file" in err


def test_an_endless_device_as_the_dso_cache_is_refused_unread(capsys):
    rc, _out, err = run(capsys, "--ldcache", "/dev/zero", "list", "--libraries")  # read to the end: out of memory
    assert rc == 1 and "/dev/zero is a character device, not a regular file" in err and err.count("\n") == 1


def test_an_oversized_dso_cache_is_refused(capsys, tmp_path):
    big = tmp_path / "ld.so.cache"
    with open(str(big), "wb") as f:
        f.truncate((8 << 20) + 1)  # sparse: one byte over the bound
    rc, _out, err = run(capsys, "--ldcache", str(big), "list", "--libraries")
    assert rc == 1 and "is larger than 8388608 bytes" in err and err.count("\n") == 1
