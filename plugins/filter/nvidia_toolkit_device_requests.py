# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""nvidia_toolkit_device_requests: which device requests NVIDIA's runtime trusts, read from its config.toml."""

from __future__ import annotations

DOCUMENTATION = r"""
name: nvidia_toolkit_device_requests
short_description: Which container device requests NVIDIA's container runtime honours, from its config.toml
version_added: 1.0.0
author: gpufleet.nvidia contributors (@gpufleet)
description:
  - Reads the text of NVIDIA's C(/etc/nvidia-container-runtime/config.toml) and returns its two top-level settings
    in the terms of the C(gpufleet_toolkit) fact, with NVIDIA's defaults (nvidia-container-toolkit v1.17.8,
    C(internal/config/config.go) C(GetDefault)) for a missing key or an empty text (no file).
  - C(accept_envvar_unprivileged) is C(accept-nvidia-visible-devices-envvar-when-unprivileged) (default C(true));
    C(accept_volume_mounts) is C(accept-nvidia-visible-devices-as-volume-mounts) (default C(false)).
options:
  _input:
    description: The file's text; an empty string when there is no file.
    type: str
    required: true
  path:
    description: The file's path, for error messages.
    type: str
    default: /etc/nvidia-container-runtime/config.toml
"""

EXAMPLES = r"""
- name: What NVIDIA's runtime trusts on this host
  ansible.builtin.debug:
    msg: "{{ nvidia_config.content | b64decode | gpufleet.nvidia.nvidia_toolkit_device_requests }}"
"""

RETURN = r"""
_value:
  description: C({accept_envvar_unprivileged, accept_volume_mounts}), both booleans.
  type: dict
"""

from typing import Any, Callable

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.toolkit import ToolkitError, device_requests


def nvidia_toolkit_device_requests(
    text: str | None, path: str = "/etc/nvidia-container-runtime/config.toml"
) -> dict[str, bool]:
    try:
        return device_requests(text, path)
    except ToolkitError as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"nvidia_toolkit_device_requests": nvidia_toolkit_device_requests}
