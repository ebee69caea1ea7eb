# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The ``cdi_spec`` module's work: write the CDI spec and the shim's index, and move every other spec for its
devices aside.

``SpecRequest`` is the module's parameters, read once; ``write_spec`` renders through ``cdi.generate`` (the one
rendering the boot-time refresh shares), picks the cdiVersion from the engines found on the host, records each spec
it moves aside in the takeover record (``discovery.takeover``) before it moves it, and returns a ``SpecResult``.
It lives in ``discovery/`` because it asks discovery for the GPUs, the device files, the engines and the specs on
the host. Python 3.8+, standard library.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, field
from typing import Any

from ..base.fileio import atomic_write, read_text, remove_stale_temporaries, stale_temporaries
from ..base.pathsafe import host_path
from ..base.runner import Failure, Host, Result
from ..cdi.devices import world_accessible
from ..cdi.driver_files import CapabilityError
from ..cdi.generate import DEFAULTS, NoGpuError, generate
from ..runtime.common import cdi_spec_version
from . import takeover
from .discover import device_files, discovered_gpus
from .engines import detect as detect_engines
from .nvidia_toolkit import cdi_specs, disabled_path, specs_to_disable


@dataclass(frozen=True)
class SpecRequest:
    """What ``cdi_spec`` is asked to do: ``options`` are ``cdi.generate``'s (the parameters that shape the spec)."""

    state: str
    options: dict[str, Any]
    disable_others: bool
    record_path: str

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> SpecRequest:
        return cls(
            state=params["state"],
            options={key: params[key] for key in DEFAULTS},
            disable_others=params["disable_others"],
            record_path=params["record_path"],
        )

    @property
    def path(self) -> str:
        return self.options["path"]

    @property
    def index_path(self) -> str:
        return self.options["index_path"] or ""

    @property
    def root(self) -> str:
        return self.options["root"]


@dataclass
class SpecResult(Result):
    """``cdi_spec``'s return values (RETURN); ``None``: not returned."""

    path: str
    index_path: str
    changed: bool = False
    removed_temporary_files: list[str] | None = None
    disabled: list[dict[str, Any]] | None = None
    driver_version: str | None = None
    cuda_version: str | None = None
    cdi_version: str | None = None
    cdi_version_reason: str | None = None
    device_files: dict[str, Any] | None = None
    devices: list[str] | None = None
    spec: dict[str, Any] | None = None
    diff: dict[str, Any] | list[dict[str, Any]] | None = field(default=None)


def write_file(path: str, text: str) -> None:
    """Atomically replace ``path`` with ``text``, mode 0644 (its folder made when missing)."""
    atomic_write(path, text, 0o644, makedirs=True)


def choose_cdi_version(request: SpecRequest, host: Host, files: dict[str, Any]) -> tuple[str, str]:
    """The cdiVersion to write, and why (``auto``: from the engines found under the root, as gpu_facts finds them, up
    to 0.7.0 where the device files ``files`` are not open to everyone)."""
    if request.options["cdi_version"] != "auto":
        return request.options["cdi_version"], "given"
    engines = detect_engines(request.root, run_command=host.run_command)
    grouped = not world_accessible(int(files["mode"], 8))
    version, held = cdi_spec_version(engines, "0.7.0" if grouped else "0.6.0")
    need = ""
    if grouped:
        need = f"the device files are mode {files['mode']} for group {files['gid']} ({files['source']})"
    if held and grouped:
        return version, (
            f"auto: {need}, which needs cdiVersion 0.7.0 (additionalGids), but {', '.join(held)} reads cdiVersion "
            f"{version} at most: CDI containers get the device nodes as before (mode 0666, owned by the container's "
            "user), not the host's group and mode; upgrade those engines to carry them"
        )
    if held:
        return version, f"auto: {', '.join(held)} reads cdiVersion {version} at most"
    if grouped:
        return version, f"auto: {need}: additionalGids gives containers the group; every engine found reads 0.7.0"
    return version, "auto: every engine found reads it"


def _targets(request: SpecRequest) -> list[tuple[str, str]]:
    """``[(host file, path as given)]``: the spec, and the index when there is one."""
    targets = [(host_path(request.root, request.path), request.path)]
    if request.index_path:
        targets.append((host_path(request.root, request.index_path), request.index_path))
    return targets


def remove_spec(request: SpecRequest, host: Host) -> SpecResult:
    """``state=absent``: the spec and the index go."""
    targets = _targets(request)
    result = SpecResult(path=request.path, index_path=request.index_path)
    before = read_text(targets[0][0])
    existing = [path for path, _label in targets if os.path.lexists(path)]
    result.changed = bool(existing)
    if host.diff:
        result.diff = {"before": before or "", "after": "", "before_header": request.path}
    if existing and not host.check_mode:
        for path in existing:
            os.unlink(path)
    return result


def _changes(targets: list[tuple[str, str]], spec_text: str, index_text: str) -> list[tuple[str, str]]:
    """``[(host file, text)]`` to write: a file whose bytes differ, or whose mode is not 0644."""
    texts = [spec_text, index_text]
    changes = [(path, texts[i]) for i, (path, _label) in enumerate(targets) if read_text(path) != texts[i]]
    for i, (path, _label) in enumerate(targets):
        if path not in [c[0] for c in changes] and os.path.exists(path) and os.stat(path).st_mode & 0o7777 != 0o644:
            changes.append((path, texts[i]))
    return changes


