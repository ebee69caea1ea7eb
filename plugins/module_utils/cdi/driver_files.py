# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The one home of "which driver files does a container get for which capability".

Used by ``gpu_facts`` (what the host has), ``cdi_spec`` (what the spec mounts) and the runtime shim
(what ``NVIDIA_DRIVER_CAPABILITIES`` means). It follows libnvidia-container's rules: libraries are
matched as soname prefixes in the driver root's ``ld.so.cache``, resolved inside the driver root, and
kept only when the resolved file name ends with the driver version, so a stale library left over from an
older driver is never injected.

Standard library only (target Pythons 3.8+).
"""

from __future__ import annotations

import os
import stat

from ..base.pathsafe import host_path, resolve_in_root
from ..base.record import record
from .ldcache import LdCacheEntry, read_ld_so_cache

# Canonical order: the order capabilities are listed in and applied in.
CAPABILITIES = ("utility", "compute", "video", "graphics", "display", "ngx", "compat32")
DEFAULT_CAPABILITIES = ("utility", "compute")
# A capability that needs another one's files to work.
IMPLIES = {"video": ("compute",), "display": ("graphics",)}

LIBRARIES = {
    "utility": ("libnvidia-ml.so", "libnvidia-cfg.so", "libnvidia-nscq.so"),
    "compute": (
        "libcuda.so",
        "libcudadebugger.so",
        "libnvidia-opencl.so",
        "libnvidia-gpucomp.so",
        "libnvidia-ptxjitcompiler.so",
        "libnvidia-fatbinaryloader.so",
        "libnvidia-allocator.so",
        "libnvidia-compiler.so",
        "libnvidia-pkcs11.so",
        "libnvidia-pkcs11-openssl3.so",
        "libnvidia-nvvm.so",
    ),
    "video": ("libvdpau_nvidia.so", "libnvidia-encode.so", "libnvidia-opticalflow.so", "libnvcuvid.so"),
    "graphics": (
        "libnvidia-eglcore.so",
        "libnvidia-glcore.so",
        "libnvidia-tls.so",
        "libnvidia-glsi.so",
        "libnvidia-fbc.so",
        "libnvidia-ifr.so",
        "libnvidia-rtcore.so",
        "libnvoptix.so",
        "libGLX_nvidia.so",
        "libEGL_nvidia.so",
        "libGLESv2_nvidia.so",
        "libGLESv1_CM_nvidia.so",
        "libnvidia-glvkspirv.so",
        "libnvidia-cbl.so",
    ),
    "display": (),
    "ngx": ("libnvidia-ngx.so",),
    "compat32": (),  # not a list of its own: the other capabilities' libraries, for i386
}

BINARIES = {
    "utility": ("nvidia-smi", "nvidia-debugdump", "nvidia-persistenced", "nv-fabricmanager"),
    "compute": ("nvidia-cuda-mps-control", "nvidia-cuda-mps-server"),
}

# Where libnvidia-container looks for the binaries inside the driver root.
BINARY_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")

# Loader configuration the graphics stack needs: ICD and vendor files (driver root).
CONFIG_FILES = {
    "compute": ("/etc/OpenCL/vendors/nvidia.icd",),
    "graphics": (
        "/etc/vulkan/icd.d/nvidia_icd.json",
        "/usr/share/vulkan/icd.d/nvidia_icd.json",
        "/etc/vulkan/implicit_layer.d/nvidia_layers.json",
        "/usr/share/vulkan/implicit_layer.d/nvidia_layers.json",
        "/usr/share/glvnd/egl_vendor.d/10_nvidia.json",
        "/etc/glvnd/egl_vendor.d/10_nvidia.json",
        "/usr/share/egl/egl_external_platform.d/10_nvidia_wayland.json",
        "/usr/share/egl/egl_external_platform.d/15_nvidia_gbm.json",
    ),
}

# Sockets of host daemons (these live on the host root, not in the driver root).
IPC_SOCKETS = {
    "utility": ("/var/run/nvidia-persistenced/socket", "/var/run/nvidia-fabricmanager/socket"),
}
MPS_PIPE_DIR = "/tmp/nvidia-mps"  # noqa: S108  # compute; CUDA_MPS_PIPE_DIRECTORY's default

FIRMWARE_DIR = "/lib/firmware/nvidia"
# Where the kernel looks for firmware, in its order (Documentation/driver-api/firmware/fw_search_path.rst, read
# 2026-11-27): the ``firmware_class.path`` parameter first, then /lib/firmware/updates/<release>,
# /lib/firmware/updates, /lib/firmware/<release>, /lib/firmware. NVIDIA's `nvidia-ctk cdi generate` searches the same
# (pkg/nvcdi/driver-nvml.go, getFirmwareSearchPaths). A driver in its own tree (a read-only /usr/local/nvidia on a
# cloud image) keeps its GSP firmware there and points the parameter at it.
FIRMWARE_CLASS_PATH = "/sys/module/firmware_class/parameters/path"

# Links the hook creates in the container (name -> target, in the same directory).
CONTAINER_LINKS = {
    "compute": (("libcuda.so", "libcuda.so.1"),),
    "graphics": (("libGLX_indirect.so.0", "libGLX_nvidia.so.0"),),
    "video": (("libnvidia-opticalflow.so", "libnvidia-opticalflow.so.1"),),
}

# Where libraries go inside the container, by the container image's layout.
# Debian's private driver folders. The sonames are public only through nvidia-alternative's links; a
# library whose link is missing (alternative pointing elsewhere, trigger not run) is still found here.
PRIVATE_LIBDIRS = {
    "x86_64": ("/usr/lib/x86_64-linux-gnu/nvidia/current",),
    "i386": ("/usr/lib/i386-linux-gnu/nvidia/current",),
}
# Where the libraries are looked for when the driver root has no ld.so.cache of its own (a driver kept in a tree
# of its own, such as GKE's, mounted at /usr/local/nvidia with lib64/ and bin/): the search paths of NVIDIA's
# library locator (nvidia-container-toolkit internal/lookup/library.go, NewLibraryLocator; commit 070129ab7ffd,
# read 2026-11-27), in its order, under the driver root. A file's ELF header says its architecture.
SEARCH_LIBDIRS = (
    "/",
    "/usr/lib64",
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu/nvidia/current",
    "/usr/lib/aarch64-linux-gnu/nvidia/current",
    "/lib64",
    "/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
    "/lib/x86_64-linux-gnu/nvidia/current",
    "/lib/aarch64-linux-gnu/nvidia/current",
    "/glibc/lib",
)
# (EI_CLASS, e_machine) of a little-endian ELF file -> the architecture names ld.so.cache entries carry
_ELF_ARCHES = {(2, 0x3E): "x86_64", (2, 0xB7): "aarch64", (1, 0x03): "i386"}
# Patterns for ``re`` (cached by it), imported where used: the shim imports this module for
# parse_capabilities and must not pay for ``re`` on every GPU container start.
_SONAME_RE = r"^lib[\w.+-]*\.so\.\d+$"
# A library file or link in a searched directory: the soname link (``libcuda.so.1``) or a library whose soname is
# its whole versioned name (``libnvidia-tls.so.535.309.01``).
_LIBRARY_RE = r"^lib[\w+-][\w.+-]*\.so(?:\.\d+)+$"

CONTAINER_LIBDIRS = {
    "x86_64": ("/usr/lib/x86_64-linux-gnu", "/usr/lib64"),
    "i386": ("/usr/lib/i386-linux-gnu", "/usr/lib32"),
}

DriverFile = record("DriverFile", ("kind", "capability", "name", "path", "resolved", "arch"))
"""One file for a container. ``kind``: library, binary, config, firmware, ipc. ``path``: where it was
found, ``resolved``: the real file behind every link; both absolute in the (driver) root's own terms."""

