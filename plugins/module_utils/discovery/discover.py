# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Device discovery: everything ``gpu_facts`` returns as ``ansible_facts.nvidia``, as one pure call.

``discover(root, driver_root, sources, run_command)`` reads the host under ``root`` (``sys/``,
``proc/``, ``dev/``, ``etc/``) and the driver userspace under ``driver_root``, asks every source that is
available (best first: ``nvml`` through ctypes, ``nvidia-smi -q -x``, ``/proc/driver/nvidia``, sysfs
PCI), merges what they say per GPU (keyed by PCI address) and records which source answered each value.
A source that fails becomes a line in ``warnings``; discovery itself never fails for a host state.

``nvidia-smi`` is spawned only when asked for, or under ``auto`` when NVML did not answer while the
kernel module is loaded: NVML in-process is the same data without a process.

Standard library only (target Pythons 3.8+); the module passes ``module.run_command`` as
``run_command(argv) -> (rc, stdout, stderr)``, tests pass fakes. With ``run_command=None`` discovery
spawns nothing: ``nvidia-smi`` and the engines' ``--version`` are skipped (a warning when ``nvidia-smi``
was asked for by name). There is deliberately no ``subprocess`` fallback here: ansible-test's pylint
forbids ``subprocess`` in module_utils (modules must go through ``run_command``) and the project keeps
no sanity ignore file; a caller outside Ansible passes its own runner.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, List, Tuple

from ..base.fileio import read_text
from ..base.pathsafe import host_path, resolve_in_root
from ..cdi.devices import (
    additional_gids,
    parse_proc_devices,
    read_device_file_params,
    scan_device_nodes,
)
from ..cdi.driver_files import (
    BINARY_DIRS,
    CAPABILITIES,
    detect_installed_version,
    find_driver_files,
    read_driver_cache,
)
from ..cdi.ldcache import LdCacheEntry
from . import dra as _dra
from . import engines as _engines
from . import gpu_users as _gpu_users
from . import gpu_watch_state as _gpu_watch
from . import imex as _imex
from . import labels as _labels
from . import mig_boot_check as _mig_boot
from . import next_boot as _next_boot
from . import nvidia_procfs as _nvidia_procfs
from . import nvidia_smi as _nvidia_smi
from . import nvidia_toolkit as _nvidia_toolkit
from . import nvml as _nvml
from . import pci as _pci
from . import problems as _problems
from . import remediation_record as _remediation
from . import toolkit as _toolkit
from . import xid as _xid
from .container import detect_container
from .nvml import nvml_candidates

SOURCES = ("nvml", "nvidia-smi", "procfs", "sysfs")  # best first
GPU_FIELDS = (
    "index",
    "minor",
    "uuid",
    "name",
    "pci_bus_id",
    "pci_device_id",
    "memory_mib",
    "compute_capability",
    "architecture",
    "mig_mode",
    "numa_node",
)


def is_gpu_node(pci_gpu_count: object) -> bool:
    """Whether the host "has a GPU": an NVIDIA GPU on the PCI bus, driver or not (the ``gpu_node`` fact). The one
    statement of the rule every stage of ``site.yml`` and every role acts on; the count may be a string from Jinja."""
    return int(pci_gpu_count or 0) > 0


def parse_sources(sources: str | list[str] | tuple[str, ...] | None) -> tuple[str, ...]:
    """The ``sources`` option as an ordered tuple of source names (``auto`` = all, best first)."""
    if isinstance(sources, str):
        sources = [s.strip() for s in sources.split(",")]
    names = [s for s in (sources or ["auto"]) if s]
    if not names or "auto" in names:
        return SOURCES
    unknown = sorted(set(names) - set(SOURCES))
    if unknown:
        raise ValueError(
            "unknown discovery source {}; valid: auto, {}".format(
                ", ".join(repr(u) for u in unknown), ", ".join(SOURCES)
            )
        )
    return tuple(s for s in SOURCES if s in names)


