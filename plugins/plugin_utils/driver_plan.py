# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The driver role's one table: given host facts and the role's settings, which packages, repository,
dnf module stream, kernel module flavor and task file. Pure functions, no I/O, so every distribution
path is unit-testable on a machine that runs none of them.

Standard library only (target Pythons 3.8+); used on the controller through the ``driver_plan``
filter.
"""

from __future__ import annotations

import re
from typing import Any

CUDA_REPO_BASE = "https://developer.download.nvidia.com/compute/cuda/repos"
# NVIDIA's current repository signing keys (the file names under each repository directory).
CUDA_APT_KEY = "3bf863cc.pub"
CUDA_RPM_KEY = "D42D0685.pub"

# Debian ships one driver branch per release (non-free): the role cannot pick another from there.
DEBIAN_BRANCH = {"12": "535", "13": "550", "testing": None}
# Debian testing and unstable (ansible reports "forky/sid", "n/a" or a codename as the major version):
# their non-free branch moves with the archive, so the role takes what the archive carries and pins
# only an explicit driver_version; NVIDIA's CUDA repository has no suite for them.
DEBIAN_TESTING_MAJORS = ("testing", "unstable", "sid", "forky", "n/a", "forky/sid", "testing/unstable")
UBUNTU_DEFAULT_BRANCH = "550"
RHEL_DEFAULT_BRANCH = "latest"
SUPPORTED = {
    "debian": ("12", "13", "testing"),
    "ubuntu": ("22", "24"),
    "redhat": ("8", "9"),
}
RHEL_LIKE = ("redhat", "rocky", "almalinux", "centos")
CUDA_ARCH = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "sbsa", "arm64": "sbsa"}

# Debian non-free: the compute (headless) set is what a container host needs (utility + compute);
# the full set is the desktop driver metapackage.
DEBIAN_COMPUTE = [
    "libcuda1",
    "libnvidia-ml1",
    "nvidia-smi",
    "libnvidia-ptxjitcompiler1",
    "libnvidia-cfg1",
    "nvidia-persistenced",
]
DEBIAN_FULL = ["nvidia-driver"]
DEBIAN_MODULE = {"proprietary": "nvidia-kernel-dkms", "open": "nvidia-open-kernel-dkms"}
# Built from other Debian sources, so not at the driver's version: never pinned to it.
DEBIAN_UNVERSIONED = {"nvidia-persistenced"}

ARCH_ORDER = ["kepler", "maxwell", "pascal", "volta", "turing", "ampere", "ada", "hopper", "blackwell"]
OPEN_MIN = "turing"  # first architecture the open kernel modules support
OPEN_ONLY = "blackwell"  # first architecture only the open kernel modules support
_ARCH_ALIASES = {"ada lovelace": "ada", "adalovelace": "ada"}
# PCI device id ranges (inclusive) by architecture, for hosts where no driver named it yet.
_PCI_RANGES = [
    (0x0FC0, 0x13BF, "kepler"),
    (0x13C0, 0x14FF, "maxwell"),
    (0x1500, 0x16FF, "pascal"),
    (0x1700, 0x17FF, "maxwell"),
    (0x1800, 0x1D7F, "pascal"),
    (0x1D80, 0x1DFF, "volta"),
    (0x1E00, 0x1FFF, "turing"),
    (0x2000, 0x20FF, "ampere"),
    (0x2100, 0x21FF, "turing"),
    (0x2200, 0x22FF, "ampere"),
    (0x2300, 0x234F, "hopper"),
    (0x2400, 0x25FF, "ampere"),
    (0x2600, 0x28FF, "ada"),
    (0x2900, 0x3FFF, "blackwell"),
]


class PlanError(ValueError):
    """A combination the role refuses, with a message saying what to change."""


def architecture_of(gpu: dict[str, Any] | None = None, pci_device: dict[str, Any] | None = None) -> str | None:
    """Lower-case architecture from gpu_facts' GPU entry, else from the PCI device id; None if unknown."""
    name = str((gpu or {}).get("architecture") or "").strip().lower()
    name = _ARCH_ALIASES.get(name, name)
    if name in ARCH_ORDER:
        return name
    device_id = (pci_device or {}).get("device_id")
    if device_id is None and gpu and gpu.get("pci_device_id"):
        device_id = "0x" + str(gpu["pci_device_id"])[2:6]  # NVML's 0xDDDDVVVV
    try:
        value = int(str(device_id), 16)
    except (TypeError, ValueError):
        return None
    for low, high, arch in _PCI_RANGES:
        if low <= value <= high:
            return arch
    return None


