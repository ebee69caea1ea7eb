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

from . import driver_plan_el

# The documents each rule below follows, read 2026-11-23 (cite them by key next to the rule):
SOURCES = {
    "matrix": "NVIDIA Data Center Drivers 615, 'Supported Drivers and CUDA Toolkit Versions', Table 2"
    " (docs.nvidia.com/datacenter/tesla/drivers/615/supported-drivers-and-cuda-toolkit-versions.html,"
    " last updated 2026-09-09)",
    "arch-matrix": "NVIDIA Data Center Drivers, 'CUDA Toolkit, Driver, and Architecture Matrix'"
    " (docs.nvidia.com/datacenter/tesla/drivers/cuda-toolkit-driver-and-architecture-matrix.html):"
    " Maxwell, Pascal and Volta: last driver R580",
    "kmod": "NVIDIA Driver Installation Guide 620, 'Kernel Modules', Table 5"
    " (docs.nvidia.com/datacenter/tesla/driver-installation-guide/620/kernel-modules.html, 2026-11-09)",
    "guide": "NVIDIA Driver Installation Guide 620 (docs.nvidia.com/datacenter/tesla/driver-installation-guide/620/"
    "pdf/Driver_Installation_Guide.pdf, 2026-11-09): 'Recent Updates' (proprietary kernel modules removed;"
    " Ubuntu 590 and later packages; version locking packages for Ubuntu / Debian)",
    "compute-only": "NVIDIA Driver Installation Guide, 'Compute-only and Desktop Installation'"
    " (docs.nvidia.com/datacenter/tesla/driver-installation-guide/compute-only-and-desktop-installation.html)",
    "versionlock": "NVIDIA Driver Installation Guide, 'Version locking', DNF 4"
    " (docs.nvidia.com/datacenter/tesla/driver-installation-guide/version-locking.html)",
    "dkms-readme": "NVIDIA/yum-packaging-dkms-nvidia README.md at 33675222 (streams latest-dkms, XXX-dkms,"
    " open-dkms, XXX-open; kmod-nvidia-latest-dkms, kmod-nvidia-open-dkms)",
    "rocky": "Rocky Linux documentation, 'Installing NVIDIA GPU drivers' (rocky-linux/documentation PR 3020:"
    " EPEL, then 'dnf config-manager --enable crb')",
    "ubuntu": "Ubuntu package index (packages.ubuntu.com, noble/questing/resolute, read 2026-11-23):"
    " linux-modules-nvidia-<branch>-server[-open]-<flavour> ('generic', 'gcp', ...; 'generic-hwe-24.04' for the"
    " HWE kernel) follow the kernel, linux-modules-nvidia-<branch>-server-<kernel> is one kernel's; Canonical's"
    " Ubuntu Server guide names the same route and 'ubuntu-drivers install --gpgpu nvidia:<branch>-server'",
    "ubuntu-eol": "Ubuntu package index: linux-modules-nvidia-570-server-generic-hwe-24.04 and the 565 ones are"
    " 'dummy transitional package' depending on the 580-server ones (an ended branch installs its successor)",
    "dkms": "dkms-project/dkms issue 162 (module signing reworked: mok_signing_key/mok_certificate in"
    " framework.conf, 3.0 series; framework.conf.d read from 3.0.4); Ubuntu 22.04 ships dkms 2.8.7 which signs"
    " with /var/lib/shim-signed/mok/MOK.priv and MOK.der (packages.ubuntu.com/jammy/dkms)",
    "fabricmanager": "NVIDIA Fabric Manager User Guide (docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide/)"
    ": NVSwitch systems (HGX/DGX) need nvidia-fabricmanager[-<branch>] and libnvidia-nscq[-<branch>]"
    " of the driver's version running before CUDA initialises; service nvidia-fabricmanager, process"
    " nv-fabricmanager",
    "debian": "Debian package index (packages.debian.org): nvidia-open-kernel-dkms in contrib, the driver in"
    " non-free, firmware-nvidia-gsp in non-free-firmware",
}

CUDA_REPO_BASE = "https://developer.download.nvidia.com/compute/cuda/repos"
# NVIDIA's current repository signing keys (the file names under each repository directory).
CUDA_APT_KEY = "3bf863cc.pub"
CUDA_RPM_KEY = "D42D0685.pub"

