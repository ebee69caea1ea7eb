# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""NVLink domains from the inventory, and what the ``imex`` role writes for a member.

Controller only, pure: the rules behind the ``imex_domain`` filter, which site.yml's imex stage, the role and the
stamped-stage plan share. The convention: ``imex_domain_groups`` lists inventory group names, each group one NVLink
(IMEX) domain; a host in one of them is a member, its address ``imex_address`` (default ``ansible_host``, else the
inventory name). A host in two domain groups, or a member without an address, raises ``ValueError`` (the filter's
``AnsibleFilterError``).

The settings follow NVIDIA's IMEX guide, "IMEX Service Config Options"
(https://docs.nvidia.com/multi-node-nvlink-systems/imex-guide/config.html, read 2026-11-28), whose keys and defaults
the DRA driver's own daemon template uses too (kubernetes-sigs/dra-driver-nvidia-gpu v0.4.1,
templates/compute-domain-daemon-config.tmpl.cfg, read 2026-11-28): ``IMEX_NODE_CONFIG_FILE``
(default ``/etc/nvidia-imex/nodes_config.cfg``), ``SERVER_PORT`` (50000), ``IMEX_WAIT_FOR_QUORUM`` (the template's
``RECOVERY``).
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from . import role_vars

# A config value the role writes is one line: no newline, no comment sign.
_VALUE = re.compile(r"^[^\n\r#]*$")
_KEY = re.compile(r"^[A-Z][A-Z0-9_]*$")


def domain_groups(value: Any) -> list[str]:
    """``imex_domain_groups`` (a list, or a survey's comma string) -> group names; blanks dropped."""
    return [str(name).strip() for name in role_vars.as_list(value, "imex_domain_groups") if str(name).strip()]


def member_of(group_names: Any, groups_value: Any) -> str | None:
    """The domain group of a host in ``group_names``, None when it is in none; ``ValueError`` when in several."""
    names = domain_groups(groups_value)
    found = [name for name in names if name in (group_names or [])]
    if len(found) > 1:
        raise ValueError(f"the host is in {len(found)} NVLink domain groups ({', '.join(found)}): one at most")
    return found[0] if found else None


def in_domain(group_names: Any, groups_value: Any) -> bool:
    """Whether the imex stage acts on a host of ``group_names``: in a domain group, or in several (the stage then
    says why it fails)."""
    try:
        return member_of(group_names, groups_value) is not None
    except ValueError:
        return True


def address(host: str, host_vars: Mapping[str, Any]) -> str:
    """A member's address in ``nodes_config.cfg``: ``imex_address``, else ``ansible_host``, else its name."""
    for name in ("imex_address", "ansible_host"):
        value = host_vars.get(name)
        if value not in (None, ""):
            return str(value).strip()
    return str(host)


def imex_domain(host: Any, groups: Mapping[str, Any], hostvars: Mapping[str, Any], groups_value: Any) -> dict[str, Any]:
    """``{"domain", "members", "addresses", "address"}`` of ``host``: its domain group (None outside any), the
    group's hosts (inventory order), their addresses (sorted, unique: the file every member writes alike) and its own.
    """
    own = hostvars.get(str(host)) or {}
    domain = member_of(own.get("group_names") or [], groups_value)
    if domain is None:
        return {"domain": None, "members": [], "addresses": [], "address": None}
    members = [str(name) for name in groups.get(domain) or []]
    by_host = {name: address(name, hostvars.get(name) or {}) for name in members}
    for name, value in by_host.items():
        if not value or not _VALUE.match(value) or " " in value:
            raise ValueError(f"NVLink domain {domain}: host {name}'s imex_address {value!r} is not one address")
    return {
        "domain": domain,
        "members": members,
        "addresses": sorted(set(by_host.values())),
        "address": by_host.get(str(host)),
    }


def config_settings(nodes_config_path: str, server_port: Any, wait_for_quorum: str, extra: Any) -> dict[str, str]:
    """The ``config.cfg`` keys the role manages, in the order it writes them: the node list's path, the port, the
    quorum mode, then ``extra`` (``imex_settings``); ``ValueError`` for a key or value that is not one ``KEY=value``."""
    port = role_vars.as_int(server_port, "imex_server_port")
    if port is None or not 0 < port < 65536:
        raise ValueError(f"imex_server_port: {server_port!r} is not a TCP port (1 to 65535)")
    settings = {
        "IMEX_NODE_CONFIG_FILE": str(nodes_config_path),
        "SERVER_PORT": str(port),
        "IMEX_WAIT_FOR_QUORUM": str(wait_for_quorum),
    }
    for key, value in dict(extra or {}).items():
        text = str(value).lower() if isinstance(value, bool) else str(value)
        settings[str(key)] = text
    for key, value in settings.items():
        if not _KEY.match(key) or not _VALUE.match(value):
            raise ValueError(f"imex_settings: {key}={value!r} is not one KEY=value line (upper-case key, no '#')")
    return settings
