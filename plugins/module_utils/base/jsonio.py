# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""JSON for the host programs' start path, without importing ``json`` (which imports ``re``, ``enum``...).

The runtime shim and the CDI hook run once per GPU container start; ``import json`` costs them about
5 ms of their ~15 ms (it pulls in ``re``). CPython's own C scanner and encoder (``_json``, what
``json`` itself uses) are called directly here; with no ``_json`` (another interpreter) this falls back
to ``json``. Same results as ``json.loads`` / ``json.dumps(obj, separators=(",", ":"))``; invalid input
raises ``ValueError``.
"""

from __future__ import annotations

try:
    import _json
except ImportError:  # pragma: no cover - CPython always has it
    _json = None

_WHITESPACE = " \t\n\r"


class _Context:
    """The attributes ``_json.make_scanner`` reads from a ``json.JSONDecoder``."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    memo = None

    @staticmethod
    def parse_constant(name: str) -> float:
        return {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}[name]


_scan = _json.make_scanner(_Context) if _json else None


def loads(data: bytes | bytearray | str, limit: int | None = None, what: str = "JSON") -> object:
    """``json.loads`` of ``data`` (bytes in UTF-8, or str); every malformed input is a ``ValueError``.

    ``limit``: the most bytes (or characters) accepted, larger input is refused before it is parsed.
    ``what`` names the input in the messages. CPython's scanner can fail in ways ``json.loads`` hides:
    ``StopIteration`` at the end of the input, ``SystemError`` for an unterminated string on Python
    3.11 and older (its error path imports ``json.decoder``, which the start path never loaded),
    ``RecursionError`` for deep nesting; each becomes a ``ValueError`` with one line.

    Held against ``json.loads`` on generated documents (``tests/unit/plugins/module_utils/base/test_jsonio.py``):
    a duplicate key keeps its last value, as in ``json`` (engines write ``config.json`` with Go's ``encoding/json``,
    which never writes a key twice; a second copy of an object key is a crafted file, whose first copy the shim
    never looks at and which the shim's rewrite of the file drops); integers as ``int`` (refused past
    ``sys.get_int_max_str_digits()`` digits, as ``json`` does);
    ``\\u`` escapes and surrogates as ``json``; bytes must be UTF-8 (``json`` also guesses UTF-16/32).
    """
    if limit is not None and len(data) > limit:
        raise ValueError(f"{what} is larger than {limit} bytes ({len(data)})")
    if isinstance(data, (bytes, bytearray)):
        try:
            data = data.decode("utf-8-sig" if data[:3] == b"\xef\xbb\xbf" else "utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"{what} is not UTF-8 (byte {exc.start})") from None
    if _scan is None:  # pragma: no cover
        import json  # noqa: PLC0415

        try:
            return json.loads(data)
        except RecursionError:
            raise ValueError(f"{what} is nested too deeply") from None
    start = len(data) - len(data.lstrip(_WHITESPACE))
    try:
        value, end = _scan(data, start)
    except StopIteration as exc:
        raise ValueError(f"{what}: invalid JSON at character {exc.value}") from None
    except RecursionError:
        raise ValueError(f"{what} is nested too deeply") from None
    except SystemError:  # Python <= 3.11: an unterminated string (see above)
        raise ValueError(f"{what}: invalid JSON (an unterminated string?)") from None
    except ValueError as exc:  # json.JSONDecodeError, where its import works
        reason = str(exc).split(":", maxsplit=1)[0]
        raise ValueError(f"{what}: invalid JSON ({reason})") from None
    if data[end:].strip(_WHITESPACE):
        raise ValueError(f"{what}: extra data after the JSON value at character {end}")
    return value


def _default(obj: object) -> None:
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")


def dumps(obj: object) -> str:
    """``json.dumps(obj, separators=(",", ":"))`` (ASCII, no sorting)."""
    if _json is None:  # pragma: no cover
        import json  # noqa: PLC0415

        return json.dumps(obj, separators=(",", ":"))
    encoder = _json.make_encoder({}, _default, _json.encode_basestring_ascii, None, ":", ",", False, False, True)
    return "".join(encoder(obj, 0))