def architectures(nvidia: dict[str, Any]) -> list[str | None]:
    """Architectures of the GPUs in gpu_facts' ``nvidia`` facts (GPUs the driver sees, else the PCI bus)."""
    found: list[str | None] = []
    for gpu in nvidia.get("gpus") or []:
        found.append(architecture_of(gpu=gpu))
    if not found:
        for dev in nvidia.get("pci_devices") or []:
            if dev.get("is_gpu"):
                found.append(architecture_of(pci_device=dev))
    return found


def module_flavor(requested: str, nvidia: dict[str, Any] | None) -> str:
    """``open`` or ``proprietary`` for ``requested`` in (auto, open, proprietary)."""
    archs = architectures(nvidia or {})
    known = [a for a in archs if a]
    old = sorted({a for a in known if ARCH_ORDER.index(a) < ARCH_ORDER.index(OPEN_MIN)}, key=ARCH_ORDER.index)
    newest = sorted({a for a in known if ARCH_ORDER.index(a) >= ARCH_ORDER.index(OPEN_ONLY)}, key=ARCH_ORDER.index)
    if requested == "auto":
        if old and newest:
            raise PlanError(
                f"GPUs of architectures {', '.join(old)} (proprietary module only) and {', '.join(newest)} (open module"
                " only) are on one host: no kernel module flavor drives both; split them across hosts"
            )
        if old:
            return "proprietary"
        return "open"
    if requested == "open" and old:
        raise PlanError(
            f"driver_module_flavor=open, but the {', '.join(old)} GPUs here need the proprietary module;"
            " set driver_module_flavor to proprietary or auto"
        )
    if requested == "proprietary" and newest:
        raise PlanError(
            f"driver_module_flavor=proprietary, but the {', '.join(newest)} GPUs here are supported by the"
            " open kernel module only; set driver_module_flavor to open or auto"
        )
    if requested not in ("open", "proprietary"):
        raise PlanError(f"driver_module_flavor={requested!r}: use auto, open or proprietary")
    return requested


def distribution_key(distribution: str | None, major: str | int | None) -> tuple[str, str]:
    """(family key, major version) or PlanError naming what is supported."""
    dist = str(distribution or "").strip().lower()
    major = str(major or "").strip()
    if dist in RHEL_LIKE:
        dist = "redhat"
    if dist == "debian" and major.lower() in DEBIAN_TESTING_MAJORS:
        major = "testing"
    if dist not in SUPPORTED or major not in SUPPORTED[dist]:
        listed = "; ".join(f"{d} {'/'.join(v)}" for d, v in SUPPORTED.items())
        raise PlanError(
            f"the driver role has no path for {distribution} {major}; supported: {listed} (RHEL, Rocky, Alma)"
        )
    return dist, major


def _branch(branch: str | int | None, version: str | None, default: str | None) -> tuple[str | None, str]:
    version = str(version or "").strip()
    branch = str(branch or "").strip()
    if version:
        if not re.match(r"^\d{3}\.\d+(\.\d+)?$", version):
            raise PlanError(f"driver_version={version!r} is not a driver version such as 535.261.03")
        from_version = version.split(".")[0]
        if branch and branch != from_version:
            raise PlanError(f"driver_version={version} is not on driver_branch={branch}; drop one or make them agree")
        return from_version, version
    if branch and not re.match(r"^(\d{3}|latest)$", branch):
        raise PlanError(f"driver_branch={branch!r} is not a branch such as 535 or 'latest'")
    return branch or default, ""


def cuda_repository(
    repo_distro: str, arch: str | None, mirror: str | None, key_url: str | None, kind: str
) -> dict[str, str]:
    base_root = (mirror or CUDA_REPO_BASE).rstrip("/")
    cuda_arch = CUDA_ARCH.get(str(arch))
    if cuda_arch is None:
        raise PlanError(f"the CUDA repository has no packages for architecture {arch!r}")
    url = f"{base_root}/{repo_distro}/{cuda_arch}/"
    key = key_url or url + (CUDA_APT_KEY if kind == "apt" else CUDA_RPM_KEY)
    return {"name": "cuda-" + repo_distro, "kind": kind, "url": url, "key_url": key}


