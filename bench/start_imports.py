#!/usr/bin/env python
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the runtime shim's Python costs before it reads a bundle: ``python3 -IS`` plus the imports of its start
path (the shim, the OCI edits, the CDI hook), for this tree against another commit's, in interleaved rounds.

bench/start_imports.py [--against REV] [--rounds N]

No fleet and no engine: both trees' host programs are installed into a temporary folder with their own
installer, and the module each one's shim launcher names is imported. Prints medians and the ratio against the
other commit measured in the same run (and bare ``python3 -IS`` as the floor); asserts nothing.
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = "/usr/bin/python3"


def install(tree: str, dest: str) -> str:
    """Install ``tree``'s host programs under ``dest``; the import line that loads its shim, OCI edits and hook."""
    installer = os.path.join(tree, "tests/tools/install_host_programs.py")
    subprocess.run(
        [PYTHON, installer, "--bindir", dest + "/bin", "--libdir", dest + "/lib"],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    with open(os.path.join(dest, "bin", "gpufleet-cdi-hook"), encoding="utf-8") as f:
        hook = re.search(r"from (\S+) import main", f.read()).group(1)
    shim = hook.replace("cdi_hook", "shim")
    oci = hook.replace("cdi_hook", "oci")
    return f"import sys; sys.path.insert(0, {dest + '/lib'!r}); import {shim}, {oci}, {hook}"


def once(code: str) -> float:
    start = time.perf_counter()
    subprocess.run([PYTHON, "-IS", "-c", code], check=True)
    return (time.perf_counter() - start) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--against", default="HEAD~1", help="the commit to compare with (default HEAD~1)")
    parser.add_argument("--rounds", type=int, default=60)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        other = os.path.join(work, "other")
        os.makedirs(other)
        archive = subprocess.run(
            [
                "git",
                "-C",
                REPO,
                "archive",
                args.against,
                "plugins/module_utils",
                "tests/tools/install_host_programs.py",
            ],
            check=True,
            capture_output=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", other], input=archive, check=True)
        variants = {
            "floor (python3 -IS)": "pass",
            args.against: install(other, work + "/a"),
            "this tree": install(REPO, work + "/b"),
        }
        samples = {name: [] for name in variants}
        for _round in range(args.rounds):
            for name, code in variants.items():
                samples[name].append(once(code))
    medians = {name: statistics.median(values) for name, values in samples.items()}
    for name, value in medians.items():
        print(f"{name:>24}: median {value:6.2f} ms over {args.rounds} rounds")
    print(f"this tree / {args.against}: {medians['this tree'] / medians[args.against]:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
