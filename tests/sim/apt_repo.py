#!/usr/bin/env python
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""A signed apt repository laid out as NVIDIA's, holding stand-in packages named as NVIDIA's (tests only).

    tests/sim/apt_repo.py build OUT [--versions 1.17.8-1 1.18.0-1] [--key-name NAME]

writes, under OUT::

    libnvidia-container/gpgkey                 the repository's public key, ASCII-armoured (NVIDIA's is too)
    libnvidia-container/stable/deb/amd64/      a flat repository: *.deb, Packages, Packages.gz,
                                               Release, InRelease (clearsigned), Release.gpg

which is the layout of ``https://nvidia.github.io/libnvidia-container`` (the list file NVIDIA's install guide
fetches says ``deb https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH) /``), so a mirror URL of
``<server>/libnvidia-container/stable`` and the default key URL ``<repository>/../gpgkey`` work as they would
against NVIDIA's. The signing key is made here, at build time (``gpg --quick-gen-key``, ed25519, no passphrase)
in a throwaway GNUPGHOME; ``--key-name`` makes a second, unrelated key (a repository apt must refuse).

Per version, the four packages of NVIDIA's install guide with NVIDIA's dependencies (architecture overview,
https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/arch-overview.html, read 2026-11-23;
``packaging/debian/control`` of NVIDIA/nvidia-container-toolkit at commit 278fa43):

* ``nvidia-container-toolkit``: Depends ``nvidia-container-toolkit-base (= V)``,
  ``libnvidia-container-tools (>= V)``, ``libnvidia-container-tools (<< 2.0.0)``;
  ships ``/usr/bin/nvidia-container-runtime-hook``;
* ``nvidia-container-toolkit-base``: ships ``/usr/bin/nvidia-ctk``, ``/usr/bin/nvidia-container-runtime``,
  ``/usr/bin/nvidia-cdi-hook``; its postinst runs ``nvidia-ctk --quiet config
  --config-file=/etc/nvidia-container-runtime/config.toml --in-place`` as NVIDIA's does (the file is generated,
  not a conffile);
* ``libnvidia-container-tools``: Depends ``libnvidia-container1 (>= V)``; ships ``/usr/bin/nvidia-container-cli``;
* ``libnvidia-container1``: a documentation file only (no library).

What the stand-ins can show: apt's signature check (signed-by), version pins, holds, upgrades along NVIDIA's
dependency chain, purge, the file list of each package, and the commands the role and NVIDIA's guides type for
configuration (``nvidia-ctk --version``, ``nvidia-ctk config [--config-file F] [--in-place] [--set K=V]``,
``nvidia-container-cli --version``). What they cannot show: anything NVIDIA's Go and C programs do with a GPU
(``nvidia-ctk cdi generate``, ``nvidia-ctk runtime configure``, the runtime's device injection and
``nvidia-container-cli configure`` exit 64 with "not in the stand-in"); ``nvidia-container-runtime`` execs runc
unchanged, which is what NVIDIA's runtime does for a container that asks for no GPU only.
"""

from __future__ import annotations

import argparse
import email.utils
import gzip
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

PACKAGES = (
    "nvidia-container-toolkit",
    "nvidia-container-toolkit-base",
    "libnvidia-container-tools",
    "libnvidia-container1",
)
VERSIONS = ("1.17.8-1", "1.18.0-1")
ARCH = "amd64"
MAINTAINER = "gpufleet.nvidia tests <tests@gpufleet.invalid>"

# A stand-in nvidia-ctk: the subcommands this collection and NVIDIA's install guides type, nothing else.
NVIDIA_CTK = r'''#!/usr/bin/python3
"""nvidia-ctk stand-in (gpufleet.nvidia tests): --version and config only."""
import re
import sys

VERSION = "@VERSION@"
DEFAULTS = [
    ("accept-nvidia-visible-devices-as-volume-mounts", "false"),
    ("accept-nvidia-visible-devices-envvar-when-unprivileged", "true"),
    ("disable-require", "false"),
    ("supported-driver-capabilities", '"compat32,compute,display,graphics,ngx,utility,video"'),
]
TABLES = """
[nvidia-container-cli]
environment = []
ldconfig = "@/sbin/ldconfig"
load-kmods = true