_VERSION_SUFFIX = r"\.so\.(\d+\.\d+(?:\.\d+)?)$"


class CapabilityError(ValueError):
    """A capability list names something that is not a capability."""


def parse_capabilities(value: str | list | tuple | None) -> tuple[str, ...]:
    """Normalise an ``NVIDIA_DRIVER_CAPABILITIES``-style value into a tuple in canonical order.

    ``None``, empty or blank means the default ``utility,compute``; ``all`` means every capability;
    an unknown name raises ``CapabilityError`` naming it. Implied capabilities (video needs compute,
    display needs graphics) are added.
    """
    if isinstance(value, (list, tuple)):
        names = [str(v).strip() for v in value]
    else:
        names = [n.strip() for n in (value or "").split(",")]
    names = [n for n in names if n]
    if not names:
        return DEFAULT_CAPABILITIES
    if "all" in names:
        return CAPABILITIES
    unknown = sorted(set(names) - set(CAPABILITIES))
    if unknown:
        from ..base.oneline import excerpt  # noqa: PLC0415  # failure path only

        # the names come from the image: a bounded few of them, each a bounded prefix
        listed = ", ".join(excerpt(u, 40) for u in unknown[:5]) + (
            f" and {len(unknown) - 5} more" if unknown[5:] else ""
        )
        valid = ", ".join(CAPABILITIES)
        raise CapabilityError(f"unknown driver capability {listed}; valid: {valid} or all")
    wanted = set(names)
    for name in names:
        wanted.update(IMPLIES.get(name, ()))
    return tuple(c for c in CAPABILITIES if c in wanted)


