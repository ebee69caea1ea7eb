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
from .registry import INFO

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


# The first version of each engine that reads CDI specs (each engine's ``INFO.cdi_from``; podman's every version does).
# The one home of this rule: the editors' warnings, the runtime role (through the engine_reads_cdi filter) and the
# validate filter.
CDI_MIN_VERSIONS = {name: info.cdi_from for name, info in INFO.items() if info.cdi_from}


def reads_cdi(engine: str, version: str | None) -> bool:
    """Whether ``engine`` at ``version`` (as the engine or gpu_facts prints it, a package epoch allowed)
    reads CDI specs; an unknown version counts as no."""
    info = INFO.get(engine)
    if info is not None and info.cdi_from is None:
        return True
    minimum = CDI_MIN_VERSIONS.get(engine)
    parsed = parse(strip_epoch(version))
    return bool(minimum and parsed and parsed >= minimum)


# The CDI spec versions ``cdi_spec`` writes (``cdi_version``): 0.5.0 is the first with ``hostPath`` on device nodes and
# device names that start with a digit (both needed), 0.6.0 the first with top-level ``annotations``
# (container-device-interface v0.6.0, specs-go/config.go and pkg/cdi/version.go ``requiresV060``), 0.7.0 the first with
# ``additionalGids`` in container edits (container-device-interface v0.7.0 of 2024-03-16, specs-go/config.go
# "AdditionalGIDs ... Added in v0.7.0" and ``requiresV070``; read at cncf-tags/container-device-interface commit
# 05ae4b5b, 2026-11-27). A library refuses a spec whose cdiVersion it does not know (pkg/cdi/spec.go
# ``validateVersion``) and, before v0.7, parses strictly, so an unknown ``additionalGids`` key fails the whole spec.
CDI_SPEC_VERSIONS = ("0.5.0", "0.6.0", "0.7.0")
# The first version of each engine whose vendored container-device-interface reads cdiVersion 0.6.0. Before it the
# library is v0.5.x: pkg/cdi/spec.go accepts cdiVersion 0.1.0 to 0.5.0 only (``validSpecVersions``) and parses with
# ``yaml.UnmarshalStrict``, which refuses the unknown ``annotations`` key (container-device-interface v0.5.3 and
# v0.5.4). From each engine's go.mod at its tags: podman v4.3.1 CDI v0.5.2 (Debian 12), v4.6.0 v0.5.4, v4.7.0 v0.6.1;
# containerd v1.7.11 v0.5.4, v1.7.12 v0.6.1; cri-o v1.27.0 v0.5.4, v1.28.0 v0.6.0. docker reads CDI from 25.0,
# which vendors v0.6 (moby/moby#45933).
CDI_0_6_MIN_VERSIONS = {name: info.cdi_0_6_from for name, info in INFO.items() if info.cdi_0_6_from}
# The first version of each engine whose vendored container-device-interface reads cdiVersion 0.7.0 (and applies
# ``additionalGids`` to ``process.user.additionalGids``: pkg/cdi/container-edits.go ``Apply`` from v0.7.0): podman
# 5.1.0, containerd 1.7.16, CRI-O 1.30.0, docker 26.1.0. From each engine's go.mod (moby: vendor.mod) at its release
# tags, read 2026-11-27: moby v26.0.2 CDI v0.6.2, v26.1.0 v0.7.1, v28.0.0 v0.8.0; podman v5.0.3 v0.6.2, v5.1.0 v0.7.2,
# v5.4.0 v0.8.0; containerd v1.7.15 v0.6.2, v1.7.16 v0.7.2, v2.0.0 v0.8.0, v2.1.0 v1.0.1; cri-o v1.29.13 v0.6.2,
# v1.30.0 v0.7.2. Reading the version is not enough for docker (below), so the table that decides is the next one.
# The first version of each engine whose containers' processes keep the spec's ``additionalGids``: the only reason this
# collection writes 0.7.0, so the version ``cdi_spec_version`` asks of an engine for it. docker applies CDI edits in
# ``WithDevices`` and, up to 29.4, ``WithUser`` ran after it and replaced ``process.user``, dropping them (moby/moby
# daemon/oci_linux.go ``createSpec``; fixed by commit 704210f9 "daemon: preserve CDI additional GIDs" of 2026-05-08,
# first in docker-v29.5.0 of 2026-05-14; read 2026-11-27; on the simulated trixie node docker 26.1.5 with a 0.7.0 spec
# ran ``--user 1000:1000`` without the group: "Insufficient Permissions"). containerd's CRI sets the user and
# ``WithAdditionalGIDs`` before ``WithCDI`` (pkg/cri/server/container_create_linux.go at v1.7.24,
# internal/cri/server/container_create_linux.go at v2.1.4), podman 5.x keeps them (run on the simulated node, 5.4.2),
# CRI-O adds the user's groups after the devices with ``AddProcessAdditionalGid``, which appends
# (server/container_create*.go at v1.30.0; read, not run: no simulated node has CRI-O).
CDI_ADDITIONAL_GIDS_MIN_VERSIONS = {
    name: info.cdi_additional_gids_from for name, info in INFO.items() if info.cdi_additional_gids_from
}
# cdiVersion -> the first engine versions this collection writes it for (0.5.0: every engine that reads CDI at all)
CDI_MIN_READERS = {"0.6.0": CDI_0_6_MIN_VERSIONS, "0.7.0": CDI_ADDITIONAL_GIDS_MIN_VERSIONS}


def cdi_spec_version(engines: dict | None, wanted: str = "0.6.0") -> tuple[str, list[str]]:
    """``(cdi_version, held_back_by)``: the newest spec version up to ``wanted`` (one of ``CDI_SPEC_VERSIONS``) that
    every engine found on the host that reads CDI specs accepts, and the engines (``"podman 4.3.1"``) that held it
    below ``wanted``.

    ``wanted`` is 0.7.0 only where the spec needs ``additionalGids`` (device files not open to everyone), else 0.6.0;
    for 0.7.0 an engine must also keep the groups (``CDI_ADDITIONAL_GIDS_MIN_VERSIONS``), not only read the version:
    a host whose spec needs nothing newer keeps the bytes it had. ``engines`` is ``gpu_facts``' ``engines``
    (``discovery.engines.detect``): ``{name: {installed, version}}``. An engine that reads no CDI spec at its version
    does not count; an engine of unknown version counts as old.
    """
    if wanted not in CDI_SPEC_VERSIONS:
        raise ValueError(f"wanted: {wanted!r} is not one of {', '.join(CDI_SPEC_VERSIONS)}")
    held = []
    chosen = CDI_SPEC_VERSIONS.index(wanted)
    for name, info in sorted((engines or {}).items()):
        if not isinstance(info, dict) or not info.get("installed"):
            continue
        version = info.get("version")
        if not reads_cdi(name, version):
            continue
        parsed = parse(strip_epoch(version))
        reads = 0
        for position, candidate in enumerate(CDI_SPEC_VERSIONS[1:], start=1):
            minimum = CDI_MIN_READERS[candidate].get(name)
            if minimum is None or (parsed is not None and parsed >= minimum):
                reads = position
            else:
                break
        if reads < CDI_SPEC_VERSIONS.index(wanted):
            held.append(f"{name} {version or '(version unknown)'}")
        chosen = min(chosen, reads)
    return CDI_SPEC_VERSIONS[chosen], held


def line_of(text: str, needle: str, start: int = 0) -> int | None:
    """1-based line of the first ``needle`` in ``text`` (``None`` when absent)."""
    pos = text.find(needle, start)
    if pos < 0:
        return None
    return text.count("\n", 0, pos) + 1
