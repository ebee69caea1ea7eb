# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""How a module runs its work: the one runner of the collection's modules.

A module (``plugins/modules/``) is an argument spec and a call: ``run_module(module, Request.from_params, work)``.
The work lives in ``module_utils`` and never sees ``AnsibleModule`` or the parameters' names: it gets a typed request,
built once from the parameters, and a ``Host`` (check mode, diff mode, commands, warnings); it returns a ``Result``,
or raises ``Failure`` with the message and the result fields so far.

The argument specs that several modules share are written here once.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable

# present/absent, present by default
STATE = {"type": "str", "choices": ["present", "absent"], "default": "present"}
# where the host's file system is mounted
ROOT = {"type": "path", "default": "/"}


class Failure(Exception):
    """The work failed: ``fail_json(msg=msg, **fields)``."""

    def __init__(self, msg: str, **fields: Any) -> None:
        super().__init__(msg)
        self.msg = msg
        self.fields = fields


def octal_mode(value: Any, label: str) -> int:
    """A file mode option (``'0644'``, or an int) as an int; ``Failure`` naming ``label`` (``'mode:'``) otherwise."""
    try:
        return int(value, 8) if isinstance(value, str) else int(value)
    except (TypeError, ValueError):
        raise Failure(f"{label} {value!r} is not an octal mode such as '0644'") from None


class Host:
    """What the work may ask of the module that runs it."""

    def __init__(self, module: Any) -> None:
        self.check_mode: bool = module.check_mode
        self.diff: bool = module._diff
        self.run_command: Callable[..., tuple[int, str, str]] = module.run_command
        self.get_bin_path: Callable[..., str | None] = module.get_bin_path
        self.warn: Callable[[str], None] = module.warn


class Result:
    """A typed result: its attributes are the module's return values; one left ``None`` is not returned."""

    def fields(self) -> dict[str, Any]:
        return {key: value for key, value in vars(self).items() if value is not None}


def run_module(module: Any, request: Callable[[dict], Any], work: Callable[[Any, Host], Result]) -> None:
    """Run ``work(request(module.params), Host(module))`` and end the module with its result or its failure."""
    try:
        result = work(request(module.params), Host(module))
    except Failure as exc:
        module.fail_json(msg=exc.msg, **exc.fields)
    module.exit_json(**result.fields())
