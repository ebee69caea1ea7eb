# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Container engines on the host under ``root``: docker, containerd, CRI-O and podman.

For each: ``installed`` (its binary is in the root), ``version`` (from the dpkg database, which costs
no process; on ``/`` only, ``<binary> --version`` when dpkg does not know it), ``config_path``,
``runtimes`` (names registered), ``default_runtime`` and ``cdi_enabled`` (containerd: ``config_version``; docker:
``unit_flags``, the flags of its systemd unit that conflict with the runtime registration in ``daemon.json``).

What each engine reads and how (file locations, containerd's import rule, CDI defaults by version) is the
engine adapter's (``runtime.registry.ENGINES``), the same reading the container_runtime module plans with;
this module only finds the files under ``root`` and parses them without ever raising for a host state.

TOML is read with ``tomllib`` (3.11+), else ``tomlkit`` when importable; with neither, the TOML-derived
fields stay None and a warning says why.

Standard library only (target Pythons 3.8+; ``tomlkit`` optional).
"""

from __future__ import annotations

import glob
import os
import re
from typing import Any, Callable

from ..base.fileio import read_text
from ..base.pathsafe import host_path
from ..base.version import parse as parse_version
from ..runtime.base import Engine, Glob, toml_loader
from ..runtime.registry import FACTS as ADAPTERS

BINARY_DIRS = ("/usr/local/bin", "/usr/bin", "/usr/sbin", "/bin", "/sbin")
_VERSION = re.compile(r"(\d+\.\d+(?:\.\d+)?)")
_toml_loads = toml_loader()


def _read(root: str, inner: str) -> str | None:
    return read_text(host_path(root, inner), tolerant=True)


def _find_binary(root: str, names: tuple[str, ...] | list[str]) -> str | None:
    for name in names:
        for directory in BINARY_DIRS:
            path = host_path(root, directory + "/" + name)
            if os.path.isfile(path) and os.access(path, os.X_OK):
                return directory + "/" + name
    return None


def dpkg_versions(text: str | None, packages: tuple[str, ...] | list[str]) -> dict[str, str]:
    """``{package: upstream version}`` of the installed packages among ``packages`` in a dpkg status
    file (``2:20.10.24+dfsg1-1+deb12u1`` -> ``20.10.24``)."""
    wanted = set(packages)
    found = {}
    for stanza in (text or "").split("\n\n"):
        if not stanza.startswith("Package: "):
            continue
        name = stanza[9 : stanza.find("\n")] if "\n" in stanza else stanza[9:]
        if name.strip() not in wanted or "Status: install ok installed" not in stanza:
            continue
        match = re.search(r"^Version: (?:\d+:)?(\S+)", stanza, re.MULTILINE)
        if match:
            version = _VERSION.match(match.group(1))
            found[name.strip()] = version.group(1) if version else match.group(1)
    return found


def _parse(root: str, inner: str, adapter: Engine, warnings: list[str]) -> tuple[Any, bool]:
    """``(data, unreadable)``: the file parsed (None when missing or unreadable; a warning says why)."""
    text = _read(root, inner)
    if text is None:
        return None, False
    if adapter.config_format == "toml" and _toml_loads is None:
        warnings.append(
            f"{adapter.name}: cannot read {inner}: no TOML parser (tomllib needs Python 3.11, or install tomlkit)"
        )
        return None, True
    try:
        return (_toml_loads(text) if text.strip() else {}) if adapter.config_format == "toml" else adapter.parse(
            text
        ), False
    except Exception as exc:  # each parser raises its own error type
        what = "is not valid TOML" if adapter.config_format == "toml" else "is not valid"
        warnings.append(f"{adapter.name}: {inner} {what}: {exc}")
        return None, True


def _glob_in(root: str) -> Glob:
    top = host_path(root, "/")

    def find(pattern: str) -> list[str]:
        return sorted(
            "/" + os.path.relpath(path, top) for path in glob.glob(host_path(root, pattern)) if os.path.isfile(path)
        )

    return find


def _configured(root: str, name: str, info: dict[str, Any], warnings: list[str]) -> None:
    """Fill ``config_path``, ``runtimes``, ``default_runtime``, ``cdi_enabled`` through the engine's adapter."""
    adapter = ADAPTERS[name]
    info["config_path"] = adapter.config_path
    main, unreadable = _parse(root, adapter.config_path, adapter, warnings)
    if unreadable and adapter.main_decides_all:
        return  # the main file decides the config version and the imports: leave the fields None
    files = [(inner, _parse(root, inner, adapter, warnings)[0]) for inner in adapter.files_before_main()]
    files.append((adapter.config_path, main))
    files += [
        (inner, _parse(root, inner, adapter, warnings)[0])
        for inner in adapter.config_files(main, _glob_in(root), adapter.config_path)
    ]
    info.update(adapter.read(files, parse_version(info["version"])))


def detect(
    root: str,
    run_command: Callable[[list[str]], tuple[int, str, str]] | None = None,
    warnings: list[str] | None = None,
) -> dict[str, dict[str, Any]]:
    """``{engine: {installed, binary, version, config_path, runtimes, default_runtime, cdi_enabled}}``."""
    warnings = [] if warnings is None else warnings
    status = None
    engines = {}
    for name, adapter in ADAPTERS.items():
        info = {
            "installed": False,
            "binary": None,
            "version": None,
            "config_path": None,
            "runtimes": [],
            "default_runtime": None,
            "cdi_enabled": None,
        }
        engines[name] = info
        binary = _find_binary(root, adapter.binaries)
        if binary is None:
            continue
        info["installed"] = True
        info["binary"] = binary
        if status is None:
            status = _read(root, "/var/lib/dpkg/status") or ""
        versions = dpkg_versions(status, adapter.packages)
        for package in adapter.packages:
            if package in versions:
                info["version"] = versions[package]
                break
        if info["version"] is None and run_command is not None and os.path.abspath(root) == "/":
            rc, out, _err = run_command([binary, "--version"])
            match = _VERSION.search(out or "") if rc == 0 else None
            info["version"] = match.group(1) if match else None
        _configured(root, name, info, warnings)
        info.update(adapter.unit_facts(root))
    return engines
