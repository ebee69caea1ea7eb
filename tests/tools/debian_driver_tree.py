# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Build the real Debian 12 NVIDIA 535 driver tree as a test fixture (never committed).

Downloads Debian's own ``.deb``s of the driver userspace with ``apt-get download`` (a private sources
list with ``contrib non-free``, so the machine's apt setup is untouched), extracts them, recreates the
links that the packages' maintainer scripts would make through update-alternatives (absolute links via
``/etc/alternatives``, exactly as on an installed system), writes ``/etc/ld.so.conf`` and runs the real
``ldconfig -r`` on the tree so its ``/etc/ld.so.cache`` is the one glibc would write.

    python tests/tools/debian_driver_tree.py DEST   # prints the driver version

The result is cached: a tree whose recipe stamp matches is reused. Concurrent builders (pytest-xdist
workers) take one lock beside the tree: the first builds, the others wait and reuse its tree, so no worker
replaces a tree another one is reading.
"""

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile

SUITE = "bookworm"
PACKAGES = (  # noqa: SIM905
    "firmware-nvidia-gsp libcuda1 libegl-nvidia0 libgl1-nvidia-glvnd-glx libgles-nvidia2 libglx-nvidia0 libnvcuvid1 "
    "libnvidia-allocator1 libnvidia-cfg1 libnvidia-eglcore libnvidia-encode1 libnvidia-fbc1 libnvidia-glcore "
    "libnvidia-glvkspirv libnvidia-ml1 libnvidia-nvvm4 libnvidia-opticalflow1 libnvidia-pkcs11-openssl3 "
    "libnvidia-ptxjitcompiler1 libnvidia-rtcore libnvoptix1 nvidia-alternative nvidia-cuda-mps nvidia-egl-icd "
    "nvidia-opencl-icd nvidia-persistenced nvidia-smi nvidia-vulkan-icd nvidia-egl-common nvidia-vulkan-common "
    "nvidia-opencl-common"
).split()
MULTIARCH = "x86_64-linux-gnu"
LD_SO_CONF = f"/usr/local/lib\n/lib/{MULTIARCH}\n/usr/lib/{MULTIARCH}\n"


def _recipe_stamp():
    with open(__file__, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:16]


def _apt(cache, *args):
    sources = os.path.join(cache, "sources.list")
    with open(sources, "w") as f:
        for suite, url in ((SUITE, "debian"), (SUITE + "-updates", "debian"), (SUITE + "-security", "debian-security")):
            f.write(f"deb http://deb.debian.org/{url} {suite} main contrib non-free non-free-firmware\n")
    for d in ("lists/partial", "archives/partial"):
        os.makedirs(os.path.join(cache, d), exist_ok=True)
    options = [
        "-o", "Dir::Etc::SourceList=" + sources,
        "-o", "Dir::Etc::SourceParts=/dev/null",
        "-o", "Dir::State::Lists=" + os.path.join(cache, "lists"),
        "-o", "Dir::Cache=" + cache,
        "-o", "Debug::NoLocking=1",
        "-o", "APT::Sandbox::User=root",
    ]  # fmt: skip
    return subprocess.run(["apt-get", "-qq", *options, *args], check=True, capture_output=True, text=True)


def _alternative_links(postinst_text):
    """(link, target) pairs the nvidia-alternative postinst registers for this architecture."""
    links = []
    for raw in postinst_text.splitlines():
        line = raw.strip()
        m = re.match(r"\$\(add_multiarch_slave /usr/lib \"?([^\" ]*)\"? (\S+) /usr/lib nvidia/current/\)", line)
        if m:
            subdir, name = m.groups()
            links.append((f"/usr/lib/{MULTIARCH}/{subdir}{name}", f"/usr/lib/{MULTIARCH}/nvidia/current/{name}"))
            continue
        m = re.match(r"update-alternatives --install (\S+) nvidia (/usr/lib/nvidia/current) ", line)
        if m:  # the master link: /usr/lib/nvidia/nvidia -> /etc/alternatives/nvidia -> current
            links.append((m.group(1), m.group(2)))
            continue
        m = re.match(r"\$\(add_slave (\S+) \S+ (\S+)\)", line)
        if m:
            links.append((m.group(1), m.group(2)))
    return links


def _built_version(dest):
    """The version of the tree at ``dest`` when it was built by this recipe, else None."""
    stamp_file = os.path.join(dest, ".gpufleet-fixture")
    if not os.path.exists(stamp_file):
        return None
    with open(stamp_file) as f:
        stamp, version = f.read().split()
    return version if stamp == _recipe_stamp() else None


def build(dest):
    """Build (or reuse) the tree at ``dest``; return the driver version."""
    version = _built_version(dest)
    if version:
        return version
    parent = os.path.dirname(os.path.abspath(dest))
    os.makedirs(parent, exist_ok=True)
    with open(os.path.join(parent, ".build.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        return _built_version(dest) or _build(dest)


def _build(dest):
    cache = os.path.join(os.path.dirname(os.path.abspath(dest)), "apt-cache")
    os.makedirs(cache, exist_ok=True)
    _apt(cache, "update")
    work = tempfile.mkdtemp(prefix="nvtree-", dir=os.path.dirname(os.path.abspath(dest)))
    try:
        debs = os.path.join(work, "debs")
        os.makedirs(debs)
        subprocess.run(
            ["apt-get", "-qq", "download", *PACKAGES],
            check=True, capture_output=True, cwd=debs,
            env=dict(os.environ, APT_CONFIG=_apt_config(cache)),
        )  # fmt: skip
        root = os.path.join(work, "root")
        for deb in sorted(os.listdir(debs)):
            subprocess.run(["dpkg-deb", "-x", os.path.join(debs, deb), root], check=True)
        ctl = os.path.join(work, "ctl")
        alt = next(d for d in os.listdir(debs) if d.startswith("nvidia-alternative_"))
        subprocess.run(["dpkg-deb", "-e", os.path.join(debs, alt), ctl], check=True)
        version = re.match(r"nvidia-alternative_([0-9.]+)-", alt).group(1)
        with open(os.path.join(ctl, "postinst")) as f:
            links = _alternative_links(f.read())
        for link, target in links:
            if not os.path.lexists(os.path.join(root, target.lstrip("/"))):
                continue  # a slave for a package this fixture does not install
            name = os.path.basename(link) + ("-" + MULTIARCH if MULTIARCH in link else "")
            if link == "/usr/lib/nvidia/nvidia":
                name = "nvidia"
            alternative = "/etc/alternatives/" + name
            _symlink(root, alternative, target)
            _symlink(root, link, alternative)
        os.makedirs(os.path.join(root, "etc"), exist_ok=True)
        with open(os.path.join(root, "etc", "ld.so.conf"), "w") as f:
            f.write(LD_SO_CONF)
        subprocess.run(["ldconfig", "-r", root], check=True)
        with open(os.path.join(root, ".gpufleet-fixture"), "w") as f:
            f.write(f"{_recipe_stamp()} {version}\n")
        if os.path.exists(dest):
            shutil.rmtree(dest)
        os.rename(root, dest)
        return version
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _apt_config(cache):
    path = os.path.join(cache, "apt.conf")
    with open(path, "w") as f:
        f.write(
            'Dir::Etc::SourceList "{}";\nDir::Etc::SourceParts "/dev/null";\nDir::State::Lists "{}";\n'
            'Dir::Cache "{}";\nDebug::NoLocking "1";\nAPT::Sandbox::User "root";\n'.format(
                os.path.join(cache, "sources.list"), os.path.join(cache, "lists"), cache
            )
        )
    return path


def _symlink(root, link, target):
    full = os.path.join(root, link.lstrip("/"))
    os.makedirs(os.path.dirname(full), exist_ok=True)
    if os.path.lexists(full):
        os.unlink(full)
    os.symlink(target, full)


if __name__ == "__main__":
    print(build(sys.argv[1]))
