# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Node images, built locally and cached (no registry is reachable from the build machines).

Two layers, each tagged with a hash of its build inputs, so an unchanged recipe is reused and a
changed one rebuilds:

* `gpufleet-sim/base:<suite>-<hash>`: `debootstrap --variant=minbase` with systemd, dbus and python3,
  apt sources with `contrib non-free non-free-firmware`, then `docker import`. The .debs are kept in
  `tests/sim/build/debs/<suite>` (gitignored) and reused by every later build.
* `gpufleet-sim/node:<suite>-<variant>-<hash>`: the base plus the node's container engines (and, for
  `driver_packages` nodes, Debian's NVIDIA userspace behind the NVML stub's divert), installed in a
  throw-away container with the same .deb cache bind-mounted, then `docker commit`.

Builds of different suites run in parallel; a file lock per tag keeps concurrent fleets (other
engineers, other pytest sessions) from building the same image twice.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from .model import DRIVER_PACKAGES, SUITE_DRIVER, engine_packages

SIM_DIR = Path(__file__).resolve().parent
BUILD_DIR = SIM_DIR / "build"
MIRROR = "http://deb.debian.org/debian"
COMPONENTS = "main,contrib,non-free,non-free-firmware"
INCLUDE = [
    "systemd",
    "systemd-sysv",
    "dbus",
    "python3",
    "python3-apt",  # the ansible apt module
    "ca-certificates",
    "iproute2",
    "kmod",
    "procps",
    "pciutils",
    "libcap2-bin",
    "xz-utils",
]
# Suites the node's apt sources name: the suite (and its -updates), never -security, so the NVIDIA
# packages stay at the versions model.SUITE_DRIVER (and the stub) report.
APT_SUITES = {"bookworm": ["bookworm", "bookworm-updates"], "trixie": ["trixie", "trixie-updates"], "sid": ["sid"]}
BASE_RECIPE_VERSION = "3"
NODE_RECIPE_VERSION = "3"
LABEL = "gpufleet.sim.image"


def log(msg: str) -> None:
    print(f"[sim] {msg}", file=sys.stderr, flush=True)


def docker(*args: str, check: bool = True, capture: bool = True, **kw: Any) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], check=check, capture_output=capture, text=True, **kw)


def image_exists(tag: str) -> bool:
    return docker("image", "inspect", tag, check=False).returncode == 0


def _hash(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:12]


def _base_post_setup(suite: str) -> str:
    lines = "\n".join(f"deb {MIRROR} {s} {COMPONENTS.replace(',', ' ')}" for s in APT_SUITES[suite])
    return f"""\
cat > etc/apt/sources.list <<'EOS'
{lines}
EOS
cat > etc/apt/apt.conf.d/90gpufleet-sim <<'EOS'
APT::Install-Recommends "false";
APT::Install-Suggests "false";
Acquire::Languages "none";
EOS
rm -rf var/lib/apt/lists/* var/cache/apt/*.bin
: > etc/machine-id
rm -f var/lib/dbus/machine-id
echo 'gpufleet-sim' > etc/hostname
"""


def base_tag(suite: str) -> str:
    digest = _hash(
        {
            "v": BASE_RECIPE_VERSION,
            "suite": suite,
            "include": INCLUDE,
            "mirror": MIRROR,
            "post": _base_post_setup(suite),
        }
    )
    return f"gpufleet-sim/base:{suite}-{digest}"


def node_packages(suite: str, engines: list[str], driver_packages: bool) -> list[str]:
    pkgs: list[str] = []
    for engine in engines:
        pkgs += engine_packages(suite, engine)
    if driver_packages:
        pkgs += DRIVER_PACKAGES
    return pkgs


def _divert_script(suite: str) -> str:
    version = SUITE_DRIVER[suite]["driver_version"]
    path = f"/usr/lib/x86_64-linux-gnu/nvidia/current/libnvidia-ml.so.{version}"
    # Debian's libnvidia-ml1 ships the library as nvidia/current/libnvidia-ml.so.<version> (the
    # libnvidia-ml.so.1 names are symlinks to it, the multiarch one an update-alternatives link):
    # divert that file before the package lands, so every name resolves to the stub put there.
    return f"mkdir -p {os.path.dirname(path)} && dpkg-divert --local --add --rename --divert {path}.real {path}\n"


def _node_script(suite: str, pkgs: list[str], driver_packages: bool) -> str:
    return (
        "set -eu\nexport DEBIAN_FRONTEND=noninteractive\n"
        "printf '#!/bin/sh\\nexit 101\\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d\n"
        # sid's Release carries Valid-Until; a build machine's clock that is off must not stop apt.
        "echo 'Acquire::Check-Valid-Until \"false\";' > /etc/apt/apt.conf.d/91gpufleet-sim-valid-until\n"
        "apt-get update -qq\n"
        + (_divert_script(suite) if driver_packages else "")
        + (f"apt-get install -y -qq --no-install-recommends {' '.join(pkgs)} >/dev/null\n" if pkgs else "")
        + "rm -f /usr/sbin/policy-rc.d\nrm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin\n"
    )


def node_tag(suite: str, engines: list[str], driver_packages: bool) -> str:
    pkgs = node_packages(suite, engines, driver_packages)
    variant = "-".join(engines) or "noengine"
    if driver_packages:
        variant += "-drv"
    digest = _hash(
        {"v": NODE_RECIPE_VERSION, "base": base_tag(suite), "script": _node_script(suite, pkgs, driver_packages)}
    )
    return f"gpufleet-sim/node:{suite}-{variant}-{digest}"


