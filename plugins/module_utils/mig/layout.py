# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""MIG layouts as code: NVIDIA mig-parted's vocabulary resolved against a host's GPUs, and the plan that takes each
GPU from the partitions it has to the ones the layout asks for. Pure functions, no NVML.

A layout is a list of entries as in one named ``mig-configs`` item of mig-parted's configuration
(github.com/NVIDIA/mig-parted, ``examples/config.yaml``)::

    - devices: all            # or a list of GPU indices
      device-filter: 0x20B010DE   # optional: a PCI device id (or list), or a product name such as A100-SXM4-40GB
      mig-enabled: true
      mig-devices: {"1g.5gb": 2, "2g.10gb": 1}

Profiles and their placements are each GPU's own, read from NVML (``nvml_mig.Session.profiles``), so a model no
table lists gets its layouts as well. A GPU instance of a profile may start only at the listed memory slices, occupies
``size`` of the GPU's memory slices and ``slices`` of its compute slices. Each GPU instance gets one compute instance
spanning it, as mig-parted creates them.

Standard library only (target Pythons 3.8+).
"""

from __future__ import annotations

from typing import Any

# A GPU's profile table, as ``nvml_mig.Session.profiles`` reads it from NVML: profile name -> (NVML GPU-instance
# profile enum, compute slices, memory slices (placement size), placement starts (memory slices), instances at most on
# one GPU).


class LayoutError(ValueError):
    """The layout cannot be applied as written; the message names the entry or GPU and the fix."""


def _matches(entry: dict[str, Any], gpu: dict[str, Any]) -> bool:
    devices = entry.get("devices", "all")
    if devices != "all" and gpu.get("index") not in devices:
        return False
    wanted = entry.get("device-filter")
    if wanted is None:
        return True
    filters = [wanted] if isinstance(wanted, str) else list(wanted)
    pci_id = str(gpu.get("pci_device_id") or "").lower()
    name = str(gpu.get("name") or "")
    return any(str(f).lower() == pci_id or (str(f) and str(f) in name) for f in filters)


def check_layout(layout: Any) -> list[dict[str, Any]]:
    """``layout`` checked and normalised: ``devices`` ``all`` or a list of ints, ``mig-enabled`` a bool,
    ``mig-devices`` a dict of profile name to count (only with MIG enabled)."""
    if not isinstance(layout, list) or not layout:
        raise LayoutError("layout: a non-empty list of entries {devices, mig-enabled, mig-devices} is needed")
    entries = []
    for position, entry in enumerate(layout):
        where = f"layout[{position}]"
        if not isinstance(entry, dict):
            raise LayoutError(f"{where}: an entry is a dict with devices, mig-enabled and mig-devices")
        unknown = sorted(set(entry) - {"devices", "device-filter", "mig-enabled", "mig-devices"})
        if unknown:
            raise LayoutError(f"{where}: unknown key(s) {', '.join(unknown)} (known: devices, device-filter, "
                              "mig-enabled, mig-devices)")  # fmt: skip
        devices = entry.get("devices", "all")
        if devices != "all" and not (
            isinstance(devices, list) and all(isinstance(d, int) and not isinstance(d, bool) for d in devices)
        ):
            raise LayoutError(f"{where}.devices: 'all' or a list of GPU indices, not {devices!r}")
        enabled = entry.get("mig-enabled")
        if not isinstance(enabled, bool):
            raise LayoutError(f"{where}.mig-enabled: true or false is required")
        counts = entry.get("mig-devices") or {}
        if not isinstance(counts, dict):
            raise LayoutError(f"{where}.mig-devices: a dict of profile to count, such as {{'1g.5gb': 7}}")
        if counts and not enabled:
            raise LayoutError(f"{where}: mig-devices given with mig-enabled false; enable MIG or drop mig-devices")
        for profile, count in counts.items():
            if not isinstance(count, int) or isinstance(count, bool) or count < 0:
                raise LayoutError(f"{where}.mig-devices.{profile}: a count (0 or more), not {count!r}")
        filters = entry.get("device-filter")
        if filters is not None and not isinstance(filters, (str, list)):
            raise LayoutError(f"{where}.device-filter: a PCI device id or product name, or a list of them")
        entries.append(
            {
                "devices": devices,
                "device-filter": filters,
                "mig-enabled": enabled,
                "mig-devices": {str(k): v for k, v in counts.items() if v},
            }
        )
    return entries


def desired_state(layout: Any, gpus: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """``{gpu index: {"mig_enabled", "devices": {profile: count}}}`` for the GPUs the layout names; a GPU no entry
    names is left as it is. Two entries naming one GPU is an error (which one would win is not obvious)."""
    entries = check_layout(layout)
    wanted: dict[int, dict[str, Any]] = {}
    named_by: dict[int, int] = {}
    for position, entry in enumerate(entries):
        hits = [g for g in gpus if _matches(entry, g)]
        if entry["devices"] != "all":
            missing = sorted(set(entry["devices"]) - {g.get("index") for g in gpus})
            if missing:
                raise LayoutError(f"layout[{position}].devices: no GPU with index {missing} on this host "
                                  f"(it has {sorted(g.get('index') for g in gpus)})")  # fmt: skip
        for gpu in hits:
            index = gpu["index"]
            if index in named_by:
                raise LayoutError(f"GPU {index} is named by layout[{named_by[index]}] and layout[{position}]; "
                                  "name each GPU once")  # fmt: skip
            named_by[index] = position
            wanted[index] = {"mig_enabled": entry["mig-enabled"], "devices": dict(entry["mig-devices"])}
    return wanted


def placements(counts: dict[str, int], table: dict[str, Any]) -> list[tuple[str, int]] | None:
    """``[(profile, start memory slice)]`` that fits ``counts`` on one GPU (no two instances share a memory slice, at
    most the GPU's compute slices, no profile more often than the GPU offers it), the largest profiles first; None
    when no placement exists. The GPU's slices are those of its whole-GPU profile (the largest in ``table``)."""
    compute_total = max(row[1] for row in table.values())
    memory_total = max(row[2] for row in table.values())
    if any(n > table[p][4] for p, n in counts.items()):
        return None
    wanted = sorted((p for p, n in counts.items() for _i in range(n)), key=lambda p: (-table[p][2], -table[p][1], p))
    if sum(table[p][1] for p in wanted) > compute_total:
        return None
    chosen: list[tuple[str, int]] = []

    def place(position: int, used: int) -> bool:
        if position == len(wanted):
            return True
        profile = wanted[position]
        size = table[profile][2]
        for start in table[profile][3]:
            mask = ((1 << size) - 1) << start
            if start + size <= memory_total and not used & mask:
                chosen.append((profile, start))
                if place(position + 1, used | mask):
                    return True
                chosen.pop()
        return False

    return list(chosen) if place(0, 0) else None


def describe(mig_enabled: bool | None, counts: dict[str, int]) -> str:
    """``MIG enabled: 1g.5gb x2, 2g.10gb x1`` / ``MIG enabled: no instances`` / ``MIG disabled``."""
    if not mig_enabled:
        return "MIG disabled"
    listed = ", ".join(f"{p} x{n}" for p, n in sorted(counts.items()) if n)
    return f"MIG enabled: {listed or 'no instances'}"


def current_counts(gpu: dict[str, Any]) -> dict[str, int]:
    """The profiles of a GPU's MIG devices (discovery's ``mig_devices``), counted."""
    counts: dict[str, int] = {}
    for mig in gpu.get("mig_devices") or ():
        profile = mig.get("profile") or "?"
        counts[profile] = counts.get(profile, 0) + 1
    return counts


def plan(
    gpus: list[dict[str, Any]], layout: Any, tables: dict[int, dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """Per GPU the layout names: ``{index, name, uuid, table (its profiles), before, after, set_mig_mode (None or
    bool), destroy (bool), create [(profile, start)], changed}``. ``tables``: each GPU's profile table by index, as
    NVML lists it. Raises LayoutError for a GPU without MIG, a profile the GPU does not offer (the message lists what
    it does offer) or a combination that does not fit.

    Instances are compared as counts per profile: a GPU whose instances already match keeps them (idempotent,
    whatever their placement); any difference destroys every instance and creates the layout's, as mig-parted does.
    """
    wanted = desired_state(layout, gpus)
    steps = []
    for gpu in gpus:
        index = gpu.get("index")
        if index not in wanted:
            continue
        want = wanted[index]
        name = gpu.get("name") or f"GPU {index}"
        mode = gpu.get("mig_mode")
        enabled_now = mode == "enabled"
        if mode is None and want["mig_enabled"]:
            raise LayoutError(f"GPU {index} ({name}) does not support MIG; take it out of the layout "
                              "(devices: [...] or device-filter)")  # fmt: skip
        counts_now = current_counts(gpu) if enabled_now else {}
        create: list[tuple[str, int]] = []
        if want["mig_enabled"] and want["devices"]:
            table = (tables or {}).get(index)
            if not table:
                raise LayoutError(
                    f"GPU {index} ({name}): NVML lists no MIG profiles for this GPU. With MIG off some drivers list "
                    "none: apply a layout with mig-enabled true and no mig-devices first, then this one"
                )
            unknown = sorted(set(want["devices"]) - set(table))
            if unknown:
                raise LayoutError(f"GPU {index} ({name}) does not offer MIG profile(s) {', '.join(unknown)}; it "
                                  f"offers {', '.join(table)}")  # fmt: skip
            fit = placements(want["devices"], table)
            if fit is None:
                used = sum(table[p][1] * n for p, n in want["devices"].items())
                most = ", ".join(f"{p} x{row[4]}" for p, row in table.items())
                raise LayoutError(
                    f"GPU {index} ({name}): {describe(True, want['devices'])} does not fit on one GPU ({used} of "
                    f"{max(row[1] for row in table.values())} compute slices, a profile more often than the GPU "
                    f"offers it, or no placement without overlapping memory slices); at most {most}"
                )
            create = fit
        set_mode = None if want["mig_enabled"] == enabled_now else want["mig_enabled"]
        recreate = want["mig_enabled"] and counts_now != want["devices"]
        destroy = bool(counts_now) and (recreate or not want["mig_enabled"])
        steps.append(
            {
                "index": index,
                "name": name,
                "table": (tables or {}).get(index) or {},
                "uuid": gpu.get("uuid"),
                "before": describe(enabled_now, counts_now),
                "after": describe(want["mig_enabled"], want["devices"]),
                "set_mig_mode": set_mode,
                "destroy": destroy,
                "create": create if recreate else [],
                "changed": set_mode is not None or destroy or recreate,
            }
        )
    return steps


def holders(gpu_users: dict[str, Any] | None, minor: int | None) -> list[str]:
    """The processes of discovery's ``gpu_users`` holding the GPU of device minor ``minor`` (``/dev/nvidia<minor>``;
    a MIG device's holder holds it too), each as ``pid N (command)[ in <engine> container <id>]``. A process holding
    only ``/dev/nvidiactl`` or ``/dev/nvidia-uvm`` holds no GPU."""
    if minor is None:
        return []
    node = f"/dev/nvidia{int(minor)}"
    found = []
    for proc in (gpu_users or {}).get("processes") or ():
        if node not in (proc.get("devices") or ()):
            continue
        text = f"pid {proc.get('pid')} ({proc.get('command')})"
        container = proc.get("container") or {}
        if container.get("engine"):
            text += f" in {container['engine']} container {str(container.get('id') or '?')[:12]}"
        found.append(text)
    return found