def version_of(filename: str) -> str | None:
    """The driver version a library file name carries (``libcuda.so.535.261.03`` -> ``535.261.03``)."""
    import re  # noqa: PLC0415  # see _SONAME_RE

    match = re.search(_VERSION_SUFFIX, filename)
    return match.group(1) if match else None


def library_capability(soname: str) -> str | None:
    """The capability whose list matches ``soname`` as a prefix, or None."""
    for capability in CAPABILITIES:
        for prefix in LIBRARIES[capability]:
            if soname.startswith(prefix):
                return capability
    return None


def select_libraries(
    entries: list[LdCacheEntry],
    capabilities: str | list | tuple | None,
    version: str | None,
    resolve: object,
    arch: str = "x86_64",
) -> list[DriverFile]:
    """Driver libraries for ``capabilities`` from ld.so.cache ``entries``, as ``DriverFile``s.

    ``resolve(path)`` maps a cache path to the real file, in the driver root's terms (pass a
    ``resolve_in_root`` partial). ``compat32`` adds the i386 copies of the other capabilities'
    libraries. One file per resolved path; cache order (the loader's) is kept.
    """
    capabilities = parse_capabilities(capabilities)
    arches = [arch] + (["i386"] if "compat32" in capabilities and arch == "x86_64" else [])
    files: list[DriverFile] = []
    seen: set[str] = set()
    for entry in entries:
        if entry.arch not in arches:
            continue
        capability = library_capability(entry.soname)
        if capability is None or capability not in capabilities:
            continue
        resolved = resolve(entry.path)
        if version and not os.path.basename(resolved).endswith(version):
            continue
        if resolved in seen:
            continue
        seen.add(resolved)
        files.append(DriverFile("library", capability, entry.soname, entry.path, resolved, entry.arch))
    return files


def private_entries(driver_root: str, entries: list[LdCacheEntry], resolve: object) -> list[LdCacheEntry]:
    """Cache-like entries for the sonames in Debian's private folders that ``entries`` lack, after them.

    Only ``lib*.so.<N>`` names (the soname links) are taken; what they point at is still resolved inside
    ``driver_root`` and filtered by version like every cache entry.
    """
    import re  # noqa: PLC0415  # see _SONAME_RE

    known = {(e.soname, e.arch) for e in entries}
    extra: list[LdCacheEntry] = []
    for arch, dirs in sorted(PRIVATE_LIBDIRS.items()):
        for directory in dirs:
            try:
                names = sorted(os.listdir(host_path(driver_root, resolve(directory))))
            except OSError:
                continue
            for name in names:
                if re.match(_SONAME_RE, name) and (name, arch) not in known:
                    known.add((name, arch))
                    extra.append(LdCacheEntry(name, directory + "/" + name, None, arch, None))
    return extra