@contextmanager
def _lock(tag: str) -> Iterator[None]:
    locks = BUILD_DIR / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    with open(locks / (tag.replace("/", "_").replace(":", "_") + ".lock"), "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def build_base(suite: str) -> str:
    tag = base_tag(suite)
    with _lock(tag):
        if image_exists(tag):
            return tag
        start = time.monotonic()
        cache = BUILD_DIR / "debs" / suite
        cache.mkdir(parents=True, exist_ok=True)
        (BUILD_DIR / "rootfs").mkdir(parents=True, exist_ok=True)
        root = Path(tempfile.mkdtemp(prefix=f"{suite}-", dir=BUILD_DIR / "rootfs"))
        try:
            log(f"debootstrap {suite} -> {tag}")
            cmd = [
                "debootstrap",
                "--variant=minbase",
                f"--components={COMPONENTS}",
                f"--include={','.join(INCLUDE)}",
                f"--cache-dir={cache}",
                suite,
                str(root),
                MIRROR,
            ]
            res = subprocess.run(cmd, check=False, capture_output=True, text=True)
            if res.returncode != 0:
                tail = "\n".join((res.stdout + res.stderr).splitlines()[-30:])
                debootstrap_log = root / "debootstrap/debootstrap.log"
                if debootstrap_log.exists():
                    tail += "\n" + "\n".join(debootstrap_log.read_text(errors="replace").splitlines()[-30:])
                raise RuntimeError(f"debootstrap {suite} failed (rc {res.returncode}):\n{tail}")
            subprocess.run(["sh", "-euc", _base_post_setup(suite)], cwd=root, check=True)
            tar = subprocess.Popen(["tar", "--numeric-owner", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
            imp = subprocess.run(
                [
                    "docker",
                    "import",
                    "--change",
                    'CMD ["/sbin/init"]',
                    "--change",
                    "ENV container=docker",
                    "--change",
                    f"LABEL {LABEL}={suite}",
                    "-",
                    tag,
                ],
                stdin=tar.stdout,
                check=False,
                capture_output=True,
                text=True,
            )
            tar.stdout.close()  # so tar ends (SIGPIPE) rather than blocks when the import fails
            tar.wait()
            if imp.returncode != 0 or tar.returncode != 0:
                raise RuntimeError(f"docker import of {suite} failed: {imp.stderr.strip()}")
        finally:
            shutil.rmtree(root, ignore_errors=True)
        log(f"built {tag} in {time.monotonic() - start:.0f}s")
        return tag


def build_node_image(suite: str, engines: list[str], driver_packages: bool) -> str:
    base = build_base(suite)
    tag = node_tag(suite, engines, driver_packages)
    with _lock(tag):
        if image_exists(tag):
            return tag
        start = time.monotonic()
        pkgs = node_packages(suite, engines, driver_packages)
        log(f"installing {' '.join(pkgs) or 'nothing'} on {suite} -> {tag}")
        cache = BUILD_DIR / "debs" / suite
        cache.mkdir(parents=True, exist_ok=True)
        name = f"gpufleet-sim-build-{os.getpid()}-{suite}-{int(time.time() * 1000) % 10**8}"
        try:
            res = docker(
                "run",
                "--name",
                name,
                "--label",
                f"{LABEL}.build=1",
                "--network",
                "host",  # no bridge needed (nor one another engine on this host may remove)
                "-v",
                f"{cache}:/var/cache/apt/archives",
                base,
                "sh",
                "-c",
                _node_script(suite, pkgs, driver_packages),
                check=False,
            )
            if res.returncode != 0:
                raise RuntimeError(f"building {tag} failed:\n{res.stdout[-3000:]}{res.stderr[-3000:]}")
            docker(
                "commit",
                "--change",
                'CMD ["/sbin/init"]',
                "--change",
                f"LABEL {LABEL}={suite}",
                name,
                tag,
            )
        finally:
            docker("rm", "-f", name, check=False)
        log(f"built {tag} in {time.monotonic() - start:.0f}s")
        return tag


def packaged_driver_version(tag: str) -> str | None:
    """The upstream version of Debian's libnvidia-ml1 installed in a node image (`535.261.03`), else None.

    A `driver_packages` node simulates exactly that driver: Debian moves the point release, and the image
    has whatever the suite had when it was built, so the version is read from the image, never assumed."""
    res = docker(
        "run", "--rm", "--network", "none", "--entrypoint", "dpkg-query", tag,
        "-W", "-f", "${db:Status-Status} ${Version}", "libnvidia-ml1",
        check=False,
    )  # fmt: skip
    status, _sep, version = res.stdout.strip().partition(" ")
    if res.returncode != 0 or status != "installed" or not version:
        return None
    return version.split(":", 1)[-1].rsplit("-", 1)[0]


def ensure_images(variants: list[tuple[str, tuple[str, ...], bool]]) -> dict[tuple[str, tuple[str, ...], bool], str]:
    """Build what is missing, suites in parallel; -> {(suite, engines, driver_packages): tag}."""
    variants = sorted(set(variants))
    with ThreadPoolExecutor(max_workers=max(1, len(variants))) as pool:
        futures = {v: pool.submit(build_node_image, v[0], list(v[1]), v[2]) for v in variants}
        return {v: f.result() for v, f in futures.items()}


def main(argv: list[str]) -> int:
    suites = argv or ["bookworm", "trixie", "sid"]
    from .model import SUITE_ENGINES

    tags = ensure_images([(s, tuple(SUITE_ENGINES[s]), False) for s in suites])
    for tag in tags.values():
        print(tag)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
