# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What a check-mode run, or a run on a CPU-only node, must leave exactly as it was: the one home of that snapshot.

``snapshot(node)`` is every entry under the engines' and CDI's configuration folders (its type, mode, owner, size,
modification time, and the SHA-256 of a file's content or a link's target) and every line of ``dpkg -l``, keyed by
path or package. ``assert_unchanged(before, after, what)`` fails naming each entry that was added, removed or changed.
Reading the files themselves (not ``docker info``, which cannot see a ``daemon.json`` written but not yet read by a
restart) is what catches a write that check mode should not have made.
"""

from __future__ import annotations

import hashlib
from typing import Any

TREES = ("/etc/docker", "/etc/containerd", "/etc/cdi", "/etc/crio")

# One line per entry: type, mode, owner, size, mtime (ns), path; then a file's sha256 or a link's target.
_SCRIPT = (
    "set -e; for d in " + " ".join(TREES) + '; do [ -e "$d" ] || continue; '
    'find "$d" -xdev | LC_ALL=C sort | while IFS= read -r p; do '
    'printf \'%s\\t\' "$p" "$(stat -c \'%F %a %U:%G %s %.9Y\' "$p")"; '
    'if [ -L "$p" ]; then readlink "$p"; elif [ -f "$p" ]; then sha256sum < "$p" | cut -d" " -f1; else echo; fi; '
    "done; done"
)


def snapshot(node: Any) -> dict[str, str]:
    """``{path or "dpkg:<package>": its description}`` for the node's configuration trees and packages."""
    state: dict[str, str] = {}
    for line in node.run(_SCRIPT, check=True).stdout.splitlines():
        path, _tab, rest = line.partition("\t")
        state[path] = rest
    for line in node.run(["dpkg", "-l"], check=True).stdout.splitlines():
        fields = line.split()
        if len(fields) >= 3 and len(fields[0]) in (2, 3) and fields[0][0] in "uirhp":
            state[f"dpkg:{fields[1]}"] = " ".join(fields[:3])
    return state


def digest(state: dict[str, str]) -> str:
    """One SHA-256 over a snapshot (for a log line)."""
    return hashlib.sha256("\n".join(f"{k}\t{v}" for k, v in sorted(state.items())).encode()).hexdigest()


def changes(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """Each entry added, removed or changed between two snapshots, as one line."""
    out = [f"added {k}: {after[k]}" for k in sorted(after.keys() - before.keys())]
    out += [f"removed {k}: {before[k]}" for k in sorted(before.keys() - after.keys())]
    out += [f"changed {k}: {before[k]} -> {after[k]}" for k in sorted(before) if k in after and before[k] != after[k]]
    return out


def assert_unchanged(before: dict[str, str], after: dict[str, str], what: str) -> None:
    assert before, f"{what}: the snapshot before is empty (no dpkg -l, no configuration trees?)"
    found = changes(before, after)
    assert not found, f"{what} changed the host ({digest(before)[:12]} -> {digest(after)[:12]}):\n" + "\n".join(found)


def contents(node: Any, places: tuple[str, ...]) -> list[str]:
    """What a round trip must give back, without times (a file rewritten with its old bytes is the same file): one
    line per entry under ``places`` (type, mode, path, link target or a file's SHA-256; ``absent <place>``), Python's
    bytecode caches left out, then dpkg's view of every package."""
    script = (
        "for place in " + " ".join(places) + '; do [ -e "$place" ] || { echo "absent $place"; continue; }; '
        "find \"$place\" -name __pycache__ -prune -o -printf '%y %m %p -> %l\\n' | "
        "while read -r kind mode path rest; do "
        'if [ "$kind" = f ]; then rest=$(sha256sum < "$path" | cut -c1-64); fi; echo "$kind $mode $path $rest"; '
        "done; done | LC_ALL=C sort; dpkg-query -W -f '${db:Status-Abbrev} ${Package} ${Version}\\n' | LC_ALL=C sort"
    )
    return node.run(script, check=True, timeout=300).stdout.splitlines()
