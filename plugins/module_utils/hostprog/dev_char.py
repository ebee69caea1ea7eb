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
anything that is not a link left alone and reported. A ``/dev/char`` that is itself a link (or anything but a
directory) is refused with one line and nothing is written: every link is made through a descriptor of the real
``/dev/char`` (``O_DIRECTORY | O_NOFOLLOW``), never through a path a planted link could redirect.

``gpufleet-dev-char-links [--dev-root /] [--dry-run]`` prints one JSON object:
``{"links": N, "created": [...], "replaced": [...], "conflicts": [...]}``; exit status 0, or 1 when a
conflict or an error leaves a node without its link. Run by the ``runtime`` role and by a udev rule
when the driver binds.

Standard library only (target Pythons 3.8+).
"""

from __future__ import annotations

import json
import os
import stat
import sys
from typing import Any

from ..base.oneline import error_line
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


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class CharDirError(Exception):
    """``/dev/char`` is not a real directory: nothing is written (the message is the one line that says so)."""


def open_char_dir(char_dir: str, create: bool) -> int | None:
    """A descriptor of ``char_dir`` (``<dev root>/dev/char``), opened ``O_DIRECTORY | O_NOFOLLOW``; None when it is
    missing and not ``create``. ``CharDirError`` when it is a link (its target is never written into: a link planted
    there would send root's links anywhere) or anything else that is not a directory."""
    try:
        st = os.lstat(char_dir)
    except FileNotFoundError:
        if not create:
            return None
        try:  # noqa: SIM105
            os.mkdir(char_dir, 0o755)
        except FileExistsError:
            pass
        st = os.lstat(char_dir)
    if stat.S_ISLNK(st.st_mode):
        raise CharDirError(
            f"{char_dir} is a symbolic link (to {os.readlink(char_dir)!r}), not a directory: refusing it"
        )
    if not stat.S_ISDIR(st.st_mode):
        raise CharDirError(f"{char_dir} is not a directory: refusing it")
    try:
        return os.open(char_dir, _DIR_FLAGS)
    except OSError as exc:  # replaced by a link or a file since the lstat
        raise CharDirError(f"{char_dir} cannot be opened as a directory ({exc.strerror or exc}): refusing it") from None


def _existing(char_fd: int | None, links: list[str]) -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    if char_fd is None:
        return found
    for link in links:
        name = os.path.basename(link)
        try:
            st = os.stat(name, dir_fd=char_fd, follow_symlinks=False)
        except FileNotFoundError:
            continue
        found[link] = os.readlink(name, dir_fd=char_fd) if stat.S_ISLNK(st.st_mode) else None
    return found


def apply(dev_root: str = "/", dry_run: bool = False) -> dict[str, Any]:
    """Create the links under ``<dev_root>/dev/char``; returns the report printed by ``main``. Every write is made
    relative to a descriptor of ``/dev/char`` (``open_char_dir``); a ``/dev/char`` that is a link or no directory
    is one error in the report and nothing is written."""
    dev_dir = os.path.join(dev_root, "dev")
    char_dir = os.path.join(dev_dir, "char")
    nodes = scan_device_nodes(dev_dir)
    report: dict[str, Any] = {"links": 0, "created": [], "replaced": [], "conflicts": [], "errors": []}
    try:
        char_fd = open_char_dir(char_dir, create=False)
        actions = plan(nodes, _existing(char_fd, [char_link(n) for n in nodes]))
        if char_fd is None and not dry_run and any(a[0] in ("create", "replace") for a in actions):
            char_fd = open_char_dir(char_dir, create=True)
    except (CharDirError, OSError) as exc:
        report["errors"].append(str(exc) if isinstance(exc, CharDirError) else f"{char_dir}: {exc.strerror or exc}")
        return report
    try:
        for action, link, target in actions:
            name = os.path.basename(link)
            if action == "conflict":
                report["conflicts"].append(link)
                continue
            if action != "ok" and not dry_run:
                tmp = f"{name}.gpufleet-{os.getpid()}"
                try:
                    os.symlink(target, tmp, dir_fd=char_fd)
                    os.replace(tmp, name, src_dir_fd=char_fd, dst_dir_fd=char_fd)
                except OSError as exc:
                    report["errors"].append(f"{link}: {exc.strerror or exc}")
                    continue
            if action == "create":
                report["created"].append(link)
            elif action == "replace":
                report["replaced"].append(link)
            report["links"] += 1
    finally:
        if char_fd is not None:
            os.close(char_fd)
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
        sys.stderr.write(error_line(NAME, exc))
        return 2
    try:
        report = apply(options["dev_root"], options["dry_run"])
    except Exception as exc:  # one line, never a traceback (run by udev and the runtime role)
        sys.stderr.write(error_line(NAME, f"internal error ({type(exc).__name__}: {exc})"))
        return 1
    sys.stdout.write(json.dumps(report, sort_keys=True) + "\n")
    for problem in report["conflicts"]:
        sys.stderr.write(error_line(NAME, f"{problem} exists and is not a link; left alone"))
    for problem in report["errors"]:
        sys.stderr.write(error_line(NAME, problem))
    return 1 if report["conflicts"] or report["errors"] else 0