def _merge_gpus(by_source: dict[str, list[dict[str, Any]]], order: tuple[str, ...]) -> list[dict[str, Any]]:
    """Merge per-source GPU records (keyed by PCI address, else UUID, else minor) into one list.

    Each field takes the first non-None value in ``order``; ``field_sources`` says whose. A GPU that only
    a lower source reports keeps that source as its ``source``.
    """
    merged = {}
    keys = []
    for source in order:
        for record in by_source.get(source) or ():
            key = record.get("pci_bus_id") or record.get("uuid") or ("minor", record.get("minor"))
            if key not in merged:
                merged[key] = {"source": source, "field_sources": {}, "lost": False}
                keys.append(key)
            gpu = merged[key]
            for field, value in record.items():
                if value is None or field in ("source",):
                    continue
                if field == "lost":
                    gpu["lost"] = gpu["lost"] or bool(value)
                    continue
                if gpu.get(field) is None:
                    gpu[field] = value
                    if field in GPU_FIELDS:
                        gpu["field_sources"][field] = source
    return [merged[k] for k in keys]


def _finish_gpu(gpu: dict[str, Any]) -> dict[str, Any]:
    for field in GPU_FIELDS:
        gpu.setdefault(field, None)
    gpu.setdefault("mig_devices", [])
    gpu["health"] = dict(gpu.get("health") or {})
    if gpu["compute_capability"] is None or gpu["architecture"] is None:
        cc, arch = _nvml.guess_compute_capability(gpu.get("name"), gpu.get("architecture"))
        if gpu["compute_capability"] is None and cc:
            gpu["compute_capability"] = cc
            gpu["field_sources"]["compute_capability"] = "table"
        if gpu["architecture"] is None and arch:
            gpu["architecture"] = arch
            gpu["field_sources"]["architecture"] = "table"
    return gpu


def _find_binary(driver_root: str, name: str) -> str | None:
    for directory in BINARY_DIRS:
        inner = resolve_in_root(driver_root, directory + "/" + name)
        path = host_path(driver_root, inner)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


RunCommand = Callable[[List[str]], Tuple[int, str, str]]


class _Scan:
    """One discover() call: where it reads, which sources it asks (``explicit``: named, not ``auto``), what it may
    run, and the warnings it collects."""

    def __init__(self, root: str, driver_root: str, sources: Any, run_command: RunCommand | None) -> None:
        self.root = root
        self.driver_root = driver_root
        self.order = parse_sources(sources)
        self.explicit = sources_explicit(sources)
        self.run_command = run_command
        self.sys_dir = host_path(root, "/sys")
        self.proc_dir = host_path(root, "/proc")
        self.warnings: list[str] = []


class _Answers:
    """What the GPU sources said: each answering source's GPU records (best first), and NVML's and nvidia-smi's
    whole answers (driver and CUDA versions)."""

    def __init__(self) -> None:
        self.by_source: dict[str, list[dict[str, Any]]] = {}
        self.nvml: dict[str, Any] | None = None
        self.smi: dict[str, Any] | None = None

    def driver_level(self) -> list[str]:
        """The driver's own sources that answered, best first (every source but sysfs)."""
        return [s for s in self.by_source if s != "sysfs"]