# NVIDIA's data center driver branches: the ONE table of which branch lives until when. Source:
# SOURCES["matrix"] (read 2026-11-23). The next change of NVIDIA's matrix is one edit here.
BRANCHES_REVIEWED = "2026-11-23"
BRANCHES = {
    "535": {"designation": "Long Term Support Branch", "end_of_life": "2026-06"},
    "580": {"designation": "Long Term Support Branch", "end_of_life": "2028-06"},
    "595": {"designation": "Production Branch", "end_of_life": "2027-03"},
    "610": {"designation": "New Feature Branch", "end_of_life": "2026-08"},
}
# Branches NVIDIA ended before the matrix above (Canonical still names some of them): their successor.
ENDED = {"550": "580", "560": "580", "565": "580", "570": "580", "575": "580", "590": "595"}
# Proprietary kernel modules stop with R580: later branches ship the open modules only, and the GPUs that need
# the proprietary ones (Maxwell, Pascal, Volta) have R580 as their last driver (SOURCES["guide"],
# SOURCES["arch-matrix"]).
PROPRIETARY_LAST = 580
# From branch 590 NVIDIA's apt repositories name the packages without the branch and lock a branch with
# nvidia-driver-pinning-<branch> (SOURCES["guide"], 'Ubuntu 590 and later packages').
APT_UNVERSIONED_FROM = 590


def supported_branches(as_of: str = BRANCHES_REVIEWED) -> list[str]:
    """Branches of BRANCHES whose end of life (YYYY-MM) is not before ``as_of`` (YYYY-MM-DD)."""
    return [b for b, row in BRANCHES.items() if row["end_of_life"] >= as_of[:7]]


def successor(branch: str) -> str:
    """The supported branch to move an ended one to: its named successor, else the oldest supported newer one."""
    alive = supported_branches()
    named = ENDED.get(branch)
    if named in alive:
        return named
    newer = [b for b in alive if int(b) > int(branch)]
    return newer[0] if newer else alive[-1]


