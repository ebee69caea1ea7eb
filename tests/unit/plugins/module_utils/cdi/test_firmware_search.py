# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""GSP firmware found where the kernel finds it: the ``firmware_class.path`` parameter, then the four standard
folders, first folder holding a name wins. A real H100 host keeps its firmware in the driver's own tree and points
the parameter at it (bench/results/2026-11-27-real-gpu-h100.md)."""

import os

from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi.driver_files import (
    FIRMWARE_CLASS_PATH,
    find_firmware,
    firmware_search_dirs,
)

VERSION = "580.159.04"
RELEASE = "6.18.44-fc"


def _put(root, path, text="x"):
    full = os.path.join(str(root), path.lstrip("/"))
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w", encoding="utf-8") as f:
        f.write(text)


def _found(root, driver_root=None):
    files = find_firmware(str(driver_root or root), str(root), VERSION, RELEASE)
    return {f.name: f.resolved for f in files}


def test_search_order_is_the_kernels():
    assert firmware_search_dirs("/nonexistent-root", RELEASE) == [
        f"/lib/firmware/updates/{RELEASE}",
        "/lib/firmware/updates",
        f"/lib/firmware/{RELEASE}",
        "/lib/firmware",
    ]


def test_custom_path_comes_first_and_the_first_folder_holding_a_name_wins(tmp_path):
    _put(tmp_path, FIRMWARE_CLASS_PATH, "/usr/local/nvidia/firmware\n")
    _put(tmp_path, f"/usr/local/nvidia/firmware/nvidia/{VERSION}/gsp_ga10x.bin")
    _put(tmp_path, f"/lib/firmware/nvidia/{VERSION}/gsp_ga10x.bin")
    _put(tmp_path, f"/lib/firmware/nvidia/{VERSION}/gsp_tu10x.bin")
    _put(tmp_path, f"/lib/firmware/nvidia/{VERSION}/README")
    assert firmware_search_dirs(str(tmp_path), RELEASE)[0] == "/usr/local/nvidia/firmware"
    assert _found(tmp_path) == {
        "gsp_ga10x.bin": f"/usr/local/nvidia/firmware/nvidia/{VERSION}/gsp_ga10x.bin",
        "gsp_tu10x.bin": f"/lib/firmware/nvidia/{VERSION}/gsp_tu10x.bin",
    }


def test_updates_for_the_running_kernel_win_over_the_plain_folder(tmp_path):
    _put(tmp_path, f"/lib/firmware/nvidia/{VERSION}/gsp_ga10x.bin")
    _put(tmp_path, f"/lib/firmware/updates/{RELEASE}/nvidia/{VERSION}/gsp_ga10x.bin")
    _put(tmp_path, f"/lib/firmware/updates/9.9.9/nvidia/{VERSION}/gsp_tu10x.bin")  # another kernel's: not searched
    assert _found(tmp_path) == {"gsp_ga10x.bin": f"/lib/firmware/updates/{RELEASE}/nvidia/{VERSION}/gsp_ga10x.bin"}


def test_an_empty_or_relative_parameter_is_no_custom_path(tmp_path):
    for value in ("\n", "firmware\n", "/\n"):
        _put(tmp_path, FIRMWARE_CLASS_PATH, value)
        assert firmware_search_dirs(str(tmp_path), RELEASE)[0] == f"/lib/firmware/updates/{RELEASE}"


def test_another_versions_firmware_is_not_taken(tmp_path):
    _put(tmp_path, "/lib/firmware/nvidia/535.261.03/gsp_ga10x.bin")
    assert _found(tmp_path) == {}


def test_a_link_out_of_the_driver_root_stays_inside_it(tmp_path):
    driver_root = tmp_path / "driver"
    _put(driver_root, f"/lib/firmware/nvidia/{VERSION}/real.bin")
    os.symlink("/etc", str(driver_root / "lib/firmware/nvidia" / VERSION / "gsp_evil.bin"))
    os.symlink("real.bin", str(driver_root / "lib/firmware/nvidia" / VERSION / "gsp_ga10x.bin"))
    found = _found(tmp_path, driver_root)
    assert found == {"gsp_ga10x.bin": f"/lib/firmware/nvidia/{VERSION}/real.bin"}