def plan(facts: dict[str, Any], settings: dict[str, Any], nvidia: dict[str, Any]) -> dict[str, Any]:
    """Everything the role does for one host, as data.

    ``facts``: distribution, distribution_major_version, architecture, kernel (Ansible's names).
    ``settings``: branch, version, module_flavor, source (distro|cuda), mirror_url, repo_key_url,
    package_set (compute|full), ubuntu_precompiled (bool), kernel_module (bool: can be built here).
    ``nvidia``: gpu_facts' ``ansible_facts.nvidia``.
    """
    dist, major = distribution_key(facts.get("distribution"), facts.get("distribution_major_version"))
    source = settings.get("source") or "distro"
    package_set = settings.get("package_set") or "compute"
    kernel = str(facts.get("kernel") or "")
    build_module = bool(settings.get("kernel_module", True))
    flavor = module_flavor(settings.get("module_flavor") or "auto", nvidia)
    if source not in ("distro", "cuda"):
        raise PlanError(f"driver_source={source!r}: use distro or cuda")
    if package_set not in ("compute", "full"):
        raise PlanError(f"driver_package_set={package_set!r}: use compute or full")
    if dist == "redhat" and source == "distro":
        raise PlanError(
            "RHEL, Rocky and Alma ship no NVIDIA driver of their own: set driver_source=cuda (and"
            " driver_mirror_url for an air-gapped site)"
        )
    out: dict[str, Any] = {
        "distribution": dist,
        "major": major,
        "task_file": "redhat.yml" if dist == "redhat" else "apt.yml",  # Debian and Ubuntu share apt.yml
        "source": source,
        "flavor": flavor,
        "package_set": package_set,
        "packages": [],
        "module_packages": [],
        "headers": [],
        "hold": [],
        "remove": [],
        "repository": None,
        "dnf_module_stream": None,
    }

    if dist == "debian":
        branch, version = _branch(settings.get("branch"), settings.get("version"), DEBIAN_BRANCH[major])
        if major == "testing" and source == "cuda":
            raise PlanError(
                "NVIDIA's CUDA repository has no suite for Debian testing/unstable: use driver_source=distro"
            )
        if major == "testing" and str(settings.get("branch") or "").strip():
            raise PlanError(
                "Debian testing/unstable carries the one driver branch its archive has: leave driver_branch"
                " empty (or set driver_version to pin a version the archive has)"
            )
        if source == "distro":
            if DEBIAN_BRANCH[major] and branch != DEBIAN_BRANCH[major]:
                raise PlanError(
                    f"Debian {major} ships driver branch {DEBIAN_BRANCH[major]} in non-free, not {branch}: set"
                    f" driver_branch={DEBIAN_BRANCH[major]}, or driver_source=cuda for other branches"
                )
            base = list(DEBIAN_COMPUTE if package_set == "compute" else DEBIAN_FULL)
            module = [DEBIAN_MODULE[flavor]]
            names = base + module
            pin = {n for n in names if n not in DEBIAN_UNVERSIONED}
            every = DEBIAN_COMPUTE + DEBIAN_FULL + list(DEBIAN_MODULE.values())
        else:
            out["repository"] = cuda_repository(
                "debian" + major,
                facts.get("architecture"),
                settings.get("mirror_url"),
                settings.get("repo_key_url"),
                "apt",
            )
            base, module, pin, every = _cuda_apt_names(branch, flavor, package_set)
        out["headers"] = [f"linux-headers-{kernel}"] if kernel else []
        _apt_versions(out, base, module, pin, version=version, build_module=build_module)
        out["hold"] = [n for n in base + module if build_module or n not in module]
        out["remove"] = every
    elif dist == "ubuntu":
        branch, version = _branch(settings.get("branch"), settings.get("version"), UBUNTU_DEFAULT_BRANCH)
        if branch == "latest":
            raise PlanError("Ubuntu packages are per branch: set driver_branch to a number such as 550")
        o = "-open" if flavor == "open" else ""
        precompiled = bool(settings.get("ubuntu_precompiled", True))
        if source == "distro":
            if package_set == "compute":
                base = [f"nvidia-headless-no-dkms-{branch}-server{o}", f"nvidia-utils-{branch}-server"]
            else:
                base = [f"nvidia-driver-{branch}-server{o}"]
            if precompiled and package_set == "compute":
                module = [f"linux-modules-nvidia-{branch}-server{o}-{kernel}"]
            else:
                module = [f"nvidia-dkms-{branch}-server{o}"]
            pin = set(base) | {m for m in module if m.startswith("nvidia-dkms")}
            every = [f"nvidia-*-{branch}-server*", f"libnvidia-*-{branch}-server*", f"linux-modules-nvidia-{branch}-*"]
        else:
            out["repository"] = cuda_repository(
                f"ubuntu{major}04",
                facts.get("architecture"),
                settings.get("mirror_url"),
                settings.get("repo_key_url"),
                "apt",
            )
            base, module, pin, every = _cuda_apt_names(branch, flavor, package_set)
            precompiled = False
        if not (source == "distro" and precompiled and package_set == "compute"):
            out["headers"] = [f"linux-headers-{kernel}"] if kernel else []
        _apt_versions(out, base, module, pin, version=version, build_module=build_module)
        out["hold"] = [n for n in base + module if build_module or n not in module]
        out["remove"] = every
    else:
        branch, version = _branch(settings.get("branch"), settings.get("version"), RHEL_DEFAULT_BRANCH)
        out["repository"] = cuda_repository(
            "rhel" + major, facts.get("architecture"), settings.get("mirror_url"), settings.get("repo_key_url"), "rpm"
        )
        stream = f"{branch}-{'open' if flavor == 'open' else 'dkms'}"
        out["dnf_module_stream"] = f"nvidia-driver:{stream}"
        if package_set == "full":
            out["packages"] = [f"@nvidia-driver:{stream}/default"]
        else:
            base = ["nvidia-driver-cuda", "nvidia-driver-NVML", "nvidia-driver-libs", "nvidia-persistenced"]
            out["packages"] = [f"{n}-{version}" if version else n for n in base]
        module = "kmod-nvidia-open-dkms" if flavor == "open" else "kmod-nvidia-latest-dkms"
        if build_module:
            out["module_packages"] = [f"{module}-{version}" if version else module]
        out["headers"] = [f"kernel-devel-{kernel}", f"kernel-headers-{kernel}"] if kernel else []
        out["hold"] = ["nvidia-driver*", "kmod-nvidia*", "nvidia-persistenced"] if version else []
        out["remove"] = ["nvidia-driver*", "kmod-nvidia*", "nvidia-persistenced", "nvidia-settings", "nvidia-xconfig"]
    out["branch"] = branch or "the archive's"
    out["version"] = version
    return out


