# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The one home of the host programs' error lines: one line, whatever the input, and bounded.

An error message of a host program can carry text an image or a pod controls (a file name in the container root,
an ``NVIDIA_*`` value, an annotation). A newline in such a name must not split the message into two lines: the
engine shows the second as a line of its own, and in runc's text ``--log`` it would start a forged entry. So every
program writes its errors through ``error_line`` (or ``one_line``), at its final output points:

* ``one_line(text)``: ``\\n``, ``\\r`` and ``\\t`` become the two characters ``\\n``, ``\\r``, ``\\t``; every other C0
  control, DEL and C1 control becomes ``\\xNN``; the Unicode line and paragraph separators ``\\u2028``/``\\u2029``;
  then the whole is cut to ``MAX_LINE`` characters (``...`` marks the cut). Backslashes are left as they are.
* ``excerpt(value)``: how a message quotes an untrusted value: ``repr`` of at most ``EXCERPT`` characters of it,
  ``...`` after the quote when there was more; a message that quotes a 1 MB value stays a few hundred bytes;
  ``clip(value)`` the same without the quotes (a key, a variable's name).

Pure, imports nothing (it is imported on the failure path of every GPU container start).
"""

from __future__ import annotations

MAX_LINE = 1000  # characters of one error line after escaping: every real message is shorter
EXCERPT = 200  # characters of an untrusted value a message quotes

_ESCAPES = {0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t", 0x2028: "\\u2028", 0x2029: "\\u2029"}
for _code in (*range(0x20), *range(0x7F, 0xA0)):
    _ESCAPES.setdefault(_code, f"\\x{_code:02x}")
del _code


def one_line(text: object, limit: int = MAX_LINE) -> str:
    """``text`` (any object: its ``str``) as one line: control characters escaped, at most ``limit`` characters."""
    line = str(text).translate(_ESCAPES)
    if len(line) > limit:
        line = line[: max(limit - 3, 0)] + "..."
    return line


def excerpt(value: object, limit: int = EXCERPT) -> str:
    """``repr`` of at most ``limit`` characters of ``value`` (its ``str``), ``...`` appended when it was longer."""
    text = value if isinstance(value, str) else str(value)
    if len(text) <= limit:
        return repr(text)
    return repr(text[:limit]) + "..."


def clip(value: object, limit: int = EXCERPT) -> str:
    """At most ``limit`` characters of ``value`` (its ``str``), unquoted, ``...`` appended when it was longer: a name
    (a key, a variable's name) a message shows as it is."""
    text = value if isinstance(value, str) else str(value)
    return text if len(text) <= limit else text[:limit] + "..."


def error_line(program: str, message: object) -> str:
    """``<program>: <message>`` as one line (``one_line``), with its newline: what a host program writes to stderr."""
    return one_line(f"{program}: {message}") + "\n"
