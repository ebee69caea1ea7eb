# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Crafted images and canaries for ``test_security_e2e.py``; runs INSIDE a simulated GPU node (python3, stdlib).

Copied into the node and run there as ``python3 _security_images.py <command> ...``:

* ``build --preload SO --canary-lib SO [--ctr NAMESPACE] [--podman]``: one pass that makes every crafted image of
  ``ATTACKS`` from ``gpufleet-sim/mini:latest`` (its single layer, taken from ``docker save``, python
  stripped), ``docker import``s each as ``gpufleet-sec/<attack>:latest`` (``docker load`` of a hand-made archive
  where an ENV value is longer than an argument may be) and, with ``--ctr``/``--podman``, loads them all
  into containerd / podman from one ``docker save``. No registry, no Dockerfile. The crafted ``ld.so.cache``
  files are written here (``ld_cache``: the new format, in ldconfig's order).
* ``reset ATTACK``: recreate the attack's canary (``/var/tmp/gpufleet-canary-<attack>`` on the node, the
  "host"), then print ``snapshot``'s JSON.
* ``snapshot ATTACK``: JSON of the canary's exact listing (every entry: type, mode, size, mtime in ns, link
  target, sha256 of files), the other names in ``/var/tmp`` and the node's own ld caches.
* ``unblock ATTACK``: open for writing every FIFO the attack planted that a process on the node is stuck
  on (seen through ``/proc/<pid>/root`` and the container root folders), so a hung start ends and can be
  cleaned up; prints what it opened.
* ``clean [--ctr NAMESPACE] [--podman]``: remove the images and the canaries.

The attack content points at the canary through ``/proc/1/root/var/tmp/gpufleet-canary-<attack>``: inside a
started container ``/proc/1/root`` is the container's own root (where that path does not exist, or holds
the image's own copy of what it replaced), but for a root process on the host side before
``pivot_root`` (a hook, or ``ldconfig -r`` chrooted into the container root with the container's
``/proc`` mounted) it is the host's ``/``.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import io
import json
import os
import shutil
import stat
import struct
import subprocess
import sys
import tarfile
import tempfile
import time

SOURCE_IMAGE = "gpufleet-sim/mini:latest"
REPOSITORY = "gpufleet-sec"
CANARY_PREFIX = "/var/tmp/gpufleet-canary-"
ESCAPE = "/proc/1/root"  # from a host-side process in the container's mount namespace: the host's /
LIBDIR = "usr/lib/x86_64-linux-gnu"
CANARY_LIB = "libgfcanary.so.1.0"  # SONAME libgfcanary.so.1: what ldconfig links when it scans the canary
VICTIM = "victim"
VICTIM_TEXT = b"gpufleet canary: this file must never change\n"
DEFAULT_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# attack -> (issue class, what the image plants). The canary of each is CANARY_PREFIX + attack.
ATTACKS = {
    "conf-line": (1, "a line /proc/1/root/<canary> in /etc/ld.so.conf"),
    "conf-include": (1, "a line /proc/1/root/<canary> in /etc/ld.so.conf.d/zz-gpufleet-sec.conf (included)"),
    "libdir": (2, "/usr/lib/x86_64-linux-gnu -> /proc/1/root/<canary> (the image's libraries moved there)"),
    "libdir-lib64": (2, "/usr/lib64 -> /proc/1/root/<canary> (the loader moved there)"),
    "etc-link": (3, "/etc -> /proc/1/root/<canary> (the image's /etc moved there)"),
    "auxcache-link": (3, "/var/cache -> /proc/1/root/<canary> (ldconfig's aux cache folder)"),
    "cache-link": (4, "/etc/ld.so.cache -> /proc/1/root/<canary>/victim"),
    "fifo-conf": (5, "/etc/ld.so.conf is a FIFO"),
    "fifo-cache": (5, "/etc/ld.so.cache is a FIFO"),
    "env": (6, "ENV LD_PRELOAD, PYTHONPATH, PYTHONSTARTUP, PYTHONHOME pointing into the image"),
    "newline-name": (7, "/etc/ld.so.conf.d -> a FILE whose name holds a newline and a forged log line"),
    "caps-huge": (8, "ENV NVIDIA_DRIVER_CAPABILITIES of 1 MiB"),
    "ldcache-digits": (9, "/etc/ld.so.cache with an entry libcuda.so.<300,000 digits>"),
    "ldcache-equal": (9, "/etc/ld.so.cache with 4,000 value-equal libcuda.so.0...01 names (8 MiB of zeros)"),
    "ldcache-offsets": (9, "/etc/ld.so.cache whose entries' string offsets point outside the file (0xFFFFFFF0)"),
}
FIFOS = {"fifo-conf": "etc/ld.so.conf", "fifo-cache": "etc/ld.so.cache"}
# What the newline-name image makes an error message carry after its newline: a line of runc's text log. It must
# never start a line of the engine's output or log.
FORGED = 'FORGED-GPUFLEET-LINE time="2026-01-01T00:00:00Z" level=info msg="container started"'
NEWLINE_NAME = "gf-lib\n" + FORGED
HUGE_CAPS = "compute," * (1 << 17)  # 1 MiB: over any argv string (MAX_ARG_STRLEN), so the image is built by docker load
MARKER_PY = """import os
try:
    _name = "escaped-python-%s-%d" % (os.path.basename(__file__), os.getpid())
    with open(os.path.join("/proc/1/root/var/tmp/gpufleet-canary-env", _name), "x") as _f:
        _f.write("run by a python process that honoured the image's PYTHON* variables\\n")
except OSError:
    pass
"""


