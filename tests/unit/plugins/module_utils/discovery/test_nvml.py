# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""discovery/nvml.py against NVIDIA's own NVML: Debian's real ``libnvidia-ml.so.1`` (535, from Debian's
``libnvidia-ml1`` package in the driver tree of tests/tools/debian_driver_tree.py) and NVIDIA's published
``nvml.h``.

* With no kernel driver (this machine, CI), the real ``nvmlInit_v2`` answers ``NVML_ERROR_DRIVER_NOT_LOADED``;
  ``query`` and ``discover`` say so cleanly, with the library's own error text.
* Every NVML symbol the collection looks up exists in the real library (a missing one would only leave a fact
  None, silently: on a real GPU host that is a fact lost), except those listed as newer than 535 (``NEWER_THAN_535``,
  each with the source that gives its fact instead).
* The ctypes structures, and the stub NVML's (tests/sim/nvml/nvml_stub.c) C structures, have NVIDIA's sizes and
  offsets. The expected layouts were read from NVIDIA's nvml.h as published in github.com/NVIDIA/go-nvml,
  ``gen/nvml/nvml.h`` at tag ``v0.13.3-0`` (commit 4ecf9856e622, 2026-06-26, NVML API 13) and at tag
  ``v0.12.0-2`` (2023-10-31, NVML API 11, the 535 era): both give the same layouts, compiled with gcc on
  x86_64 and printed with sizeof/offsetof (checked 2026-11-23). The header itself is not in this tree.