[nvidia-container-runtime]
log-level = "info"
mode = "auto"
runtimes = ["runc", "crun"]

[nvidia-container-runtime-hook]
path = "nvidia-container-runtime-hook"
skip-mode-detection = false
"""


def config(args):
    path, in_place, sets = "/etc/nvidia-container-runtime/config.toml", False, []
    while args:
        arg = args.pop(0)
        if arg.startswith("--config-file="):
            path = arg.split("=", 1)[1]
        elif arg in ("--config-file", "-c"):
            path = args.pop(0)
        elif arg in ("--in-place", "-i"):
            in_place = True
        elif arg.startswith("--set="):
            sets.append(arg.split("=", 1)[1])
        elif arg == "--set":
            sets.append(args.pop(0))
        else:
            sys.exit(f"nvidia-ctk config (stand-in): {arg} is not in the stand-in")
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        text = "".join(f"{k} = {v}\n" for k, v in DEFAULTS) + TABLES
    for item in sets:
        key, _sep, value = item.partition("=")
        if key not in dict(DEFAULTS):
            sys.exit(f"nvidia-ctk config (stand-in): --set {key} is not in the stand-in")
        value = value if value in ("true", "false") else '"' + value + '"'
        line = re.compile("^" + re.escape(key) + r"\s*=.*$", re.M)
        text = line.sub(f"{key} = {value}", text) if line.search(text) else f"{key} = {value}\n" + text
    if in_place:
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            f.write(text)
        __import__("os").replace(path + ".tmp", path)
    else:
        sys.stdout.write(text)


def main(argv):
    args = [a for a in argv if a not in ("--quiet", "-q", "--debug", "-d")]
    if args[:1] in (["--version"], ["-v"], ["version"]):
        print(f"NVIDIA Container Toolkit CLI version {VERSION} (gpufleet.nvidia test stand-in)")
        return
    if args[:1] == ["config"]:
        config(args[1:])
        return
    print(f"nvidia-ctk {' '.join(args)}: not in the stand-in (gpufleet.nvidia tests)", file=sys.stderr)
    sys.exit(64)


main(sys.argv[1:])
'''

RUNTIME = """#!/bin/sh
# nvidia-container-runtime stand-in (gpufleet.nvidia tests): passes every container to runc unchanged, which
# is what NVIDIA's runtime does for a container that asks for no GPU; it injects nothing.
case "$1" in --version|-v) echo "NVIDIA Container Runtime version @VERSION@ (gpufleet.nvidia test stand-in)"; \
exit 0;; esac
exec runc "$@"
"""

NOT_HERE = """#!/bin/sh
# @NAME@ stand-in (gpufleet.nvidia tests)
case "$1" in --version|-v|version) echo "@NAME@ version @VERSION@ (gpufleet.nvidia test stand-in)"; exit 0;; esac
echo "@NAME@ $*: not in the stand-in (gpufleet.nvidia tests)" >&2
exit 64
"""

BASE_POSTINST = """#!/bin/sh
set -e
if [ "$1" = configure ]; then
    mkdir -p /etc/nvidia-container-runtime
    /usr/bin/nvidia-ctk --quiet config --config-file=/etc/nvidia-container-runtime/config.toml --in-place
