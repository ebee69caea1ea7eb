# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The one reading of a dotted version (engines, drivers, CUDA requirements).

Imports nothing: the runtime shim reaches ``parts`` on its start path (NVIDIA_REQUIRE_* checks), where
``re`` alone costs milliseconds.

Standard library only (target Pythons 3.8+).
"""

from __future__ import annotations

_DIGITS = "0123456789"


def _number(text: str, start: int) -> int:
    """The end of the run of ASCII digits starting at ``start``."""
    end = start
    while end < len(text) and text[end] in _DIGITS:
        end += 1
    return end


def _dotted(word: str) -> tuple[int, int, int] | None:
    """``major.minor[.patch]`` at the start of ``word`` (a leading ``v`` allowed), else None."""
    pos = 1 if word[:1] in ("v", "V") else 0
    numbers = []
    while len(numbers) < 3:
        end = _number(word, pos)
        if end == pos:
            break
        numbers.append(int(word[pos:end]))
        if end < len(word) and word[end] == "." and len(numbers) < 3:
            pos = end + 1
            continue
        break
    if len(numbers) < 2:
        return None
    return numbers[0], numbers[1], numbers[2] if len(numbers) > 2 else 0


def parse(text: str | None) -> tuple[int, int, int] | None:
    """``(major, minor, patch)`` of the first word of ``text`` that starts with a dotted version, else None.

    Reads what the engines and packages print: ``1.7.27``, ``v28.0.4``, ``2.1.0-rc.1``,
    ``20.10.24+dfsg1``, ``1.6.20~ds1``, ``Docker version 20.10.24+dfsg1, build 5d6db84``,
    ``containerd containerd.io 1.7.27 05044ec`` (the words before the version are skipped: ``containerd.io``
    does not start with a digit). A missing patch is 0 (``1.7`` is ``(1, 7, 0)``); a lone number is not a
    version. A package epoch (``2:20.10.24``) is not one either: strip it first (see ``strip_epoch``).
    """
    if not text:
        return None
    for word in str(text).replace(",", " ").split():
        found = _dotted(word)
        if found:
            return found
    return None


def strip_epoch(text: str | None) -> str:
    """``2:20.10.24+dfsg1`` -> ``20.10.24+dfsg1`` (a Debian/RPM epoch)."""
    text = str(text or "").strip()
    head, sep, tail = text.partition(":")
    return tail if sep and head and all(c in _DIGITS for c in head) else text


def parts(text: str | None) -> tuple[int, ...]:
    """Every leading number of ``text`` split at ``.`` and ``-``, any count: ``12.2`` -> ``(12, 2)``,
    ``535.104.05`` -> ``(535, 104, 5)``, ``12-1`` -> ``(12, 1)``, ``12.x`` -> ``(12,)``. For comparing
    versions of different lengths (pad with zeros, see ``compare``)."""
    found = []
    for piece in str(text or "").replace("-", ".").split("."):
        if not piece or any(c not in _DIGITS for c in piece):
            break
        found.append(int(piece))
    return tuple(found)


def compare(have: str, op: str, want: str) -> bool:
    """``have <op> want`` over ``parts`` padded to the same length (``12 >= 12.0`` holds)."""
    a, b = parts(have), parts(want)
    width = max(len(a), len(b))
    a, b = a + (0,) * (width - len(a)), b + (0,) * (width - len(b))
    return {
        ">=": a >= b,
        "<=": a <= b,
        ">": a > b,
        "<": a < b,
        "=": a == b,
        "==": a == b,
        "!=": a != b,
    }[op]


def text_of(version: tuple[int, ...] | None) -> str:
    """``(1, 7, 27)`` -> ``1.7.27``; None -> ``""``."""
    return ".".join(str(n) for n in version) if version else ""