def canary(attack: str) -> str:
    return CANARY_PREFIX + attack


def image(attack: str) -> str:
    return f"{REPOSITORY}/{attack}:latest"


# -- crafted ld.so.cache files (the new format, as plugins/module_utils/cdi/ldcache.py documents it) ------------
def _libcmp_key(name: bytes) -> list:
    """glibc's ``_dl_cache_libcmp`` order as a sort key (digit runs as numbers, without int(): 300,000 digits)."""
    key, i = [], 0
    while i < len(name):
        if 48 <= name[i] <= 57:
            j = i
            while j < len(name) and 48 <= name[j] <= 57:
                j += 1
            digits = name[i:j].lstrip(b"0") or b"0"
            key.append((1, len(digits), digits))
            i = j
        else:
            key.append((0, name[i] - 256 if name[i] > 127 else name[i], b""))
            i += 1
    return key


def ld_cache(names: list[bytes], key_offset: int | None = None) -> bytes:
    """A new-format ``ld.so.cache`` (48-byte header, 24-byte entries, strings after the table) of x86-64
    libraries ``names``, each at ``/usr/lib/x86_64-linux-gnu/<name>`` (a name longer than a file name may be at
    ``long-<i>.so``), in ldconfig's order (names descending by libcmp; equal names as given); ``key_offset``
    replaces every entry's name offset (one outside the file)."""
    names = sorted(names, key=_libcmp_key, reverse=True)
    table = 48 + 24 * len(names)
    strings = bytearray()
    rows = []
    for i, name in enumerate(names):
        key = table + len(strings)
        strings += name + b"\0"
        value = table + len(strings)
        strings += b"/usr/lib/x86_64-linux-gnu/" + (name if len(name) <= 255 else b"long-%d.so" % i) + b"\0"
        rows.append(struct.pack("<iIIIQ", 0x0303, key if key_offset is None else key_offset, value, 0, 0))
    head = struct.pack("<17s3sIIB3xI12x", b"glibc-ld.so.cache", b"1.1", len(names), len(strings), 2, 0)
    return head + b"".join(rows) + bytes(strings)


