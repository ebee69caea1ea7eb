# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a validate check's output means: ``parse_output`` reads what ``plan.CHECK_SCRIPT`` printed in the
container, ``device_problems``, ``library_problems``, ``dlopen_problem`` and ``nvidia_smi_problem`` say what is wrong
with it, and ``validate_result`` builds the ``gpufleet_validate`` fact from every check's result. Pure functions (no
I/O), behind the filters of ``plugins/filter/validate.py``.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping

from .plan import (
    BEGIN,
    END,
    NVSMI,
    NVSMI_RC,
    REQUIRED_LIBS,
)

# ``nvidia-smi -L``: ``GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-6fbb13f4-...)``; MIG devices are indented lines with
# ``MIG-`` UUIDs and are not GPUs of their own.
_SMI_GPU_LINE = re.compile(r"^GPU \d+: .*\(UUID: (GPU-[0-9A-Za-z-]+)\)\s*$")
_SMI_OUTPUT_LINES = 64
# What to do when a container lacks /dev/nvidia-uvm (gpu_facts' uvm_device_missing / cdi_spec_uvm_missing say which).
UVM_FIX = (
    "CUDA needs /dev/nvidia-uvm: create it on the host ('systemctl restart gpufleet-nvidia-devices') and regenerate "
    "the CDI spec ('systemctl restart gpufleet-cdi-refresh')"
)
_SEE_HELP = re.compile(r"^See '.*--help'\.?$")
_GPU_NODE = re.compile(r"^/dev/nvidia(\d+)$")
# strerror as glibc and musl word it, in the shell's "cannot open" message: what an open of a device node found.
_OPEN_ERRORS = (
    ("No such device or address", "nodriver"),  # ENXIO: the cgroup let it through, no driver behind the major
    ("Operation not permitted", "denied"),  # EPERM: the device cgroup (or a seccomp/LSM rule) refused it
    ("Permission denied", "denied"),  # EACCES: mode bits, or a nodev mount
)


def _seconds(delta: str | None) -> float:
    """``0:00:01.234567`` (command's ``delta``) -> 1.235."""
    m = re.match(r"^(\d+):(\d+):(\d+(?:\.\d+)?)$", str(delta or ""))
    if not m:
        return 0.0
    return round(int(m.group(1)) * 3600 + int(m.group(2)) * 60 + float(m.group(3)), 3)


def nvidia_smi_gpus(output: str | Iterable[str] | None) -> list[str]:
    """The GPU UUIDs ``nvidia-smi -L`` printed, in its order (MIG devices left out)."""
    lines = output.splitlines() if isinstance(output, str) else list(output or [])
    return [m.group(1) for m in (_SMI_GPU_LINE.match(line.strip()) for line in lines) if m]


def parse_output(stdout: str | None) -> dict[str, Any]:
    """What the check script printed: ``{complete, device_nodes, opens, files, libs, ldconfig, libcuda, libcuda_path,
    dlopen, nvidia_smi_rc, nvidia_smi_gpus, nvidia_smi_output}``.

    ``opens``: device node -> ``ok`` or the shell's error message; ``libs``: soname -> ``[{path, resolved}]``, one per
    ``ldconfig -p`` entry (``resolved`` None when the entry's file does not exist); ``ldconfig``: False when the image
    has none; ``dlopen``: ``ok``, ``none`` (no python3 in the image), ``failed <dlerror>``, or None (no answer);
    ``nvidia_smi_rc`` is None when the script never got to nvidia-smi. ``libcuda``/``libcuda_path``: the ld cache
    entry of ``libcuda.so.1``."""
    lines = (stdout or "").splitlines()
    complete = BEGIN in lines and END in lines
    devices: list[str] = []
    opens: dict[str, str] = {}
    files: list[str] = []
    libs: dict[str, list[dict[str, Any]]] = {}
    dlopen = None
    ldconfig = True
    smi_lines: list[str] = []
    smi_rc = None
    in_smi = False
    for line in lines:
        if in_smi:
            if line.startswith(NVSMI_RC + " "):
                in_smi = False
                rc = line[len(NVSMI_RC) + 1 :].strip()
                smi_rc = int(rc) if rc.isdigit() else None
            elif len(smi_lines) < _SMI_OUTPUT_LINES:
                smi_lines.append(line)
        elif line == NVSMI:
            in_smi = True
        elif line.startswith("DEV /dev/"):
            devices.append(line[4:])
        elif line.startswith("OPEN /dev/"):
            path, _sep, status = line[5:].partition(" ")
            opens[path] = status.strip()
        elif line.startswith("FILE /"):
            files.append(line[5:])
        elif line.startswith("LIB "):
            parts = line.split()
            if len(parts) >= 4 and parts[1] in REQUIRED_LIBS:
                resolved = (parts[4] if len(parts) > 4 else "") if parts[3] == "=" else None
                libs.setdefault(parts[1], []).append({"path": parts[2], "resolved": resolved})
        elif line == "NO-LDCONFIG":
            ldconfig = False
        elif line.startswith("DLOPEN ") and dlopen is None:
            dlopen = line[7:].strip()
    cuda = libs.get("libcuda.so.1") or []
    return {
        "complete": complete,
        "device_nodes": sorted(set(devices)),
        "opens": opens,
        "files": files,
        "libs": libs,
        "ldconfig": ldconfig,
        "libcuda": bool(cuda),
        "libcuda_path": cuda[0]["path"] if cuda else None,
        "dlopen": dlopen,
        "nvidia_smi_rc": smi_rc,
        "nvidia_smi_gpus": nvidia_smi_gpus(smi_lines),
        "nvidia_smi_output": smi_lines,
    }


