#!/usr/bin/env python
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The collection's dependencies (galaxy.yml's, and theirs) as collection artifacts for the local EE build
(tests/tools/ee.sh; no Galaxy here), packed from the toolchain's ansible package.

    ee_collections.py SITE_PACKAGES OUT_DIR  ->  OUT_DIR/<ns>-<name>.tar.gz, their names on stdout
    ee_collections.py --repack TARBALL       ->  TARBALL byte-stable (the collection's own, from ansible-galaxy)

The ansible package installs a collection without its CI and docs files, which its FILES.json still lists, so
``ansible-galaxy collection install`` of a plain tar of it fails ("Unable to extract '.azure-pipelines'"): FILES.json
keeps the entries present (and MANIFEST.json the new FILES.json's checksum). Byte for byte the same tarball on every
run (sorted, mtime 0, gzip without a time), so the EE build's layers that install them stay cached.

``--repack``: ``ansible-galaxy collection build`` stamps MANIFEST.json and FILES.json (and the gzip header) with the
time of the build, so two builds of one tree differ and every EE layer from the tarball on is built again (minutes
under load); the same members with mtime 0 and a gzip header without a time make the same tree the same bytes, and a
second ``make ee EE_BUILD=1`` of it (lane 1's test_ee_runner.py after lane 2's build in ``make test``) all cached.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import sys
import tarfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def closure(site: Path) -> list[str]:
    """galaxy.yml's dependencies and theirs, each once, in the order met."""
    todo = list(yaml.safe_load((ROOT / "galaxy.yml").read_text())["dependencies"])
    seen: list[str] = []
    while todo:
        dep = todo.pop(0)
        if dep in seen:
            continue
        seen.append(dep)
        manifest = json.loads((site / "ansible_collections" / dep.replace(".", "/") / "MANIFEST.json").read_text())
        todo += list(manifest["collection_info"].get("dependencies") or {})
    return seen


def _add(tar: tarfile.TarFile, name: str, data: bytes | None, mode: int) -> None:
    info = tarfile.TarInfo(name)
    info.mtime, info.uid, info.gid, info.uname, info.gname, info.mode = 0, 0, 0, "", "", mode
    if data is None:
        info.type = tarfile.DIRTYPE
        tar.addfile(info)
    else:
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))


def _write_gzip(dest: Path, data: bytes) -> None:
    """``data`` gzipped into ``dest`` with a header that carries no time and no name: the same data, the same bytes."""
    with dest.open("wb") as out, gzip.GzipFile(fileobj=out, mode="wb", mtime=0, filename="") as gz:
        gz.write(data)


def pack(src: Path, dest: Path) -> None:
    files = json.loads((src / "FILES.json").read_text())
    kept = [e for e in files["files"] if e["name"] == "." or (src / e["name"]).exists()]
    files_json = json.dumps({**files, "files": kept}, indent=4).encode()
    manifest = json.loads((src / "MANIFEST.json").read_text())
    manifest["file_manifest_file"]["chksum_sha256"] = hashlib.sha256(files_json).hexdigest()
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as tar:
        _add(tar, "MANIFEST.json", json.dumps(manifest, indent=4).encode(), 0o644)
        _add(tar, "FILES.json", files_json, 0o644)
        for entry in sorted(kept, key=lambda e: e["name"]):
            if entry["name"] == ".":
                continue
            path = src / entry["name"]
            if entry["ftype"] == "dir":
                _add(tar, entry["name"], None, 0o755)
            else:
                _add(tar, entry["name"], path.read_bytes(), 0o755 if path.stat().st_mode & 0o111 else 0o644)
    _write_gzip(dest, raw.getvalue())


def repack(tarball: Path) -> None:
    """``tarball`` rewritten with its members in the same order and content, every mtime 0, the gzip header timeless."""
    raw = io.BytesIO()
    with tarfile.open(tarball) as src, tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for info in src.getmembers():
            data = src.extractfile(info) if info.isfile() else None
            info.mtime = 0  # links and modes as they were
            tar.addfile(info, data)
    _write_gzip(tarball, raw.getvalue())


def main(argv: list[str]) -> int:
    if argv[1] == "--repack":
        repack(Path(argv[2]))
        return 0
    site, out = Path(argv[1]), Path(argv[2])
    for dep in closure(site):
        namespace, name = dep.split(".")
        pack(site / "ansible_collections" / namespace / name, out / f"{namespace}-{name}.tar.gz")
        print(dep)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
