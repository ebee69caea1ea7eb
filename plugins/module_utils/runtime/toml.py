# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Round-trip TOML helpers shared by the containerd and CRI-O editors (tomlkit, imported lazily).

tomlkit keeps comments, key order and layout. It is needed on the target host; when it is missing,
``TOMLKIT_IMPORT_ERROR`` holds the traceback and the module fails with an install hint (see
``MISSING_TOMLKIT_HINT``) instead of failing to import.
"""

from __future__ import annotations

import copy
import re
import traceback
from typing import Any, Sequence

from .common import (
    FIX_BY_HAND,
    TRACK_PREFIX,
    RuntimeConfigError,
)

try:
    import tomlkit
    from tomlkit.exceptions import ParseError as _TomlParseError
    from tomlkit.items import Table as _Table
except ImportError:  # pragma: no cover - exercised by ansible-test sanity's import test
    tomlkit = None
    _TomlParseError = Exception
    _Table = dict
    TOMLKIT_IMPORT_ERROR: str | None = traceback.format_exc()
else:
    TOMLKIT_IMPORT_ERROR = None

MISSING_TOMLKIT_HINT = (
    "install it on the target: apt-get install python3-tomlkit (Debian/Ubuntu), "
    "dnf install python3-tomlkit (RHEL/Fedora, EPEL on 8), or pip install tomlkit"
)


def require_tomlkit() -> None:
    if tomlkit is None:
        raise RuntimeConfigError("the Python library tomlkit is missing", hint=MISSING_TOMLKIT_HINT)


def parse(text: str, path: str) -> Any:
    require_tomlkit()
    try:
        return tomlkit.parse(text)
    except _TomlParseError as exc:
        raise RuntimeConfigError(f"not valid TOML: {exc}", path, getattr(exc, "line", None), FIX_BY_HAND) from None


def dumps(doc: Any) -> str:
    return tomlkit.dumps(doc)


def key_line(text: str, key: str) -> int | None:
    """Best-effort 1-based line where ``key`` is assigned or opens a table in ``text``."""
    k = re.escape(key)
    pat = re.compile(r'^\s*(?:\[[^\]]*"?' + k + r'"?\s*\]|"?' + k + r'"?\s*=)', re.M)
    m = pat.search(text)
    return text.count("\n", 0, m.start()) + 1 if m else None


def is_table(value: Any) -> bool:
    return isinstance(value, dict)


def get_table(container: Any, keys: Sequence[str], *, text: str, path: str, create: bool) -> Any:
    """The table at ``keys`` under ``container``; created as implicit (header-less) tables when
    ``create``; ``None`` when missing and not ``create``. A non-table in the way is an error."""
    cur = container
    walked: list[str] = []
    for key in keys:
        walked.append(key)
        nxt = cur.get(key)
        if nxt is None:
            if not create:
                return None
            nxt = tomlkit.table(is_super_table=True)
            cur[key] = nxt
            nxt = cur[key]
        elif not is_table(nxt):
            dotted = ".".join(_quote(k) for k in walked)
            raise RuntimeConfigError(
                f"{dotted} is {_render(nxt)}, a table is expected there",
                path,
                key_line(text, key),
                FIX_BY_HAND,
            )
        cur = nxt
    return cur


def _quote(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else f'"{key}"'


def _render(value: Any) -> str:
    try:
        return tomlkit.item(value).as_string()
    except Exception:  # only for a message
        return repr(value)


def body(table: Any) -> list[Any]:
    """The (key, item) pairs of a table or document, comments and blank lines included."""
    container = table if hasattr(table, "body") else getattr(table, "value", None)
    if not hasattr(container, "body"):
        # a table split over several places in the file (k3s writes them): tomlkit's proxy
        container = getattr(table, "_internal_container", None)
    return list(container.body) if container is not None else []


def _plain_items(table: Any) -> list[Any]:
    return [(k, v) for k, v in body(table) if k is not None and not is_table(v)]


def get_item(table: Any, key: str) -> Any:
    """The tomlkit item (with its comment and layout) of ``key``."""
    if hasattr(table, "item"):
        return table.item(key)
    container = getattr(table, "value", None)  # tomlkit < 0.12: a Table has no item(), its Container has
    if container is not None and hasattr(container, "item") and key in container:
        return container.item(key)
    for part in getattr(table, "_tables", []):  # tomlkit's proxy for a table split over the file
        if key in part:
            return get_item(part, key)
    raise KeyError(key)


def add_key(table: Any, key: str, value: Any) -> Any:
    """Add ``key = value`` after the table's plain keys, indented like them; returns the item."""
    siblings = _plain_items(table)
    # tomlkit prefixes a newline to the indent of the sub-table that follows an inserted key
    indents = [(v, v.trivia.indent) for k, v in body(table) if k is not None and hasattr(v, "trivia")]
    table[key] = value
    for v, indent in indents:
        v.trivia.indent = indent
    item = get_item(table, key)
    if siblings:
        item.trivia.indent = siblings[-1][1].trivia.indent
        # tomlkit puts a blank line after a key inserted before a sub-table; the siblings have none
        prev_trail = siblings[-1][1].trivia.trail
        if item.trivia.trail.count("\n") > 1 and prev_trail.count("\n") <= 1:
            item.trivia.trail = prev_trail
    return item


