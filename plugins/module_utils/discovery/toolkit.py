# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The container toolkit installed on the host, and the CDI spec: what a stage that runs alone (``site.yml --tags
runtime``) needs from the stages before it when they did not run in this play.

* the native provider (``host_programs``): its launchers in the toolkit's bindir, each marked ``installed by
  gpufleet.nvidia``, and the shim's ``/etc/gpufleet/runtime.json`` (which device requests it honours);
* NVIDIA's packages: ``/usr/bin/nvidia-container-runtime`` and its neighbours, with
  ``/etc/nvidia-container-runtime/config.toml`` for the same two settings, and this collection's helpers;
* the CDI spec under ``/etc/cdi`` or ``/var/run/cdi`` (``nvidia.yaml``/``nvidia.json``).

The program names, the config path and its defaults are ``hostprog/install.py``'s (``PROGRAMS``, ``RUNTIME_CONFIG``,
``RUNTIME_CONFIG_DEFAULTS``); discovery sits below ``hostprog`` and cannot import it, so they are repeated here and
``tests/unit/plugins/module_utils/discovery/test_toolkit.py`` holds the two equal."""

from __future__ import annotations

import json
import os
import re
from typing import Any

from ..base.fileio import read_text
from ..base.names import SHIM
from ..base.pathsafe import host_path
from ..cdi.spec import DRIVER_VERSION_ANNOTATION

HOOK = "gpufleet-cdi-hook"
NATIVE_PROGRAMS = (
    SHIM,
    "gpufleet-cdi-hook",
    "nvidia-container-runtime-hook",
    "gpufleet-cdi-refresh",
    "gpufleet-dev-char-links",
    "nvidia-container-cli",
    "nvidia-docker",
    "gpufleet-nvidia-devices",
    "gpufleet-mig-boot",
    "gpufleet-gpu-watch",
)
HELPER_PROGRAMS = ("gpufleet-cdi-hook", "gpufleet-cdi-refresh", "gpufleet-dev-char-links", "gpufleet-nvidia-devices")
RUNTIME_CONFIG = "/etc/gpufleet/runtime.json"
RUNTIME_CONFIG_DEFAULTS = {
    "accept_cdi_annotations_unprivileged": True,
    "accept_envvar_unprivileged": True,
    "accept_volume_mounts": False,
}
MARK = "installed by gpufleet.nvidia"
DEFAULT_BINDIR = "/usr/local/bin"
NVIDIA_PROGRAMS = (
    "/usr/bin/nvidia-container-runtime",
    "/usr/bin/nvidia-container-runtime-hook",
    "/usr/bin/nvidia-ctk",
)
NVIDIA_CONFIG = "/etc/nvidia-container-runtime/config.toml"
NVIDIA_KEYS = {
    "accept_envvar_unprivileged": "accept-nvidia-visible-devices-envvar-when-unprivileged",
    "accept_volume_mounts": "accept-nvidia-visible-devices-as-volume-mounts",
}
CDI_SPECS = ("/etc/cdi/nvidia.yaml", "/etc/cdi/nvidia.json", "/var/run/cdi/nvidia.yaml", "/var/run/cdi/nvidia.json")
_STAMP = re.compile(rf"{re.escape(DRIVER_VERSION_ANNOTATION)}[\"']?\s*:\s*[\"']?([0-9][0-9.]*)")


def _ours(root: str, path: str) -> bool:
    """Whether ``path`` (in the root's terms) is a launcher that ``host_programs`` wrote."""
    text = read_text(host_path(root, path), tolerant=True, errors="replace")
    return text is not None and MARK in text[:512]


def _executable(root: str, path: str) -> bool:
    real = host_path(root, path)
    return os.path.isfile(real) and os.access(real, os.X_OK)


def _runtime_config(root: str) -> dict[str, bool]:
    settings = dict(RUNTIME_CONFIG_DEFAULTS)
    text = read_text(host_path(root, RUNTIME_CONFIG), tolerant=True)
    try:
        data = json.loads(text) if text else {}
    except ValueError:
        data = {}
    if isinstance(data, dict):
        settings.update({k: v for k, v in data.items() if k in settings and isinstance(v, bool)})
    return settings


def _nvidia_config(root: str) -> dict[str, bool]:
    """The two settings from NVIDIA's config.toml (top-level keys; NVIDIA's defaults when absent), and
    ``accept_cdi_annotations_unprivileged`` true: NVIDIA has no such setting, its runtime honours CDI annotations from
    any container in its ``cdi`` mode."""
    settings = dict(RUNTIME_CONFIG_DEFAULTS)
    text = read_text(host_path(root, NVIDIA_CONFIG), tolerant=True) or ""
    for key, toml_key in NVIDIA_KEYS.items():
        match = re.search(rf"(?m)^\s*{re.escape(toml_key)}\s*=\s*(true|false)\b", text)
        if match:
            settings[key] = match.group(1) == "true"
    return settings


def toolkit(root: str = "/", bindir: str = DEFAULT_BINDIR) -> dict[str, Any] | None:
    """The installed toolkit as the toolkit role publishes it (``gpufleet_toolkit``'s keys, ``version`` aside), with
    ``source: discovered``; None when neither provider is installed."""
    ours = [f"{bindir.rstrip('/')}/{name}" for name in NATIVE_PROGRAMS]
    ours = [path for path in ours if _executable(root, path) and _ours(root, path)]
    shim = f"{bindir.rstrip('/')}/{SHIM}"
    hook = f"{bindir.rstrip('/')}/{HOOK}"
    if shim in ours:
        return {
            "provider": "native",
            "runtime_path": shim,
            "hook_path": hook if hook in ours else None,
            "programs": ours,
            "version": None,
            "source": "discovered",
            **_runtime_config(root),
        }
    nvidia = [path for path in NVIDIA_PROGRAMS if _executable(root, path)]
    if NVIDIA_PROGRAMS[0] in nvidia:
        return {
            "provider": "nvidia",
            "runtime_path": NVIDIA_PROGRAMS[0],
            "hook_path": hook if hook in ours else None,
            "programs": nvidia + [path for path in ours if path.rsplit("/", 1)[-1] in HELPER_PROGRAMS],
            "version": None,
            "source": "discovered",
            **_nvidia_config(root),
        }
    return None


def shadowed(root: str = "/", bindir: str = DEFAULT_BINDIR) -> list[tuple[str, str]]:
    """``(ours, NVIDIA's)`` for each launcher ``host_programs`` wrote into ``bindir`` under the name of a program of
    NVIDIA's in ``/usr/bin`` (``nvidia-container-runtime-hook``, ``nvidia-container-cli``): a ``PATH`` lookup, as
    NVIDIA's runtime does for its hook, finds ours first (``/usr/local/bin`` comes before ``/usr/bin``)."""
    found = []
    for name in NATIVE_PROGRAMS:
        mine, theirs = f"{bindir.rstrip('/')}/{name}", f"/usr/bin/{name}"
        if mine == theirs or not (_executable(root, theirs) and _executable(root, mine)):
            continue
        if _ours(root, mine) and not _ours(root, theirs):
            found.append((mine, theirs))
    return found


def cdi_spec(root: str = "/") -> dict[str, Any] | None:
    """The first NVIDIA CDI spec found (``path``, ``driver_version`` it is stamped with, when it says), else None."""
    for path in CDI_SPECS:
        text = read_text(host_path(root, path), tolerant=True, errors="replace")
        if text is not None:
            stamp = _STAMP.search(text[:4096])
            return {"path": path, "driver_version": stamp.group(1) if stamp else None}
    return None
