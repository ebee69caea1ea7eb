# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The dpkg_hold module's work: dpkg's selection (``hold``, ``install``) of several packages in one module run.

What ``ansible.builtin.dpkg_selections`` does for one package - ``dpkg --get-selections NAME``, then
``dpkg --set-selections`` when it differs - for a list: one ``--get-selections`` for all of them, one
``--set-selections`` for those that differ. A package dpkg does not know (not installed: in check mode before the
install that brings it) is reported in ``missing`` and counts as a change; it is not given to ``--set-selections``,
which would only warn that it is unknown and ignore it.

Standard library only (target Pythons 3.8+).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .runner import Failure, Result

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from .runner import Host

# Debian Policy 5.6.1: lower case letters, digits, + - . (at least two characters, starting with a letter or digit);
# an architecture qualifier (:amd64) is allowed as dpkg takes it.
_NAME = re.compile(r"^[a-z0-9][a-z0-9+.-]+(:[a-z0-9-]+)?$")


def selections(text: str) -> dict[str, str]:
    """``{package: selection}`` from ``dpkg --get-selections`` output (``name<tabs>selection`` per line)."""
    found = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) == 2:
            found[fields[0]] = fields[1]
    return found


@dataclass(frozen=True)
class HoldRequest:
    names: tuple[str, ...]
    selection: str

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> HoldRequest:
        names = []
        for name in params["name"]:
            if not _NAME.match(name or ""):
                raise Failure(f"name: {name!r} is not a Debian package name (such as 'nvidia-driver')")
            if name not in names:
                names.append(name)
        return cls(tuple(names), params["selection"])


@dataclass
class HoldResult(Result):
    """``dpkg_hold``'s return values (RETURN)."""

    changed: bool
    changed_packages: list[str]
    missing: list[str]
    before: dict[str, str]
    diff: dict[str, str] | None = None


def _dpkg(host: Host, *args: str, data: str | None = None) -> str:
    dpkg = host.get_bin_path("dpkg")
    if not dpkg:
        raise Failure("dpkg not found: dpkg_hold is for Debian and Ubuntu hosts (dnf versionlock on Red Hat)")
    kwargs = {"data": data} if data is not None else {}
    rc, out, err = host.run_command([dpkg, *args], **kwargs)
    if rc != 0:
        raise Failure(f"dpkg {args[0]} failed (exit {rc}): {(err or out).strip()}; run it by hand to see why")
    return out


def set_selections(request: HoldRequest, host: Host) -> HoldResult:
    """The ``dpkg_hold`` module: give every package of the request its selection, in one ``dpkg`` call."""
    before = selections(_dpkg(host, "--get-selections", *request.names)) if request.names else {}
    # dpkg lists a package of one architecture by its name, a multi-arch one (Multi-Arch: same) as name:arch; either is
    # found under the name it was asked by, with or without its architecture
    bare = {}
    for listed, value in before.items():
        bare.setdefault(listed.split(":")[0], value)
    now = {name: before.get(name) or bare.get(name.split(":")[0]) for name in request.names}
    change = [name for name in request.names if now[name] != request.selection]
    missing = [name for name in change if now[name] is None]
    result = HoldResult(
        changed=bool(change),
        changed_packages=change,
        missing=missing,
        before={name: value for name, value in now.items() if value is not None},
    )
    if host.diff:
        result.diff = {
            "before": "".join(f"{name} {now[name] or '(not installed)'}\n" for name in change),
            "after": "".join(f"{name} {request.selection}\n" for name in change),
        }
    known = [name for name in change if now[name] is not None]
    if known and not host.check_mode:
        _dpkg(host, "--set-selections", data="".join(f"{name} {request.selection}\n" for name in known))
    return result