def discover(
    root: str = "/",
    driver_root: str | None = None,
    sources: str | list[str] | tuple[str, ...] | None = ("auto",),
    run_command: RunCommand | None = None,
    toolkit_bindir: str = _toolkit.DEFAULT_BINDIR,
    *,
    kernel_log: str = "/dev/kmsg",
) -> dict[str, Any]:
    """The ``ansible_facts.nvidia`` dict of the host under ``root`` (see the module's RETURN).

    ``kernel_log``: where the XID events are read, under ``root`` (``/dev/kmsg``, or a file of its records or of
    ``dmesg`` lines); when it cannot be read and ``root`` is ``/``, ``journalctl -k -b`` through ``run_command``."""
    scan = _Scan(root, root if driver_root is None else driver_root, sources, run_command)
    # PCI bus (always read: pci_gpu_count and NUMA nodes do not depend on the sources chosen).
    pci = _pci.scan_pci(os.path.join(scan.sys_dir, "bus", "pci", "devices"))
    pci_gpus = [f for f in pci if f["is_gpu"]]
    kernel = _Kernel(scan)
    entries, installed_version = _installed_userspace(scan)
    answers = _ask_sources(scan, kernel, entries, installed_version, pci_gpus)
    gpus = _gpus(answers, scan.order)
    # NVSwitch systems need NVIDIA's Fabric Manager running before CUDA initialises on their GPUs.
    fabric_manager = _fabric_manager(root, pci, run_command)
    # XID events since boot (what the kernel ring buffer or the journal still holds), per GPU by PCI address.
    xid_source, xid_events = _kernel_xids(root, kernel_log, run_command, scan.warnings)
    # The GPU watch's state: its XIDs of this boot the ring buffer no longer holds count too; its last run is a fact.
    watch_state, watch_error = _gpu_watch.read_state(root)
    boot, record = _remediation.boot_id(root), _remediation.read_record(root)[0]
    xid_events = _gpu_watch.merge_xids(
        xid_events, watch_state, boot, lambda event: _remediation.xid_handled(event, record, boot)
    )
    for gpu in gpus:
        gpu["health"]["xid_events"] = [e for e in xid_events if e["pci_bus_id"] == gpu.get("pci_bus_id")]
    facts = {
        "gpus": gpus,
        "gpu_count": len(gpus),
        "pci_gpu_count": len(pci_gpus),
        "gpu_node": is_gpu_node(len(pci_gpus)),
        "pci_devices": pci,
        "driver": _driver(root, kernel, answers, installed_version),
        "device_nodes": _device_nodes(root),
        "libraries": _libraries(scan, entries, installed_version),
        "engines": _engines.detect(root, run_command, scan.warnings),
        "container": detect_container(root),
        "toolkit": _toolkit.toolkit(root, toolkit_bindir),
        "cdi_spec": _toolkit.cdi_spec(root),
        "nvidia_toolkit": _nvidia_toolkit.nvidia_toolkit(root, run_command),
        # The processes holding /dev/nvidia* open (about 45 ms for 530 processes): this module itself is left out.
        "gpu_users": _gpu_users.gpu_users(root, exclude_pids=(os.getpid(),) if os.path.abspath(root) == "/" else ()),
        "xid_events": xid_events,
        "xid_source": xid_source,
        "gpu_watch": _gpu_watch.watch_facts(watch_state, watch_error, time.time()),
        "fabric_manager": fabric_manager,
        # NVLink multi-node memory sharing: the IMEX channel device, its nodes, nvidia-imex's files and unit.
        "imex": _imex.imex_facts(root, scan.proc_dir, _find_binary(root, "systemctl"), run_command),
        # The kernel the bootloader starts next and whether driver installed_version's module pairs with it.
        "next_boot": _next_boot.pairing(
            root,
            installed_version,
            _problems.secure_boot_enabled(scan.sys_dir),
            run_command if os.path.abspath(root) == "/" else None,
            sys_dir=scan.sys_dir,
        ),
        # The layout the mig role's boot unit applies again at every boot, and what it did at this one.
        "mig_boot": _mig_boot.mig_boot(root),
        "sources": {"requested": list(scan.order), "answered": [s for s in SOURCES if s in answers.by_source]},
        "warnings": scan.warnings,
    }
    facts["labels"] = _labels.gfd_labels(facts, _pci.read_machine(scan.sys_dir))
    facts["problems"] = _host_problems(facts, scan, kernel, toolkit_bindir)
    # Whether NVIDIA's DRA driver could serve this host's GPUs (None: no NVIDIA GPU), from the facts above.
    facts["dra"] = _dra.host_verdict(facts, root)
    return facts


class _Kernel:
    """The kernel's side: the nvidia and nouveau modules in sysfs, ``/proc/driver/nvidia/version``, whether the
    nvidia module is loaded and whether nvidia-uvm is."""

    def __init__(self, scan: _Scan) -> None:
        self.module = _nvidia_procfs.module_state(scan.sys_dir, "nvidia")
        self.nouveau = _nvidia_procfs.module_state(scan.sys_dir, "nouveau")
        self.proc_version = _nvidia_procfs.read_version(scan.proc_dir)
        self.loaded = _nvidia_procfs.module_loaded(self.module) or self.proc_version is not None
        # nvidia-uvm registers a dynamic major when it loads; /sys/module/nvidia_uvm says so too.
        proc_devices = read_text(os.path.join(scan.proc_dir, "devices"), tolerant=True, errors="replace") or ""
        self.uvm_loaded = "nvidia-uvm" in parse_proc_devices(proc_devices)["character"] or (
            _nvidia_procfs.module_loaded(_nvidia_procfs.module_state(scan.sys_dir, "nvidia_uvm"))
        )


