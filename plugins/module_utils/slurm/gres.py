# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Slurm's GPU resources from discovery: the lines of ``gres.conf`` and the node's ``Gres=`` value for
``slurm.conf``, rendered from gpu_facts' GPU records. Pure functions.

Rules, from the Slurm documentation (read 2026-11-27):

* https://slurm.schedmd.com/gres.conf.html : ``AutoDetect=off`` makes slurmd use only the lines given (no NVML
  detection); each GPU is ``Name=gpu Type=<type> File=<device file>``; a MIG device is described with
  ``MultipleFiles=`` (a comma-separated list: the parent GPU's ``/dev/nvidia<minor>`` and the MIG device's
  capability files ``/dev/nvidia-caps/nvidia-cap<minor>`` for its GPU instance and its compute instance; the
  keyword exists since Slurm 22.05, Debian 12 ships 22.05.8 and Debian 13 ships 24.11); ``File`` and
  ``MultipleFiles`` may not be on one line; parameter names are case insensitive.
* https://slurm.schedmd.com/slurm.conf.html : a node's ``Gres=<name>[:<type>]:<count>[,...]``, and the types
  there match gres.conf's.
* https://slurm.schedmd.com/gres.html (MIG section): the capability minors are those of
  ``/proc/driver/nvidia-caps/mig-minors`` (``gpu<G>/gi<I>/access`` and ``gpu<G>/gi<I>/ci<C>/access``).

A GPU with MIG enabled is offered as its MIG devices only (Slurm schedules either the whole GPU or its slices, not
both); a type is the product name lower-cased with every character Slurm's ``name:type:count`` syntax cannot carry
turned into ``_`` (``NVIDIA A100-SXM4-40GB`` -> ``a100-sxm4-40gb``), and a MIG device's type is its GPU's type and
its profile (``a100-sxm4-40gb_1g.5gb``) or, without a profile name, its memory in GiB (``a100-sxm4-40gb_5gb``).

Standard library only (target Pythons 3.8+).
"""

from __future__ import annotations

import re
from typing import Any

_TYPE_BAD = re.compile(r"[^a-z0-9._-]+")
HEADER = "# Written by gpufleet.nvidia from the GPUs' discovery; changes here are replaced.\n"


class GresError(ValueError):
    """A GPU record that cannot be described to Slurm (the message names the GPU and what is missing)."""


def gpu_type(name: str | None) -> str:
    """Slurm GRES type of a product name: ``NVIDIA A100-SXM4-40GB`` -> ``a100-sxm4-40gb``."""
    text = (name or "gpu").strip().lower()
    if text.startswith("nvidia "):
        text = text[len("nvidia ") :]
    return _TYPE_BAD.sub("_", text).strip("_") or "gpu"


def mig_type(parent: str, mig: dict[str, Any]) -> str:
    """Type of a MIG device: the parent's type and the profile (or memory in GiB)."""
    profile = mig.get("profile")
    if profile:
        return f"{parent}_{_TYPE_BAD.sub('_', str(profile).lower())}"
    memory = mig.get("memory_mib")
    if not memory:
        raise GresError(f"MIG device {mig.get('index')} has neither a profile name nor a memory size")
    return f"{parent}_{round(memory / 1024)}gb"


def gres_lines(gpus: list[dict[str, Any]], mig_minors: dict[str, int]) -> list[tuple[str, str]]:
    """``[(type, gres.conf line), ...]`` for every GPU, and every MIG device of a GPU with MIG enabled.

    ``mig_minors`` is ``cdi.devices.parse_mig_minors`` of ``/proc/driver/nvidia-caps/mig-minors``.
    """
    found: list[tuple[str, str]] = []
    for gpu in sorted(gpus, key=lambda g: (g.get("minor") is None, g.get("minor") or 0)):
        minor = gpu.get("minor")
        if minor is None:
            raise GresError(f"GPU {gpu.get('pci_bus_id') or gpu.get('index')} has no minor number (nvidia-smi -q -x)")
        parent = gpu_type(gpu.get("name"))
        if gpu.get("mig_mode") != "enabled":
            found.append((parent, f"Name=gpu Type={parent} File=/dev/nvidia{minor}"))
            continue
        for mig in sorted(gpu.get("mig_devices") or [], key=lambda m: (m.get("gi_id", 0), m.get("ci_id", 0))):
            gi, ci = mig.get("gi_id"), mig.get("ci_id")
            gi_key, ci_key = f"gpu{minor}/gi{gi}/access", f"gpu{minor}/gi{gi}/ci{ci}/access"
            missing = [key for key in (gi_key, ci_key) if key not in mig_minors]
            if gi is None or ci is None or missing:
                raise GresError(
                    f"MIG device gi{gi}/ci{ci} of GPU {minor}: no capability minor for "
                    f"{', '.join(missing) or 'its instance ids'} in /proc/driver/nvidia-caps/mig-minors"
                )
            kind = mig_type(parent, mig)
            files = ",".join(
                [
                    f"/dev/nvidia{minor}",
                    f"/dev/nvidia-caps/nvidia-cap{mig_minors[gi_key]}",
                    f"/dev/nvidia-caps/nvidia-cap{mig_minors[ci_key]}",
                ]
            )
            found.append((kind, f"Name=gpu Type={kind} MultipleFiles={files}"))
    return found


def gres_value(lines: list[tuple[str, str]]) -> str:
    """slurm.conf's ``Gres=`` value: ``gpu:<type>:<count>`` per type, in first-seen order (empty: no GPU)."""
    counts: dict[str, int] = {}
    for kind, _line in lines:
        counts[kind] = counts.get(kind, 0) + 1
    return ",".join(f"gpu:{kind}:{count}" for kind, count in counts.items())


def render(
    node: str, gpus: list[dict[str, Any]], mig_minors: dict[str, int], cgroup_constrain: bool = False
) -> dict[str, Any]:
    """Everything the node's Slurm files need: ``gres_conf`` (text), ``gres`` (the ``Gres=`` value),
    ``slurm_conf`` (the node line's fragment ``NodeName=<node> Gres=...``) and, when asked, ``cgroup_conf``
    (``ConstrainDevices=yes``: https://slurm.schedmd.com/cgroup.conf.html, read 2026-11-27; a job sees only the
    device files of the GRES it was given)."""
    lines = gres_lines(gpus, mig_minors)
    header = HEADER
    gres = gres_value(lines)
    out: dict[str, Any] = {
        "gres": gres,
        "gres_conf": header + "AutoDetect=off\n" + "".join(f"{line}\n" for _kind, line in lines),
        "slurm_conf": header + (f"NodeName={node} Gres={gres}\n" if gres else f"# NodeName={node}: no GPU\n"),
    }
    if cgroup_constrain:
        out["cgroup_conf"] = header + "ConstrainDevices=yes\n"
    return out