def set_tracked(table: Any, key: str, value: Any, *, track: bool = True) -> str | None:
    """Set ``key`` to ``value`` leaving a trailing ``# gpufleet.nvidia: was <old>`` (or ``added``)
    comment so that ``unset_tracked`` can put back exactly what was there. Returns a description
    of the change, ``None`` when the value was already right."""
    if key in table and table[key] == value and isinstance(table[key], bool) == isinstance(value, bool):
        return None
    if key not in table:
        item = add_key(table, key, value)
        if track:
            item.comment(TRACK_PREFIX + "added")
        return f"{key}: set to {_render(value)}"
    old_item = get_item(table, key)
    old = old_item.as_string()
    old_comment = old_item.trivia.comment
    table[key] = value
    if track:
        note = TRACK_PREFIX + "was " + old
        if old_comment:
            note += " | " + old_comment.lstrip("#").strip()
        get_item(table, key).comment(note)
    return f"{key}: {old} -> {_render(value)}"


def tracked_old(table: Any, key: str) -> Any:
    """The value ``set_tracked`` replaced (from our ``was`` comment), ``None`` when there is none."""
    if key not in table:
        return None
    comment = get_item(table, key).trivia.comment.lstrip("#").strip()
    if not comment.startswith(TRACK_PREFIX + "was "):
        return None
    old = comment[len(TRACK_PREFIX + "was ") :].partition(" | ")[0]
    try:
        return tomlkit.parse(f"v = {old}\n")["v"]
    except _TomlParseError:
        return None


def unset_tracked(table: Any, key: str, *, fallback: Any = None) -> str | None:
    """Undo ``set_tracked``. Without our comment the key is not ours: it is set to ``fallback``
    when one is given (a default runtime that would no longer exist), else left alone."""
    if key not in table:
        return None
    item = get_item(table, key)
    comment = item.trivia.comment.lstrip("#").strip()
    if comment == TRACK_PREFIX + "added":
        del table[key]
        return f"{key}: removed"
    if comment.startswith(TRACK_PREFIX + "was "):
        rest = comment[len(TRACK_PREFIX + "was ") :]
        old, _sep, orig_comment = rest.partition(" | ")
        try:
            restored = tomlkit.parse(f"v = {old}\n")["v"]
        except _TomlParseError:
            restored = fallback
        table[key] = restored
        new_item = get_item(table, key)
        new_item.trivia.comment = ("# " + orig_comment) if orig_comment else ""
        if not orig_comment:
            new_item.trivia.comment_ws = ""
        return f"{key}: restored to {old}"
    if fallback is not None and table[key] != fallback:
        old = item.as_string()
        table[key] = fallback
        return f"{key}: {old} -> {_render(fallback)}"
    return None


def make_implicit_if_bare(parent: Any, key: str) -> None:
    """After removing keys: a table left with only sub-tables (no keys, no comments) goes back to
    having no header of its own, as it had before we added a key to it."""
    table = parent.get(key)
    if not is_table(table) or not hasattr(table, "is_super_table") or table.is_super_table():
        return  # (a table split over the file is left as it is)
    for k, v in body(table):
        if k is None:
            if v.as_string().strip():
                return  # a comment the admin wrote
        elif not is_table(v):
            return
    if table.trivia.comment:
        return
    new = tomlkit.table(is_super_table=True)
    for k, v in body(table):
        if k is not None:
            new.append(k, v)
    parent[key] = new


def prune_empty(container: Any, keys: Sequence[str]) -> None:
    """Remove the tables along ``keys`` (deepest first) that are empty and have no header of their
    own, i.e. that only existed to hold what we removed."""
    chain = [container]
    for key in keys:
        nxt = chain[-1].get(key)
        if not is_table(nxt):
            break
        chain.append(nxt)
    for depth in range(len(chain) - 1, 0, -1):
        table, parent, key = chain[depth], chain[depth - 1], keys[depth - 1]
        if not hasattr(table, "is_super_table"):
            break
        if len(table) == 0 and (table.is_super_table() or not table.trivia.comment):
            notes = [v for k, v in body(table) if k is None and v.as_string().strip()]
            if notes:
                break
            del parent[key]
        else:
            break


def deepcopy(value: Any) -> Any:
    return copy.deepcopy(value)


def last_header_is(text: str, needle: str) -> bool:
    """Whether the last table header of ``text`` contains ``needle`` (the table we remove closes the
    file: tomlkit had put a blank line before it, which ``trim_after_last`` takes back)."""
    headers = [line.strip() for line in text.splitlines() if line.strip().startswith("[")]
    return bool(headers) and needle in headers[-1]


def trim_after_last(out: str, was_last: bool) -> str:
    return out[:-1] if was_last and out.endswith("\n\n") else out