fi
exit 0
"""


@dataclass(frozen=True)
class Repo:
    root: Path  # OUT
    url_path: str  # "libnvidia-container/stable": the mirror URL's path under the server's root
    deb_dir: Path  # OUT/libnvidia-container/stable/deb/amd64
    key: Path  # OUT/libnvidia-container/gpgkey
    fingerprint: str
    versions: tuple[str, ...]


def _run(cmd: list[str], env: dict[str, str] | None = None, stdin: bytes | None = None) -> bytes:
    proc = subprocess.run(cmd, input=stdin, capture_output=True, env=env, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {proc.returncode}: {proc.stderr.decode(errors='replace')}")
    return proc.stdout


def _upstream(version: str) -> str:
    return version.split("-", 1)[0]


def _package(name: str, version: str) -> tuple[dict[str, str], dict[str, tuple[str, int]], dict[str, str]]:
    """(control fields, {path: (content, mode)}, {maintainer script: content}) of one stand-in package."""
    up = _upstream(version)
    control = {"Package": name, "Version": version, "Architecture": ARCH, "Maintainer": MAINTAINER}
    files: dict[str, tuple[str, int]] = {
        f"/usr/share/doc/{name}/README.stand-in": (
            f"{name} {version}: a stand-in built by gpufleet.nvidia's tests (tests/sim/apt_repo.py), not NVIDIA's.\n",
            0o644,
        )
    }
    scripts: dict[str, str] = {}
    if name == "nvidia-container-toolkit":
        control["Depends"] = (
            f"nvidia-container-toolkit-base (= {version}), libnvidia-container-tools (>= {version}), "
            "libnvidia-container-tools (<< 2.0.0)"
        )
        hook = NOT_HERE.replace("@NAME@", "nvidia-container-runtime-hook").replace("@VERSION@", up)
        files["/usr/bin/nvidia-container-runtime-hook"] = (hook, 0o755)
    elif name == "nvidia-container-toolkit-base":
        files["/usr/bin/nvidia-ctk"] = (NVIDIA_CTK.replace("@VERSION@", up), 0o755)
        files["/usr/bin/nvidia-container-runtime"] = (RUNTIME.replace("@VERSION@", up), 0o755)
        cdi_hook = NOT_HERE.replace("@NAME@", "nvidia-cdi-hook").replace("@VERSION@", up)
        files["/usr/bin/nvidia-cdi-hook"] = (cdi_hook, 0o755)
        scripts["postinst"] = BASE_POSTINST
    elif name == "libnvidia-container-tools":
        control["Depends"] = f"libnvidia-container1 (>= {version})"
        cli = NOT_HERE.replace("@NAME@", "nvidia-container-cli").replace("@VERSION@", up)
        files["/usr/bin/nvidia-container-cli"] = (cli, 0o755)
    control.update(
        {
            "Section": "utils",
            "Priority": "optional",
            "Description": f"{name} (gpufleet.nvidia test stand-in)\n"
            " Named, versioned and depending as NVIDIA's package; built by tests/sim/apt_repo.py.",
        }
    )
    return control, files, scripts


def _build_deb(name: str, version: str, out: Path, work: Path) -> Path:
    control, files, scripts = _package(name, version)
    tree = work / f"{name}_{version}"
    (tree / "DEBIAN").mkdir(parents=True)
    for path, (content, mode) in files.items():
        target = tree / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, encoding="utf-8")
        target.chmod(mode)
    (tree / "DEBIAN" / "control").write_text("".join(f"{k}: {v}\n" for k, v in control.items()), encoding="utf-8")
    for script, content in scripts.items():
        (tree / "DEBIAN" / script).write_text(content, encoding="utf-8")
        (tree / "DEBIAN" / script).chmod(0o755)
    deb = out / f"{name}_{version}_{ARCH}.deb"
    _run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(tree), str(deb)])
    return deb


def _packages_index(debs: list[Path], deb_dir: Path) -> str:
    stanzas = []
    for deb in sorted(debs):
        fields = _run(["dpkg-deb", "--field", str(deb)]).decode().rstrip("\n")
        data = deb.read_bytes()
        stanzas.append(
            f"{fields}\nFilename: ./{deb.relative_to(deb_dir)}\nSize: {len(data)}\n"
            f"MD5sum: {hashlib.md5(data).hexdigest()}\nSHA256: {hashlib.sha256(data).hexdigest()}\n"  # noqa: S324
        )
    return "\n".join(stanzas)


def _release(deb_dir: Path, names: list[str]) -> str:
    lines = [
        "Origin: gpufleet.nvidia tests",
        "Label: NVIDIA container toolkit stand-ins",
        f"Architectures: {ARCH}",
        f"Date: {email.utils.formatdate(usegmt=True)}",
    ]
    for field, algo in (("MD5Sum", "md5"), ("SHA256", "sha256")):
        lines.append(f"{field}:")
        for name in names:
            data = (deb_dir / name).read_bytes()
            lines.append(f" {hashlib.new(algo, data).hexdigest()} {len(data)} {name}")
    return "\n".join(lines) + "\n"


def build(out: Path, versions: tuple[str, ...] = VERSIONS, key_name: str = "gpufleet test repository") -> Repo:
    """Build the stand-in packages and the signed repository under ``out`` (made or emptied); see the module doc."""
    for tool in ("dpkg-deb", "gpg"):
        if not shutil.which(tool):
            raise RuntimeError(f"tests/sim/apt_repo.py needs {tool} (apt-get install dpkg-dev gnupg)")
    if out.exists():
        shutil.rmtree(out)
    base = out / "libnvidia-container"
    deb_dir = base / "stable" / "deb" / ARCH
    deb_dir.mkdir(parents=True)
    gnupg = Path(tempfile.mkdtemp(prefix="gf-gpg-", dir="/tmp"))  # short: gpg-agent's socket path has a limit
    env = dict(os.environ, GNUPGHOME=str(gnupg))
    try:
        gnupg.chmod(0o700)
        uid = f"{key_name} <tests@gpufleet.invalid>"
        _run(["gpg", "--batch", "--passphrase", "", "--quick-gen-key", uid, "ed25519", "sign", "never"], env=env)
        colons = _run(["gpg", "--batch", "--with-colons", "--list-keys", uid], env=env).decode()
        fingerprint = next(line.split(":")[9] for line in colons.splitlines() if line.startswith("fpr:"))
        (base / "gpgkey").write_bytes(_run(["gpg", "--batch", "--armor", "--export", fingerprint], env=env))
        with tempfile.TemporaryDirectory(prefix="gf-debs-") as work:
            debs = [_build_deb(n, v, deb_dir, Path(work)) for v in versions for n in PACKAGES]
        index = _packages_index(debs, deb_dir)
        (deb_dir / "Packages").write_text(index, encoding="utf-8")
        with gzip.GzipFile(deb_dir / "Packages.gz", "wb", mtime=0) as f:
            f.write(index.encode())
        release = _release(deb_dir, ["Packages", "Packages.gz"])
        (deb_dir / "Release").write_text(release, encoding="utf-8")
        sign = ["gpg", "--batch", "--pinentry-mode", "loopback", "--passphrase", "", "--local-user", fingerprint]
        sign += ["--digest-algo", "SHA512"]
        data = release.encode()
        (deb_dir / "InRelease").write_bytes(_run([*sign, "--clearsign"], env=env, stdin=data))
        (deb_dir / "Release.gpg").write_bytes(_run([*sign, "--armor", "--detach-sign"], env=env, stdin=data))
    finally:
        subprocess.run(["gpgconf", "--kill", "all"], env=env, capture_output=True, check=False)
        shutil.rmtree(gnupg, ignore_errors=True)
    return Repo(out, "libnvidia-container/stable", deb_dir, base / "gpgkey", fingerprint, tuple(versions))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    sub = parser.add_subparsers(dest="command", required=True)
    cmd = sub.add_parser("build", help="build the stand-in packages and the signed repository")
    cmd.add_argument("out", type=Path)
    cmd.add_argument("--versions", nargs="+", default=list(VERSIONS))
    cmd.add_argument("--key-name", default="gpufleet test repository")
    args = parser.parse_args(argv)
    repo = build(args.out, tuple(args.versions), args.key_name)
    print(f"{repo.deb_dir} (key {repo.fingerprint})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
