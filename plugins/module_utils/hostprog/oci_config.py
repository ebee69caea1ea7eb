# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The bundle's ``config.json``: read within limits, and the type of every part the shim and the hook touch
checked, so a mistyped file is one line, never a traceback; and ``RequestError``, the one-line refusal of every
part of a GPU request (``hostprog.oci``, ``hostprog.oci_edits``, ``hostprog.ctr_hook``).

On the runtime shim's start path: standard library only, nothing heavy.
"""

from __future__ import annotations

import os

from ..base.fileio import FileLimitError as _FileLimitError
from ..base.fileio import read_fd as _read_fd
from ..base.fileio import read_regular as _read_regular

# ``typing`` imports ``re`` (milliseconds in every GPU container start): its names are for type checkers only.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable

MAX_CONFIG_BYTES = 16 << 20  # config.json: a few KiB usually; Kubernetes annotations can make it larger


class RequestError(ValueError):
    """A GPU request that cannot be satisfied; the message is the one line the container start fails with."""

    def __str__(self) -> str:
        # Names in the message come from the container's config.json: a line break in one must not split it.
        from ..base.oneline import one_line  # noqa: PLC0415  # failure path only

        return one_line(super().__str__())


def _q(value: object) -> str:
    """How a message quotes a value from the image or the pod: ``base.oneline.excerpt`` (a bounded prefix)."""
    from ..base.oneline import excerpt  # noqa: PLC0415  # failure path only

    return excerpt(value)


def _clip(value: object) -> str:
    """How a message shows a key or a name from the image or the pod: ``base.oneline.clip`` (a bounded prefix)."""
    from ..base.oneline import clip  # noqa: PLC0415  # failure path only

    return clip(value, 100)


_CONFIG_SHAPE = (
    # (path, type, element type or None)
    (("process",), dict, None),
    (("process", "env"), list, str),
    (("process", "capabilities"), dict, None),
    (("process", "capabilities", "bounding"), list, str),
    (("process", "user"), dict, None),
    (("process", "user", "additionalGids"), list, int),
    (("root",), dict, None),
    (("root", "path"), str, None),
    (("mounts",), list, dict),
    (("hooks",), dict, None),
    (("linux",), dict, None),
    (("linux", "devices"), list, dict),
    (("linux", "resources"), dict, None),
    (("linux", "resources", "devices"), list, dict),
    (("annotations",), dict, None),
)
_TYPE_NAMES = {dict: "an object", list: "an array", str: "a string", int: "an integer"}


def check_config(config: object, what: str = "config.json") -> dict:
    """Raise ``RequestError`` unless ``config`` has the types the shim and hook rely on."""
    if not isinstance(config, dict):
        raise RequestError(f"{what} is not a JSON object")
    for path, kind, element in _CONFIG_SHAPE:
        value = config
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        if value is None:
            continue
        name = ".".join(path)
        if not isinstance(value, kind):
            raise RequestError(f"{what}: {name} is not {_TYPE_NAMES[kind]}")
        if element is not None and not all(isinstance(item, element) for item in value):
            raise RequestError(f"{what}: {name} holds an element that is not {_TYPE_NAMES[element]}")
    for key, value in (config.get("annotations") or {}).items():
        if not isinstance(value, str):
            raise RequestError(f"{what}: annotation {_clip(key)} is not a string")
    for mount in config.get("mounts") or ():
        for key in ("source", "destination"):
            if not isinstance(mount.get(key, ""), str):
                raise RequestError(f"{what}: a mount's {key} is not a string")
    for phase, hooks in (config.get("hooks") or {}).items():
        if not isinstance(hooks, list) or not all(isinstance(h, dict) for h in hooks):
            raise RequestError(f"{what}: hooks.{_clip(phase)} is not an array of objects")
        for hook in hooks:
            if not isinstance(hook.get("path", ""), str) or not isinstance(hook.get("args", []), list):
                raise RequestError(f"{what}: a hook in hooks.{_clip(phase)} has a path or args of the wrong type")
    return config


def read_limited(
    path: str, limit: int, what: str | None = None, check: Callable[[os.stat_result], object] | None = None
) -> bytes:
    """The bytes of ``path``, refused (``RequestError``) when larger than ``limit`` or not a regular file.

    ``base.fileio.read_regular`` (the one bounded reader) with its refusal as a ``RequestError``: ``check(st)``,
    when given, runs on the open file's ``fstat`` first (the shim's ownership rule), so what is checked is what is
    read. Opened ``O_NONBLOCK``: a FIFO there never blocks.
    """
    try:
        return _read_regular(path, limit, what, check=check)
    except _FileLimitError as exc:
        raise RequestError(str(exc)) from None


def read_fd(fd: int, limit: int, what: str) -> bytes:
    """At most ``limit`` bytes from the open file ``fd`` (``base.fileio.read_fd``); ``RequestError`` naming ``what``
    when it holds more (never more than ``limit + 1`` bytes are read)."""
    try:
        return _read_fd(fd, limit, what)
    except _FileLimitError as exc:
        raise RequestError(str(exc)) from None


def read_config(path: str) -> dict:
    """The bundle's ``config.json``: read within ``MAX_CONFIG_BYTES``, parsed, type-checked."""
    from ..base.jsonio import loads  # noqa: PLC0415

    try:
        config = loads(read_limited(path, MAX_CONFIG_BYTES), None, path)
    except ValueError as exc:
        raise RequestError(str(exc)) from None
    check_config(config, path)
    if not (config.get("root") or {}).get("path"):
        raise RequestError(f"{path} has no root.path")
    return config
