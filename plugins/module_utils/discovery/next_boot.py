# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Whether the kernel a host boots next has a working, trusted nvidia module: the ``next_boot`` facts and their
problem codes (``next_boot_problems``, in ``problems.CHECKS``), which the reboot guard
(``playbooks/tasks/reboot_guard.yml``) refuses a reboot on.

For the next kernel (``boot_next.next_kernel``) the module is the ``nvidia.ko*`` that ``modprobe`` would load: the
one ``/lib/modules/<k>/modules.dep`` lists (``nvidia.ko*``, Debian's ``nvidia-current.ko*``; DKMS puts it under
``updates/dkms/``, Ubuntu's precompiled
``linux-modules-nvidia-*`` under ``kernel/nvidia-<branch>[srv]/``, RHEL's kmod packages under ``extra/``), else,
where the kernel has no ``modules.dep`` yet, the first found under ``updates/``, ``extra/``, ``kernel/`` in that
order (depmod's default search order, depmod.d(5)). Its ``version`` must be the installed userspace driver's and its
``vermagic`` must name that kernel.

With Secure Boot on, the kernel loads a module only when it is signed by a key it trusts (kernel
Documentation/admin-guide/module-signing.rst, read 2026-11-27): its own build key (which also signs Ubuntu's
precompiled nvidia modules and the kmods Red Hat builds, so the signer of one of that kernel's own modules is
trusted), the keys the running kernel holds (``/proc/keys``: built-in, secondary, platform and machine keyrings,
the distributions' vendor keys among them; RHEL's kernels build in an NVIDIA out-of-tree module signing key, CentOS
Stream 9 kernel merge request 3464 "redhat: add nvidia oot signing key", RHEL-18051,
https://gitlab.com/redhat/centos-stream/src/kernel/centos-stream-9/-/merge_requests/3464, read 2026-11-27), and the
Machine Owner Keys ``mokutil --list-enrolled`` prints. A key
in ``mokutil --list-new`` is waiting for MokManager at the next boot, which needs someone at the console.

Standard library only (target Pythons 3.8+).
"""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, List, Tuple

from ..base.fileio import read_text
from ..base.pathsafe import host_path
from . import kmod_file
from .boot_next import next_kernel

RunCommand = Callable[[List[str]], Tuple[int, str, str]]
Problem = Dict[str, str]
# Debian's packages name the module nvidia-current.ko (an "alias nvidia nvidia-current" in modprobe.d; NVIDIA's own
# nvidia-cdi-refresh unit looks for either name in modules.dep).
NAMES = tuple(f"{base}.ko{ext}" for base in ("nvidia", "nvidia-current") for ext in ("", ".xz", ".gz", ".zst"))
SEARCH = ("updates", "extra", "kernel")
# States the reboot guard refuses (``ok`` and ``unknown``, the next kernel not found, it lets through).
REFUSED = (
    "no_module",
    "not_indexed",
    "wrong_kernel",
    "version_mismatch",
    "unsigned",
    "untrusted",
    "unverified",
    "enrolment_pending",
)


def module_in_dep(text: str | None) -> str | None:
    """The nvidia module's path (relative to ``/lib/modules/<k>``) in a ``modules.dep``."""
    for line in (text or "").splitlines():
        path = line.split(":", 1)[0].strip()
        if os.path.basename(path) in NAMES:
            return path
    return None


def module_on_disk(moddir: str) -> str | None:
    """The first ``nvidia.ko*`` under ``moddir``'s ``updates/``, ``extra/``, ``kernel/`` (relative path)."""
    for top in SEARCH:
        for dirpath, dirnames, filenames in os.walk(os.path.join(moddir, top)):
            dirnames.sort()
            for name in NAMES:
                if name in filenames:
                    return os.path.relpath(os.path.join(dirpath, name), moddir)
    return None


def program(root: str, name: str) -> str | None:
    """``name``'s path when it is installed in the usual directories under ``root`` (a missing program must not be
    run: Ansible's run_command fails the module on it)."""
    for directory in ("/usr/sbin", "/usr/bin", "/sbin", "/bin"):
        if os.access(host_path(root, f"{directory}/{name}"), os.X_OK):
            return f"{directory}/{name}"
    return None


def kernel_build_key(
    moddir: str, dep: str | None, run_command: RunCommand | None, modinfo: str | None
) -> dict[str, str] | None:
    """The key that signed the kernel's own modules (the first in-tree module of ``modules.dep`` that reads)."""
    tried = 0
    for line in (dep or "").splitlines():
        path = line.split(":", 1)[0].strip()
        if not path.startswith("kernel/") or os.path.basename(path) in NAMES:
            continue
        info, _why = kmod_file.module_info(os.path.join(moddir, path), run_command, modinfo)
        if info and info.get("signer"):
            return {
                "cn": info["signer"] or "",
                "serial": kmod_file.normal_key_id(info.get("sig_key")),
                "key_id": "",
                "source": "the kernel's own build key",
            }
        tried += 1
        if tried >= 3:
            break
    return None


def _mok(root: str, run_command: RunCommand | None, flag: str, source: str) -> list[dict[str, str]]:
    mokutil = program(root, "mokutil")
    if run_command is None or mokutil is None:
        return []
    rc, out, _err = run_command([mokutil, flag])
    return kmod_file.mokutil_keys(out, source) if rc == 0 else []


def running_kernel(root: str) -> str | None:
    return (read_text(host_path(root, "/proc/sys/kernel/osrelease"), tolerant=True) or "").strip() or None


def pairing(
    root: str,
    installed_version: str | None,
    secure_boot: bool | None,
    run_command: RunCommand | None = None,
    sys_dir: str | None = None,
) -> dict[str, Any]:
    """The ``next_boot`` facts: the next kernel (``boot_next.next_kernel``'s keys), ``running_kernel``, ``module``
    (path on the host or None), its ``version``, ``vermagic``, ``signer``, ``sig_key``, ``trusted_by`` (which key
    list holds its signer), ``state`` (``ok``, ``unknown`` or one of ``REFUSED``) and ``detail``."""
    found = next_kernel(root, sys_dir)
    kernel = found["kernel"]
    if kernel and ("/" in kernel or kernel in (".", "..")):
        found["kernel"] = kernel = None  # not a kernel release name; never a path out of /lib/modules
    facts: dict[str, Any] = {
        **found,
        "running_kernel": running_kernel(root),
        "secure_boot": secure_boot,
        "module": None,
        "version": None,
        "vermagic": None,
        "signer": None,
        "sig_key": None,
        "trusted_by": None,
        "state": "unknown",
        "detail": "the kernel the host boots next could not be found",
    }
    if not kernel:
        return facts
    moddir_inner = f"/lib/modules/{kernel}"
    moddir = host_path(root, moddir_inner)
    dep = read_text(os.path.join(moddir, "modules.dep"), tolerant=True)
    relative = module_in_dep(dep)
    if relative is None:
        relative = module_on_disk(moddir)
        if relative is None:
            return {**facts, "state": "no_module", "detail": f"there is no nvidia.ko* under {moddir_inner}"}
        if dep is not None:
            path = f"{moddir_inner}/{relative}"
            return {**facts, "module": path, "state": "not_indexed", "detail": f"{path} is not in modules.dep"}
    path = relative if relative.startswith("/") else f"{moddir_inner}/{relative}"
    facts["module"] = path
    info, why = kmod_file.module_info(host_path(root, path), run_command, program(root, "modinfo"))
    if info is None:
        state = "unverified" if secure_boot else "unknown"
        return {**facts, "state": state, "detail": why}
    facts.update({k: info.get(k) for k in ("version", "vermagic", "signer", "sig_key")})
    built_for = (info.get("vermagic") or "").split(" ", 1)[0]
    if built_for and built_for != kernel:
        return {**facts, "state": "wrong_kernel", "detail": f"{path} was built for kernel {built_for}"}
    if installed_version and info.get("version") != installed_version:
        return {**facts, "state": "version_mismatch", "detail": f"{path} is version {info.get('version')}"}
    if secure_boot:
        return _trust(facts, info, moddir, dep, run_command=run_command, root=root)
    return {**facts, "state": "ok", "detail": f"{path} {info.get('version')} pairs with kernel {kernel}"}


def _trust(
    facts: dict[str, Any],
    info: dict[str, Any],
    moddir: str,
    dep: str | None,
    *,
    run_command: RunCommand | None,
    root: str,
) -> dict[str, Any]:
    path = facts["module"]
    if info.get("signed") != "yes":
        return {**facts, "state": "unsigned", "detail": f"{path} is unsigned"}
    build_key = kernel_build_key(moddir, dep, run_command, program(root, "modinfo"))
    keys = [build_key] if build_key else []
    keys += kmod_file.proc_keys(read_text(host_path(root, "/proc/keys"), tolerant=True))
    keys += _mok(root, run_command, "--list-enrolled", "enrolled MOK")
    key = kmod_file.trusting_key(info, keys)
    if key:
        return {**facts, "state": "ok", "trusted_by": key["source"], "detail": f"{path} is signed by {key['source']}"}
    pending = kmod_file.trusting_key(info, _mok(root, run_command, "--list-new", "MOK pending enrolment"))
    if pending:
        return {
            **facts,
            "state": "enrolment_pending",
            "trusted_by": pending["source"],
            "detail": f"its signing key '{info.get('signer') or 'unnamed'}' is in mokutil --list-new, not yet enrolled",
        }
    signer = f"'{info.get('signer') or 'unnamed'}' (key {info.get('sig_key') or 'unknown'})"
    return {
        **facts,
        "state": "untrusted",
        "detail": f"{path} is signed by {signer}, a key neither that kernel, the running kernel nor the enrolled "
        "MOKs hold",
    }


def problem(code: str, message: str, fix: str) -> Problem:
    return {"code": code, "message": message, "fix": fix}


def _refusal(nb: dict[str, Any], installed: str) -> Problem | None:
    """The problem of a refused ``next_boot`` state (``tests/tools/problem_docs.py`` documents these calls)."""
    kernel, source, module, detail = nb["kernel"], nb.get("source"), nb.get("module"), nb.get("detail")
    running = nb.get("running_kernel")
    or_running = f"; or make the running kernel {running} the default again" if running and running != kernel else ""
    state = nb["state"]
    if state in ("no_module", "wrong_kernel", "version_mismatch"):
        code = "next_boot_module_version_mismatch" if state == "version_mismatch" else "next_boot_no_nvidia_module"
        return problem(
            code,
            f"kernel {kernel}, which the host boots next ({source}), has no nvidia module of the installed driver "
            f"{installed}: {detail}",
            f"install driver {installed}'s module for kernel {kernel} (DKMS: 'dkms autoinstall -k {kernel}' with its "
            f"headers installed; Ubuntu: linux-modules-nvidia-<branch>-{kernel}; RHEL: the kmod-nvidia package of "
            f"that kernel){or_running}",
        )
    if state == "not_indexed":
        return problem(
            "next_boot_no_nvidia_module",
            f"kernel {kernel}, which the host boots next ({source}): modprobe will not find {module} ({detail})",
            f"run 'depmod {kernel}'",
        )
    if state in ("unsigned", "untrusted"):
        return problem(
            "next_boot_module_untrusted",
            f"Secure Boot is on and kernel {kernel}, which the host boots next ({source}), will refuse its nvidia "
            f"module: {detail}",
            "sign the module with a Machine Owner Key and enrol it ('mokutil --import <cert.der>', then confirm it in "
            "MokManager at the console during the next boot), or use the modules the distribution signs (Ubuntu's "
            "linux-modules-nvidia-*, Red Hat's kmod-nvidia)",
        )
    if state == "unverified":
        return problem(
            "next_boot_module_untrusted",
            f"Secure Boot is on and the signature of {module}, the nvidia module of kernel {kernel} which the host "
            f"boots next, could not be read: {detail}",
            f"install kmod's modinfo on the host, or check the signer with 'modinfo -F signer {module}'",
        )
    if state == "enrolment_pending":
        return problem(
            "next_boot_mok_enrolment_pending",
            f"Secure Boot is on and kernel {kernel}, which the host boots next, has nvidia module {module}: {detail}; "
            "enrolment pending at next boot (console needed)",
            "reboot with someone at the console to confirm the key in MokManager with the one-time password given to "
            "'mokutil --import' (driver role: driver_mok_console=true); until it is enrolled the module does not load",
        )
    return None


def next_boot_problems(host: Any) -> list[Problem]:
    """The check in ``problems.CHECKS``: the ``next_boot`` facts' refused state, with the driver installed."""
    nb = host.facts.get("next_boot") or {}
    installed = host.facts.get("driver", {}).get("installed_version")
    if not installed or nb.get("state") not in REFUSED:
        return []
    found = _refusal(nb, installed)
    return [found] if found else []