def open_status(message: str | None) -> str:
    """``ok``, ``nodriver`` (ENXIO: the device cgroup let the open through and no driver serves the major, as on a
    host whose driver is not loaded), ``denied`` (EPERM/EACCES: the container's device cgroup, or a nodev mount, refuses
    the node) or ``error`` (anything else), from an ``OPEN`` line's status."""
    text = (message or "").strip()
    if text == "ok":
        return "ok"
    for words, status in _OPEN_ERRORS:
        if words in text:
            return status
    return "error"


def device_problems(parsed: Mapping[str, Any], required: Iterable[str]) -> list[str]:
    """What is wrong with the container's device nodes: required ones missing, required ones it may not open, and GPU
    nodes (``/dev/nvidia<N>``) it was not given. A required node that opens, or answers ENXIO (no driver), is fine."""
    required = list(required or [])
    seen = list(parsed.get("device_nodes") or [])
    opens = parsed.get("opens") or {}
    problems = []
    missing = [d for d in required if d not in seen]
    if missing:
        problems.append("device node(s) not visible: " + ", ".join(missing))
        if "/dev/nvidia-uvm" in missing:
            problems.append(UVM_FIX)
    denied, broken = [], []
    for node in (d for d in required if d in seen):
        status = open_status(opens.get(node)) if node in opens else "error"
        why = opens.get(node) or "not a character device"
        why = why.rsplit(": ", 1)[-1] if ": " in why else why
        if status == "denied":
            denied.append(f"{node} ({why})")
        elif status == "error":
            broken.append(f"{node} ({why})")
    if denied:
        problems.append(
            "device node(s) present but denied to the container (no device cgroup rule allows them): "
            + ", ".join(denied)
        )
    if broken:
        problems.append("device node(s) that cannot be opened: " + ", ".join(broken))
    wanted = {d for d in required if _GPU_NODE.match(d)}
    if wanted:
        gpu_nodes = [d for d in seen if _GPU_NODE.match(d)]
        extra = sorted((d for d in gpu_nodes if d not in wanted), key=lambda d: int(_GPU_NODE.match(d).group(1)))
        if extra:
            problems.append(
                f"{len(gpu_nodes)} GPU device node(s) in the container, {len(wanted)} requested; not requested: "
                + ", ".join(extra)
            )
    return problems


def library_problems(parsed: Mapping[str, Any], driver_version: str | None) -> list[str]:
    """What is wrong with the driver libraries in the container's ld cache: each of ``REQUIRED_LIBS`` needs an
    ``ldconfig -p`` entry whose file exists and (with ``driver_version``, the host's) resolves to a file named for
    that version (``libcuda.so.<version>``); every entry of that soname must, so no other driver's copy shadows it."""
    libs = parsed.get("libs") or {}
    files = list(parsed.get("files") or [])
    version = str(driver_version or "").strip()
    if not parsed.get("ldconfig", True):
        return [
            "the image has no ldconfig, so its ld cache cannot be read: use an image with ldconfig (validate_image)"
        ]
    problems = []
    for soname in REQUIRED_LIBS:
        entries = libs.get(soname) or []
        if not entries:
            msg = f"{soname} not in the container's ld cache (ldconfig -p)"
            if soname == "libcuda.so.1" and files:
                msg += " although a file is at " + ", ".join(files) + " (injected without an ld cache update)"
            problems.append(msg)
            continue
        for entry in entries:
            resolved = entry.get("resolved")
            if resolved is None:
                problems.append(f"ldconfig -p names {entry['path']} for {soname}, which does not exist")
            elif not resolved:
                problems.append(f"{soname} at {entry['path']} could not be resolved (no readlink in the image)")
            elif version and not resolved.rsplit("/", 1)[-1].endswith(".so." + version):
                problems.append(f"{soname} at {entry['path']} is {resolved}, not the host driver's version {version}")
    return problems


