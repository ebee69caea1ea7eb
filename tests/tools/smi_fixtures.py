#!/usr/bin/env python
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The discovery fixtures that a real tool on this machine can write, written by it.

    tests/tools/smi_fixtures.py            rewrite them
    tests/tools/smi_fixtures.py --check    exit 1 when one is not what the tool says now (timestamp, version aside)

``nvidia-smi-535-stub.xml``: Debian's real ``nvidia-smi`` 535 (bookworm's ``nvidia-smi`` package, from the driver
tree of tests/tools/debian_driver_tree.py) run as ``nvidia-smi -q -x`` over the project's stub NVML
(tests/sim/nvml/nvml_stub.c, ``LD_LIBRARY_PATH``) answering for two GPUs: GPU 0 an A100 with MIG on, GPU 1 an
H100 (``discovery_tree.stub_config(count=2, mig=True, version=version
        )``). The stub serves no GPU-instance API, so the A100's
``<mig_devices>`` is ``None`` here; the MIG device blocks stay in the hand-written ``nvidia-smi-a100-mig-535.xml``.

ld.so.cache fixtures are not files: every cache the tests read is written at test time by the real ``ldconfig``
(tests/unit/plugins/module_utils/cdi/test_ldcache.py, discovery_tree.HostTree.nvml_stub). Which fixture is
hand-written, and why, is in tests/unit/plugins/module_utils/discovery/fixtures/README.md.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "unit" / "plugins" / "module_utils" / "discovery" / "fixtures"
DRIVER_TREE = REPO / ".cache" / "debian-nvidia" / "root"
NVIDIA_SMI = "usr/lib/nvidia/current/nvidia-smi"  # where Debian's nvidia-smi package puts it (an alternative)
# What changes without the tool changing: the time it ran, and Debian's 535 point release (the stub is told to report
# the tree's version, as a driver matching its userspace would).
VOLATILE = re.compile(r"<(timestamp|driver_version)>[^<]*</(timestamp|driver_version)>")


def _tools():
    """debian_driver_tree (tests/tools) and discovery_tree (the unit tests' stub builders)."""
    collections = str(REPO / ".cache" / "collections")
    for path in (str(REPO / "tests" / "tools"), collections):
        if path not in sys.path:
            sys.path.insert(0, path)
    import debian_driver_tree

    from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils.discovery import discovery_tree

    return debian_driver_tree, discovery_tree


def generate() -> dict[str, str]:
    """``{fixture name: text}`` as the real tools write them now."""
    debian_driver_tree, discovery_tree = _tools()
    version = debian_driver_tree.build(str(DRIVER_TREE))
    if not (shutil.which("gcc") or shutil.which("cc")):
        raise SystemExit("smi_fixtures: a C compiler is needed to build the stub NVML")
    with tempfile.TemporaryDirectory(prefix="smi-fixtures-") as work:
        stub = discovery_tree.compile_nvml_stub(work)
        os.rename(stub, os.path.join(work, "libnvidia-ml.so.1"))
        config = discovery_tree.write_stub_config(os.path.join(work, "gpus.json"), count=2, mig=True, version=version)
        env = dict(os.environ, LD_LIBRARY_PATH=work, GPUFLEET_SIM_GPUS_JSON=config, LC_ALL="C")
        proc = subprocess.run(
            [str(DRIVER_TREE / NVIDIA_SMI), "-q", "-x"], env=env, capture_output=True, text=True, check=False
        )
    if proc.returncode != 0:
        raise SystemExit(f"smi_fixtures: nvidia-smi -q -x over the stub: rc {proc.returncode}\n{proc.stderr}")
    return {"nvidia-smi-535-stub.xml": proc.stdout}


def same(a: str, b: str) -> bool:
    """Equal but for ``<timestamp>`` and ``<driver_version>`` (see VOLATILE)."""
    return VOLATILE.sub(r"<\1/>", a) == VOLATILE.sub(r"<\1/>", b)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when a fixture is not what the tool says now")
    args = parser.parse_args(argv)
    stale = []
    for name, text in generate().items():
        path = FIXTURES / name
        current = path.read_text(encoding="utf-8") if path.exists() else ""
        if same(current, text):
            continue
        stale.append(name)
        if not args.check:
            path.write_text(text, encoding="utf-8")
            print(f"smi_fixtures: wrote {path.relative_to(REPO)}")
    if args.check and stale:
        print(f"smi_fixtures: not what the tools say now (run tests/tools/smi_fixtures.py): {', '.join(stale)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