LD_CACHES = {
    "ldcache-digits": lambda: ld_cache([b"libcuda.so." + b"7" * 300_000, b"libc.so.6", b"libm.so.6"]),
    "ldcache-equal": lambda: ld_cache(
        [b"libcuda.so." + b"0" * (4000 - i) + b"1" for i in range(4000)] + [b"libc.so.6"]
    ),
    "ldcache-offsets": lambda: ld_cache([b"libz.so.1"] * 1000 + [b"libc.so.6"], key_offset=0xFFFFFFF0),
}
MAX_CACHE_BYTES = 8 << 20  # the hook's bound: each crafted cache is within it, so it is read and parsed


def _run(argv: list[str], **kw) -> subprocess.CompletedProcess:
    res = subprocess.run(argv, check=False, capture_output=True, **kw)
    if res.returncode != 0:
        err = res.stderr.decode(errors="replace") if isinstance(res.stderr, bytes) else res.stderr
        raise SystemExit(f"{' '.join(argv[:4])} failed (rc {res.returncode}): {err.strip()}")
    return res


# -- images ---------------------------------------------------------------------------------------------
class Layer:
    """The files of a one-layer image: ordered {path: (TarInfo, bytes or None)}, paths without ``./``."""

    def __init__(self, entries: dict[str, tuple[tarfile.TarInfo, bytes | None]]) -> None:
        self.entries = entries

    def copy(self) -> Layer:
        return Layer({k: (_clone(i), d) for k, (i, d) in self.entries.items()})

    def add(self, path: str, kind: bytes, data: bytes | None = None, mode: int = 0o644, link: str = "") -> None:
        info = tarfile.TarInfo(path)
        info.type = kind
        info.mode = mode
        info.mtime = int(time.time())
        info.linkname = link
        if data is not None:
            info.size = len(data)
        self.entries.pop(path, None)
        parent = os.path.dirname(path)
        if parent and parent not in self.entries:
            self.add(parent, tarfile.DIRTYPE, mode=0o755)
        self.entries[path] = (info, data)

    def move_tree(self, src: str, dest: str) -> None:
        """Everything under ``src`` goes under ``dest`` (hard link targets follow); ``src`` itself is dropped."""

        def moved(path: str) -> str:
            return dest + path[len(src) :] if path == src or path.startswith(src + "/") else path

        self.add(dest, tarfile.DIRTYPE, mode=0o755)
        result = {}
        for path, (info, data) in self.entries.items():
            if path == src:
                continue
            new = moved(path)
            info.name = new
            if info.type == tarfile.LNKTYPE:
                info.linkname = moved(_relative(info.linkname))
            result[new] = (info, data)
        self.entries = result

    def tar(self) -> bytes:
        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as t:
            for info, data in self.entries.values():
                t.addfile(info, io.BytesIO(data) if data is not None else None)
        return out.getvalue()


def _relative(name: str) -> str:
    while name.startswith("./"):
        name = name[2:]
    return name.strip("/")


def _clone(info: tarfile.TarInfo) -> tarfile.TarInfo:
    new = tarfile.TarInfo(info.name)
    for attr in ("size", "mtime", "mode", "type", "linkname", "uid", "gid", "uname", "gname", "devmajor", "devminor"):
        setattr(new, attr, getattr(info, attr))
    new.pax_headers = dict(info.pax_headers)
    return new


def load_source(tag: str, work: str) -> Layer:
    """The single layer of ``tag`` (``docker save``: docker 20.10's layout or the OCI one of docker 25+)."""
    save = os.path.join(work, "source.tar")
    with open(save, "wb") as f:
        subprocess.run(["docker", "save", tag], check=True, stdout=f)
    with tarfile.open(save) as outer:
        manifest = json.load(outer.extractfile("manifest.json"))
        layers = manifest[0]["Layers"]
        if len(layers) != 1:
            raise SystemExit(f"{tag}: expected one layer, found {len(layers)}")
        blob = outer.extractfile(layers[0]).read()
    entries: dict[str, tuple[tarfile.TarInfo, bytes | None]] = {}
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:*") as layer:
        for info in layer:
            name = _relative(info.name)
            if not name or name == ".":
                continue
            # No python in the crafted images: nothing there needs it, and they stay small.
            if name.startswith(("usr/lib/python3", "usr/bin/python3")):
                continue
            info.name = name
            if info.type == tarfile.LNKTYPE:
                info.linkname = _relative(info.linkname)
            data = layer.extractfile(info).read() if info.isreg() else None
            entries[name] = (info, data)
    return Layer(entries)


