# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""``gpufleet-dev-char-links``: the ``/dev/char/<major>:<minor>`` links of the NVIDIA device nodes.

systemd's device cgroup rules name devices through ``/dev/char/<major>:<minor>``; when those links are
missing for the NVIDIA nodes (they are made by udev only for nodes udev created, and the driver's nodes
are made by ``nvidia-modprobe``), a ``systemctl daemon-reload`` re-applies the rules without them and
running containers lose their GPUs ("Failed to initialize NVML: Unknown Error"). This program makes
them, like ``nvidia-ctk system create-dev-char-symlinks --create-all``: a relative link
``/dev/char/195:0 -> ../nvidia0`` per node, an existing correct link left alone, a wrong link replaced,
anything that is not a link left alone and reported.

``gpufleet-dev-char-links [--dev-root /] [--dry-run]`` prints one JSON object:
``{"links": N, "created": [...], "replaced": [...], "conflicts": [...]}``; exit status 0, or 1 when a
conflict or an error leaves a node without its link. Run by the ``runtime`` role and by a udev rule
when the driver binds.

Standard library only (target Pythons 3.8+).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from ..cdi.devices import DeviceNode, char_link, scan_device_nodes

NAME = "gpufleet-dev-char-links"


def link_target(node_path: str) -> str:
    """The relative target of the ``/dev/char`` link of ``node_path`` (``/dev/nvidia0`` -> ``../nvidia0``)."""
    return os.path.relpath(node_path, "/dev/char")


def plan(nodes: list[DeviceNode], existing: dict[str, str | None]) -> list[tuple[str, str, str]]:
    """What to do for each node.

    ``nodes``: ``DeviceNode``s; ``existing``: ``{link path: target or None (not a link) }`` of the
    ``/dev/char`` entries that exist. Returns ``[(action, link, target)]`` with action ``ok``,
    ``create``, ``replace`` or ``conflict``, in the nodes' order.
    """
    actions: list[tuple[str, str, str]] = []
    for node in nodes:
        link = char_link(node)
        target = link_target(node.path)
        if link not in existing:
            actions.append(("create", link, target))
        elif existing[link] is None:
            actions.append(("conflict", link, target))
        elif existing[link] in (target, node.path):
            actions.append(("ok", link, target))
        else:
            actions.append(("replace", link, target))
    return actions


def _existing(char_dir: str, links: list[str]) -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for link in links:
        full = os.path.join(char_dir, os.path.basename(link))
        if os.path.islink(full):
            found[link] = os.readlink(full)
        elif os.path.lexists(full):
            found[link] = None
    return found


def apply(dev_root: str = "/", dry_run: bool = False) -> dict[str, Any]:
    """Create the links under ``<dev_root>/dev/char``; returns the report printed by ``main``."""
    dev_dir = os.path.join(dev_root, "dev")
    char_dir = os.path.join(dev_dir, "char")
    nodes = scan_device_nodes(dev_dir)
    actions = plan(nodes, _existing(char_dir, [char_link(n) for n in nodes]))
    report: dict[str, Any] = {"links": 0, "created": [], "replaced": [], "conflicts": [], "errors": []}
    if not dry_run and any(a[0] in ("create", "replace") for a in actions):
        os.makedirs(char_dir, 0o755, exist_ok=True)
    for action, link, target in actions:
        full = os.path.join(char_dir, os.path.basename(link))
        if action == "conflict":
            report["conflicts"].append(link)
            continue
        if action != "ok" and not dry_run:
            tmp = f"{full}.gpufleet-{os.getpid()}"
            try:
                os.symlink(target, tmp)
                os.replace(tmp, full)
            except OSError as exc:
                report["errors"].append(f"{link}: {exc.strerror or exc}")
                continue
        if action == "create":
            report["created"].append(link)
        elif action == "replace":
            report["replaced"].append(link)
        report["links"] += 1
    return report


def parse_args(argv: list[str]) -> dict[str, Any]:
    args = list(argv[1:])
    options: dict[str, Any] = {"dev_root": "/", "dry_run": False}
    while args:
        arg = args.pop(0)
        if arg == "--dry-run":
            options["dry_run"] = True
        elif arg == "--dev-root" and args:
            options["dev_root"] = args.pop(0)
        elif arg.startswith("--dev-root="):
            options["dev_root"] = arg.split("=", 1)[1]
        else:
            raise ValueError(f"unknown argument {arg!r} (usage: {NAME} [--dev-root DIR] [--dry-run])")
    return options


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv if argv is None else argv
    try:
        options = parse_args(argv)
    except ValueError as exc:
        sys.stderr.write(f"{NAME}: {exc}\n")
        return 2
    report = apply(options["dev_root"], options["dry_run"])
    sys.stdout.write(json.dumps(report, sort_keys=True) + "\n")
    for problem in report["conflicts"]:
        sys.stderr.write(f"{NAME}: {problem} exists and is not a link; left alone\n")
    return 1 if report["conflicts"] or report["errors"] else 0