def elf_arch(path: str) -> str | None:
    """The architecture of the ELF file at ``path`` (``x86_64``, ``aarch64``, ``i386``), or None when it is not a
    little-endian ELF file of one of them or cannot be read."""
    try:
        with open(path, "rb") as f:
            head = f.read(20)
    except OSError:
        return None
    if len(head) < 20 or head[:4] != b"\x7fELF" or head[5] != 1:
        return None
    return _ELF_ARCHES.get((head[4], int.from_bytes(head[18:20], "little")))


def searched_entries(driver_root: str, resolve: object) -> list[LdCacheEntry]:
    """Cache-like entries for the libraries (``_LIBRARY_RE``) in ``SEARCH_LIBDIRS`` under ``driver_root``, the
    first of each name and architecture in that order: what stands in for a driver root's missing ld.so.cache."""
    import re  # noqa: PLC0415  # see _SONAME_RE

    seen = set()
    entries: list[LdCacheEntry] = []
    for directory in SEARCH_LIBDIRS:
        try:
            names = sorted(os.listdir(host_path(driver_root, resolve(directory))))
        except OSError:
            continue
        # a library's soname link before its versioned file, so the link names what both resolve to
        for name in sorted(names, key=lambda n: (n.split(".so.", 1)[0], len(n), n)):
            if not re.match(_LIBRARY_RE, name):
                continue
            path = directory.rstrip("/") + "/" + name
            arch = elf_arch(host_path(driver_root, resolve(path)))
            if arch is not None and (name, arch) not in seen:
                seen.add((name, arch))
                entries.append(LdCacheEntry(name, path, None, arch, None))
    return entries


def driver_root_entries(driver_root: str, resolve: object) -> list[LdCacheEntry]:
    """The driver root's ld.so.cache entries, or ``searched_entries`` when it has no ld.so.cache at all.
    Raises OSError when the cache exists but cannot be read, ``LdCacheError`` when it is no cache."""
    try:
        return read_ld_so_cache(host_path(driver_root, resolve("/etc/ld.so.cache")))
    except FileNotFoundError:
        return searched_entries(driver_root, resolve)


def detect_installed_version(entries: list[LdCacheEntry], resolve: object, arch: str = "x86_64") -> str | None:
    """The driver version of the installed userspace: the suffix of the file behind libnvidia-ml.so.1
    (else libcuda.so.1) in the cache, or None when neither is installed."""
    for wanted in ("libnvidia-ml.so.1", "libcuda.so.1"):
        for entry in entries:
            if entry.soname == wanted and entry.arch == arch:
                found = version_of(os.path.basename(resolve(entry.path)))
                if found:
                    return found
    return None


def _is_file(root: str, inner: str, executable: bool = False) -> bool:
    try:
        st = os.stat(host_path(root, inner))
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and (not executable or bool(st.st_mode & 0o111))


def _is_socket(root: str, inner: str) -> bool:
    try:
        return stat.S_ISSOCK(os.stat(host_path(root, inner)).st_mode)
    except OSError:
        return False


def read_driver_cache(driver_root: str) -> list[LdCacheEntry]:
    """The driver root's ld.so.cache entries (``driver_root_entries``: a root without a cache is searched) plus
    ``private_entries``: what the loader and libnvidia-container see, and the libraries Debian keeps out of the
    cache (``libnvidia-ml.so.1``). Raises OSError or ``LdCacheError`` (a ValueError) when a cache cannot be read."""

    def resolve(path: str) -> str:
        return resolve_in_root(driver_root, path)

    entries = driver_root_entries(driver_root, resolve)
    return entries + private_entries(driver_root, entries, resolve)