def _installed_userspace(scan: _Scan) -> tuple[list[LdCacheEntry], str | None]:
    """The driver root's ld.so.cache entries and the installed userspace's version they show (Debian's
    ``nvidia/<flavour>`` directory included)."""
    try:
        entries = read_driver_cache(scan.driver_root)
    except OSError:
        entries = []
    except ValueError as exc:
        scan.warnings.append(f"ld.so.cache: {exc}")
        entries = []

    def resolve(path: str) -> str:
        return resolve_in_root(scan.driver_root, path)

    return entries, (detect_installed_version(entries, resolve) if entries else None)


def _ask_sources(
    scan: _Scan,
    kernel: _Kernel,
    entries: list[LdCacheEntry],
    installed_version: str | None,
    pci_gpus: list[dict[str, Any]],
) -> _Answers:
    """Every source of ``scan.order`` that can answer, best first."""
    answers = _Answers()
    if "nvml" in scan.order:
        _ask_nvml(scan, answers, entries, installed_version)
    if "nvidia-smi" in scan.order and (scan.explicit or (answers.nvml is None and kernel.loaded)):
        _ask_nvidia_smi(scan, answers)
    if "procfs" in scan.order:
        procfs_gpus = _nvidia_procfs.read_gpus(scan.proc_dir)
        if procfs_gpus is not None or kernel.proc_version is not None:
            answers.by_source["procfs"] = procfs_gpus or []
    if "sysfs" in scan.order:
        driver_level = answers.driver_level()
        answers.by_source["sysfs"] = [
            {
                "pci_bus_id": f["pci_bus_id"],
                "pci_device_id": _pci.gpu_pci_device_id(f["device_id"], f["vendor_id"]),
                "numa_node": f["numa_node"],
            }
            for f in pci_gpus
            # Without a driver-level source, the GPUs the driver sees are those bound to it.
            if driver_level or f["driver"] == "nvidia"
        ]
    return answers


def _ask_nvml(scan: _Scan, answers: _Answers, entries: list[LdCacheEntry], installed_version: str | None) -> None:
    library = nvml_candidates(scan.driver_root, entries)
    if not library:
        if scan.explicit:
            scan.warnings.append(f"nvml: libnvidia-ml.so.1 is not in {scan.driver_root}'s ld.so.cache")
        return
    try:
        answers.nvml = _nvml.query(library)
    except _nvml.NvmlUnavailable as exc:
        if scan.explicit or installed_version:
            scan.warnings.append(f"nvml: {exc}")
    except _nvml.NvmlError as exc:
        scan.warnings.append(f"nvml: {exc}")
    else:
        answers.by_source["nvml"] = answers.nvml["gpus"]
        scan.warnings.extend(f"nvml: {w}" for w in answers.nvml["warnings"])


def _ask_nvidia_smi(scan: _Scan, answers: _Answers) -> None:
    """``nvidia-smi -q -x``; the GPUs it says are lost (in its XML or its errors) are records too."""
    binary = _find_binary(scan.driver_root, "nvidia-smi")
    if binary is None or scan.run_command is None:
        if scan.explicit:
            why = f"not found in {scan.driver_root}" if binary is None else "not run (no run_command given)"
            scan.warnings.append(f"nvidia-smi: {why}")
        return
    rc, out, err = scan.run_command([binary, "-q", "-x"])
    lost = _nvidia_smi.lost_gpus(out + "\n" + err)
    try:
        answers.smi = _nvidia_smi.parse_xml(out) if out.strip().startswith("<") else None
    except ValueError as exc:
        scan.warnings.append(f"nvidia-smi: {exc}")
    if answers.smi is None and not lost:
        scan.warnings.append(f"nvidia-smi: rc={rc}: {(err or out).strip()[:300]}")
        return
    records = list(answers.smi["gpus"]) if answers.smi else []
    records.extend({"pci_bus_id": bus_id, "lost": True} for bus_id in lost)
    answers.by_source["nvidia-smi"] = records
    if rc != 0:
        scan.warnings.append(f"nvidia-smi: rc={rc}: {(err or out).strip()[:300]}")