def _cuda_apt_names(
    branch: str | None, flavor: str, package_set: str
) -> tuple[list[str], list[str], set[str], list[str]]:
    """NVIDIA's CUDA apt repository (Debian and Ubuntu): per-branch metapackages."""
    if branch == "latest":
        o = "-open" if flavor == "open" else ""
        base = ["nvidia-open"] if flavor == "open" else ["cuda-drivers"]
        if package_set == "compute":
            base = [f"nvidia-headless{o}"] if flavor == "open" else ["nvidia-headless"]
        every = ["cuda-drivers*", "nvidia-open*", "nvidia-headless*", "nvidia-driver*", "nvidia-dkms*"]
        return base, [], set(), every
    o = "-open" if flavor == "open" else ""
    if package_set == "compute":
        base = [f"nvidia-headless-{branch}{o}", f"nvidia-utils-{branch}"]
    else:
        base = [f"nvidia-open-{branch}"] if flavor == "open" else [f"cuda-drivers-{branch}"]
    module = [f"nvidia-dkms-{branch}{o}"]
    every = [f"cuda-drivers-{branch}*", f"nvidia-*-{branch}*", f"libnvidia-*-{branch}*"]
    return base, module, set(base) | set(module), every


def _apt_versions(
    out: dict[str, Any],
    base: list[str],
    module: list[str],
    pin: set[str],
    *,
    version: str,
    build_module: bool,
) -> None:
    def spec(name: str) -> str:
        return f"{name}={version}-*" if version and name in pin else name

    out["packages"] = [spec(n) for n in base]
    out["module_packages"] = [spec(n) for n in module] if build_module else []