def find_driver_files(
    driver_root: str,
    capabilities: str | list | tuple | None = None,
    version: str | None = None,
    *,
    root: str | None = None,
    arch: str = "x86_64",
    entries: list[LdCacheEntry] | None = None,
    release: str | None = None,
) -> tuple[str | None, list[DriverFile]]:
    """Every driver file a container gets for ``capabilities``, found on the system under ``driver_root``.

    ``version`` defaults to the installed userspace's (``detect_installed_version``); ``root`` (the host
    root, default ``driver_root``) is where IPC sockets live. ``entries`` lets a caller pass an
    already-parsed ld.so.cache; ``release`` (default: the running kernel's) picks the kernel's firmware folders.
    Returns ``(version, [DriverFile, ...])``.
    """
    root = driver_root if root is None else root
    release = os.uname().release if release is None else release
    capabilities = parse_capabilities(capabilities)

    def resolve(path: str) -> str:
        return resolve_in_root(driver_root, path)

    if entries is None:
        entries = driver_root_entries(driver_root, resolve)
    entries = list(entries) + private_entries(driver_root, entries, resolve)
    if version is None:
        version = detect_installed_version(entries, resolve, arch)
    files = select_libraries(entries, capabilities, version, resolve, arch) if version else []

    for capability in capabilities:
        for name in BINARIES.get(capability, ()):
            for directory in BINARY_DIRS:
                inner = resolve(directory + "/" + name)
                if _is_file(driver_root, inner, executable=True):
                    files.append(DriverFile("binary", capability, name, directory + "/" + name, inner, arch))
                    break
        for path in CONFIG_FILES.get(capability, ()):
            inner = resolve(path)
            if _is_file(driver_root, inner):
                files.append(DriverFile("config", capability, os.path.basename(path), path, inner, None))
        for path in IPC_SOCKETS.get(capability, ()):
            inner = resolve_in_root(root, path)
            if _is_socket(root, inner):
                files.append(DriverFile("ipc", capability, os.path.basename(os.path.dirname(path)), path, inner, None))

    if version:
        files.extend(find_firmware(driver_root, root, version, release))
    return version, files


def firmware_search_dirs(root: str, release: str) -> list[str]:
    """The kernel's firmware folders in its search order; the ``firmware_class.path`` parameter is read from the host
    ``root`` (empty or unreadable: not set)."""
    try:
        with open(host_path(root, FIRMWARE_CLASS_PATH), encoding="utf-8", errors="replace") as f:
            custom = f.read(4096).strip()
    except OSError:
        custom = ""
    standard = [
        "/lib/firmware/updates/" + release,
        "/lib/firmware/updates",
        "/lib/firmware/" + release,
        "/lib/firmware",
    ]
    dirs = ([custom.rstrip("/")] if custom.startswith("/") and len(custom) > 1 else []) + standard
    return list(dict.fromkeys(dirs))


def find_firmware(driver_root: str, root: str, version: str, release: str) -> list[DriverFile]:
    """The driver's GSP firmware (``nvidia/<version>/gsp*.bin``), each name from the first folder of the kernel's
    search order that holds it, as the kernel loads it. The parameter is read from the host ``root``; every folder is
    searched in the driver root, as nvidia-ctk searches them. The container sees each at
    ``/lib/firmware/nvidia/<version>/<name>``."""
    found: dict[str, DriverFile] = {}
    for folder in firmware_search_dirs(root, release):
        inner = resolve_in_root(driver_root, folder + "/nvidia/" + version)
        try:
            names = sorted(os.listdir(host_path(driver_root, inner)))
        except OSError:
            continue
        for name in names:
            if name.startswith("gsp") and name.endswith(".bin") and name not in found:
                path = inner + "/" + name
                resolved = resolve_in_root(driver_root, path)
                if _is_file(driver_root, resolved):
                    found[name] = DriverFile("firmware", "utility", name, path, resolved, None)
    return list(found.values())
