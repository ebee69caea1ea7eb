# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""NVIDIA's own container toolkit on the host, whoever installed it, and every CDI spec the engines read.

What ``gpu_facts`` publishes as ``ansible_facts.nvidia.nvidia_toolkit`` (the toolkit role's ``auto`` adopts it,
``problems`` finds its conflicts with ours):

* ``packages``: NVIDIA's four packages (dpkg's status file; ``rpm -q`` on an rpm host), full versions;
* ``binaries``: NVIDIA's programs in ``/usr/bin`` and the version each prints with ``--version`` (run on ``/``
  only);
* ``config``: ``/etc/nvidia-container-runtime/config.toml`` (written by ``nvidia-ctk config``/the package);
* ``cdi_specs``: every spec in the directories the engines read, each with its ``kind``, device names and whether
  this collection wrote it (its ``gpufleet.nvidia/driver-version`` annotation);
* ``units``: NVIDIA's ``nvidia-cdi-refresh.service``/``.path`` (toolkit 1.18 on), found, enabled, masked, active.
* ``repositories``: the package source files that name NVIDIA's container toolkit repository.

Sources, read 2026-11-23:

* CDI spec directories and their order: container-device-interface ``pkg/cdi/spec-dirs.go``
  (``DefaultSpecDirs = []string{"/etc/cdi", "/var/run/cdi"}``, a later directory has the higher priority, only
  ``.json`` and ``.yaml`` files are loaded) and ``pkg/cdi/cache.go`` ``refresh`` (commit 0256ad41): one device
  name in two specs of the same priority is a conflict and both are dropped; across directories the higher
  priority silently wins.
* NVIDIA's refresh units: NVIDIA/nvidia-container-toolkit ``deployments/systemd/nvidia-cdi-refresh.service``
  (commit 044b670d: ``nvidia-ctk cdi generate`` to ``NVIDIA_CTK_CDI_OUTPUT_FILE_PATH=/var/run/cdi/nvidia.yaml``)
  and ``nvidia-cdi-refresh.path`` (commit 347d5efd: runs it when ``modules.dep`` changes), packaged from v1.18.0.

