# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What taking a host over from NVIDIA's toolkit moved aside, and how ``uninstall.yml`` gives it back.

``site.yml`` never leaves two CDI specs for one device, and NVIDIA's ``nvidia-cdi-refresh`` units would write one
again: ``cdi_spec`` moves NVIDIA's specs aside (``<path>.gpufleet-disabled``, ``nvidia_toolkit.disabled_path``), the
runtime role masks the units, and ``container_runtime`` replaces values NVIDIA's ``nvidia-ctk runtime configure`` set
in docker's ``daemon.json`` (JSON has no comments to keep them in, as containerd's TOML does). Each of them writes
what it found into one record on the host, ``RECORD_PATH``, before it changes anything; the ``takeover`` module
(``state=absent``, run by the runtime role's ``absent.yml``) reads it back and gives back exactly that:

* a spec goes back to its name only when nothing else is there now (or only a spec of ours); a spec found at the
  name again (NVIDIA's refresh wrote one) is never overwritten: it is reported and its backup left where it is;
* a unit is unmasked only when it was not masked before, enabled or disabled as it was, started when it was active;
* docker's keys get their values back (``runtime/docker.absent``'s ``was``).

The first state seen is the one kept: a second ``site.yml`` finds the units masked and the specs moved already, and
must not record that as NVIDIA's state. The record's functions are pure; ``run_takeover`` below is the ``takeover``
module's work, which reads and writes the file and runs systemctl (Python 3.8+, standard library).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Callable

from ..base.fileio import atomic_write, read_text
from ..base.pathsafe import host_path
from ..base.runner import Failure, Host, Result
from ..cdi.spec import DRIVER_VERSION_ANNOTATION
from .nvidia_toolkit import units as unit_states

RECORD_PATH = "/var/lib/gpufleet-nvidia/takeover.json"
RECORD_LIMIT = 1 << 20
# the record's option, in the terms of the module's root (``cdi_spec`` and ``takeover``)
RECORD_PATH_OPTION = {"type": "path", "default": RECORD_PATH}


def empty() -> dict[str, Any]:
    return {"specs": [], "units": {}, "engines": {}}


def load(text: str | None, path: str = RECORD_PATH) -> dict[str, Any]:
    """The record in ``text`` (the file's content; None: no file, an empty record). A file that is not such a
    record raises ``ValueError`` naming it (nothing is given back on a guess)."""
    record = empty()
    if text is None or not text.strip():
        return record
    if len(text) > RECORD_LIMIT:
        raise ValueError(f"{path} is larger than {RECORD_LIMIT} bytes")
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{path} is not JSON ({exc})") from None
    ok = (
        isinstance(data, dict)
        and isinstance(data.get("specs", []), list)
        and all(
            isinstance(s, dict) and isinstance(s.get("path"), str) and isinstance(s.get("backup"), str)
            for s in data.get("specs", [])
        )
        and isinstance(data.get("units", {}), dict)
        and all(isinstance(u, dict) for u in data.get("units", {}).values())
        and isinstance(data.get("engines", {}), dict)
    )
    if not ok:
        raise ValueError(f"{path} is not a gpufleet.nvidia takeover record (specs, units, engines)")
    record.update({k: data[k] for k in ("specs", "units", "engines") if k in data})
    return record


def dump(record: dict[str, Any]) -> str:
    return json.dumps(record, indent=2, sort_keys=True) + "\n"


def is_empty(record: dict[str, Any]) -> bool:
    return not (record.get("specs") or record.get("units") or record.get("engines"))


def open_items(record: dict[str, Any]) -> bool:
    """Anything left to give back (an engine entry already given back is kept only as a marker)."""
    engines = [e for e in (record.get("engines") or {}).values() if not e.get("given_back")]
    return bool(record.get("specs") or record.get("units") or engines)


def with_specs(record: dict[str, Any], disabled: list[dict[str, Any]]) -> dict[str, Any]:
    """``record`` plus the specs ``cdi_spec`` moved aside (its ``disabled``: ``{path, backup, ...}``); one entry per
    backup."""
    out = {**record, "specs": list(record.get("specs") or [])}
    known = {s["backup"] for s in out["specs"]}
    for d in disabled:
        if d["backup"] not in known:
            out["specs"].append({"path": d["path"], "backup": d["backup"]})
            known.add(d["backup"])
    return out


def with_units(record: dict[str, Any], found: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``record`` plus each unit's state before it is masked (``{unit: {enabled, masked, active}}``); a unit already
    recorded keeps its first state."""
    units = dict(record.get("units") or {})
    for unit, state in sorted(found.items()):
        units.setdefault(unit, {k: bool(state.get(k)) for k in ("enabled", "masked", "active")})
    return {**record, "units": units}


def with_engine(record: dict[str, Any], config_path: str, was: dict[str, Any]) -> dict[str, Any]:
    """``record`` plus an engine file's values before they were first replaced (kept when already recorded, unless
    they were given back since: then these are the file's values again)."""
    engines = dict(record.get("engines") or {})
    if config_path not in engines or engines[config_path].get("given_back"):
        engines[config_path] = was
    return {**record, "engines": engines}


def given_back(record: dict[str, Any], config_path: str) -> dict[str, Any]:
    """``record`` once ``absent`` put an engine file's values back: the entry stays, marked, so that a second
    ``absent`` finds those values in place and changes nothing (without it, ``absent`` would take NVIDIA's runtime out
    of the file as if it were ours). It is the one entry left after ``uninstall.yml`` on a host taken over."""
    engines = dict(record.get("engines") or {})
    if config_path in engines and not engines[config_path].get("given_back"):
        engines[config_path] = {**engines[config_path], "given_back": True}
    return {**record, "engines": engines}


def spec_restores(
    record: dict[str, Any], exists: Callable[[str], bool], ours: Callable[[str], bool]
) -> list[dict[str, Any]]:
    """What happens to each spec moved aside: ``{path, backup, action, why}``, ``action`` one of ``restore`` (the
    backup goes back to ``path``), ``kept`` (a spec that is not ours is at ``path`` again: nothing is overwritten, the
    backup stays) and ``gone`` (the backup is no longer there: nothing to give back)."""
    out = []
    for spec in record.get("specs") or []:
        path, backup = spec["path"], spec["backup"]
        if not exists(backup):
            action, why = "gone", f"{backup} is no longer there; nothing to move back to {path}"
        elif exists(path) and not ours(path):
            action, why = (
                "kept",
                (
                    f"{path} exists again and was not written by gpufleet.nvidia (NVIDIA's nvidia-cdi-refresh?): it is "
                    f"not overwritten; {backup} stays: compare the two and move one yourself"
                ),
            )
        else:
            action, why = "restore", f"{backup} -> {path}"
        out.append({"path": path, "backup": backup, "action": action, "why": why})
    return out


def unit_restores(record: dict[str, Any], current: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The systemctl verbs that give each recorded unit its state back: ``{unit, verbs}`` (``unmask``, then ``enable``
    or ``disable``, then ``start``), for the units whose state differs; ``current`` as ``nvidia_toolkit.units`` reads
    it (a unit not found there any more, its package gone, has nothing to give back)."""
    out = []
    for unit, was in sorted((record.get("units") or {}).items()):
        now = current.get(unit)
        if now is None:
            continue
        verbs = []
        if now.get("masked") and not was.get("masked"):
            verbs.append("unmask")
        if was.get("enabled") and not now.get("enabled"):
            verbs.append("enable")
        elif not was.get("enabled") and now.get("enabled"):
            verbs.append("disable")
        if was.get("active") and not was.get("masked") and not now.get("active"):
            verbs.append("start")
        if verbs:
            out.append({"unit": unit, "verbs": verbs})
    return out


def after_restore(record: dict[str, Any], specs: list[dict[str, Any]]) -> dict[str, Any]:
    """The record once the specs were given back and the units set as they were: only the specs ``kept`` stay (a
    second run reports them again); units are done; engines stay for ``container_runtime``."""
    kept = [{"path": s["path"], "backup": s["backup"]} for s in specs if s["action"] == "kept"]
    return {**record, "specs": kept, "units": {}}


# The takeover module's work.


@dataclass(frozen=True)
class TakeoverRequest:
    """What ``takeover`` is asked to do (``root`` absolute)."""

    state: str
    units: list[str]
    record_path: str
    root: str
    mask: bool = False

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> TakeoverRequest:
        if params.get("mask") and params["state"] != "present":
            raise Failure("mask: only with state=present (state=absent gives the units their recorded state back)")
        return cls(
            params["state"],
            params["units"],
            params["record_path"],
            os.path.abspath(params["root"]),
            bool(params.get("mask")),
        )


@dataclass
class TakeoverResult(Result):
    """``takeover``'s return values (RETURN); ``None``: not returned."""

    changed: bool = False
    recorded: dict[str, dict[str, Any]] | None = None
    restored: list[dict[str, str]] | None = None
    kept: list[dict[str, str]] | None = None
    units: list[dict[str, Any]] | None = None
    diff: dict[str, str] | list[dict[str, str]] | None = None


def units_now(host: Host, root: str, wanted: list[str] | None = None) -> dict[str, dict]:
    """The units' state now (``wanted``: only those); active only where systemctl runs (``root`` is ``/``)."""
    found = unit_states(root)
    for unit, state in found.items():
        if wanted is not None and unit not in wanted:
            continue
        state["active"] = False
        if root == "/":
            rc, out, _err = host.run_command(["systemctl", "is-active", unit])
            state["active"] = rc == 0 and out.strip() == "active"
    return {u: s for u, s in found.items() if wanted is None or u in wanted}


def save(path: str, label: str, record: dict) -> None:
    """Write ``record`` to ``path``; an empty record removes the file, and its folder when that is left empty."""
    try:
        if is_empty(record):
            if os.path.lexists(path):
                os.unlink(path)
            folder = os.path.dirname(path)
            if os.path.isdir(folder) and not os.listdir(folder):
                os.rmdir(folder)
        else:
            atomic_write(path, dump(record), 0o644, makedirs=True)
    except OSError as exc:
        raise Failure(f"cannot write the takeover record {label}: {exc.strerror or exc}; check its folder") from None


def _units_diff(verbs: list[dict[str, Any]]) -> list[dict[str, str]]:
    """One diff entry per unit: the systemctl verbs run on it."""
    return [
        {"before": "", "after": f"systemctl {' '.join(v['verbs'])} {v['unit']}\n", "after_header": v["unit"]}
        for v in verbs
    ]


def _systemctl(host: Host, verbs: list[dict[str, Any]], advice: str, result: TakeoverResult) -> None:
    """Run each entry's systemctl verbs in order; the first that fails ends the module, its message ending with
    ``advice`` and the result so far."""
    for entry in verbs:
        for verb in entry["verbs"]:
            rc, out, err = host.run_command(["systemctl", verb, entry["unit"]])
            if rc != 0:
                raise Failure(
                    f"systemctl {verb} {entry['unit']} failed (rc {rc}): {(err or out).strip()}; {advice}",
                    **result.fields(),
                )


def mask_verbs(found: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The systemctl verbs that leave each found unit stopped and masked (``found`` as ``units_now`` reads it): what
    ``ansible.builtin.systemd_service`` with ``state=stopped masked=true`` runs."""
    verbs = []
    for unit, state in sorted(found.items()):
        todo = (["stop"] if state.get("active") else []) + ([] if state.get("masked") else ["mask"])
        if todo:
            verbs.append({"unit": unit, "verbs": todo})
    return verbs


def record_units(request: TakeoverRequest, host: Host, record: dict, before_text: str) -> TakeoverResult:
    """``state=present``: record the units' state (the first state seen stays); with ``mask``, then stop and mask
    them (the record is written first: a unit that fails to mask is still given back by ``state=absent``)."""
    found = units_now(host, request.root, request.units)
    new = with_units(record, found)
    recorded = {u: s for u, s in new["units"].items() if u not in record["units"]}
    verbs = mask_verbs(found) if request.mask else []
    if verbs and request.root != "/":
        raise Failure(f"mask: cannot run systemctl for a host mounted at {request.root}: {verbs}")
    result = TakeoverResult(changed=new != record or bool(verbs), recorded=recorded)
    if request.mask:
        result.units = verbs
    if host.diff:
        record_diff = {
            "before": before_text,
            "after": dump(new) if new != record else before_text,
            "before_header": request.record_path,
            "after_header": request.record_path,
        }
        result.diff = [record_diff, *_units_diff(verbs)] if request.mask else record_diff
    if host.check_mode:
        return result
    if new != record:
        save(host_path(request.root, request.record_path), request.record_path, new)
    _systemctl(
        host,
        verbs,
        f"its state before is in {request.record_path}; stop and mask it by hand, or remove what is at its unit "
        "file's place",
        result,
    )
    return result


def _restore_diff(request: TakeoverRequest, result: TakeoverResult, before_text: str, new: dict) -> list[dict]:
    diffs = [
        {
            "before": f"{s['backup']} (a CDI spec moved aside by gpufleet.nvidia)\n",
            "after": f"{s['path']} (given back)\n",
            "before_header": s["backup"],
            "after_header": s["path"],
        }
        for s in result.restored or []
    ]
    diffs += _units_diff(result.units or [])
    diffs.append(
        {
            "before": before_text,
            "after": "" if is_empty(new) else dump(new),
            "before_header": request.record_path,
            "after_header": request.record_path,
        }
    )
    return diffs


def _restore(request: TakeoverRequest, host: Host, result: TakeoverResult) -> None:
    """Move the specs back, then set each unit as it was."""
    for spec in result.restored or []:
        source, target = host_path(request.root, spec["backup"]), host_path(request.root, spec["path"])
        try:
            os.replace(source, target)
        except OSError as exc:
            raise Failure(
                f"cannot move {spec['backup']} back to {spec['path']}: {exc.strerror or exc}; move it yourself",
                **result.fields(),
            ) from None
    for entry in result.units or []:
        advice = f"the specs were moved back already; give the unit its state back by hand: {entry['verbs']}"
        _systemctl(host, [entry], advice, result)


def give_back(request: TakeoverRequest, host: Host, record: dict, before_text: str) -> TakeoverResult:
    """``state=absent``: give back what the record names, and drop it from the record."""
    root = request.root

    def exists(path: str) -> bool:
        return os.path.lexists(host_path(root, path))

    def ours(path: str) -> bool:
        return DRIVER_VERSION_ANNOTATION in (read_text(host_path(root, path), tolerant=True, errors="replace") or "")

    specs = spec_restores(record, exists, ours)
    verbs = unit_restores(record, units_now(host, root)) if record["units"] else []
    new = after_restore(record, specs)
    restored = [{"path": s["path"], "backup": s["backup"]} for s in specs if s["action"] == "restore"]
    kept = [{"path": s["path"], "backup": s["backup"], "why": s["why"]} for s in specs if s["action"] == "kept"]
    result = TakeoverResult(changed=bool(restored or verbs or new != record), restored=restored, kept=kept, units=verbs)
    for spec in kept:
        host.warn(spec["why"])
    if verbs and root != "/":
        raise Failure(f"cannot run systemctl for a host mounted at {root}: {verbs}", **result.fields())
    if host.diff:
        result.diff = _restore_diff(request, result, before_text, new)
    if host.check_mode:
        return result
    _restore(request, host, result)
    if new != record:
        save(host_path(root, request.record_path), request.record_path, new)
    return result


def run_takeover(request: TakeoverRequest, host: Host) -> TakeoverResult:
    """The ``takeover`` module: record the units (``present``) or give back what the record names (``absent``)."""
    text = read_text(host_path(request.root, request.record_path), tolerant=True)
    try:
        record = load(text, request.record_path)
    except ValueError as exc:
        raise Failure(f"{exc}; fix it, or move it aside if nothing is to be given back") from None
    if request.state == "present":
        return record_units(request, host, record, text or "")
    return give_back(request, host, record, text or "")
