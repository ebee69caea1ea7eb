# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Whether a GPU host is ready for NVIDIA's DRA driver: the host layer the driver expects someone else to have made.

NVIDIA's DRA driver for GPUs (kubernetes-sigs/dra-driver-nvidia-gpu) and the GPU Operator's ``GPUCluster``, which
deploys it, manage neither the driver, nor the container toolkit, nor MIG. The rules below are those of the release the
``device_plugin`` role deploys, **v0.4.1** (tag of 2026-06-30; the release GPU Operator v26.7.0 deploys), from its
https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/blob/v0.4.1/docs/prerequisites.md, read 2026-11-28:

* NVIDIA driver **565 or later** for GPU allocation; **570.158.01 or later** for ComputeDomains (the feature gate
  ``IMEXDaemonsWithDNSNames``, on by default, needs it: ``cmd/compute-domain-kubelet-plugin/main.go``,
  ``IMEXDaemonsWithDNSNamesMinDriverVersion``);
* CDI enabled in the container runtime: the DRA driver hands every container its GPUs as CDI devices. On by default in
  containerd 2.0 and later and CRI-O 1.27 and later; containerd 1.7 reads specs with ``enable_cdi = true`` in its CRI
  plugin; containerd 1.6 has no CDI;
* the MIG geometry made beforehand (the driver allocates "preconfigured MIG devices"; NVIDIA's "DRA Driver for NVIDIA
  GPUs" page of the GPU Operator documentation, read 2026-11-28);
* for ComputeDomains (multi-node NVLink), IMEX channels on every node of the NVLink domain (NVIDIA's IMEX guide,
  "IMEX Channels": the channel nodes are the administrator's, and do not persist across a reboot).

The verdict is a pure function of ``gpu_facts``' own facts (no second look at the host) and the CDI spec's text:
``{"ready", "release", "checks": [{"name", "ok", "found", "need", "fix"}]}``, the checks that apply to the host only.
"""

from __future__ import annotations

from typing import Any, Callable

from ..base.fileio import read_text
from ..base.pathsafe import host_path
from ..base.version import parse as parse_version
from ..runtime.registry import CRI, INFO

RELEASE = "v0.4.1"
MIN_DRIVER = "565.00"  # prerequisites.md at v0.4.1: "v565 or later for GPU allocation"
MIN_DRIVER_COMPUTE_DOMAINS = "570.158.01"  # the same page and cmd/compute-domain-kubelet-plugin/main.go at v0.4.1
DRIVER_FIX = (
    "install driver branch 565 or later (driver role: driver_source: cuda, driver_branch: '580'; Debian's own "
    "packages stop at 550)"
)


def _at_least(version: str | None, minimum: str) -> bool:
    if not version:
        return False
    found, need = parse_version(version), parse_version(minimum)
    return found is not None and need is not None and found >= need


def _check(name: str, ok: bool, found: str, need: str, fix: str) -> dict[str, Any]:
    return {"name": name, "ok": bool(ok), "found": found, "need": need, "fix": "" if ok else fix}


def _driver(facts: dict[str, Any]) -> dict[str, Any]:
    driver = facts.get("driver") or {}
    version = driver.get("loaded_version") if driver.get("loaded") else None
    return _check(
        "driver",
        _at_least(version, MIN_DRIVER),
        f"driver {version} loaded" if version else "no NVIDIA driver loaded",
        "driver 565 or later, loaded",
        DRIVER_FIX,
    )


def _spec_entries(facts: dict[str, Any]) -> list[tuple[str, tuple[str, ...]]]:
    """Each GPU and MIG device with what shows it in the CDI spec's text: a GPU's device node (every device of the GPU
    carries it, whatever the naming strategy); a MIG device's UUID or its ``<gpu>:<mig>`` name."""
    entries = []
    for gpu in facts.get("gpus") or []:
        label = str(gpu.get("uuid") or gpu.get("index"))
        if gpu.get("minor") is not None:
            entries.append((label, (f"/dev/nvidia{int(gpu['minor'])}",)))
        elif gpu.get("uuid"):
            entries.append((label, (str(gpu["uuid"]),)))
        for mig in gpu.get("mig_devices") or []:
            marks = tuple(str(m) for m in (mig.get("uuid"), f"{gpu.get('index')}:{mig.get('index')}") if m)
            entries.append((str(mig.get("uuid") or marks[-1]), marks))
    return entries


def _named(text: str, mark: str) -> bool:
    """``mark`` in the spec as a whole word (``/dev/nvidia1`` is not ``/dev/nvidia10``)."""
    start = text.find(mark)
    while start != -1:
        after = text[start + len(mark) : start + len(mark) + 1]
        if not after or not (after.isalnum() or after in "-_"):
            return True
        start = text.find(mark, start + 1)
    return False


def _cdi(facts: dict[str, Any], spec_text: str | None) -> dict[str, Any]:
    fix = "write the CDI spec: site.yml --tags runtime (runtime_cdi: true), or the gpufleet.nvidia.cdi_spec module"
    spec = facts.get("cdi_spec") or {}
    if not spec or spec_text is None:
        return _check("cdi_spec", False, "no NVIDIA CDI spec", "a CDI spec naming every GPU and MIG device", fix)
    stale = [p for p in facts.get("problems") or [] if p.get("code") in ("cdi_spec_stale", "cdi_spec_uvm_missing")]
    if stale:
        return _check(
            "cdi_spec",
            False,
            f"{spec['path']}: {stale[0].get('message', stale[0]['code'])}",
            "a CDI spec for the installed driver",
            fix,
        )
    missing = [label for label, marks in _spec_entries(facts) if not any(_named(spec_text, m) for m in marks)]
    if missing:
        return _check(
            "cdi_spec",
            False,
            f"{spec['path']} lacks {', '.join(missing)}",
            "a CDI spec naming every GPU and MIG device",
            fix,
        )
    return _check("cdi_spec", True, f"{spec['path']} names every GPU and MIG device", "", "")


def _dotted(version: tuple[int, ...]) -> str:
    return ".".join(str(part) for part in version[:2])


def _runtime(facts: dict[str, Any]) -> dict[str, Any]:
    """A kubelet's runtime (the registry's CRI engines) that reads CDI: at or above its ``dra_cdi_from`` and with CDI
    on (``cdi_enabled``: containerd's facts count the 2.0 default; 1.7 needs ``enable_cdi``)."""
    cri = [(name, INFO[name].dra_cdi_from) for name in CRI if INFO[name].dra_cdi_from]
    need = " or ".join(f"{name} {_dotted(since)}+ with CDI on" for name, since in cri)
    engines = facts.get("engines") or {}
    found = []
    for name, since in cri:
        engine = engines.get(name) or {}
        if not engine.get("installed"):
            continue
        version = engine.get("version")
        parsed = parse_version(version)
        if parsed is None or parsed < since:
            found.append(
                (
                    name,
                    f"{name} {version}, which the DRA driver takes as reading no CDI",
                    f"upgrade {name} to {_dotted(since)} or later",
                )
            )
        elif engine.get("cdi_enabled") is False:
            found.append(
                (
                    name,
                    f"{name} {version} without CDI",
                    "run the runtime stage with runtime_cdi: true (it turns CDI on in the engine's configuration)",
                )
            )
        else:
            return _check("runtime_cdi", True, f"{name} {version} with CDI on", need, "")
    if not found:
        return _check("runtime_cdi", False, "no CRI runtime", need, f"install the kubelet's runtime: {need}")
    return _check("runtime_cdi", False, "; ".join(f for _n, f, _x in found), need, "; ".join(x for _n, _f, x in found))


def _mig(facts: dict[str, Any]) -> dict[str, Any] | None:
    boot = facts.get("mig_boot") or {}
    if boot.get("layout") is None:
        return None  # no MIG layout asked for on this host
    status = boot.get("status")
    failed = [p for p in facts.get("problems") or [] if p.get("code") == "mig_boot_failed"]
    ok = not failed and (status is None or status.get("ok", True))
    return _check(
        "mig_layout",
        ok,
        f"layout {boot['layout']}" + ("" if ok else " not applied at this boot"),
        "the MIG layout applied",
        "run the mig stage: site.yml --tags mig (journalctl -u gpufleet-mig-layout)",
    )


def _imex(facts: dict[str, Any]) -> list[dict[str, Any]]:
    imex = facts.get("imex") or {}
    domain = imex.get("domain")
    if not domain:
        return []  # not in an NVLink domain: ComputeDomains do not apply
    channels = imex.get("channels") or []
    driver = facts.get("driver") or {}
    version = driver.get("loaded_version") if driver.get("loaded") else None
    return [
        _check(
            "imex_channels",
            0 in channels,
            f"domain {domain}, channels {channels or 'none'}",
            "/dev/nvidia-caps-imex-channels/channel0",
            "run the imex stage: site.yml --tags imex (gpufleet-nvidia-devices.service makes the channels)",
        ),
        _check(
            "driver_compute_domains",
            _at_least(version, MIN_DRIVER_COMPUTE_DOMAINS),
            f"driver {version}" if version else "no NVIDIA driver loaded",
            f"driver {MIN_DRIVER_COMPUTE_DOMAINS} or later for ComputeDomains",
            "install driver 570.158.01 or later (driver_source: cuda, driver_branch: '580')",
        ),
    ]


def verdict(facts: dict[str, Any], spec_text: str | None) -> dict[str, Any]:
    """The DRA readiness of a GPU host from its ``gpu_facts`` and its CDI spec's text (None: none readable)."""
    checks = [_driver(facts), _cdi(facts, spec_text), _runtime(facts)]
    mig = _mig(facts)
    if mig is not None:
        checks.append(mig)
    checks += _imex(facts)
    return {"ready": all(c["ok"] for c in checks), "release": RELEASE, "checks": checks}


def host_verdict(facts: dict[str, Any], root: str = "/", read: Callable[..., Any] = read_text) -> dict[str, Any] | None:
    """``verdict`` for a GPU host, reading the CDI spec ``facts`` found; None for a host without an NVIDIA GPU."""
    if not facts.get("gpu_node"):
        return None
    spec = facts.get("cdi_spec") or {}
    text = read(host_path(root, spec["path"]), tolerant=True, errors="replace") if spec.get("path") else None
    return verdict(facts, text)