def _to_disable(request: SpecRequest, spec: dict[str, Any], names: list[str]) -> list[dict[str, Any]]:
    """The other specs that claim one of ``names``, each ``{path, backup, devices}`` (``disable_others``)."""
    root = request.root
    others = specs_to_disable(cdi_specs(root), request.path, spec["kind"], names) if request.disable_others else []
    stamp = time.strftime("%Y%m%d%H%M%S")
    return [
        {
            "path": other["path"],
            "backup": disabled_path(other["path"], lambda c: os.path.lexists(host_path(root, c)), stamp),
            "devices": sorted(set(other["devices"]) & set(names)),
        }
        for other in others
    ]


def _diff(request: SpecRequest, before: str | None, spec_text: str, kind: str, disabled: list[dict[str, Any]]) -> Any:
    diff = {"before": before or "", "after": spec_text, "before_header": request.path, "after_header": request.path}
    if not disabled:
        return diff
    moved = [
        {
            "before": f"{d['path']} (a CDI spec for {kind}={', '.join(d['devices'])})\n",
            "after": f"{d['backup']} (moved aside: one spec per device; the CDI cache loads *.json, *.yaml)\n",
            "before_header": d["path"],
            "after_header": d["backup"],
        }
        for d in disabled
    ]
    return [diff, *moved]


def _record(request: SpecRequest, disabled: list[dict[str, Any]], result: SpecResult) -> None:
    """Record the specs to move aside in the takeover record (before they move: a run killed between the move and the
    record would leave a spec nobody gives back)."""
    record_file = host_path(request.root, request.record_path)
    try:
        record = takeover.load(read_text(record_file, tolerant=True), request.record_path)
        atomic_write(record_file, takeover.dump(takeover.with_specs(record, disabled)), 0o644, makedirs=True)
    except (OSError, ValueError) as exc:
        raise Failure(
            f"cannot record the specs to move aside in {request.record_path}: {exc}; nothing was moved: fix or "
            "move that file aside, or set record_path to an empty string to keep no record",
            **result.fields(),
        ) from None


def _move_aside(request: SpecRequest, disabled: list[dict[str, Any]], result: SpecResult) -> None:
    for d in disabled:
        source, backup = host_path(request.root, d["path"]), host_path(request.root, d["backup"])
        try:
            if d["path"] == request.path:
                shutil.copy2(source, backup)  # replaced below by ours, atomically
            else:
                os.rename(source, backup)
        except OSError as exc:
            raise Failure(
                f"cannot move the CDI spec {d['path']} aside to {d['backup']}: {exc.strerror or exc}; move it "
                "out of the *.json/*.yaml names yourself, or set disable_others=false to keep both",
                **result.fields(),
            ) from None


def write_spec(request: SpecRequest, host: Host) -> SpecResult:
    """``state=present``: render the spec and the index, move the other specs for its devices aside, write."""
    if request.state == "absent":
        return remove_spec(request, host)
    root = request.root
    targets = _targets(request)
    result = SpecResult(path=request.path, index_path=request.index_path)
    files = device_files(root)
    version, reason = choose_cdi_version(request, host, files)
    try:
        driver, spec, spec_text, index, index_text = generate(
            {**request.options, "cdi_version": version}, discovered_gpus
        )
    except NoGpuError as exc:
        raise Failure(str(exc), **result.fields()) from None
    except (ValueError, KeyError, TypeError, CapabilityError) as exc:
        raise Failure(f"cannot build the CDI spec: {exc}", **result.fields()) from None

    before = read_text(targets[0][0])
    changes = _changes(targets, spec_text, index_text)
    names = [d["name"] for d in spec["devices"]]
    disabled = _to_disable(request, spec, names)
    # the temporary files a run killed inside its atomic write left next to the spec or the index (only our own
    # names, only when their writer is gone: base.fileio.stale_temporaries)
    stale = [tmp for path, _label in targets for tmp in stale_temporaries(path)]
    if stale and not host.check_mode:
        stale = [tmp for path, _label in targets for tmp in remove_stale_temporaries(path)]
    result.removed_temporary_files = stale or None
    result.changed = bool(changes or disabled or stale)
    result.disabled = disabled
    result.driver_version = driver
    result.cuda_version = index["cudaVersion"]
    result.cdi_version = spec["cdiVersion"]
    result.cdi_version_reason = reason
    result.device_files = files
    result.devices = names
    result.spec = spec
    if host.diff:
        result.diff = _diff(request, before, spec_text, spec["kind"], disabled)
    if disabled and not host.check_mode and request.record_path:
        _record(request, disabled, result)
    if disabled and not host.check_mode:
        _move_aside(request, disabled, result)
    if changes and not host.check_mode:
        labels = dict(targets)
        for path, text in changes:
            try:
                write_file(path, text)
            except OSError as exc:
                # a full disk fails in write(), whose error carries no file name: name the file being written
                raise Failure(f"cannot write {labels[path]}: {exc.strerror or exc}", **result.fields()) from None
    return result
