# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Shared pieces of the runtime-registration editors (docker, containerd, CRI-O).

Pure Python, no ansible import: these run on the target (Python 3.8+) and under the 3.8 test venv.
Every editor takes the current text of a file and the wanted options and returns an ``Edit``:
the new text plus one human-readable line per change. An unchanged file comes back byte-identical.
"""

from __future__ import annotations

from ..base.version import parse, strip_epoch

# Written at the top of every file this collection owns outright (drop-ins): the way `state=absent`
# knows a drop-in is ours and may be deleted.
MANAGED_MARKER = "Managed by gpufleet.nvidia.container_runtime"
# Trailing comment on a key we changed in a file the admin owns: what was there before, so that
# `state=absent` puts it back exactly.
TRACK_PREFIX = "gpufleet.nvidia: "


class RuntimeConfigError(Exception):
    """A config file we must not touch: says which file, which line, and what to do about it."""

    def __init__(self, message: str, path: str | None = None, line: int | None = None, hint: str | None = None) -> None:
        self.message = message
        self.path = path
        self.line = line
        self.hint = hint
        super().__init__(self.__str__())

    def __str__(self) -> str:
        where = self.path or "<config>"
        if self.line:
            where = f"{where}:{self.line}"
        text = f"{where}: {self.message}"
        if self.hint:
            text += f" ({self.hint})"
        return text


class Edit:
    """The result of one editor call: ``text`` (new content, ``None`` for "delete the file") and
    ``changes`` (what was done, one line each; empty when nothing changed)."""

    def __init__(self, text: str | None, changes: list[str]) -> None:
        self.text = text
        self.changes = list(changes)

    @property
    def changed(self) -> bool:
        return bool(self.changes)

    def __repr__(self) -> str:
        return f"Edit(changes={self.changes!r})"


# The "what to do" of every refusal to edit a file that cannot be read as the engine would.
FIX_BY_HAND = "fix the file by hand and run again; it was left untouched"


def older_than(engine_version: tuple[int, int, int] | None, minimum: tuple[int, int, int]) -> str | None:
    """The engine version as text when it is known and older than ``minimum``, else ``None``
    (an unknown version is never reported as too old)."""
    if engine_version and tuple(engine_version) < minimum:
        return ".".join(str(n) for n in engine_version)
    return None


# The first version of each engine that reads CDI specs (podman always does). The one home of this rule:
# the editors' warnings, the runtime role (through the engine_reads_cdi filter) and the validate filter.
CDI_MIN_VERSIONS = {"docker": (25, 0, 0), "containerd": (1, 7, 0), "crio": (1, 23, 0)}


def reads_cdi(engine: str, version: str | None) -> bool:
    """Whether ``engine`` at ``version`` (as the engine or gpu_facts prints it, a package epoch allowed)
    reads CDI specs; an unknown version counts as no."""
    if engine == "podman":
        return True
    minimum = CDI_MIN_VERSIONS.get(engine)
    parsed = parse(strip_epoch(version))
    return bool(minimum and parsed and parsed >= minimum)


# The CDI spec versions ``cdi_spec`` writes (``cdi_version``): 0.5.0 is the first with ``hostPath`` on device nodes and
# device names that start with a digit (both needed), 0.6.0 the first with top-level ``annotations``
# (container-device-interface v0.6.0, specs-go/config.go and pkg/cdi/version.go ``requiresV060``).
CDI_SPEC_VERSIONS = ("0.5.0", "0.6.0")
# The first version of each engine whose vendored container-device-interface reads cdiVersion 0.6.0. Before it the
# library is v0.5.x: pkg/cdi/spec.go accepts cdiVersion 0.1.0 to 0.5.0 only (``validSpecVersions``) and parses with
# ``yaml.UnmarshalStrict``, which refuses the unknown ``annotations`` key (container-device-interface v0.5.3 and
# v0.5.4). From each engine's go.mod at its tags: podman v4.3.1 CDI v0.5.2 (Debian 12), v4.6.0 v0.5.4, v4.7.0 v0.6.1;
# containerd v1.7.11 v0.5.4, v1.7.12 v0.6.1; cri-o v1.27.0 v0.5.4, v1.28.0 v0.6.0. docker reads CDI from 25.0,
# which vendors v0.6 (moby/moby#45933).
CDI_0_6_MIN_VERSIONS = {"podman": (4, 7, 0), "containerd": (1, 7, 12), "crio": (1, 28, 0), "docker": (25, 0, 0)}


def cdi_spec_version(engines: dict | None) -> tuple[str, list[str]]:
    """``(cdi_version, held_back_by)``: the newest spec version (``CDI_SPEC_VERSIONS``) that every engine found on the
    host that reads CDI specs accepts, and the engines (``"podman 4.3.1"``) that held it at 0.5.0.

    ``engines`` is ``gpu_facts``' ``engines`` (``discovery.engines.detect``): ``{name: {installed, version}}``. An
    engine that reads no CDI spec at its version does not count; podman of an unknown version counts as old.
    """
    held = []
    for name, info in sorted((engines or {}).items()):
        if not isinstance(info, dict) or not info.get("installed"):
            continue
        version = info.get("version")
        if not reads_cdi(name, version):
            continue
        parsed = parse(strip_epoch(version))
        minimum = CDI_0_6_MIN_VERSIONS.get(name)
        if minimum and (parsed is None or parsed < minimum):
            held.append(f"{name} {version or '(version unknown)'}")
    return (CDI_SPEC_VERSIONS[0] if held else CDI_SPEC_VERSIONS[-1]), held


def line_of(text: str, needle: str, start: int = 0) -> int | None:
    """1-based line of the first ``needle`` in ``text`` (``None`` when absent)."""
    pos = text.find(needle, start)
    if pos < 0:
        return None
    return text.count("\n", 0, pos) + 1
