# Copyright (c) gpufleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""JSON for the host programs' start path, without importing ``json`` (which imports ``re``, ``enum``...).

The runtime shim and the CDI hook run once per GPU container start; ``import json`` costs them about
5 ms of their ~15 ms (it pulls in ``re``). CPython's own C scanner and encoder (``_json``, what
``json`` itself uses) are called directly here; with no ``_json`` (another interpreter) this falls back
to ``json``. Same results as ``json.loads`` / ``json.dumps(obj, separators=(",", ":"))``; invalid input
raises ``ValueError``.
"""

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
    def parse_constant(name):
        return {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}[name]


_scan = _json.make_scanner(_Context) if _json else None


def loads(data):
    """``json.loads`` of ``data`` (bytes in UTF-8, or str)."""
    if isinstance(data, (bytes, bytearray)):
        data = data.decode("utf-8-sig" if data[:3] == b"\xef\xbb\xbf" else "utf-8")
    if _scan is None:  # pragma: no cover
        import json  # noqa: PLC0415

        return json.loads(data)
    start = len(data) - len(data.lstrip(_WHITESPACE))
    try:
        value, end = _scan(data, start)
    except StopIteration as exc:
        raise ValueError("invalid JSON at character %d" % exc.value) from None
    if data[end:].strip(_WHITESPACE):
        raise ValueError("extra data after the JSON value at character %d" % end)
    return value


def _default(obj):
    raise TypeError("Object of type %s is not JSON serializable" % type(obj).__name__)


def dumps(obj):
    """``json.dumps(obj, separators=(",", ":"))`` (ASCII, no sorting)."""
    if _json is None:  # pragma: no cover
        import json  # noqa: PLC0415

        return json.dumps(obj, separators=(",", ":"))
    encoder = _json.make_encoder({}, _default, _json.encode_basestring_ascii, None, ":", ",", False, False, True)
    return "".join(encoder(obj, 0))