def dlopen_problem(parsed: Mapping[str, Any]) -> str:
    """``dlopen(libcuda.so.1)`` in the container failed (python3's ctypes, RTLD_NOW), or ``""`` (it worked, or the
    image has no python3 to try it with)."""
    dlopen = parsed.get("dlopen")
    if dlopen is None:
        return "the libcuda dlopen probe gave no answer"
    if dlopen.startswith("failed"):
        return "dlopen(libcuda.so.1) failed: " + (dlopen[6:].strip() or "no reason given")
    return ""


def nvidia_smi_problem(parsed: Mapping[str, Any], expected: Iterable[str] | None) -> str:
    """What is wrong with the container's ``nvidia-smi -L`` (``parse_output``'s fields), or ``""``.

    It must run (exit 0) and list exactly the GPUs the container was given, ``expected`` (UUIDs; every check asks
    for all of the host's GPUs); with no ``expected`` UUIDs (a discovery that found none) it must run and list
    at least one GPU."""
    rc = parsed.get("nvidia_smi_rc")
    listed = list(parsed.get("nvidia_smi_gpus") or [])
    last = _last_line("\n".join(parsed.get("nvidia_smi_output") or [])) or "no output"
    if rc is None:
        return "nvidia-smi -L did not run"
    if rc == 127:
        return "nvidia-smi not found in the container (the driver's utility binaries were not injected)"
    if rc != 0:
        return f"nvidia-smi -L failed (rc {rc}): {last}"
    want = [u for u in (expected or []) if u]
    if not want:
        return "" if listed else f"nvidia-smi -L listed no GPU: {last}"
    missing = [u for u in want if u not in listed]
    extra = [u for u in listed if u not in want]
    problems = []
    if missing:
        problems.append("missing " + ", ".join(missing))
    if extra:
        problems.append("not expected " + ", ".join(extra))
    if len(listed) != len(set(listed)):
        problems.append("listed twice " + ", ".join(sorted({u for u in listed if listed.count(u) > 1})))
    if problems:
        return f"nvidia-smi -L lists {len(listed)} GPU(s), expected {len(want)}: " + "; ".join(problems)
    return ""


def _last_line(text: str | None) -> str:
    """The last line that says something (docker ends its errors with "See 'docker run --help'.")."""
    lines = [x.strip() for x in (text or "").splitlines() if x.strip() and not _SEE_HELP.match(x.strip())]
    return lines[-1] if lines else ""


def _judge(
    check: Mapping[str, Any],
    res: Mapping[str, Any] | None,
    device_nodes: list[str],
    uuids: list[str] | None = None,
    *,
    nvidia_smi: bool = True,
    driver_version: str | None = None,
) -> dict[str, Any]:
    out = {
        "mode": check["mode"],
        "passed": False,
        "seconds": 0.0,
        "device_nodes": [],
        "libcuda": False,
        "nvidia_smi_gpus": [],
    }
    label = "{} ({})".format(check["engine"], check["mode"])
    if check.get("skipped") or res is None or res.get("skipped"):
        out.update(skipped=True, message=check.get("message") or f"{label}: not run")
        return out
    out["skipped"] = False
    out["seconds"] = _seconds(res.get("delta"))
    if res.get("msg") and "rc" not in res:
        out["message"] = "{}: could not run: {}".format(label, res["msg"])
        return out
    parsed = parse_output(res.get("stdout"))
    out.update(device_nodes=parsed["device_nodes"], libcuda=parsed["libcuda"], libcuda_path=parsed["libcuda_path"])
    out["nvidia_smi_gpus"] = parsed["nvidia_smi_gpus"]
    out["dlopen"] = parsed["dlopen"]
    rc = res.get("rc")
    if rc in (124, 137):
        out["message"] = f"{label}: timed out (rc {rc})"
    elif rc != 0:
        why = _last_line(res.get("stderr")) or _last_line(res.get("stdout")) or "no output"
        out["message"] = f"{label}: container failed (rc {rc}): {why}"
    elif not (res.get("stdout") or res.get("stderr")):
        # the check script always prints; exit 0 and silence is the engine losing the output (the role runs a
        # containerd check once more before this)
        out["message"] = (
            f"{label}: the container exited 0 and printed nothing, {res.get('attempts') or 1} time(s): the engine lost "
            "its output (ctr's short-lived-task race); run the validation again"
        )
    elif not parsed["complete"]:
        out["message"] = f"{label}: the check script did not finish (image without /bin/sh?)"
    else:
        problems = device_problems(parsed, device_nodes) + library_problems(parsed, driver_version)
        dl = dlopen_problem(parsed)
        if dl:
            problems.append(dl)
        smi = nvidia_smi_problem(parsed, uuids) if nvidia_smi else ""
        if smi:
            problems.append(smi)
        if problems:
            out["message"] = "{}: {}".format(label, "; ".join(problems))
        else:
            out["passed"] = True
            dlopen = "dlopen ok" if parsed["dlopen"] == "ok" else "dlopen not tried: no python3 in the image"
            out["message"] = (
                f"{label}: {len(parsed['device_nodes'])} device node(s), libcuda.so.1 at {parsed['libcuda_path']}"
                f" ({dlopen}), libnvidia-ml.so.1 in the ld cache"
            )
            if driver_version:
                out["message"] += f", both of driver {driver_version}"
            if nvidia_smi:
                out["message"] += f", nvidia-smi -L lists {len(parsed['nvidia_smi_gpus'])} GPU(s)"
    return out