def _gpus(answers: _Answers, order: tuple[str, ...]) -> list[dict[str, Any]]:
    """The GPUs, merged from every source, with every field; sorted by minor (then index)."""
    gpus = _merge_gpus(answers.by_source, order)
    driver_level = answers.driver_level()
    if driver_level:
        # Only the driver's own sources decide which GPUs exist; sysfs fills fields in.
        seen = {g.get("pci_bus_id") for src in driver_level for g in answers.by_source[src]}
        gpus = [g for g in gpus if g.get("pci_bus_id") in seen or g["source"] != "sysfs"]
    best = driver_level[0] if driver_level else None
    best_lost = (answers.nvml or {}).get("lost_count") if best == "nvml" else None
    for gpu in gpus:
        # NVML counted a GPU it could not get a handle for: the GPUs only lower sources list are those.
        if best_lost and gpu["source"] not in ("nvml", "sysfs"):
            gpu["lost"] = True
    gpus = [_finish_gpu(g) for g in gpus]
    gpus.sort(key=lambda g: g.get("pci_bus_id") or "")
    for position, gpu in enumerate(gpus):
        if gpu["index"] is None:
            gpu["index"] = position
            gpu["field_sources"]["index"] = "pci-order"
    gpus.sort(key=lambda g: (g["minor"] is None, g["minor"] if g["minor"] is not None else 0, g["index"]))
    return gpus


def _driver(root: str, kernel: _Kernel, answers: _Answers, installed_version: str | None) -> dict[str, Any]:
    """``driver``: its versions, each with the source that gave it, and its device files."""
    driver_sources = {}
    loaded_version = None
    for source, value in (
        ("sysfs", kernel.module["version"] if kernel.module["present"] else None),
        ("procfs", kernel.proc_version and kernel.proc_version["version"]),
        ("nvml", answers.nvml and answers.nvml["driver_version"]),
        ("nvidia-smi", answers.smi and answers.smi["driver_version"]),
    ):
        if value:
            loaded_version = value
            driver_sources["loaded_version"] = source
            break
    cuda_version = None
    for source, result in (("nvml", answers.nvml), ("nvidia-smi", answers.smi)):
        if result and result.get("cuda_version"):
            cuda_version = result["cuda_version"]
            driver_sources["cuda_version"] = source
            break
    if installed_version:
        driver_sources["installed_version"] = "ld.so.cache"
    loaded = bool(kernel.loaded or answers.nvml or answers.smi)
    return {
        "installed_version": installed_version,
        "loaded_version": loaded_version,
        "loaded": loaded,
        "kernel_module_flavor": kernel.proc_version["flavor"] if kernel.proc_version else None,
        "uvm_loaded": bool(loaded and kernel.uvm_loaded),
        "cuda_version": cuda_version,
        "reboot_required": bool(installed_version and loaded_version and installed_version != loaded_version),
        "device_files": device_files(root),
        "sources": driver_sources,
    }


def _device_nodes(root: str) -> list[dict[str, Any]]:
    """The device nodes and their /dev/char links."""
    return [
        {
            "path": node.path,
            "major": node.major,
            "minor": node.minor,
            "char_link": f"/dev/char/{int(node.major)}:{int(node.minor)}",
            "char_link_present": _problems.char_link_present(root, node),
        }
        for node in scan_device_nodes(host_path(root, "/dev"))
    ]


def _host_problems(facts: dict[str, Any], scan: _Scan, kernel: _Kernel, toolkit_bindir: str) -> list[dict[str, str]]:
    """The problems of ``facts`` and of what discovery saw beside them (nouveau, Secure Boot, the module's taint,
    our launchers shadowing NVIDIA's programs)."""
    return _problems.check(
        facts,
        scan.root,
        nouveau_loaded=_nvidia_procfs.module_loaded(kernel.nouveau),
        secure_boot=_problems.secure_boot_enabled(scan.sys_dir),
        nvidia_taint=kernel.module["taint"],
        shadowed=_toolkit.shadowed(scan.root, toolkit_bindir),
    )


def _libraries(scan: _Scan, entries: list[LdCacheEntry], installed_version: str | None) -> dict[str, Any]:
    """The installed driver's files per capability."""
    libraries: dict[str, list[dict[str, Any]]] = {c: [] for c in CAPABILITIES}
    if not installed_version:
        return libraries
    try:
        files = find_driver_files(scan.driver_root, CAPABILITIES, installed_version, root=scan.root, entries=entries)[1]
    except OSError as exc:
        scan.warnings.append(f"driver files: {exc}")
        files = []
    for f in files:
        libraries[f.capability].append(
            {"kind": f.kind, "name": f.name, "path": f.path, "resolved": f.resolved, "arch": f.arch}
        )
    return libraries