Each load of a real or stub NVML runs in its own Python process: the same soname is loaded once per process.
"""

from __future__ import annotations

import ctypes
import inspect
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery import nvml as _nvml
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils.discovery.discovery_tree import (
    REPO,
    STUB_SOURCE,
    HostTree,
)

COLLECTIONS = os.path.join(REPO, ".cache", "collections")
NVML_SOURCE = inspect.getsourcefile(_nvml)

# nvml.h (go-nvml gen/nvml/nvml.h, v0.13.3-0 and v0.12.0-2): {struct: (sizeof, {field: (offsetof, sizeof)})}.
NVML_H = {
    "nvmlPciInfo_t": (
        68,
        {
            "busIdLegacy": (0, 16),  # NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE
            "domain": (16, 4),
            "bus": (20, 4),
            "device": (24, 4),
            "pciDeviceId": (28, 4),
            "pciSubSystemId": (32, 4),
            "busId": (36, 32),  # NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE
        },
    ),
    "nvmlMemory_t": (24, {"total": (0, 8), "free": (8, 8), "used": (16, 8)}),
    "nvmlMemory_v2_t": (
        40,
        {"version": (0, 4), "total": (8, 8), "reserved": (16, 8), "free": (24, 8), "used": (32, 8)},
    ),
    "nvmlPciInfoExt_t": (
        64,
        {
            "version": (0, 4),
            "domain": (4, 4),
            "bus": (8, 4),
            "device": (12, 4),
            "pciDeviceId": (16, 4),
            "pciSubSystemId": (20, 4),
            "baseClass": (24, 4),
            "subClass": (28, 4),
            "busId": (32, 32),
        },
    ),
    "nvmlFieldValue_t": (
        40,
        {
            "fieldId": (0, 4),
            "scopeId": (4, 4),
            "timestamp": (8, 8),
            "latencyUsec": (16, 8),
            "valueType": (24, 4),
            "nvmlReturn": (28, 4),
            "value": (32, 8),  # nvmlValue_t, a union of 8 bytes
        },
    ),
    "nvmlEventData_t": (
        32,
        {
            "device": (0, 8),
            "eventType": (8, 8),
            "eventData": (16, 8),
            "gpuInstanceId": (24, 4),
            "computeInstanceId": (28, 4),
        },
    ),
}
# nvml.h buffer sizes: NVML_DEVICE_NAME_V2_BUFFER_SIZE, NVML_DEVICE_UUID_V2_BUFFER_SIZE (96),
# NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE (80).
NAME_UUID_BUFFER = 96
DRIVER_VERSION_BUFFER = 80
# The ctypes classes of discovery/nvml.py and the nvml.h structure each stands for.
CTYPES = {"nvmlPciInfo_t": _nvml.PciInfo, "nvmlMemory_t": _nvml.Memory}
# NVML's return codes (nvml.h nvmlReturn_t) that discovery names.
# Entry points discovery uses that are newer than Debian's 535 (each optional: a missing one leaves its field to
# another source). nvmlDeviceGetNumaNodeId first appears in go-nvml v0.12.4-0 (2024-05-24, driver 550).
NEWER_THAN_535 = {"nvmlDeviceGetNumaNodeId": "numa_node comes from sysfs (/sys/bus/pci/devices/*/numa_node)"}
RETURN_CODES = {
    "SUCCESS": 0,
    "ERROR_NOT_SUPPORTED": 3,
    "ERROR_NOT_FOUND": 6,
    "ERROR_DRIVER_NOT_LOADED": 9,
    "ERROR_LIBRARY_NOT_FOUND": 12,
    "ERROR_GPU_IS_LOST": 15,
}


def real_nvml(driver_root: str) -> str:
    path = os.path.join(driver_root, "usr/lib/x86_64-linux-gnu/nvidia/current/libnvidia-ml.so.1")
    assert os.path.isfile(path), f"Debian's libnvidia-ml1 is not in the driver tree: {path}"
    return path


def symbols_called() -> set[str]:
    """Every NVML entry point discovery/nvml.py looks up by name (string literals ``"nvml..."``)."""
    with open(NVML_SOURCE, encoding="utf-8") as f:
        return set(re.findall(r"""["'](nvml[A-Z][A-Za-z0-9_]*)["']""", f.read()))


def _in_own_process(script: str, *args: str) -> dict:
    env = dict(os.environ, PYTHONPATH=COLLECTIONS)
    proc = subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, env=env, check=False, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


QUERY = """
import json, sys
from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery import nvml
try:
    nvml.query([sys.argv[1]])
except nvml.NvmlError as exc:
    print(json.dumps({"type": type(exc).__name__, "message": str(exc)}))
else:
    print(json.dumps({"type": None}))
"""

SYMBOLS = """
import ctypes, json, sys
lib = ctypes.CDLL(sys.argv[1])
lib.nvmlErrorString.restype = ctypes.c_char_p
missing = [name for name in sys.argv[2:] if not hasattr(lib, name)]
print(json.dumps({"missing": missing, "init": lib.nvmlInit_v2(), "text": lib.nvmlErrorString(9).decode()}))
"""


def test_real_nvml_without_a_driver_is_unavailable_with_its_own_words(debian_driver_tree):
    driver_root, _version = debian_driver_tree
    out = _in_own_process(QUERY, real_nvml(driver_root))
    assert out == {"type": "NvmlUnavailable", "message": "nvmlInit: Driver Not Loaded"}


def test_discover_over_the_real_nvml_reports_the_driver_not_loaded(tmp_path, debian_driver_tree):
    driver_root, version = debian_driver_tree
    script = f"""
import json, sys
from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery.discover import discover
facts = discover({str(tmp_path)!r}, driver_root={driver_root!r}, sources=["nvml"])
print(json.dumps({{k: facts[k] for k in ("sources", "warnings", "gpu_count", "driver")}}))
"""
    HostTree(tmp_path).pci("0000:07:00.0", driver=None)
    facts = _in_own_process(script)
    assert facts["sources"] == {"requested": ["nvml"], "answered": []}
    assert "nvml: nvmlInit: Driver Not Loaded" in facts["warnings"]
    assert facts["gpu_count"] == 0
    assert facts["driver"]["installed_version"] == version
    assert facts["driver"]["loaded"] is False


def test_every_nvml_symbol_discovery_calls_is_in_the_real_library(debian_driver_tree):
    driver_root, _version = debian_driver_tree
    wanted = symbols_called()
    # The lookups the facts depend on are all found by the scan (it reads the source, not a copy of the list).
    assert {
        "nvmlInit_v2",
        "nvmlDeviceGetPciInfo_v3",
        "nvmlDeviceGetMigDeviceHandleByIndex",
        "nvmlErrorString",
    } <= wanted
    out = _in_own_process(SYMBOLS, real_nvml(driver_root), *sorted(wanted))
    assert out["missing"] == sorted(NEWER_THAN_535), (
        f"NVML entry points Debian's 535 libnvidia-ml lacks: {out['missing']}"
    )
    assert out["init"] == _nvml.ERROR_DRIVER_NOT_LOADED
    assert out["text"] == _nvml.ERROR_STRINGS[_nvml.ERROR_DRIVER_NOT_LOADED] == "Driver Not Loaded"


def test_return_codes_are_nvml_h_s():
    assert {name: getattr(_nvml, name) for name in RETURN_CODES} == RETURN_CODES


@pytest.mark.parametrize("struct", sorted(CTYPES))
def test_ctypes_structures_have_nvml_h_layout(struct):
    cls = CTYPES[struct]
    size, fields = NVML_H[struct]
    assert ctypes.sizeof(cls) == size
    assert [name for name, _type in cls._fields_] == list(fields)
    assert {name: (getattr(cls, name).offset, getattr(cls, name).size) for name in fields} == fields


def test_string_buffers_are_nvml_h_s():
    assert inspect.signature(_nvml._Nvml.string).parameters["size"].default == NAME_UUID_BUFFER
    with open(NVML_SOURCE, encoding="utf-8") as f:
        source = f.read()
    assert f'nv.string("nvmlSystemGetDriverVersion", size={DRIVER_VERSION_BUFFER})' in source


LAYOUT_C = r"""
#include "%(stub)s"
#include <stdio.h>
#include <stddef.h>
#define F(T, m) printf("%%s\t%%zu\t%%s\t%%zu\t%%zu\n", #T, sizeof(T), #m, offsetof(T, m), sizeof(((T *)0)->m))
int main(void) {
%(lines)s
    return 0;
}
"""


@pytest.mark.skipif(not shutil.which("gcc"), reason="gcc is needed to compile the stub's structures")
def test_stub_structures_have_nvml_h_layout(tmp_path):
    lines = "\n".join(f"    F({struct}, {field});" for struct, (_size, fields) in NVML_H.items() for field in fields)
    source = tmp_path / "layout.c"
    source.write_text(LAYOUT_C % {"stub": STUB_SOURCE, "lines": lines})
    subprocess.run(["gcc", "-o", str(tmp_path / "layout"), str(source), "-ldl"], check=True)
    out = subprocess.run([str(tmp_path / "layout")], capture_output=True, text=True, check=True).stdout
    seen: dict[str, tuple[int, dict[str, tuple[int, int]]]] = {}
    for line in out.splitlines():
        struct, size, field, offset, width = line.split("\t")
        seen.setdefault(struct, (int(size), {}))[1][field] = (int(offset), int(width))
    assert seen == NVML_H