Standard library only (target Pythons 3.8+).
"""

from __future__ import annotations

import json
import os
import re
from typing import Any, Callable, Iterator

from ..base.fileio import read_text
from ..base.pathsafe import host_path
from ..base.version import compare
from ..cdi.spec import DRIVER_VERSION_ANNOTATION

PACKAGES = (
    "nvidia-container-toolkit",
    "nvidia-container-toolkit-base",
    "libnvidia-container-tools",
    "libnvidia-container1",
)
BINARIES = (
    "/usr/bin/nvidia-ctk",
    "/usr/bin/nvidia-container-runtime",
    "/usr/bin/nvidia-container-runtime-hook",
    "/usr/bin/nvidia-cdi-hook",
    "/usr/bin/nvidia-container-cli",
)
CONFIG = "/etc/nvidia-container-runtime/config.toml"
CDI_SPEC_DIRS = ("/etc/cdi", "/var/run/cdi")
CDI_SPEC_EXTENSIONS = (".json", ".yaml")
UNITS = ("nvidia-cdi-refresh.service", "nvidia-cdi-refresh.path")
# systemd's unit load path for system units (systemd.unit(5)), highest precedence first.
UNIT_DIRS = (
    "/etc/systemd/system",
    "/run/systemd/system",
    "/usr/local/lib/systemd/system",
    "/usr/lib/systemd/system",
    "/lib/systemd/system",
)
# NVIDIA's container toolkit repository among the host's package sources (NVIDIA's install guide names its list
# nvidia-container-toolkit.list and its repo nvidia-container-toolkit.repo; the packages are libnvidia-container*).
REPO_DIRS = ("/etc/apt/sources.list.d", "/etc/yum.repos.d")
REPO_SUFFIXES = (".list", ".sources", ".repo")
REPO_NAMES = ("libnvidia-container", "nvidia-container-toolkit")
SPEC_LIMIT = 4 << 20
_VERSION = re.compile(r"\b(\d+\.\d+(?:\.\d+)?)\b")
_DPKG_FIELD = re.compile(r"(?m)^([A-Za-z-]+): (.*)$")


def dpkg_stanzas(status: str | None) -> Iterator[dict[str, str]]:
    """Each package's stanza of a dpkg status file as ``{field: value}`` (a field's first line; the continuation
    lines of a multi-line field are left out)."""
    for stanza in (status or "").split("\n\n"):
        yield dict(_DPKG_FIELD.findall(stanza))


def dpkg_packages(status: str | None, names: tuple[str, ...] = PACKAGES) -> dict[str, str]:
    """``{package: full version}`` of the installed ones among ``names`` in a dpkg status file."""
    found = {}
    for fields in dpkg_stanzas(status):
        if fields.get("Package") in names and fields.get("Status", "").endswith(" installed") and "Version" in fields:
            found[fields["Package"]] = fields["Version"]
    return found


# rpm's own query of NVIDIA's packages. Its output and exit status, as rpm 4.18.0 gives them (captured 2026-11-23 from
# a database of stand-in packages, tests/unit/plugins/module_utils/discovery/test_nvidia_toolkit.py): one
# ``NAME VERSION-RELEASE`` line per installed instance (a package installed twice, another version or architecture,
# has two), ``package NAME is not installed`` on stdout for each one missing, and the exit status is the number of
# packages not installed (2 for two missing, as measured): 0 to 4 here, all of them an answer, so every status up to
# the number of packages keeps the packages found.
RPM_QUERY = ("/usr/bin/rpm", "-q", "--qf", "%{NAME} %{VERSION}-%{RELEASE}\\n", *PACKAGES)


def rpm_packages(output: str, rc: int = 0) -> dict[str, str]:
    """``{package: version-release}`` from ``RPM_QUERY``'s output and exit status (the number of packages not
    installed; any other status, as rpm's database cannot be read, is no answer: ``{}``); a package listed twice keeps
    its newest version."""
    if not 0 <= rc <= len(PACKAGES):
        return {}
    found: dict[str, str] = {}
    for line in output.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] in PACKAGES:
            old = found.get(parts[0])
            if old is None or compare(parts[1], ">", old):
                found[parts[0]] = parts[1]
    return found


def binary_version(output: str) -> str | None:
    """The first version in a program's ``--version`` output (``NVIDIA Container Toolkit CLI version 1.17.8``,
    ``cli-version: 1.17.8``)."""
    match = _VERSION.search(output or "")
    return match.group(1) if match else None


def _unquote(value: str) -> str:
    value = value.split(" #", 1)[0].strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def spec_summary(text: str, json_format: bool) -> tuple[str | None, list[str], bool]:
    """``(kind, device names, written by this collection)`` of a CDI spec's text. JSON is parsed; YAML is read line
    by line (no YAML parser in the standard library): the top-level ``kind:``, and the ``name:`` of each item of the
    top-level ``devices:`` list, in the block style both ``nvidia-ctk cdi generate`` (items at the key's column)
    and ``cdi/spec.render_yaml`` (items indented by two) write."""
    ours = DRIVER_VERSION_ANNOTATION in text
    if json_format:
        try:
            data = json.loads(text)
        except ValueError:
            return None, [], ours
        if not isinstance(data, dict):
            return None, [], ours
        devices = data.get("devices") if isinstance(data.get("devices"), list) else []
        names = [str(d["name"]) for d in devices if isinstance(d, dict) and isinstance(d.get("name"), (str, int))]
        kind = data.get("kind")
        return (kind if isinstance(kind, str) else None), names, ours
    kind = None
    names: list[str] = []
    in_devices = False
    item_indent = None
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if not line[0].isspace() and not line.startswith("-"):
            in_devices = line.rstrip() == "devices:"
            key, sep, value = line.partition(":")
            if sep and key == "kind":
                kind = _unquote(value)
            continue
        if not in_devices:
            continue
        stripped = line.lstrip(" ")
        indent = len(line) - len(stripped)
        if stripped.startswith("- "):
            if item_indent is None:
                item_indent = indent
            if indent == item_indent:
                stripped, indent = stripped[2:].lstrip(" "), indent + 2
        if item_indent is not None and indent == item_indent + 2 and stripped.startswith("name:"):
            names.append(_unquote(stripped[5:]))
    return kind, names, ours


def cdi_specs(root: str = "/") -> list[dict[str, Any]]:
    """Every CDI spec the engines load, in the order they load them (``/etc/cdi`` then ``/var/run/cdi``, files by
    name): ``{path, priority, kind, devices, ours}``; a file that cannot be read or parsed has ``kind`` None."""
    found = []
    for priority, directory in enumerate(CDI_SPEC_DIRS):
        try:
            names = sorted(os.listdir(host_path(root, directory)))
        except OSError:
            continue
        for name in names:
            path = f"{directory}/{name}"
            if os.path.splitext(name)[1] not in CDI_SPEC_EXTENSIONS or not os.path.isfile(host_path(root, path)):
                continue
            text = read_text(host_path(root, path), tolerant=True, errors="replace", limit=SPEC_LIMIT) or ""
            kind, devices, ours = spec_summary(text, name.endswith(".json"))
            found.append({"path": path, "priority": priority, "kind": kind, "devices": devices, "ours": ours})
    return found


def spec_conflicts(specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Pairs of specs that claim one ``kind=name`` device: ``{device, paths, dropped}``, ``dropped`` true when both
    are of the same priority (the CDI cache drops the device: no engine can use it), false when the spec in the
    higher-priority directory silently wins (``paths`` lists the winner last)."""
    owner: dict[str, dict[str, Any]] = {}
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for spec in specs:
        if not spec.get("kind"):
            continue
        for name in spec["devices"]:
            device = f"{spec['kind']}={name}"
            other = owner.get(device)
            if other is None:
                owner[device] = spec
                continue
            pair = (other["path"], spec["path"])
            entry = found.setdefault(
                pair, {"devices": [], "paths": list(pair), "dropped": other["priority"] == spec["priority"]}
            )
            entry["devices"].append(device)
            if other["priority"] < spec["priority"]:
                owner[device] = spec
    return list(found.values())


def units(root: str = "/") -> dict[str, dict[str, Any]]:
    """NVIDIA's refresh units: ``{unit: {path, enabled, masked}}`` for those found (``masked``: the unit file in
    ``/etc/systemd/system`` is a link to ``/dev/null``; ``enabled``: linked from a ``*.wants`` folder there)."""
    found = {}
    for unit in UNITS:
        path = None
        masked = False
        for directory in UNIT_DIRS:
            candidate = host_path(root, f"{directory}/{unit}")
            if os.path.lexists(candidate):
                if os.path.islink(candidate) and os.readlink(candidate) == "/dev/null":
                    masked = True
                    continue
                path = path or f"{directory}/{unit}"
        if path is None and not masked:
            continue
        wants = host_path(root, "/etc/systemd/system")
        try:
            enabled = any(
                os.path.lexists(os.path.join(wants, d, unit)) for d in os.listdir(wants) if d.endswith(".wants")
            )
        except OSError:
            enabled = False
        found[unit] = {"path": path, "enabled": enabled, "masked": masked}
    return found


def repositories(root: str = "/") -> list[str]:
    """The apt list and sources files and the dnf repo files that name NVIDIA's container toolkit repository
    (``libnvidia-container`` or ``nvidia-container-toolkit`` in their text), in path order."""
    found = []
    for directory in REPO_DIRS:
        try:
            names = sorted(os.listdir(host_path(root, directory)))
        except OSError:
            continue
        for name in names:
            path = f"{directory}/{name}"
            if name.endswith(REPO_SUFFIXES) and os.path.isfile(host_path(root, path)):
                text = read_text(host_path(root, path), tolerant=True, errors="replace") or ""
                if any(word in text for word in REPO_NAMES):
                    found.append(path)
    return found


def nvidia_toolkit(
    root: str = "/", run_command: Callable[[list[str]], tuple[int, str, str]] | None = None
) -> dict[str, Any]:
    """The ``nvidia_toolkit`` fact (see the module docstring); ``installed`` when any of NVIDIA's packages or its
    runtime, CLI or ``nvidia-ctk`` is there."""
    on_host = os.path.abspath(root) == "/" and run_command is not None
    status = read_text(host_path(root, "/var/lib/dpkg/status"), tolerant=True, errors="replace")
    packages = dpkg_packages(status)
    if status is None and on_host and os.access("/usr/bin/rpm", os.X_OK):
        rc, out, _err = run_command(list(RPM_QUERY))
        packages = rpm_packages(out, rc)
    binaries = {}
    for path in BINARIES:
        real = host_path(root, path)
        if os.path.isfile(real) and os.access(real, os.X_OK):
            version = None
            if on_host:
                rc, out, err = run_command([path, "--version"])
                version = binary_version(out or err) if rc == 0 else None
            binaries[path] = {"version": version}
    config = os.path.isfile(host_path(root, CONFIG))
    return {
        "installed": bool(packages) or any(p in binaries for p in BINARIES[:2]) or BINARIES[4] in binaries,
        "packages": packages,
        "binaries": binaries,
        "config_path": CONFIG if config else None,
        "cdi_specs": cdi_specs(root),
        "units": units(root),
        "repositories": repositories(root),
    }


DISABLED_SUFFIX = ".gpufleet-disabled"


def specs_to_disable(specs: list[dict[str, Any]], path: str, kind: str, names: list[str]) -> list[dict[str, Any]]:
    """The specs among ``specs`` (``cdi_specs``' entries) that a spec about to be written at ``path`` for ``kind``
    and device ``names`` would collide with: every other spec of that kind claiming one of those names (the CDI cache
    drops the device or lets the later directory win), and a spec at ``path`` itself that this collection did not
    write (its content is kept as a backup before it is replaced)."""
    wanted = set(names)
    return [
        spec
        for spec in specs
        if spec.get("kind") == kind
        and wanted & set(spec.get("devices") or ())
        and (spec["path"] != path or not spec.get("ours"))
    ]


def disabled_path(path: str, taken: Callable[[str], bool], stamp: str) -> str:
    """Where a spec moved aside goes: ``<path>.gpufleet-disabled`` in its own folder (a name the CDI cache does not
    load, found next to the file it replaces), ``<path>.<stamp>.gpufleet-disabled`` when that is taken."""
    first = path + DISABLED_SUFFIX
    return first if not taken(first) else f"{path}.{stamp}{DISABLED_SUFFIX}"
