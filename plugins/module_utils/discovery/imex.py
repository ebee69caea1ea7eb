# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""IMEX (NVLink multi-node memory export/import) on a host: ``ansible_facts.nvidia.imex`` and its problems.

NVIDIA IMEX guide (https://docs.nvidia.com/multi-node-nvlink-systems/imex-guide/, read 2026-11-28):

* the driver registers the character device ``nvidia-caps-imex-channels`` (its major is dynamic: ``/proc/devices``);
  the nodes ``/dev/nvidia-caps-imex-channels/channel<N>`` (minor N) are made by the administrator and do not persist
  across a reboot; ``channel0`` is the default channel ("IMEX Channels", imexchannels.html);
* ``nvidia-imex.service`` reads ``/etc/nvidia-imex/config.cfg`` at start; its ``IMEX_NODE_CONFIG_FILE`` (default
  ``/etc/nvidia-imex/nodes_config.cfg``) lists one IP address per line, every node of the IMEX domain, and every
  instance must have the same list ("Deployment Models", deployment.html; "IMEX Service Config Options", config.html).

The ``imex`` role records the domain it configured in ``RECORD`` (``{"domain", "mode", "members", "channels",
"config_path", "nodes_config_path"}``); the checks compare the host with it. Without a record (no domain member)
there is nothing to compare and no problem. ``gpufleet-nvidia-devices`` (hostprog/dev_nodes.py) reads the record's
``channels`` at every boot and makes their nodes.

Standard library only (target Pythons 3.8+).
"""

from __future__ import annotations

import json
import os
import stat
from typing import Any, Callable, Dict, List, Tuple

from ..base.fileio import read_text
from ..base.pathsafe import host_path
from ..cdi.devices import parse_proc_devices

PROC_NAME = "nvidia-caps-imex-channels"
CHANNEL_DIR = "/dev/nvidia-caps-imex-channels"
CONFIG_PATH = "/etc/nvidia-imex/config.cfg"
NODES_CONFIG_PATH = "/etc/nvidia-imex/nodes_config.cfg"
UNIT = "nvidia-imex.service"
RECORD = "/etc/gpufleet/imex.json"
UNIT_DIRS = ("/etc/systemd/system", "/usr/lib/systemd/system", "/lib/systemd/system")
MODES = ("host", "dra")
PROC_ENV = "GPUFLEET_NVIDIA_PROC"  # hostprog/dev_nodes.py's stand-in /proc (a simulated node)
MAX_CHANNEL = (1 << 20) - 1  # the kernel's MINORBITS
_LIMIT = 1 << 20

Problem = Dict[str, str]


def problem(code: str, message: str, fix: str) -> Problem:
    return {"code": code, "message": message, "fix": fix}


def parse_nodes_config(text: str | None) -> list[str]:
    """``nodes_config.cfg`` -> its addresses in file order (blank lines and ``#`` comments skipped)."""
    found = []
    for line in (text or "").splitlines():
        entry = line.split("#", 1)[0].strip()
        if entry:
            found.append(entry)
    return found


def parse_config(text: str | None) -> dict[str, str]:
    """``config.cfg`` (``KEY=value`` lines, ``#`` comments) -> ``{KEY: value}``; a repeated key: the last wins."""
    settings = {}
    for line in (text or "").splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        key, sep, value = stripped.partition("=")
        if sep and key.strip():
            settings[key.strip()] = value.strip()
    return settings


def membership(listed: list[str], expected: list[str]) -> dict[str, list[str]]:
    """``{"missing": [...], "extra": [...], "duplicate": [...]}``: the domain members ``listed`` lacks, the addresses
    it has that are no member, and the ones written twice (each sorted)."""
    return {
        "missing": sorted(set(expected) - set(listed)),
        "extra": sorted(set(listed) - set(expected)),
        "duplicate": sorted({a for a in listed if listed.count(a) > 1}),
    }


def read_channels(dev_dir: str, major: int | None) -> list[int]:
    """The N of every ``channel<N>`` under ``dev_dir`` that is a character device of ``major``, sorted."""
    if major is None:
        return []
    try:
        names = os.listdir(dev_dir)
    except OSError:
        return []
    found = []
    for name in names:
        number = name[len("channel") :]
        if not (name.startswith("channel") and number.isdigit() and number.isascii()):
            continue
        try:
            st = os.lstat(os.path.join(dev_dir, name))
        except OSError:
            continue
        if stat.S_ISCHR(st.st_mode) and os.major(st.st_rdev) == major and os.minor(st.st_rdev) == int(number):
            found.append(int(number))
    return sorted(found)


def parse_systemctl_show(text: str | None) -> dict[str, Any]:
    """``systemctl show -p LoadState -p ActiveState -p UnitFileState`` -> ``{"installed", "active", "enabled",
    "masked"}`` (a unit that is not installed: ``installed`` false)."""
    props = dict(line.partition("=")[::2] for line in (text or "").splitlines() if "=" in line)
    load, unit_file = props.get("LoadState", ""), props.get("UnitFileState", "")
    masked = load == "masked" or unit_file.startswith("masked")
    return {
        "installed": load not in ("", "not-found") or masked,
        "active": props.get("ActiveState") == "active",
        "enabled": unit_file in ("enabled", "enabled-runtime", "alias", "static", "indirect", "generated"),
        "masked": masked,
    }


def read_record(root: str) -> tuple[dict[str, Any] | None, str | None]:
    """``(record, error)``: the ``imex`` role's ``RECORD``, None when absent; an error when it is not a mapping."""
    text = read_text(host_path(root, RECORD), tolerant=True, limit=_LIMIT)
    if text is None:
        return None, None
    try:
        record = json.loads(text)
    except ValueError as exc:
        return None, f"{RECORD} is not JSON ({exc})"
    if not isinstance(record, dict) or not isinstance(record.get("members"), list):
        return None, f"{RECORD} has no 'members' list"
    return record, None


def record_channels(record: dict[str, Any] | None) -> list[int]:
    """The channel numbers a record asks for (numbers from 0 to ``MAX_CHANNEL``; anything else is dropped)."""
    channels = (record or {}).get("channels")
    if not isinstance(channels, list):
        return []
    return sorted({c for c in channels if isinstance(c, int) and not isinstance(c, bool) and 0 <= c <= MAX_CHANNEL})


RunCommand = Callable[[List[str]], Tuple[int, str, str]]


def imex_facts(root: str, proc_dir: str, systemctl: str | None, run_command: RunCommand | None) -> dict[str, Any]:
    """``ansible_facts.nvidia.imex``. ``systemctl``: its path, asked about ``UNIT`` when ``root`` is ``/``. There,
    ``$GPUFLEET_NVIDIA_PROC`` names another ``/proc`` for ``devices``, as for ``gpufleet-nvidia-devices``."""
    if os.path.abspath(root) == "/" and os.environ.get(PROC_ENV):
        proc_dir = os.environ[PROC_ENV]
    devices = read_text(os.path.join(proc_dir, "devices"), tolerant=True, errors="replace", limit=_LIMIT) or ""
    major = parse_proc_devices(devices)["character"].get(PROC_NAME)
    record, record_error = read_record(root)
    config_path = str((record or {}).get("config_path") or CONFIG_PATH)
    config_text = read_text(host_path(root, config_path), tolerant=True, errors="replace", limit=_LIMIT)
    config = parse_config(config_text)
    nodes_path = config.get("IMEX_NODE_CONFIG_FILE") or str((record or {}).get("nodes_config_path") or "")
    nodes_path = nodes_path or NODES_CONFIG_PATH
    nodes_text = read_text(host_path(root, nodes_path), tolerant=True, errors="replace", limit=_LIMIT)
    # systemctl is asked only where the unit (or its mask) or a record is there: one process less on other hosts.
    unit_file = any(os.path.lexists(host_path(root, d + "/" + UNIT)) for d in UNIT_DIRS)
    service: dict[str, Any] = {
        "unit": UNIT,
        "installed": unit_file,
        "active": None,
        "enabled": None,
        "masked": None,
    }
    if systemctl and run_command is not None and os.path.abspath(root) == "/" and (unit_file or record):
        rc, out, _err = run_command(
            [systemctl, "show", UNIT, "-p", "LoadState", "-p", "ActiveState", "-p", "UnitFileState"]
        )
        if rc == 0:
            service.update(parse_systemctl_show(out))
    return {
        "present": major is not None,
        "major": major,
        "channels": read_channels(host_path(root, CHANNEL_DIR), major),
        "config_path": config_path,
        "config_present": config_text is not None,
        "nodes_config_path": nodes_path,
        "nodes_config": None if nodes_text is None else parse_nodes_config(nodes_text),
        "service": service,
        "domain": (record or {}).get("domain"),
        "mode": (record or {}).get("mode"),
        "members": list((record or {}).get("members") or []),
        "wanted_channels": record_channels(record),
        "record_error": record_error,
    }


def imex_problems(host: Any) -> list[Problem]:
    """The ``imex_*`` problems of a domain member (``host``: a ``problems.Host``); none where no domain is recorded."""
    imex = host.facts.get("imex") or {}
    found: list[Problem] = []
    if imex.get("record_error"):
        found.append(
            problem(
                "imex_record_unreadable",
                f"the IMEX domain record cannot be read: {imex['record_error']}",
                "run the gpufleet.nvidia.imex role again (it rewrites the record)",
            )
        )
    if not imex.get("domain"):
        return found
    domain, members = imex["domain"], sorted(imex.get("members") or [])
    listed = imex.get("nodes_config")
    if listed is None:
        found.append(
            problem(
                "imex_nodes_config_mismatch",
                f"IMEX domain {domain}: {imex['nodes_config_path']} is missing; nvidia-imex cannot reach its "
                f"{len(members)} member(s)",
                "run the gpufleet.nvidia.imex role on the domain's hosts (it writes every member's address)",
            )
        )
    else:
        diff = membership(listed, members)
        if diff["missing"] or diff["extra"] or diff["duplicate"]:
            parts = [f"{k} {', '.join(v)}" for k, v in diff.items() if v]
            # IMEX guide, "Deployment Models": every instance must have the same address map, else it fails.
            found.append(
                problem(
                    "imex_nodes_config_mismatch",
                    f"IMEX domain {domain}: {imex['nodes_config_path']} does not list exactly the domain's members "
                    f"({'; '.join(parts)}); the IMEX instances' address maps differ and the domain does not form",
                    "run the gpufleet.nvidia.imex role on every host of the domain (the inventory group is the "
                    "domain), then restart nvidia-imex on each",
                )
            )
    if imex.get("present"):
        lacking = [c for c in imex.get("wanted_channels") or [] if c not in (imex.get("channels") or [])]
        if lacking:
            found.append(
                problem(
                    "imex_channel_missing",
                    f"IMEX domain {domain}: {', '.join(f'{CHANNEL_DIR}/channel{c}' for c in lacking)} missing; "
                    "CUDA's multi-node memory calls fail with an insufficient permission error",
                    "'systemctl restart gpufleet-nvidia-devices' makes them (the runtime role installs it); "
                    "'journalctl -u gpufleet-nvidia-devices' says why it could not",
                )
            )
    service = imex.get("service") or {}
    if imex.get("mode") == "dra" and service.get("installed") and not service.get("masked"):
        found.append(
            problem(
                "imex_service_not_masked",
                f"{UNIT} is not masked on a host whose IMEX daemons the DRA driver runs; a host daemon would "
                "hold the IMEX channels and ports of the compute-domain pods",
                "'systemctl disable --now nvidia-imex.service && systemctl mask nvidia-imex.service', or run the "
                "gpufleet.nvidia.imex role with imex_mode=dra",
            )
        )
    if imex.get("mode") == "host" and service.get("installed") and not service.get("active"):
        found.append(
            problem(
                "imex_service_down",
                f"IMEX domain {domain}: {UNIT} is not active; multi-node NVLink memory sharing fails on this host",
                "'systemctl enable --now nvidia-imex'; 'journalctl -u nvidia-imex' says why it stopped (quorum, "
                "address map, driver version)",
            )
        )
    return found