# Debian ships one driver branch per release (non-free): the role cannot pick another from there.
DEBIAN_BRANCH = {"12": "535", "13": "550", "testing": None}
# Debian testing and unstable (ansible reports "forky/sid", "n/a" or a codename as the major version):
# their non-free branch moves with the archive, so the role takes what the archive carries and pins
# only an explicit driver_version; NVIDIA's CUDA repository has no suite for them.
DEBIAN_TESTING_MAJORS = ("testing", "unstable", "sid", "forky", "n/a", "forky/sid", "testing/unstable")
# Ubuntu's default: the newest Long Term Support branch (SOURCES["matrix"]); 550 ended (SOURCES["ubuntu-eol"]).
# The same branch is the default of NVIDIA's CUDA apt repository on Debian (whose own 550 ended).
UBUNTU_DEFAULT_BRANCH = "580"
RHEL_DEFAULT_BRANCH = "latest"
SUPPORTED = {
    "debian": ("12", "13", "testing"),
    "ubuntu": ("22", "24"),
    "redhat": ("8", "9", "10"),
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


def has_nvswitch(nvidia: dict[str, Any]) -> bool:
    """True when gpu_facts' PCI scan has an NVIDIA bridge function (class 0x0680xx): an NVSwitch of HGX/DGX."""
    return any(
        str(dev.get("class") or "").lower().startswith("0x0680") for dev in (nvidia or {}).get("pci_devices") or []
    )


def _check_branch_alive(branch: str | None, where: str) -> None:
    """PlanError for a numeric branch that NVIDIA ended (SOURCES["matrix"]): its packages are gone or are
    transitional packages to another branch (SOURCES["ubuntu-eol"]), so the role would install one branch while
    planning another."""
    if not branch or branch == "latest":
        return
    alive = supported_branches()
    if branch in alive:
        return
    row = BRANCHES.get(branch)
    ended = f"ended {row['end_of_life']}" if row else "is not among NVIDIA's supported branches"
    raise PlanError(
        f"driver branch {branch} {ended} (NVIDIA's matrix as of {BRANCHES_REVIEWED}: supported"
        f" {', '.join(alive)}); {where} would install another branch under its name: set"
        f" driver_branch={successor(branch)}"
    )


def _check_proprietary(branch: str | None, flavor: str) -> None:
    """Proprietary modules stop with R580 (SOURCES["guide"], SOURCES["arch-matrix"])."""
    if flavor != "proprietary":
        return
    if branch in (None, "latest") or int(branch) > PROPRIETARY_LAST:
        raise PlanError(
            f"the proprietary kernel module (GPUs before Turing, or driver_module_flavor=proprietary) ends with"
            f" branch {PROPRIETARY_LAST}; branch {branch or 'latest'} ships the open module only: set"
            f" driver_branch={PROPRIETARY_LAST}"
        )


def ubuntu_kernel_flavour(kernel: str, major: str) -> str | None:
    """The linux-modules-nvidia flavour metapackage suffix for a running Ubuntu kernel: ``generic`` for
    5.15.0-125-generic on 22.04, ``generic-hwe-22.04`` for 6.8.0-45-generic there (not the release's GA
    kernel), ``aws``/``gcp``/``nvidia``... as they are (SOURCES["ubuntu"])."""
    match = re.match(r"^(\d+\.\d+)\.\d+-\d+-([a-z0-9-]+)$", kernel)
    if not match:
        return None
    series, flavour = match.groups()
    if flavour == "generic" and series != UBUNTU_GA_KERNEL.get(major, series):
        return f"generic-hwe-{major}.04"
    return flavour


# Ubuntu LTS releases' GA kernel series (a newer series there is the HWE kernel).
UBUNTU_GA_KERNEL = {"22": "5.15", "24": "6.8"}


def plan(facts: dict[str, Any], settings: dict[str, Any], nvidia: dict[str, Any]) -> dict[str, Any]:
    """Everything the role does for one host, as data.

    ``facts``: distribution, distribution_major_version, architecture, kernel (Ansible's names).
    ``settings``: branch, version, module_flavor, source (distro|cuda), mirror_url, repo_key_url,
    package_set (compute|full), ubuntu_precompiled (bool), kernel_module (bool: can be built here),
    el_extra_repos (bool: set up EPEL and CRB/PowerTools for DKMS on EL), el_module_source (auto|dkms|redhat|
    precompiled) and secure_boot (bool or None, from gpu_facts): ``driver_plan_el``.
    ``nvidia``: gpu_facts' ``ansible_facts.nvidia``.
    """
    dist, major = distribution_key(facts.get("distribution"), facts.get("distribution_major_version"))
    source = settings.get("source") or "distro"
    package_set = settings.get("package_set") or "compute"
    kernel = str(facts.get("kernel") or "")
    build_module = bool(settings.get("kernel_module", True))
    flavor = module_flavor(settings.get("module_flavor") or "auto", nvidia)
    _check_choices(dist, source, package_set)
    out: dict[str, Any] = {
        "distribution": dist,
        "major": major,
        "task_file": "redhat.yml" if dist == "redhat" else "apt.yml",  # Debian and Ubuntu share apt.yml
        "source": source,
        "flavor": flavor,
        "package_set": package_set,
        "pinning": [],  # installed (and held) before the driver: NVIDIA's apt branch pinning package
        "packages": [],
        "module_packages": [],
        "headers": [],
        "hold": [],
        "remove": [],
        "repository": None,
        "dnf_module_stream": None,
        "el_repos": None,
        "apt_components": {},  # package -> the archive component it lives in (checked when it has no candidate)
        "dkms_signing": None,  # conf.d (dkms >= 3.0.4) | shim-mok (Ubuntu 22.04's dkms 2.8.7) | None (nothing built)
        "nvswitch": has_nvswitch(nvidia),
        "fabricmanager": [],
        "module_signer": None,  # EL: redhat | nvidia when a signed package is installed (driver_plan_el)
    }
    if dist == "debian":
        branch, version = _debian_plan(out, facts, settings, kernel, build_module)
    elif dist == "ubuntu":
        branch, version = _ubuntu_plan(out, facts, settings, kernel, build_module)
    else:
        branch, version = _redhat_plan(out, facts, settings, kernel, build_module)
    out["branch"] = branch or "the archive's"
    out["version"] = version
    return out


def _check_choices(dist: str, source: str, package_set: str) -> None:
    """The settings every distribution checks alike: the source, the package set, a source the distribution has."""
    if source not in ("distro", "cuda"):
        raise PlanError(f"driver_source={source!r}: use distro or cuda")
    if package_set not in ("compute", "full"):
        raise PlanError(f"driver_package_set={package_set!r}: use compute or full")
    if dist == "redhat" and source == "distro":
        raise PlanError(
            "RHEL, Rocky and Alma ship no NVIDIA driver of their own: set driver_source=cuda (and"
            " driver_mirror_url for an air-gapped site)"
        )


def _cuda_apt(
    out: dict[str, Any], facts: dict[str, Any], settings: dict[str, Any], branch: str | None, suite: str
) -> tuple[list[str], list[str], set[str], list[str]]:
    """NVIDIA's CUDA apt repository for ``suite`` and its branch pinning into ``out``; ``_cuda_apt_names``."""
    out["repository"] = cuda_repository(
        suite, facts.get("architecture"), settings.get("mirror_url"), settings.get("repo_key_url"), "apt"
    )
    names = _cuda_apt_names(branch, out["flavor"], out["package_set"], debian=suite.startswith("debian"))
    out["pinning"] = _apt_pinning(branch)
    return names


def _debian_plan(
    out: dict[str, Any], facts: dict[str, Any], settings: dict[str, Any], kernel: str, build_module: bool
) -> tuple[str | None, str]:
    """Debian: the archive's one branch (non-free, contrib) or NVIDIA's CUDA repository; ``(branch, version)``."""
    major, source = out["major"], out["source"]
    default = DEBIAN_BRANCH[major] if source == "distro" else UBUNTU_DEFAULT_BRANCH
    branch, version = _branch(settings.get("branch"), settings.get("version"), default)
    if major == "testing" and source == "cuda":
        raise PlanError("NVIDIA's CUDA repository has no suite for Debian testing/unstable: use driver_source=distro")
    if major == "testing" and str(settings.get("branch") or "").strip():
        raise PlanError(
            "Debian testing/unstable carries the one driver branch its archive has: leave driver_branch"
            " empty (or set driver_version to pin a version the archive has)"
        )
    if source == "distro":
        base, module, pin, every = _debian_archive_names(out, branch, build_module)
    else:
        _check_branch_alive(branch, "NVIDIA's CUDA repository")
        _check_proprietary(branch, out["flavor"])
        base, module, pin, every = _cuda_apt(out, facts, settings, branch, "debian" + major)
        out["fabricmanager"] = ["nvidia-fabricmanager", "libnvidia-nscq"] if out["nvswitch"] else []
    out["headers"] = [f"linux-headers-{kernel}"] if kernel else []
    _apt_versions(out, base, module, pin, version=version, build_module=build_module)
    # Fabric Manager must stay at the driver's version: held with it, or an apt upgrade moves it alone
    # (tests/integration/test_driver_apt_standins.py).
    out["hold"] = out["pinning"] + [n for n in base + module if build_module or n not in module]
    out["hold"] += [n for n in out["fabricmanager"] if n not in out["hold"]]
    out["remove"] = every
    out["dkms_signing"] = "conf.d" if build_module else None  # Debian 12: dkms 3.0.10 (SOURCES["dkms"])
    return branch, version


def _debian_archive_names(
    out: dict[str, Any], branch: str | None, build_module: bool
) -> tuple[list[str], list[str], set[str], list[str]]:
    """Debian's packages: ``base``, ``module``, the names to pin and to remove; their components into ``out``."""
    major, flavor = out["major"], out["flavor"]
    if DEBIAN_BRANCH[major] and branch != DEBIAN_BRANCH[major]:
        raise PlanError(
            f"Debian {major} ships driver branch {DEBIAN_BRANCH[major]} in non-free, not {branch}: set"
            f" driver_branch={DEBIAN_BRANCH[major]}, or driver_source=cuda for other branches"
        )
    if out["nvswitch"]:
        raise PlanError(
            "this host has NVSwitches, which need NVIDIA Fabric Manager, and Debian's archive has none:"
            " set driver_source=cuda (SOURCES['fabricmanager'])"
        )
    base = list(DEBIAN_COMPUTE if out["package_set"] == "compute" else DEBIAN_FULL)
    module = [DEBIAN_MODULE[flavor]]
    pin = {n for n in base + module if n not in DEBIAN_UNVERSIONED}
    every = DEBIAN_COMPUTE + DEBIAN_FULL + list(DEBIAN_MODULE.values())
    # SOURCES["debian"]: which component each package needs (a missing one is named, not guessed).
    out["apt_components"] = {n: "non-free" for n in base}
    if build_module:
        out["apt_components"][DEBIAN_MODULE[flavor]] = "contrib" if flavor == "open" else "non-free"
        out["apt_components"]["firmware-nvidia-gsp"] = "non-free-firmware"
    return base, module, pin, every


def _ubuntu_plan(
    out: dict[str, Any], facts: dict[str, Any], settings: dict[str, Any], kernel: str, build_module: bool
) -> tuple[str | None, str]:
    """Ubuntu: Canonical's server branches (precompiled or DKMS) or NVIDIA's CUDA repository; (branch, version)."""
    major, source = out["major"], out["source"]
    branch, version = _branch(settings.get("branch"), settings.get("version"), UBUNTU_DEFAULT_BRANCH)
    if branch == "latest" and source == "distro":
        raise PlanError(
            f"Ubuntu's packages are per branch: set driver_branch to a number such as {UBUNTU_DEFAULT_BRANCH}"
        )
    _check_branch_alive(branch, "Canonical's archive" if source == "distro" else "NVIDIA's CUDA repository")
    _check_proprietary(branch, out["flavor"])
    precompiled = bool(settings.get("ubuntu_precompiled", True))
    if source == "distro":
        base, module, pin, every, fm = _ubuntu_archive_names(out, branch, kernel, precompiled)
    else:
        base, module, pin, every = _cuda_apt(out, facts, settings, branch, f"ubuntu{major}04")
        precompiled = False
        unversioned = branch == "latest" or int(str(branch)) >= APT_UNVERSIONED_FROM
        fm = (
            ["nvidia-fabricmanager", "libnvidia-nscq"]
            if unversioned
            else [f"nvidia-fabricmanager-{branch}", f"libnvidia-nscq-{branch}"]
        )
    out["fabricmanager"] = fm if out["nvswitch"] else []
    built = not (source == "distro" and precompiled and out["package_set"] == "compute")
    if built:
        out["headers"] = [f"linux-headers-{kernel}"] if kernel else []
    _apt_versions(out, base, module, pin, version=version, build_module=build_module)
    # Never hold the precompiled modules: their flavour metapackage must follow the kernel.
    out["hold"] = out["pinning"] + [n for n in base + module if (build_module and built) or n not in module]
    # Fabric Manager must stay at the driver's version: held with it.
    out["hold"] += out["fabricmanager"]
    out["remove"] = every
    if build_module and built:
        # Ubuntu 22.04's dkms 2.8.7 ignores framework.conf.d and signs with the shim-signed MOK (SOURCES["dkms"]).
        out["dkms_signing"] = "shim-mok" if major == "22" else "conf.d"
    return branch, version


def _ubuntu_archive_names(
    out: dict[str, Any], branch: str | None, kernel: str, precompiled: bool
) -> tuple[list[str], list[str], set[str], list[str], list[str]]:
    """Canonical's packages: ``base``, ``module``, the names to pin and to remove, and Fabric Manager's."""
    o = "-open" if out["flavor"] == "open" else ""
    compute = out["package_set"] == "compute"
    if compute:
        base = [f"nvidia-headless-no-dkms-{branch}-server{o}", f"nvidia-utils-{branch}-server"]
    else:
        base = [f"nvidia-driver-{branch}-server{o}"]
    if precompiled and compute:
        # The per-kernel package for the running kernel and the flavour metapackage that follows the
        # kernel's updates (SOURCES["ubuntu"]): without the latter the next kernel boots without a module.
        flavour = ubuntu_kernel_flavour(kernel, out["major"])
        if not flavour:
            raise PlanError(
                f"cannot tell the Ubuntu kernel flavour of {kernel!r} for the precompiled modules: set"
                " driver_ubuntu_precompiled=false (DKMS)"
            )
        module = [
            f"linux-modules-nvidia-{branch}-server{o}-{kernel}",
            f"linux-modules-nvidia-{branch}-server{o}-{flavour}",
        ]
    else:
        module = [f"nvidia-dkms-{branch}-server{o}"]
    pin = set(base) | {m for m in module if m.startswith("nvidia-dkms")}
    every = [f"nvidia-*-{branch}-server*", f"libnvidia-*-{branch}-server*", f"linux-modules-nvidia-{branch}-*"]
    fm = [f"nvidia-fabricmanager-{branch}", f"libnvidia-nscq-{branch}"]
    return base, module, pin, every, fm


def _redhat_plan(
    out: dict[str, Any], facts: dict[str, Any], settings: dict[str, Any], kernel: str, build_module: bool
) -> tuple[str | None, str]:
    """RHEL, Rocky, Alma: NVIDIA's CUDA repository (``_el_plan``); ``(branch, version)``."""
    major, flavor = out["major"], out["flavor"]
    branch, version = _branch(settings.get("branch"), settings.get("version"), RHEL_DEFAULT_BRANCH)
    _check_branch_alive(branch, "NVIDIA's CUDA repository")
    _check_proprietary(branch, flavor)
    out["repository"] = cuda_repository(
        "rhel" + major, facts.get("architecture"), settings.get("mirror_url"), settings.get("repo_key_url"), "rpm"
    )
    _el_plan(
        out,
        facts=facts,
        settings=settings,
        branch=branch or "latest",
        version=version,
        flavor=flavor,
        package_set=out["package_set"],
        build_module=build_module,
        kernel=kernel,
        major=major,
    )
    out["dkms_signing"] = "conf.d" if build_module else None  # EPEL's dkms is 3.x (SOURCES["dkms"])
    try:  # DKMS, Red Hat's signed kmod-nvidia or NVIDIA's precompiled stream (driver_plan_el.SOURCES)
        driver_plan_el.apply(out, facts, settings, branch or "latest", version)
    except ValueError as exc:
        raise PlanError(str(exc)) from exc
    return branch, version


# Kernel module packages of NVIDIA's EL repositories (SOURCES["dkms-readme"], SOURCES["compute-only"]).
EL_KMOD = {"open": "kmod-nvidia-open-dkms", "proprietary": "kmod-nvidia-latest-dkms"}
# Full driver metapackage per flavor (SOURCES["kmod"], Table 5, "All releases beyond driver version 570").
EL_FULL = {"open": "nvidia-open", "proprietary": "cuda-drivers"}
EL_REMOVE = [
    "nvidia-open",
    "cuda-drivers",
    "nvidia-driver*",
    "kmod-nvidia*",
    "nvidia-kmod-common",
    "libnvidia-ml",
    "libnvidia-cfg",
    "libnvidia-fbc",
    "libnvidia-gpucomp",
    "nvidia-persistenced",
    "nvidia-modprobe",
    "nvidia-settings",
    "nvidia-xconfig",
    "nvidia-fabricmanager",
    "libnvidia-nscq",
]


def el_stream(branch: str, flavor: str) -> str:
    """NVIDIA's nvidia-driver module stream (SOURCES["dkms-readme"], SOURCES["kmod"]): open-dkms / <b>-open for
    the open modules, latest-dkms / <b>-dkms for the proprietary ones."""
    if flavor == "open":
        return "open-dkms" if branch == "latest" else f"{branch}-open"
    return "latest-dkms" if branch == "latest" else f"{branch}-dkms"


def _el_plan(
    out: dict[str, Any],
    *,
    facts: dict[str, Any],
    settings: dict[str, Any],
    branch: str,
    version: str,
    flavor: str,
    package_set: str,
    build_module: bool,
    kernel: str,
    major: str,
) -> None:
    def spec(name: str) -> str:
        return f"{name}-{version}" if version else name

    # RHEL 10 has no module streams: install, then versionlock the branch (SOURCES["kmod"], Table 5).
    if major in ("8", "9"):
        out["dnf_module_stream"] = f"nvidia-driver:{el_stream(branch, flavor)}"
    if package_set == "full":
        out["packages"] = [spec(EL_FULL[flavor])]
    else:
        # Compute only: nvidia-driver-cuda (libraries, nvidia-smi, persistenced) + the DKMS module
        # (SOURCES["compute-only"]); nvidia-driver-NVML is no longer a package of the current streams.
        out["packages"] = [spec("nvidia-driver-cuda"), spec("nvidia-persistenced")]
    if build_module:
        out["module_packages"] = [spec(EL_KMOD[flavor])]
        # kernel-devel of the running kernel (EL9/10: kernel-devel-matched pulls the one matching the installed
        # kernel) and the unversioned kernel-headers (SOURCES["guide"], pre-installation actions).
        if major == "8":
            out["headers"] = ([f"kernel-devel-{kernel}"] if kernel else ["kernel-devel"]) + ["kernel-headers"]
        else:
            out["headers"] = ["kernel-devel-matched", "kernel-headers"]
        if settings.get("el_extra_repos", True):
            out["el_repos"] = el_extra_repos(facts, major)
    out["fabricmanager"] = [spec("nvidia-fabricmanager"), spec("libnvidia-nscq")] if out["nvswitch"] else []
    # NVIDIA locks *nvidia*<branch>* (SOURCES["versionlock"]): every package with nvidia in its name at that
    # branch (libnvidia-*, nvidia-kmod-common, nvidia-open, kmod-nvidia-*). RHEL 10 locks the branch this way;
    # EL 8/9's stream already holds the branch, so they lock only an exact version.
    if version:
        out["hold"] = [f"*nvidia*{version}*"]
    elif major not in ("8", "9") and branch != "latest":
        out["hold"] = [f"*nvidia*{branch}*"]
    out["remove"] = list(EL_REMOVE)


def el_extra_repos(facts: dict[str, Any], major: str) -> dict[str, Any]:
    """EPEL (dkms lives there) and CRB / PowerTools (EPEL's packages need it) for DKMS on EL
    (SOURCES["rocky"], SOURCES["guide"] pre-installation actions)."""
    dist = str(facts.get("distribution") or "").strip().lower()
    arch = CUDA_ARCH.get(str(facts.get("architecture")), str(facts.get("architecture")))
    arch = "aarch64" if arch == "sbsa" else arch
    if dist == "redhat":
        crb = {"name": f"codeready-builder-for-rhel-{major}-{arch}-rpms", "tool": "subscription-manager"}
        epel = f"https://dl.fedoraproject.org/pub/epel/epel-release-latest-{major}.noarch.rpm"
    else:
        crb = {"name": "powertools" if major == "8" else "crb", "tool": "dnf"}
        epel = "epel-release"
    return {"epel": epel, "crb": crb["name"], "crb_tool": crb["tool"]}


def _apt_pinning(branch: str | None) -> list[str]:
    """NVIDIA's apt branch lock for Debian and Ubuntu (SOURCES["guide"], 'Version locking packages for Ubuntu /
    Debian'): installed before the driver, for a numeric branch."""
    if not branch or branch == "latest":
        return []
    return [f"nvidia-driver-pinning-{branch}"]


def _cuda_apt_names(
    branch: str | None, flavor: str, package_set: str, *, debian: bool
) -> tuple[list[str], list[str], set[str], list[str]]:
    """NVIDIA's CUDA apt repository. Debian's names are Debian-style (nvidia-driver-cuda, nvidia-kernel[-open]-dkms,
    nvidia-open, cuda-drivers) on every branch; Ubuntu's carry the branch up to 580 and none from 590
    (SOURCES["guide"], 'Ubuntu 590 and later packages'), the pinning package then holds the branch."""
    o = "-open" if flavor == "open" else ""
    full = ["nvidia-open"] if flavor == "open" else ["cuda-drivers"]
    if debian:
        base = ["nvidia-driver-cuda"] if package_set == "compute" else full
        module = ["nvidia-kernel-open-dkms" if flavor == "open" else "nvidia-kernel-dkms"]
        every = ["cuda-drivers*", "nvidia-open*", "nvidia-driver*", "nvidia-kernel*", "libcuda1", "libnvidia-*"]
        return base, module, set(base) | set(module), every
    if branch == "latest" or int(str(branch)) >= APT_UNVERSIONED_FROM:
        base = ["libnvidia-compute", "nvidia-utils"] if package_set == "compute" else full
        module = [f"nvidia-dkms{o}"]
        every = ["cuda-drivers*", "nvidia-open*", "nvidia-driver*", "nvidia-dkms*", "libnvidia-compute*"]
        every.append("nvidia-utils*")  # installed by name, so autoremove keeps it
        return base, module, set(base) | set(module), every
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
