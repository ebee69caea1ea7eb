# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The toolkit role's decisions (controller only, pure), behind its filters:

* ``plan(settings, kubernetes_node, repo_files, nvidia_installed)``: the provider, what the runtime trusts, NVIDIA's
  repository and key, the programs to install (``toolkit_plan``);
* ``packages(packages, version, os_family)``: the requests for NVIDIA's four toolkit packages, held or not, and
  whether anything is to change (``nvidia_toolkit_packages``);
* ``device_requests(text, path)``: the device requests NVIDIA's ``config.toml`` honours
  (``nvidia_toolkit_device_requests``).

A bad setting or file raises ``ToolkitError`` (a ``ValueError``) with the message the filters hand on as
``AnsibleFilterError``.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.gpufleet.nvidia.plugins.module_utils.hostprog.install import DEFAULT_PROGRAMS

try:
    import tomllib
except ImportError:  # pragma: no cover - controller Pythons before 3.11 (ansible-core 2.19 needs 3.11)
    tomllib = None

PROVIDERS = ("native", "nvidia")
NVIDIA_REPO_URL = "https://nvidia.github.io/libnvidia-container/stable"
NVIDIA_DOCKER = "nvidia-docker"
PACKAGES = (
    "nvidia-container-toolkit",
    "nvidia-container-toolkit-base",
    "libnvidia-container-tools",
    "libnvidia-container1",
)
# gpufleet_toolkit key -> (NVIDIA's config.toml key, NVIDIA's default)
KEYS = {
    "accept_envvar_unprivileged": ("accept-nvidia-visible-devices-envvar-when-unprivileged", True),
    "accept_volume_mounts": ("accept-nvidia-visible-devices-as-volume-mounts", False),
}


class ToolkitError(ValueError):
    """A toolkit setting or NVIDIA's config file that cannot work; the message names what to change."""


def _setting(value: Any, derived: bool) -> bool:
    """The role variable as Ansible's ``bool`` filter reads it; null means derived."""
    return derived if value is None else boolean(value, strict=False)


def plan(
    settings: Mapping[str, Any],
    kubernetes_node: Any = False,
    repo_files: Any = 0,
    nvidia_installed: Any = False,
    gpu_allocation: Any = "device_plugin",
) -> dict:
    """The toolkit role's choices for a host (see the ``toolkit_plan`` filter's DOCUMENTATION). ``gpu_allocation`` is
    the device_plugin role's ``device_plugin_gpu_allocation``: the device plugin's default strategy needs the runtime
    to honour its volume mounts; NVIDIA's DRA driver hands out CDI devices, so with ``dra`` no mount is honoured."""
    settings = settings or {}
    provider = settings.get("provider") or "auto"
    mirror = str(settings.get("nvidia_mirror_url") or "")
    state = settings.get("nvidia_state") or "present"
    adopt = False
    if state not in ("present", "absent"):
        raise ToolkitError(f"toolkit_nvidia_state: {state!r} is not present or absent")
    if provider == "auto":
        repository = bool(mirror) or int(repo_files or 0) > 0
        installed = boolean(nvidia_installed, strict=False)
        provider = "nvidia" if state == "present" and (repository or installed) else "native"
        adopt = provider == "nvidia" and not repository and not str(settings.get("nvidia_version") or "")
    elif provider not in PROVIDERS:
        raise ToolkitError(f"toolkit_provider: {provider!r} is not auto, native or nvidia")
    elif provider == "nvidia" and state == "absent":
        raise ToolkitError(
            "toolkit_provider=nvidia with toolkit_nvidia_state=absent: the nvidia provider cannot install NVIDIA's "
            "packages and remove them; set toolkit_provider to auto or native to remove them"
        )
    node = boolean(kubernetes_node, strict=False)
    if gpu_allocation not in (None, "device_plugin", "dra"):
        raise ToolkitError(f"device_plugin_gpu_allocation: {gpu_allocation!r} is not device_plugin or dra")
    dra = gpu_allocation == "dra"
    repo = re.sub(r"/+$", "", mirror or str(settings.get("nvidia_repo_url") or NVIDIA_REPO_URL))
    key = str(settings.get("nvidia_key_url") or "") or f"{re.sub(r'/[^/]+$', '', repo)}/gpgkey"
    return {
        "provider": provider,
        "nvidia_state": state,
        "adopt": adopt,
        "kubernetes_node": node,
        "accept_envvar_unprivileged": _setting(settings.get("accept_envvar_unprivileged"), not node),
        "accept_volume_mounts": _setting(settings.get("accept_volume_mounts"), node and not dra),
        "accept_cdi_annotations_unprivileged": _setting(settings.get("accept_cdi_annotations_unprivileged"), not node),
        "repo": repo,
        "key": key,
        "programs": [
            name for name in DEFAULT_PROGRAMS if name != NVIDIA_DOCKER or _setting(settings.get("nvidia_docker"), True)
        ],
    }


def _installed(entries: Any, os_family: str) -> str:
    entry = (entries or [{}])[0] or {}
    version = str(entry.get("version") or "")
    release = str(entry.get("release") or "")
    return f"{version}-{release}" if os_family != "Debian" and release else version


def packages(packages: Mapping[str, Any] | None, version: str = "", os_family: str = "Debian") -> dict:
    """The package requests of the toolkit role's nvidia provider (see the ``nvidia_toolkit_packages`` filter's
    DOCUMENTATION) from ``ansible_facts.packages``, the pinned ``version`` and the host's ``os_family``."""
    version = str(version or "").strip()
    if any(c.isspace() for c in version) or version.startswith(("=", "-")):
        raise ToolkitError(f"toolkit_nvidia_version: {version!r} is not a package version such as 1.18.0-1")
    debian = os_family == "Debian"
    packages = packages or {}
    installed = {name: _installed(packages[name], os_family) for name in PACKAGES if packages.get(name)}
    if version:
        install = [f"{name}={version}" if debian else f"{name}-{version}" for name in PACKAGES]
        # apt's pin names the Debian revision ("1.18.0-1"); dnf's may leave the release out ("1.18.0")
        pending = any(
            installed.get(n) != version and (debian or not installed.get(n, "").startswith(version + "-"))
            for n in PACKAGES
        )
    else:
        install = list(PACKAGES)
        pending = any(n not in installed for n in PACKAGES)
    return {
        "names": list(PACKAGES),
        "install": install,
        "selection": "hold" if version else "install",
        "installed": installed,
        "pending": pending,
    }


def device_requests(text: str | None, path: str = "/etc/nvidia-container-runtime/config.toml") -> dict[str, bool]:
    """The ``KEYS`` settings of NVIDIA's ``config.toml`` (``text``, read from ``path``) as ``gpufleet_toolkit`` names
    them, NVIDIA's defaults where the file leaves them out."""
    text = text or ""
    if tomllib is None:  # pragma: no cover
        raise ToolkitError("nvidia_toolkit_device_requests needs Python 3.11 or later on the controller")
    try:
        config = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        msg = f"{path} is not valid TOML ({exc}); fix the file or reinstall NVIDIA's toolkit"
        raise ToolkitError(msg) from exc
    out: dict[str, bool] = {}
    for name, (key, default) in KEYS.items():
        value = config.get(key, default)
        if not isinstance(value, bool):
            raise ToolkitError(f"{path}: {key} is {value!r}, not true or false; set {key} = true or false")
        out[name] = value
    return out