def craft(attack: str, base: Layer, preload: bytes) -> tuple[Layer, list[str]]:
    """The image of ``attack``: (its files, its ENV lines)."""
    layer = base.copy()
    env = [DEFAULT_PATH]
    target = ESCAPE + canary(attack)
    in_image = canary(attack).lstrip("/")  # the image's own copy, where /proc/1/root leads once started
    if attack == "conf-line":
        conf = (layer.entries["etc/ld.so.conf"][1] or b"").rstrip(b"\n") + b"\n" + target.encode() + b"\n"
        layer.add("etc/ld.so.conf", tarfile.REGTYPE, conf)
    elif attack == "conf-include":
        conf = layer.entries["etc/ld.so.conf"][1] or b""
        if b"include /etc/ld.so.conf.d/*.conf" not in conf:
            layer.add("etc/ld.so.conf", tarfile.REGTYPE, b"include /etc/ld.so.conf.d/*.conf\n" + conf)
        layer.add("etc/ld.so.conf.d/zz-gpufleet-sec.conf", tarfile.REGTYPE, target.encode() + b"\n")
    elif attack == "libdir":
        layer.move_tree(LIBDIR, in_image)
        layer.add(LIBDIR, tarfile.SYMTYPE, link=target, mode=0o777)
    elif attack == "libdir-lib64":
        layer.move_tree("usr/lib64", in_image)
        layer.add("usr/lib64", tarfile.SYMTYPE, link=target, mode=0o777)
    elif attack == "etc-link":
        layer.move_tree("etc", in_image)
        layer.add("etc", tarfile.SYMTYPE, link=target, mode=0o777)
    elif attack == "auxcache-link":
        layer.add("var/cache", tarfile.SYMTYPE, link=target, mode=0o777)
    elif attack == "cache-link":
        layer.add("etc/ld.so.cache", tarfile.SYMTYPE, link=target + "/" + VICTIM, mode=0o777)
    elif attack in FIFOS:
        layer.add(FIFOS[attack], tarfile.FIFOTYPE, mode=0o644)
    elif attack == "newline-name":
        # A folder only our code writes into (the engines mount nothing there, so their own errors do not name it).
        layer.move_tree("etc/ld.so.conf.d", "gf-conf.d")  # files left under a link would be lost by docker save
        layer.add(NEWLINE_NAME, tarfile.REGTYPE, b"a file, not a folder\n")
        layer.add("etc/ld.so.conf.d", tarfile.SYMTYPE, link="/" + NEWLINE_NAME, mode=0o777)
    elif attack == "caps-huge":
        env.append("NVIDIA_DRIVER_CAPABILITIES=" + HUGE_CAPS)
    elif attack in LD_CACHES:
        data = LD_CACHES[attack]()
        assert len(data) <= MAX_CACHE_BYTES, (attack, len(data))
        layer.add("etc/ld.so.cache", tarfile.REGTYPE, data)
    elif attack == "env":
        layer.add("gfcanary.so", tarfile.REGTYPE, preload, mode=0o755)
        for name in ("sitecustomize.py", "usercustomize.py", "startup.py", "struct.py", "json.py", "encodings.py"):
            layer.add("gfpy/" + name, tarfile.REGTYPE, MARKER_PY.encode())
        layer.add("gfhome/lib", tarfile.DIRTYPE, mode=0o755)
        # The host side runs with its cwd in the bundle or the container root: reach the image through it too.
        roots = ("", "/proc/self/cwd", "/proc/self/cwd/rootfs")
        env += [
            "LD_PRELOAD=" + ":".join(r + "/gfcanary.so" for r in roots),
            "PYTHONPATH=" + ":".join(r + "/gfpy" for r in roots),
            "PYTHONSTARTUP=/proc/self/cwd/gfpy/startup.py",
            "PYTHONHOME=/proc/self/cwd/gfhome",
            "PYTHONUSERBASE=/proc/self/cwd/gfhome",
        ]
    else:
        raise SystemExit(f"unknown attack {attack!r}")
    return layer, env