def validate_result(
    plan: Iterable[Mapping[str, Any]] | None,
    results: Iterable[Mapping[str, Any]] | None,
    device_nodes: Iterable[str] | None = None,
    check_mode: bool = False,
    *,
    gpu_uuids: Iterable[str] | None = None,
    nvidia_smi: bool = True,
    driver_version: str | None = None,
) -> dict[str, Any]:
    """The ``gpufleet_validate`` fact; see ``plugins/filter/validate_result.yml``. ``gpu_uuids``: the GPUs each
    container's ``nvidia-smi -L`` must list (``validate_gpu_uuids``); ``nvidia_smi=False`` leaves that check out;
    ``driver_version``: the host driver's version, which the container's ``libcuda.so.1`` and ``libnvidia-ml.so.1``
    must resolve to (``validate_driver_version``; None leaves the version out of the check)."""
    device_nodes = list(device_nodes or [])
    uuids = list(gpu_uuids or [])
    results = list(results or [])
    engines = {}
    for i, check in enumerate(plan or []):
        res = results[i] if i < len(results) else None
        if check_mode and not check.get("skipped"):
            res = None
            check_run = dict(check, message="{} ({}): not run in check mode".format(check["engine"], check["mode"]))
        else:
            check_run = check
        judged = _judge(check_run, res, device_nodes, uuids, nvidia_smi=nvidia_smi, driver_version=driver_version)
        judged["argv"] = list(check.get("argv") or [])
        entry = engines.setdefault(
            check["engine"],
            {
                "passed": True,
                "skipped": True,
                "message": "",
                "image": check["image"],
                "device_nodes": [],
                "libcuda": False,
                "seconds": 0.0,
                "checks": [],
            },
        )
        entry["checks"].append(judged)
    for entry in engines.values():
        ran = [c for c in entry["checks"] if not c["skipped"]]
        entry["skipped"] = not ran
        entry["passed"] = bool(ran) and all(c["passed"] for c in ran)
        entry["message"] = "; ".join(c["message"] for c in entry["checks"])
        entry["device_nodes"] = sorted({d for c in ran for d in c["device_nodes"]})
        entry["libcuda"] = bool(ran) and all(c["libcuda"] for c in ran)
        entry["seconds"] = round(sum(c["seconds"] for c in entry["checks"]), 3)
    ran = [e for e in engines.values() if not e["skipped"]]
    failed = sorted(name for name, e in engines.items() if not e["skipped"] and not e["passed"])
    if check_mode:
        message = "check mode: no container was run"
    elif not engines:
        message = "no container engine found to validate"
    elif not ran:
        message = "every engine was skipped"
    elif failed:
        message = "failed on: " + ", ".join(failed)
    else:
        message = "passed on: " + ", ".join(sorted(n for n, e in engines.items() if not e["skipped"]))
    return {
        "passed": bool(ran) and not failed,
        "skipped": bool(check_mode),
        "failed_engines": failed,
        "required_device_nodes": device_nodes,
        "required_gpus": uuids if nvidia_smi else [],
        "driver_version": driver_version or None,
        "message": message,
        "engines": engines,
    }


def failure_message(fact: Mapping[str, Any]) -> str:
    """Why the host fails validation (the engines that failed, each one's message), or "" when none failed: what the
    role's last task and ``converge_check`` fail the host with under ``validate_fail_on_error``."""
    failed = list(fact.get("failed_engines") or [])
    if not failed:
        return ""
    engines = fact.get("engines") or {}
    messages = " | ".join(str((engines.get(name) or {}).get("message") or "") for name in failed)
    return (
        f"GPU container validation failed on {', '.join(failed)}: {messages}. "
        "Set validate_fail_on_error=false to record and go on."
    )
