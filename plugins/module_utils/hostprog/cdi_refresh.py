# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""``gpufleet-cdi-refresh``: regenerate the CDI spec when the installed driver or the device nodes are not the ones
it was made for.

Run at boot by ``gpufleet-cdi-refresh.service`` (installed by the ``runtime`` role), before the engines
start: a driver upgraded by the package manager (and the reboot that loads it) must not leave engines
injecting the old driver's files. The spec carries the driver version it was made for in its annotation
``gpufleet.nvidia/driver-version``; when the installed userspace's version differs (or the spec is
missing), or when the NVIDIA device nodes under ``/dev`` are not those the spec was made from (its annotation
``gpufleet.nvidia/device-nodes``, a fingerprint of their paths, majors and minors: a ``/dev/nvidia-uvm`` made at
boot by ``gpufleet-nvidia-devices`` after the spec was written, a GPU gone), the spec and the runtime shim's index
are rendered again with the options ``cdi_spec`` used,
which the role records in ``/etc/gpufleet/cdi-refresh.json``. The rendering is ``cdi.generate.generate``, the
same function the ``cdi_spec`` module calls, so boot and Ansible produce the same bytes; this file holds only
the program: its configuration, the decision to refresh, and the writes.

``gpufleet-cdi-refresh [--config PATH] [--force] [--dry-run]``: prints one JSON line
(``{"changed": bool, "stamp": ..., "installed": ..., "nodes_stamp": ..., "nodes": ..., "reason": ...}``); exit
status 0, 1 on failure.

Standard library only (target Pythons 3.8+).
"""

from __future__ import annotations

import json
import sys
from typing import Any, Mapping

from ..base.fileio import atomic_write, read_text
from ..base.oneline import error_line
from ..base.pathsafe import host_path
from ..cdi.driver_files import find_driver_files
from ..cdi.generate import generate, host_node_fingerprint, options_with_defaults, spec_node_stamp, spec_stamp

NAME = "gpufleet-cdi-refresh"
CONFIG_PATH = "/etc/gpufleet/cdi-refresh.json"


def needs_refresh(
    stamp: str | None,
    installed: str | None,
    force: bool = False,
    nodes_stamp: str | None = None,
    nodes: str | None = None,
) -> tuple[bool, str]:
    """``(bool, reason)``: whether a spec stamped ``stamp`` (driver) and ``nodes_stamp`` (device-node fingerprint)
    must be rendered again for the ``installed`` driver and the device nodes whose fingerprint is ``nodes`` (None:
    not compared)."""
    if installed is None:
        return False, "no NVIDIA driver userspace installed: spec left as it is"
    if force:
        return True, "forced"
    if stamp is None:
        return True, "no spec (or no driver stamp in it)"
    if stamp != installed:
        return True, f"spec made for driver {stamp}, installed is {installed}"
    if nodes is not None and nodes_stamp != nodes:
        if nodes_stamp is None:
            return True, "the spec does not record the device nodes it was made from"
        return True, f"the NVIDIA device nodes changed since the spec was made ({nodes_stamp} -> {nodes})"
    return False, f"spec matches the installed driver {installed}"


def installed_version(root: str = "/", driver_root: str = "/") -> str | None:
    """The installed driver userspace's version (from the ld.so.cache under the driver root), or None."""
    try:
        version, _files = find_driver_files(host_path(root, driver_root), ["utility"], None, root=root)
    except (OSError, ValueError):
        return None
    return version


def write_text(path: str, text: str, mode: int = 0o644) -> None:
    """Atomically replace ``path`` (a temporary file in the same directory, fsync'd, renamed)."""
    atomic_write(path, text, mode, makedirs=True)


def refresh(options: Mapping[str, Any] | None, force: bool = False, dry_run: bool = False) -> dict[str, Any]:
    """Regenerate the spec when its stamp is not the installed driver; returns the report ``main`` prints."""
    p = options_with_defaults(options)
    spec_file = host_path(p["root"], p["path"])
    text = read_text(spec_file)
    stamp, nodes_stamp = spec_stamp(text), spec_node_stamp(text)
    installed = p["driver_version"] or installed_version(p["root"], p["driver_root"])
    nodes = host_node_fingerprint(p["root"], p["dev_root"])
    wanted, reason = needs_refresh(stamp, installed, force, nodes_stamp, nodes)
    report = {
        "changed": False,
        "stamp": stamp,
        "installed": installed,
        "nodes_stamp": nodes_stamp,
        "nodes": nodes,
        "reason": reason,
        "path": p["path"],
    }
    if not wanted:
        return report
    # GPUs come from the configuration when it pins them (the role does not: discovery decides at boot).
    from ..discovery.discover import discovered_gpus  # noqa: PLC0415  # heavy; only when the spec is rendered

    version, _spec, spec_text, _index, index_text = generate(dict(p, driver_version=installed), discovered_gpus)
    report["changed"] = True
    report["installed"] = version
    if not dry_run:
        write_text(spec_file, spec_text)
        if p["index_path"]:
            write_text(host_path(p["root"], p["index_path"]), index_text)
    return report


def parse_args(argv: list[str]) -> dict[str, Any]:
    args = list(argv[1:])
    options: dict[str, Any] = {"config": CONFIG_PATH, "force": False, "dry_run": False}
    while args:
        arg = args.pop(0)
        if arg in ("--force", "--dry-run"):
            options[arg[2:].replace("-", "_")] = True
        elif arg == "--config" and args:
            options["config"] = args.pop(0)
        else:
            raise ValueError(f"unknown argument {arg!r} (usage: {NAME} [--config PATH] [--force] [--dry-run])")
    return options


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv if argv is None else argv
    try:
        args = parse_args(argv)
        text = read_text(args["config"])
        options = json.loads(text) if text else {}
        if not isinstance(options, dict):
            raise ValueError(f"{args['config']}: not a JSON object")
        report = refresh(options, force=args["force"], dry_run=args["dry_run"])
    except Exception as exc:  # one line for the journal, never a traceback at boot
        sys.stderr.write(error_line(NAME, f"cannot refresh the CDI spec: {exc}"))
        return 1
    sys.stdout.write(json.dumps(report, sort_keys=True) + "\n")
    return 0
