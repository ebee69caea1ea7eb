# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The kernel a host boots next, read from its bootloader's files the way the bootloader reads them.

Sources, each read 2026-11-27:

* GRUB: the environment block (``grubenv``: ``saved_entry``, and ``next_entry`` that ``grub-reboot`` sets for one
  boot), and ``default`` naming a menu entry by number, title or ``--id``, with ``>`` between a submenu and its entry
  (GNU GRUB manual, "Environment block", "default", "grub-reboot":
  https://www.gnu.org/software/grub/manual/grub/grub.html). The generated ``grub.cfg`` sets ``default`` to
  ``${next_entry}`` when that is set, else to ``${saved_entry}`` (``GRUB_DEFAULT=saved``) or to a fixed entry.
  Debian and Ubuntu: ``/boot/grub/grub.cfg``, ``/boot/grub/grubenv``; RHEL: ``/boot/grub2/``.
* RHEL 8 and later: GRUB's ``blscfg`` command builds the menu from Boot Loader Specification entries in
  ``/boot/loader/entries/*.conf`` (keys ``title``, ``version``, ``linux``); ``saved_entry`` holds the entry's file
  name without ``.conf``, which ``grubby --set-default`` writes and ``grubby --default-kernel`` reads back (RHEL 9
  "Managing, monitoring and updating the kernel", chapter "Configuring kernel command-line parameters" / "Changing
  the default boot entry with grubby":
  https://docs.redhat.com/en/documentation/red_hat_enterprise_linux/9/html/managing_monitoring_and_updating_the_kernel/;
  UAPI Boot Loader Specification, type #1 entries and their sorting (newest version first):
  https://uapi-group.org/specifications/specs/boot_loader_specification/).
* systemd-boot: ``loader/loader.conf``'s ``default`` (a glob over entry ids) on the ESP (``/efi``, ``/boot`` or
  ``/boot/efi``), overridden by the EFI variables ``LoaderEntryOneShot`` (next boot only) and ``LoaderEntryDefault``
  (vendor GUID 4a67b082-0a4c-41cf-b6c7-440b29bb8c4f, UTF-16LE) that ``bootctl set-oneshot``/``set-default`` write
  (loader.conf(5) https://www.freedesktop.org/software/systemd/man/latest/loader.conf.html, systemd-boot(7)
  https://www.freedesktop.org/software/systemd/man/latest/systemd-boot.html). Unified kernel images
  (``EFI/Linux/*.efi``, type #2) are not read: their kernel is inside the image.
* Neither found: the newest kernel that has both ``/lib/modules/<k>`` and ``/boot/vmlinuz-<k>`` (what the
  distributions' kernel postinst hooks make the default).

Standard library only (target Pythons 3.8+).
"""

from __future__ import annotations

import fnmatch
import os
import re
import shlex
from typing import Any

from ..base.fileio import read_text
from ..base.pathsafe import host_path

GRUB_DIRS = ("/boot/grub", "/boot/grub2")
ESP_DIRS = ("/efi", "/boot", "/boot/efi")
BLS_DIRS = ("/boot/loader/entries",)
LOADER_GUID = "4a67b082-0a4c-41cf-b6c7-440b29bb8c4f"
_ENTRY = re.compile(r"^\s*(menuentry|submenu)\s+(.*?)\s*\{\s*$")
_LINUX = re.compile(r"^\s*(?:linux|linuxefi|linux16)\s+(\S+)")
_SET_DEFAULT = re.compile(r"""^\s*set\s+default=["']?([^"'\s]*)["']?\s*$""")


def version_key(text: str) -> tuple[Any, ...]:
    """A sort key for kernel version strings: numbers compare as numbers (``6.8.0-45`` < ``6.8.0-100``)."""
    return tuple(
        (0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.findall(r"\d+|[^\d.\-_+~]+", text)
    )


def kernel_of(linux_path: str | None) -> str | None:
    """``/boot/vmlinuz-6.8.0-45-generic`` -> ``6.8.0-45-generic``; None for anything else."""
    base = os.path.basename(linux_path or "")
    return release(base[len("vmlinuz-") :]) if base.startswith("vmlinuz-") else None


def release(text: str | None) -> str | None:
    """``text`` when it can be a kernel release name (a directory name under ``/lib/modules``), else None."""
    text = (text or "").strip()
    return text if text and "/" not in text and text not in (".", "..") else None


def parse_grubenv(text: str | None) -> dict[str, str]:
    """The ``key=value`` lines of a GRUB environment block (comments and the ``#`` padding left out)."""
    env: dict[str, str] = {}
    for line in (text or "").splitlines():
        key, sep, value = line.partition("=")
        if sep and key and not key.startswith("#"):
            env[key.strip()] = value
    return env


def parse_grub_cfg(text: str) -> tuple[list[dict[str, Any]], list[str], bool]:
    """``(menu, default values, blscfg used)``: the menu as ``{"title", "id", "kernel", "children"}`` entries in
    order, the top-level ``set default=`` values, and whether ``blscfg`` builds entries from BLS files."""
    root: list[dict[str, Any]] = []
    stack: list[dict[str, Any]] = []
    defaults: list[str] = []
    blscfg = False
    for line in text.splitlines():
        match = _ENTRY.match(line)
        if match:
            try:
                words = shlex.split(match.group(2))
            except ValueError:
                words = match.group(2).split()
            ident = None
            for i, word in enumerate(words[1:], 1):
                if word in ("$menuentry_id_option", "--id") and i + 1 < len(words):
                    ident = words[i + 1]
            entry = {"title": words[0] if words else "", "id": ident, "kernel": None, "children": None}
            if match.group(1) == "submenu":
                entry["children"] = []
            (stack[-1]["children"] if stack else root).append(entry)
            stack.append(entry)
            continue
        stripped = line.strip()
        if stripped == "}" and stack:
            stack.pop()
            continue
        linux = _LINUX.match(line)
        if linux and stack and stack[-1]["kernel"] is None:
            stack[-1]["kernel"] = kernel_of(linux.group(1))
            continue
        if not stack:
            default = _SET_DEFAULT.match(line)
            if default:
                defaults.append(default.group(1))
            elif stripped == "blscfg" or stripped.startswith("blscfg "):
                blscfg = True
    return root, defaults, blscfg


def parse_bls(text: str) -> dict[str, str]:
    """A Boot Loader Specification type #1 entry's ``key value`` lines (first of each key)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.strip().split(None, 1)
        if len(parts) == 2 and not parts[0].startswith("#"):
            fields.setdefault(parts[0], parts[1].strip())
    return fields


def bls_entries(root: str, dirs: tuple[str, ...]) -> list[dict[str, Any]]:
    """The BLS entries under ``dirs`` as menu entries (``id`` is the file name without ``.conf``), sorted as the
    specification sorts them: ``sort-key``, then version, newest first."""
    entries = []
    for directory in dirs:
        path = host_path(root, directory)
        try:
            names = sorted(n for n in os.listdir(path) if n.endswith(".conf"))
        except OSError:
            continue
        for name in names:
            fields = parse_bls(read_text(os.path.join(path, name), tolerant=True) or "")
            # The specification's version is the kernel's; Arch-style /vmlinuz-linux names no release.
            kernel = release(fields.get("version")) or kernel_of(fields.get("linux"))
            entries.append(
                {
                    "title": fields.get("title") or name[:-5],
                    "id": name[:-5],
                    "kernel": kernel if fields.get("linux") else None,
                    "children": None,
                    "sort": (fields.get("sort-key", ""), version_key(fields.get("version") or kernel or name)),
                }
            )
    entries.sort(key=lambda e: e["sort"][1], reverse=True)
    entries.sort(key=lambda e: e["sort"][0])
    return entries


def select(menu: list[dict[str, Any]], default: str) -> dict[str, Any] | None:
    """The entry ``default`` names (GRUB's rule: each ``>``-separated part a number, an id or a title)."""
    level: list[dict[str, Any]] | None = menu
    chosen = None
    for part in default.split(">"):
        if level is None:
            return None
        if part.isdigit():
            chosen = level[int(part)] if int(part) < len(level) else None
        else:
            chosen = next((e for e in level if part in (e["id"], e["title"])), None)
        if chosen is None:
            return None
        level = chosen["children"]
    if chosen is not None and chosen["children"] is not None:
        return None
    return chosen


def _grub(root: str) -> dict[str, Any] | None:
    for directory in GRUB_DIRS:
        cfg_path = host_path(root, f"{directory}/grub.cfg")
        text = read_text(cfg_path, tolerant=True)
        if text is None:
            continue
        env = parse_grubenv(read_text(host_path(root, f"{directory}/grubenv"), tolerant=True))
        menu, defaults, blscfg = parse_grub_cfg(text)
        if blscfg:
            menu = bls_entries(root, BLS_DIRS) + menu
        default, via = "0", f"{directory}/grub.cfg (first entry)"
        for value in defaults:
            if value == "${next_entry}" and env.get("next_entry"):
                default, via = env["next_entry"], f"{directory}/grubenv next_entry"
                break
            if value == "${saved_entry}":
                if env.get("saved_entry"):
                    default, via = env["saved_entry"], f"{directory}/grubenv saved_entry"
            elif value and value != "${next_entry}":
                default, via = value, f"{directory}/grub.cfg set default"
        entry = select(menu, default)
        return {"bootloader": "grub", "source": via, "entry": default, "kernel": entry["kernel"] if entry else None}
    return None


def efi_string(sys_dir: str, name: str) -> str | None:
    """A systemd-boot EFI variable (4 attribute bytes, then UTF-16LE, NUL-terminated); None when absent."""
    try:
        with open(os.path.join(sys_dir, "firmware", "efi", "efivars", f"{name}-{LOADER_GUID}"), "rb") as f:
            data = f.read(4096)
    except OSError:
        return None
    return data[4:].decode("utf-16-le", "replace").split("\0", 1)[0] or None


def _systemd_boot(root: str, sys_dir: str) -> dict[str, Any] | None:
    for esp in ESP_DIRS:
        conf = read_text(host_path(root, f"{esp}/loader/loader.conf"), tolerant=True)
        if conf is None:
            continue
        entries = bls_entries(root, (f"{esp}/loader/entries",))
        pattern, via = parse_bls(conf).get("default"), f"{esp}/loader/loader.conf default"
        for variable in ("LoaderEntryOneShot", "LoaderEntryDefault"):
            value = efi_string(sys_dir, variable)
            if value:
                pattern, via = value, f"EFI variable {variable}"
                break
        if pattern:
            matching = [
                e for e in entries if fnmatch.fnmatch(e["id"], pattern) or fnmatch.fnmatch(f"{e['id']}.conf", pattern)
            ]
        else:
            matching, via = entries, f"{esp}/loader/entries (first entry)"
        entry = matching[0] if matching else None
        return {
            "bootloader": "systemd-boot",
            "source": via,
            "entry": entry["id"] if entry else pattern,
            "kernel": entry["kernel"] if entry else None,
        }
    return None


def newest_installed(root: str) -> str | None:
    """The newest kernel with both ``/lib/modules/<k>`` and ``/boot/vmlinuz-<k>``."""
    try:
        names = os.listdir(host_path(root, "/lib/modules"))
    except OSError:
        return None
    kernels = [k for k in names if os.path.exists(host_path(root, f"/boot/vmlinuz-{k}"))]
    return max(kernels, key=version_key) if kernels else None


def next_kernel(root: str = "/", sys_dir: str | None = None) -> dict[str, Any]:
    """``{"bootloader", "source", "entry", "kernel"}`` for the host under ``root``; ``kernel`` None when the
    default entry names no Linux kernel or nothing could be read (``bootloader`` None then)."""
    sys_dir = sys_dir if sys_dir is not None else host_path(root, "/sys")
    grub = _grub(root)
    systemd_boot = _systemd_boot(root, sys_dir)
    # Both installed: the one the firmware starts tells itself by LoaderInfo (systemd-boot sets it, GRUB does not).
    if systemd_boot and (grub is None or efi_string(sys_dir, "LoaderInfo")):
        return systemd_boot
    if grub:
        return grub
    kernel = newest_installed(root)
    return {
        "bootloader": None,
        "source": "newest kernel in /lib/modules with /boot/vmlinuz" if kernel else None,
        "entry": None,
        "kernel": kernel,
    }
