# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The ``slurm_gres`` module's work: write a Slurm node's GPU files from discovery and say its ``slurm.conf`` line.

* ``gres.conf`` (whole, ours: ``gres.render``); an admin's file there that the collection did not write is backed up
  before it is replaced;
* ``cgroup.conf``: only the ``ConstrainDevices=yes`` line, when asked; every other line of the admin's file is kept
  (https://slurm.schedmd.com/cgroup.conf.html, read 2026-11-27: one ``Key=Value`` per line, ``#`` comments, keys case
  insensitive);
* the node line for ``slurm.conf``: ``slurmd -C``'s line (the hardware slurmd finds: CPUs, sockets, cores, threads,
  memory; https://slurm.schedmd.com/slurmd.html, ``-C``, read 2026-11-27) with the node's ``Gres=``;
* the nodes fragment: the node lines given (every Slurm GPU node of the play), written whole into a file the admin's
  ``slurm.conf`` includes (``Include``, https://slurm.schedmd.com/slurm.conf.html, read 2026-11-27).

Standard library only (target Pythons 3.8+).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..base.fileio import atomic_write, backup, read_text
from ..base.runner import Failure, Host, Result
from ..cdi.devices import parse_mig_minors
from . import gres

HEADER = gres.HEADER
MIG_MINORS = "/proc/driver/nvidia-caps/mig-minors"


@dataclass(frozen=True)
class GresRequest:
    gpus: list[dict[str, Any]] | None
    node_name: str
    gres_conf: str
    cgroup_conf: str
    constrain_devices: bool
    nodes_conf: str
    nodes: list[str] | None
    backup: bool

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> GresRequest:
        return cls(
            gpus=params["gpus"],
            node_name=params["node_name"] or "",
            gres_conf=params["gres_conf"],
            cgroup_conf=params["cgroup_conf"],
            constrain_devices=params["constrain_devices"],
            nodes_conf=params["nodes_conf"],
            nodes=params["nodes"],
            backup=params["backup"],
        )


@dataclass
class GresResult(Result):
    changed: bool
    slurmd: bool
    node_name: str | None = None
    node_line: str | None = None
    gres: str | None = None
    files: list[str] = field(default_factory=list)
    backup_files: list[str] = field(default_factory=list)
    diff: list[dict[str, str]] = field(default_factory=list)


def set_key(text: str, key: str, value: str) -> str:
    """``text`` (a ``Key=Value`` file) with ``key`` set to ``value``: the first line setting it (any case) is
    replaced, later ones dropped; appended when none does. Comments and other lines stay."""
    out: list[str] = []
    done = False
    for line in text.splitlines():
        name = line.split("=", 1)[0].strip()
        if "=" in line and not line.lstrip().startswith("#") and name.lower() == key.lower():
            if not done:
                out.append(f"{key}={value}")
                done = True
            continue
        out.append(line)
    if not done:
        out.append(f"{key}={value}")
    return "\n".join(out) + "\n"


def node_line(hardware: str, node_name: str, gres_value: str) -> tuple[str, str]:
    """``(name, line)`` from ``slurmd -C``'s first line, its ``NodeName`` replaced by ``node_name`` when given, and
    ``Gres=`` appended when the node has GPUs."""
    words = (hardware.strip().splitlines() or [""])[0].split()
    if not words or not words[0].startswith("NodeName="):
        raise ValueError(f"slurmd -C printed no NodeName line: {hardware.strip()[:200]!r}")
    name = node_name or words[0].split("=", 1)[1]
    words[0] = f"NodeName={name}"
    if gres_value:
        words.append(f"Gres={gres_value}")
    return name, " ".join(words)


def _name(line: str) -> str:
    return line.split(None, 1)[0].split("=", 1)[1] if line.startswith("NodeName=") else ""


def merge_nodes(existing: str, lines: list[str]) -> list[str]:
    """The fragment's node lines: ``lines``, and the lines of ``existing`` for nodes they do not name (a run limited
    to some hosts keeps the others' lines), sorted by node name."""
    given = {_name(line): line.strip() for line in lines if _name(line)}
    kept = {_name(line): line.strip() for line in existing.splitlines() if _name(line) and _name(line) not in given}
    merged = {**kept, **given}
    return [merged[name] for name in sorted(merged)]


class _Writer:
    """Writes files the way every module of the collection does: atomic, check mode, diff, backup."""

    def __init__(self, host: Host, result: GresResult, keep_backup: bool) -> None:
        self.host, self.result, self.keep_backup = host, result, keep_backup

    def put(self, path: str, text: str, ours: bool) -> None:
        try:
            before = read_text(path)
        except OSError as exc:
            raise Failure(f"slurm_gres: cannot read {path}: {exc}; fix its permissions or the path") from exc
        if before == text:
            return
        self.result.changed = True
        self.result.files.append(path)
        if self.host.diff:
            self.result.diff.append(
                {"before_header": path, "after_header": path, "before": before or "", "after": text}
            )
        if self.host.check_mode:
            return
        try:
            if before is not None and self.keep_backup and not (ours and before.startswith(HEADER)):
                self.result.backup_files.append(backup(path))
            atomic_write(path, text, makedirs=True)
        except OSError as exc:
            raise Failure(f"slurm_gres: cannot write {path}: {exc}; the folder must exist and be writable") from exc


def write_gres(request: GresRequest, host: Host) -> GresResult:
    """Write what the request names; a host without ``slurmd`` gets nothing (``slurmd: false``)."""
    slurmd = host.get_bin_path("slurmd")
    result = GresResult(changed=False, slurmd=bool(slurmd))
    writer = _Writer(host, result, request.backup)
    if request.gpus is not None and slurmd:
        minors = parse_mig_minors(read_text(MIG_MINORS, tolerant=True) or "")
        rc, out, err = host.run_command([slurmd, "-C"])
        if rc != 0:
            raise Failure(f"slurm_gres: {slurmd} -C failed (rc {rc}): {err.strip() or out.strip()}", **result.fields())
        try:
            rendered = gres.render(request.node_name or "-", request.gpus, minors)
            result.gres = rendered["gres"]
            result.node_name, result.node_line = node_line(out, request.node_name, result.gres)
        except ValueError as exc:
            raise Failure(f"slurm_gres: {exc}", **result.fields()) from exc
        writer.put(request.gres_conf, rendered["gres_conf"], ours=True)
        if request.constrain_devices:
            before = read_text(request.cgroup_conf, tolerant=True) or ""
            writer.put(request.cgroup_conf, set_key(before, "ConstrainDevices", "yes"), ours=False)
    if request.nodes is not None:
        kept = read_text(request.nodes_conf, tolerant=True) or ""
        body = "".join(f"{line}\n" for line in merge_nodes(kept, request.nodes))
        writer.put(request.nodes_conf, HEADER + (body or "# no Slurm GPU node in this run\n"), ours=True)
    if not host.diff:
        result.diff = []
    return result
