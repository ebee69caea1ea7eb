# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""as_bool, as_int, as_list: a role variable as its argument spec types it, also when it came as a string;
role_vars_problems: the playbooks' preflight, one host's role variables against every role's argument spec."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ansible.errors import AnsibleFilterError

try:
    from ansible.template import accept_lazy_markers
except ImportError:  # ansible-core 2.18: hostvars raise AnsibleUndefinedVariable instead of handing out a marker

    def accept_lazy_markers(plugin: Callable[..., Any]) -> Callable[..., Any]:
        return plugin


from ansible_collections.gpufleet.nvidia.plugins.plugin_utils import role_specs, role_vars


def _wrap(func: Callable[[Any, str], Any]) -> Callable[..., Any]:
    def filter_(value: Any, name: str = "value") -> Any:
        try:
            return func(value, name)
        except ValueError as exc:
            raise AnsibleFilterError(str(exc)) from exc

    filter_.__name__ = func.__name__
    return filter_


@accept_lazy_markers
def role_vars_problems(variables: Mapping[str, Any]) -> list[str]:
    """One line per bad value among the role variables a host sets (``hostvars[inventory_hostname]``). A value that
    cannot be templated here (it names a role default or a fact, which only a later play has) is left to the role."""
    return role_specs.problems(role_specs.host_values(variables))


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "as_bool": _wrap(role_vars.as_bool),
            "as_int": _wrap(role_vars.as_int),
            "as_list": _wrap(role_vars.as_list),
            "role_vars_problems": role_vars_problems,
        }
