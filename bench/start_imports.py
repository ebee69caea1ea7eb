#!/usr/bin/env python
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the runtime shim's Python costs before it reads a bundle: ``python3 -IS`` plus the imports of its start
path (the shim, the OCI edits, the CDI hook), for this tree against another commit's, in interleaved rounds; with
``--hook``, the installed ``gpufleet-cdi-hook``'s whole run instead (start, imports, the merge of an image's
``ld.so.cache`` (this machine's) with 25 driver libraries, the links and the cache written into a container root).

bench/start_imports.py [--against REV] [--rounds N] [--hook]

No fleet and no engine: both trees' host programs are installed into a temporary folder with their own
installer, and the module each one's shim launcher names is imported. Prints medians and the ratio against the
other commit measured in the same run (and bare ``python3 -IS`` as the floor); asserts nothing.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = "/usr/bin/python3"
OCI_MODULES = ("oci", "oci_config", "oci_edits", "ctr_hook")


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
    folder = os.path.join(dest, "lib", *hook.split(".")[:-1])
    # The request, config.json, edits and ctr hook modules the shim's GPU start imports: one file or several.
    oci = [hook.replace("cdi_hook", n) for n in OCI_MODULES if os.path.exists(os.path.join(folder, n + ".py"))]
    return f"import sys; sys.path.insert(0, {dest + '/lib'!r}); import {', '.join([shim, *oci, hook])}"


def once(code: str) -> float:
    start = time.perf_counter()
    subprocess.run([PYTHON, "-IS", "-c", code], check=True)
    return (time.perf_counter() - start) * 1000


LIB = "/usr/lib/x86_64-linux-gnu"


def hook_bundle(work: str) -> tuple[str, list[str]]:
    """A bundle whose root holds this machine's ``ld.so.cache`` as the image's and 25 driver libraries (empty files)
    at their container paths: ``(state JSON, the hook's arguments)``, as a CDI spec's hook entry gives them."""
    sys.path.insert(0, os.path.join(REPO, ".cache", "collections"))
    from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils.cdi.crafted_ldcache import (
        DRIVER_LIBRARIES,
    )

    root = os.path.join(work, "bundle", "rootfs")
    os.makedirs(os.path.join(root, "etc"))
    os.makedirs(root + LIB)
    with open("/etc/ld.so.cache", "rb") as src, open(os.path.join(root, "etc", "ld.so.cache"), "wb") as dst:
        dst.write(src.read())
    args = ["apply", "--folder", LIB]
    mounts = []
    for soname, _path, arch in DRIVER_LIBRARIES:
        real = soname + ".535.216.01"
        open(os.path.join(root + LIB, real), "wb").close()
        args += ["--library", f"{arch}::{soname}::{LIB}/{real}"]
        mounts.append({"destination": f"{LIB}/{real}", "source": "/dev/null", "options": ["ro", "bind"]})
    config = {"ociVersion": "1.0.2", "root": {"path": "rootfs"}, "process": {"args": ["sh"]}, "mounts": mounts}
    with open(os.path.join(work, "bundle", "config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f)
    state = {"ociVersion": "1.0.2", "id": "c1", "status": "creating", "pid": 1, "bundle": work + "/bundle"}
    return json.dumps(state), args


def hook_once(hook: str, state: str, args: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run([hook, *args], input=state, text=True, check=True)
    elapsed = (time.perf_counter() - start) * 1000
    bundle = json.loads(state)["bundle"]
    with open(os.path.join(bundle, "rootfs", "etc", "ld.so.cache"), "rb") as f:
        assert b"libnvidia-ngx.so.1\0" in f.read(), "the hook did not merge the driver's libraries"
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--against", default="HEAD~1", help="the commit to compare with (default HEAD~1)")
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--hook", action="store_true", help="time the CDI hook's whole run instead of the imports")
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
        if args.hook:
            state, hook_args = hook_bundle(work)
            hooks = {args.against: work + "/a/bin/gpufleet-cdi-hook", "this tree": work + "/b/bin/gpufleet-cdi-hook"}
            del samples["floor (python3 -IS)"]
        for _round in range(args.rounds):
            for name, code in variants.items():
                if not args.hook:
                    samples[name].append(once(code))
                elif name in hooks:
                    samples[name].append(hook_once(hooks[name], state, hook_args))
    medians = {name: statistics.median(values) for name, values in samples.items()}
    for name, value in medians.items():
        print(f"{name:>24}: median {value:6.2f} ms over {args.rounds} rounds")
    print(f"this tree / {args.against}: {medians['this tree'] / medians[args.against]:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