def build(args: argparse.Namespace) -> None:
    with open(args.preload, "rb") as f:
        preload = f.read()
    work = tempfile.mkdtemp(prefix="gpufleet-sec-")
    try:
        base = load_source(SOURCE_IMAGE, work)
        tags = []
        for attack in ATTACKS:
            layer, env = craft(attack, base, preload)
            if sum(len(e) for e in env) > 64 << 10:  # too long for one argv string: a hand-made docker save archive
                _docker_load(image(attack), layer.tar(), env, work)
            else:
                changes = []
                for item in env:
                    changes += ["--change", "ENV " + item]
                _run(["docker", "import", *changes, "-", image(attack)], input=layer.tar())
            tags.append(image(attack))
        print("docker: " + " ".join(tags))
        save = os.path.join(work, "crafted.tar")
        if args.ctr or args.podman:
            with open(save, "wb") as f:
                subprocess.run(["docker", "save", *tags], check=True, stdout=f)
        if args.ctr:
            _run(["ctr", "-n", args.ctr, "images", "import", save])
            print(f"containerd ({args.ctr}): " + " ".join(tags))
        if args.podman:
            _run(["podman", "load", "-i", save])
            print("podman: " + " ".join(tags))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for attack in ATTACKS:
        reset_canary(attack, args.canary_lib)


