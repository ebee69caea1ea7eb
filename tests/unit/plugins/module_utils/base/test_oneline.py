# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""base.oneline: every error line a host program writes is one line, bounded, whatever the text it carries."""

import unicodedata

from hypothesis import example, given
from hypothesis import strategies as st

from ansible_collections.gpufleet.nvidia.plugins.module_utils.base import oneline

# Everything a reader may take for the end of a line: str.splitlines' separators and every control character.
BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"


def test_newlines_and_controls_are_escaped_visibly():
    assert oneline.one_line("a\nb") == "a\\nb"
    assert oneline.one_line("a\r\nb\tc") == "a\\r\\nb\\tc"
    assert oneline.one_line("x\x00\x1b[31m\x7f\x85\x9fy") == "x\\x00\\x1b[31m\\x7f\\x85\\x9fy"
    assert oneline.one_line("p\u2028q\u2029r") == "p\\u2028q\\u2029r"
    assert oneline.one_line("caf\u00e9 \\n") == "caf\u00e9 \\n"  # printable text and backslashes stay as they are


def test_a_forged_log_entry_stays_inside_the_line():
    forged = 'lib\ntime="2026-01-01T00:00:00Z" level=info msg="container started"'
    line = oneline.error_line("gpufleet-cdi-hook", f"cannot read {forged}")
    assert line.count("\n") == 1 and line.endswith("\n")
    assert line.startswith("gpufleet-cdi-hook: cannot read lib\\ntime=")


def test_lines_are_bounded():
    line = oneline.one_line("x" * 1_000_000)
    assert len(line) == oneline.MAX_LINE and line.endswith("...")
    assert len(oneline.one_line("\n" * 1_000_000)) == oneline.MAX_LINE


def test_excerpt_and_clip_quote_a_bounded_prefix():
    assert oneline.excerpt("compute") == "'compute'"
    big = "a" * 1_000_000
    assert oneline.excerpt(big) == repr("a" * oneline.EXCERPT) + "..."
    assert oneline.clip(big, 10) == "a" * 10 + "..."
    assert oneline.clip("short") == "short"
    assert oneline.excerpt(5) == "'5'"


@given(st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x2FFF)), st.integers(10, 3000))
@example("\x85\u2028" * 600, 1000)
@example("a\nb", 10)
def test_one_line_is_one_line_bounded_and_idempotent(text, limit):
    line = oneline.one_line(text, limit)
    assert len(line) <= limit
    assert line.splitlines() in ([], [line])
    assert not any(c in BREAKS or unicodedata.category(c) == "Cc" for c in line)
    assert oneline.one_line(line, limit) == line
    plain = not any(c in BREAKS or unicodedata.category(c) == "Cc" for c in text)
    if plain and len(text) <= limit:  # nothing to escape, nothing to cut: the text itself
        assert line == text
    if not plain:
        assert len(line) > len(text) or len(line) == limit  # an escape is longer than the character it stands for
