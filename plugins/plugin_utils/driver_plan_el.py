# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Where the kernel module of an EL host comes from, and who signed it: the driver plan's Secure Boot rules for
RHEL, Rocky and Alma. A pure function of the host facts, the role's settings and the plan ``driver_plan._el_plan``
made (DKMS), so every case is unit-testable on a machine that runs none of them.

Three sources, each with the document it follows (read 2026-11-27; cite them by key next to the rule):

* ``dkms``: NVIDIA's DKMS packages (``kmod-nvidia-open-dkms``, ``kmod-nvidia-latest-dkms``), built on the host and,
  with Secure Boot on, signed by the admin's or a generated Machine Owner Key (``roles/driver/tasks/mok.yml``).
* ``redhat``: Red Hat's own signed ``kmod-nvidia`` from RHEL's extensions repository, RHEL 10.1 and later on x86_64;
  Red Hat's key is built into the kernel, so no key is enrolled (SOURCES["rhel-extensions"]).
* ``precompiled``: NVIDIA's precompiled streams ``nvidia-driver:<branch>`` on EL 8/9 (the proprietary modules),
  signed with NVIDIA's key, which must be enrolled as a MOK before the reboot (SOURCES["precompiled-uefi"]); the RHEL
  kernel is not relied on to hold that key (SOURCES["precompiled-signer"]). Whether it is trusted is what the reboot
  guard checks on the host (``discovery/next_boot.py``: the kernel's keyrings in ``/proc/keys``, enrolled MOKs).

Used on the controller through the ``driver_plan`` filter (``driver_plan.plan`` calls ``apply``).
"""

from __future__ import annotations

import re
from typing import Any

SOURCES = {
    "rhel-extensions": "NVIDIA/yum-packaging-precompiled-kmod issue 59, answer of NVIDIA's maintainer (kmittman),"
    " 2026-02-04 (github.com/NVIDIA/yum-packaging-precompiled-kmod/issues/59): 'For RHEL 10.1+ (x86_64), Red Hat is"
    " now providing signed .ko modules, these do not require importing a key into MOK': 'subscription-manager repos"
    " --enable=rhel-10-for-x86_64-extensions-rpms' then 'dnf install kmod-nvidia nvidia-open'; it links Red Hat's"
    " announcement www.redhat.com/en/blog/introducing-new-and-simplified-ai-accelerator-driver-experience-rhel"
    " (not readable here)",
    "precompiled-uefi": "NVIDIA/yum-packaging-precompiled-kmod UEFI.md at 53ac1fe4: for the precompiled streams only"
    " ('dnf module install nvidia-driver:latest' or 'nvidia-driver:XXX'; not the DKMS streams) the modules load under"
    " Secure Boot once NVIDIA's public key is imported into the MOK database before the reboot ('mokutil --import',"
    " confirmed in MokManager); the key is NVIDIA2019-public_key.der in the rhel8/rhel9 x86_64 repository directories,"
    " 'subject to change in a future release'",
    "precompiled-readme": "NVIDIA/yum-packaging-precompiled-kmod README.md at 0628aadc: RHEL 8 streams 'latest' and"
    " 'XXX' carry kmod-nvidia-${driver}-${kernel} (e.g. kmod-nvidia-440.33.01-4.18.0-147.5.1) in place of the"
    " latest-dkms/XXX-dkms packages; 'dnf module install nvidia-driver:${stream}' (default profile)",
    "precompiled-proprietary": "NVIDIA/yum-packaging-precompiled-kmod issue 57, kmittman 2025-02-21: 'The 535, 550, 565"
    " branch precompiled proprietary kmods'; the open modules are packaged for DKMS only (kmod-nvidia-open-dkms,"
    " streams open-dkms / XXX-open: driver_plan SOURCES['dkms-readme'])",
    "precompiled-signer": "NVIDIA/yum-packaging-precompiled-kmod issue 67 (2026-01-27): on RHEL 9.7 the precompiled"
    " kmod-nvidia 590.48.01 modules are signed by 'NVIDIA' (modinfo -F signer), not by Red Hat, and did not load with"
    " Secure Boot on; CentOS Stream 9 kernel MR 3464 ('redhat: add nvidia oot signing key') is not evidence that a"
    " given RHEL 8/9 kernel trusts these modules",
}

# The sources of an EL kernel module, and who signs what each installs.
SOURCES_OF_MODULE = ("auto", "dkms", "redhat", "precompiled")
SIGNER = {"dkms": None, "redhat": "redhat", "precompiled": "nvidia"}
# SOURCES["rhel-extensions"]: the first RHEL release and the one architecture Red Hat's signed kmod-nvidia is for.
REDHAT_KMOD_FROM = (10, 1)
REDHAT_KMOD_ARCH = "x86_64"
REDHAT_KMOD = "kmod-nvidia"
REDHAT_FULL = "nvidia-open"


def redhat_extensions_repo(major: str) -> str:
    """RHEL's extensions repository as subscription-manager names it (SOURCES["rhel-extensions"])."""
    return f"rhel-{major}-for-{REDHAT_KMOD_ARCH}-extensions-rpms"


# SOURCES["precompiled-uefi"]: NVIDIA's module signing certificate, a file of the CUDA repository directory.
NVIDIA_KMOD_KEY = "NVIDIA2019-public_key.der"


def _release(facts: dict[str, Any]) -> tuple[int, int] | None:
    """(major, minor) from Ansible's ``distribution_version`` (``10.1``), None when it does not say."""
    match = re.match(r"^(\d+)\.(\d+)", str(facts.get("distribution_version") or ""))
    return (int(match.group(1)), int(match.group(2))) if match else None


def _arch(facts: dict[str, Any]) -> str:
    arch = str(facts.get("architecture") or "")
    return "x86_64" if arch == "amd64" else arch


def why_not_redhat(facts: dict[str, Any], flavor: str) -> str | None:
    """None when Red Hat's signed kmod-nvidia fits this host (SOURCES["rhel-extensions"]), else the reason."""
    dist = str(facts.get("distribution") or "").strip().lower()
    if dist != "redhat":
        return f"Red Hat's kmod-nvidia comes from RHEL's extensions repository, not from {facts.get('distribution')}"
    release = _release(facts)
    if release is None or release < REDHAT_KMOD_FROM:
        version = facts.get("distribution_version") or "an unknown release"
        return f"Red Hat ships its signed kmod-nvidia from RHEL 10.1, and this host runs RHEL {version}"
    if _arch(facts) != REDHAT_KMOD_ARCH:
        return f"Red Hat's signed kmod-nvidia is for x86_64, and this host is {facts.get('architecture')}"
    if flavor != "open":
        return "Red Hat's kmod-nvidia is installed with nvidia-open (the open modules); the proprietary flavor is not"
    return None


def why_not_precompiled(facts: dict[str, Any], flavor: str, branch: str) -> str | None:
    """None when an NVIDIA precompiled stream fits this host (SOURCES["precompiled-readme"],
    SOURCES["precompiled-uefi"], SOURCES["precompiled-proprietary"]), else the reason."""
    major = str(facts.get("distribution_major_version") or "")
    if major not in ("8", "9"):
        return f"NVIDIA publishes precompiled streams for EL 8 and 9, not {major}"
    if _arch(facts) != "x86_64":
        return f"NVIDIA's precompiled kmods and their key are for x86_64, and this host is {facts.get('architecture')}"
    if flavor != "proprietary":
        return "NVIDIA's precompiled kmods are the proprietary modules; the open modules are built by DKMS"
    if not branch.isdigit():
        return "a precompiled stream is chosen by its branch: set driver_branch (for example 580)"
    return None


def kernel_release(kernel: str) -> str:
    """The kernel's version-release as NVIDIA's precompiled package names carry it (SOURCES["precompiled-readme"]):
    ``4.18.0-553.5.1`` for ``4.18.0-553.5.1.el8_10.x86_64``."""
    return re.sub(r"\.el\d+[^.]*(\.[a-z0-9_]+)?$", "", kernel)


def choose(facts: dict[str, Any], settings: dict[str, Any], flavor: str, branch: str) -> tuple[str, str]:
    """(source, reason): ``dkms``, ``redhat`` or ``precompiled`` for ``settings['el_module_source']``; a source asked
    for by name that does not fit raises ValueError with the reason."""
    asked = str(settings.get("el_module_source") or "auto")
    if asked not in SOURCES_OF_MODULE:
        raise ValueError(f"driver_el_module_source={asked!r}: use {', '.join(SOURCES_OF_MODULE)}")
    checks = {
        "redhat": lambda: why_not_redhat(facts, flavor),
        "precompiled": lambda: why_not_precompiled(facts, flavor, branch),
    }
    if asked == "dkms":
        return "dkms", "driver_el_module_source=dkms"
    if asked in checks:
        why = checks[asked]()
        if why:
            raise ValueError(f"driver_el_module_source={asked}: {why}; use auto or dkms")
        return asked, f"driver_el_module_source={asked}"
    if settings.get("secure_boot") is not True:
        return "dkms", "Secure Boot is not on: DKMS builds the module, unsigned modules load"
    reasons = []
    for source in ("redhat", "precompiled"):
        why = checks[source]()
        if why is None:
            return source, f"Secure Boot is on and {SIGNER[source]}'s signed modules fit this host"
        reasons.append(why)
    return "dkms", "Secure Boot is on and no signed package fits (" + "; ".join(reasons) + "): DKMS signs with a MOK"


def apply(out: dict[str, Any], facts: dict[str, Any], settings: dict[str, Any], branch: str, version: str) -> None:
    """Rewrite the DKMS plan ``out`` (from ``driver_plan._el_plan``) for the chosen module source; sets
    ``module_source``, ``module_signer`` (None, ``redhat``, ``nvidia``), ``module_source_reason``, ``rhsm_repos`` and
    ``mok_import`` (the vendor certificate to enrol: ``url`` and ``name``, or None)."""
    out.update({"module_source": "dkms", "module_signer": None, "rhsm_repos": [], "mok_import": None})
    if not out["module_packages"]:  # nothing of the module is installed here (a container)
        out["module_source_reason"] = "the kernel module is not managed on this host"
        return
    source, reason = choose(facts, settings, out["flavor"], branch)
    out.update({"module_source": source, "module_signer": SIGNER[source], "module_source_reason": reason})
    if source == "dkms":
        return
    # Nothing is built: no headers, no EPEL/CRB for dkms, no DKMS signing.
    out.update({"headers": [], "el_repos": None, "dkms_signing": None})

    def spec(name: str) -> str:
        return f"{name}-{version}" if version else name

    if source == "redhat":
        # SOURCES["rhel-extensions"]: 'dnf install kmod-nvidia nvidia-open' with the extensions repository enabled.
        # The compute set keeps its userspace (nvidia-driver-cuda, nvidia-persistenced) with Red Hat's module.
        out["rhsm_repos"] = [redhat_extensions_repo(out["major"])]
        out["module_packages"] = [REDHAT_KMOD]
        if out["package_set"] == "full":
            out["packages"] = [spec(REDHAT_FULL)]
        return
    # SOURCES["precompiled-readme"]: the branch's precompiled stream; without a pinned version its default profile
    # ('dnf module install nvidia-driver:<branch>') picks the kmod of the running kernel, with one the package of that
    # version and kernel is named.
    out["dnf_module_stream"] = f"nvidia-driver:{branch}"
    kernel = str(facts.get("kernel") or "")
    if version and kernel:
        out["module_packages"] = [f"kmod-nvidia-{version}-{kernel_release(kernel)}"]
    else:
        out["module_packages"] = [f"@nvidia-driver:{branch}/default"]
    repository = out.get("repository") or {}
    out["mok_import"] = {"url": str(repository.get("url") or "") + NVIDIA_KMOD_KEY, "name": NVIDIA_KMOD_KEY}