def _docker_load(tag: str, layer: bytes, env: list[str], work: str) -> None:
    """``docker load`` of a one-layer image in docker save's own format (``manifest.json``, the config, the layer):
    how an image gets an ENV value longer than an argument of ``docker import --change`` may be."""
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Env": env, "Cmd": ["sh"]},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created_by": "gpufleet-sec"}],
    }
    config_bytes = json.dumps(config).encode()
    config_name = hashlib.sha256(config_bytes).hexdigest() + ".json"
    manifest = json.dumps([{"Config": config_name, "RepoTags": [tag], "Layers": ["layer/layer.tar"]}]).encode()
    archive = os.path.join(work, "load.tar")
    with tarfile.open(archive, "w") as t:
        for name, data in (("manifest.json", manifest), (config_name, config_bytes), ("layer/layer.tar", layer)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = int(time.time())
            t.addfile(info, io.BytesIO(data))
    _run(["docker", "load", "-i", archive])


# -- canaries ---------------------------------------------------------------------------------------------
def reset_canary(attack: str, canary_lib: str) -> None:
    path = canary(attack)
    shutil.rmtree(path, ignore_errors=True)
    if os.path.lexists(path):
        os.unlink(path)
    os.makedirs(path, 0o755)
    shutil.copyfile(canary_lib, os.path.join(path, CANARY_LIB))
    os.chmod(os.path.join(path, CANARY_LIB), 0o644)
    with open(os.path.join(path, VICTIM), "wb") as f:
        f.write(VICTIM_TEXT)
    os.makedirs(os.path.join(path, "sub"), 0o755)
    # Old, distinct mtimes: any rewrite (same content or not) shows.
    for i, name in enumerate((CANARY_LIB, VICTIM, "sub", "")):
        os.utime(os.path.join(path, name), ns=(1_000_000_000 * (1000 + i),) * 2)


def _entry(path: str) -> dict:
    st = os.lstat(path)
    kind = stat.S_IFMT(st.st_mode)
    item = {
        "type": {stat.S_IFREG: "file", stat.S_IFDIR: "dir", stat.S_IFLNK: "link", stat.S_IFIFO: "fifo"}.get(
            kind, oct(kind)
        ),
        "mode": oct(stat.S_IMODE(st.st_mode)),
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
    }
    if kind == stat.S_IFLNK:
        item["target"] = os.readlink(path)
    elif kind == stat.S_IFREG:
        with open(path, "rb") as f:
            item["sha256"] = hashlib.sha256(f.read()).hexdigest()[:16]
    return item


def snapshot(attack: str) -> dict:
    root = canary(attack)
    listing = {}
    if os.path.lexists(root):
        listing["."] = _entry(root)
        for dirpath, dirnames, filenames in os.walk(root):
            for name in dirnames + filenames:
                full = os.path.join(dirpath, name)
                listing[os.path.relpath(full, root)] = _entry(full)
    host = {}
    for path in ("/etc/ld.so.cache", "/var/cache/ldconfig/aux-cache"):
        host[path] = _entry(path) if os.path.lexists(path) else None
    # systemd's PrivateTmp folders come and go with services; they are not what an attack names.
    others = sorted(n for n in os.listdir("/var/tmp") if not n.startswith(("gpufleet-canary-", "systemd-private-")))
    return {"canary": listing, "host": host, "var_tmp": others}


# -- hung starts --------------------------------------------------------------------------------------------
def unblock(attack: str) -> list[str]:
    """Open for writing (then close) the attack's FIFO wherever a container root of the node shows it."""
    rel = FIFOS.get(attack)
    if not rel:
        return []
    candidates = set(glob.glob("/proc/[0-9]*/root/" + rel))
    candidates.update(glob.glob("/run/containerd/io.containerd.runtime.v2.task/*/*/rootfs/" + rel))
    candidates.update(glob.glob("/var/lib/docker/overlay2/*/merged/" + rel))
    candidates.update(glob.glob("/var/lib/containers/storage/overlay/*/merged/" + rel))
    opened = []
    for path in sorted(candidates):
        try:
            if not stat.S_ISFIFO(os.stat(path).st_mode):
                continue
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)  # ENXIO when nobody is reading: nothing to do
        except OSError:
            continue
        os.close(fd)  # the reader's open() returns, its read() gets EOF
        opened.append(path)
    return opened


def clean(args: argparse.Namespace) -> None:
    tags = [image(a) for a in ATTACKS]
    subprocess.run(["docker", "rmi", "-f", *tags], check=False, capture_output=True)
    if args.ctr:
        refs = ["docker.io/" + t for t in tags]
        subprocess.run(["ctr", "-n", args.ctr, "images", "rm", *refs], check=False, capture_output=True)
    if args.podman:
        subprocess.run(["podman", "rmi", "-f", *tags], check=False, capture_output=True)
    for attack in ATTACKS:
        shutil.rmtree(canary(attack), ignore_errors=True)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="_security_images.py")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("build")
    p.add_argument("--preload", required=True)
    p.add_argument("--canary-lib", required=True)
    p.add_argument("--ctr", default="")
    p.add_argument("--podman", action="store_true")
    for name in ("reset", "snapshot", "unblock"):
        p = sub.add_parser(name)
        p.add_argument("attack", choices=sorted(ATTACKS))
        if name == "reset":
            p.add_argument("--canary-lib", required=True)
    p = sub.add_parser("clean")
    p.add_argument("--ctr", default="")
    p.add_argument("--podman", action="store_true")
    args = parser.parse_args(argv)
    if args.command == "build":
        build(args)
    elif args.command == "reset":
        reset_canary(args.attack, args.canary_lib)
        print(json.dumps(snapshot(args.attack)))
    elif args.command == "snapshot":
        print(json.dumps(snapshot(args.attack)))
    elif args.command == "unblock":
        print(json.dumps(unblock(args.attack)))
    else:
        clean(args)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