def device_files(root: str = "/") -> dict[str, Any]:
    """``driver.device_files``: the owner, group and mode the driver gives its device files, where that was read, and
    the groups a container's process needs to open them (``cdi.devices``)."""
    params = read_device_file_params(root)
    mode = int(params["mode"])
    return {
        "uid": int(params["uid"]),
        "gid": int(params["gid"]),
        "mode": f"{mode:04o}",
        "source": params["source"],
        "additional_gids": additional_gids(params),
    }


# NVSwitch PCI functions: NVIDIA's vendor id, class "bridge, other" (0x0680xx), as lspci lists them on HGX/DGX boards.
NVSWITCH_CLASS_PREFIX = "0x0680"
FABRIC_MANAGER_UNIT = "nvidia-fabricmanager.service"


def _fabric_manager(
    root: str, pci: list[dict[str, Any]], run_command: Callable[[list[str]], tuple[int, str, str]] | None
) -> dict[str, Any]:
    """``{nvswitch_count, state}``: the NVSwitches on the PCI bus and, when there are some and ``root`` is ``/``, what
    ``systemctl is-active nvidia-fabricmanager`` says (``active``, ``inactive``, ``failed``, ...); ``state`` None when
    not asked or not known."""
    count = sum(1 for f in pci if (f.get("class") or "").lower().startswith(NVSWITCH_CLASS_PREFIX))
    state = None
    if count and run_command is not None and os.path.abspath(root) == "/":
        systemctl = _find_binary(root, "systemctl")
        if systemctl is not None:
            _rc, out, _err = run_command([systemctl, "is-active", FABRIC_MANAGER_UNIT])
            state = out.strip().splitlines()[0] if out.strip() else None
    return {"nvswitch_count": count, "state": state}


def _kernel_xids(
    root: str,
    kernel_log: str,
    run_command: Callable[[list[str]], tuple[int, str, str]] | None,
    warnings: list[str],
) -> tuple[str | None, list[dict[str, Any]]]:
    """``(where they were read, per-GPU XID summaries)``; ``(None, [])`` when no kernel log could be read. XIDs that
    ``playbooks/remediate.yml`` remediated (the remediation record's mark) are left out."""
    record, _error = _remediation.read_record(root)
    boot = _remediation.boot_id(root)
    text = _xid.read_kmsg(host_path(root, kernel_log))
    if text is not None:
        return kernel_log, _xid.summarize(_remediation.drop_handled(_xid.parse(text), record, boot))
    if run_command is None or os.path.abspath(root) != "/":
        return None, []
    journalctl = _find_binary(root, "journalctl")
    if journalctl is None:
        return None, []
    rc, out, err = run_command([journalctl, "-k", "-b", "--no-pager", "-o", "short-monotonic"])
    if rc != 0:
        warnings.append(f"xid: {kernel_log} unreadable and journalctl -k failed: rc={rc}: {(err or out).strip()[:200]}")
        return None, []
    return "journalctl", _xid.summarize(_remediation.drop_handled(_xid.parse(out), record, boot))


def sources_explicit(sources: str | list[str] | tuple[str, ...] | None) -> bool:
    """True when the caller named sources (not ``auto``): then an unavailable one is worth a warning."""
    if isinstance(sources, str):
        sources = [s.strip() for s in sources.split(",")]
    return bool(sources) and "auto" not in sources


def discovered_gpus(root: str = "/", driver_root: str = "/") -> list[dict[str, Any]] | None:
    """The GPUs discovery finds with an index and a device minor (what a CDI spec needs), or None.

    ``driver_root`` is in host terms, read under ``root``. For the CDI spec's callers discovery is a
    convenience: any failure gives None, and the spec falls back to the ``/dev/nvidia<N>`` nodes.
    """
    try:
        facts = discover(root=root, driver_root=host_path(root, driver_root))
    except Exception:
        return None
    gpus = [g for g in facts.get("gpus") or () if g.get("minor") is not None and g.get("index") is not None]
    return gpus or None
