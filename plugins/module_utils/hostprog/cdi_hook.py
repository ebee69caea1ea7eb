# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""``gpufleet-cdi-hook``: the createContainer hook the CDI spec calls.

``gpufleet-cdi-hook apply --folder /usr/lib/x86_64-linux-gnu
--library x86_64::libcuda.so.1::/usr/lib/x86_64-linux-gnu/libcuda.so.535.309.01 ...
--link libcuda.so.1::/usr/lib/x86_64-linux-gnu/libcuda.so ...`` with the OCI state on stdin:

1. writes ``/etc/ld.so.conf.d/00-gpufleet-nvidia.conf`` (the folders) in the container root, so an
   ``ldconfig`` run later inside the container keeps the driver's folder;
2. for each ``--library`` mounted into this container, makes its soname link (``libcuda.so.1 ->
   libcuda.so.535.309.01``) and adds it to the container's ``/etc/ld.so.cache`` (``cdi.ldcache.add_entries``:
   the image's entries are kept, the driver's are spliced in where glibc's ldconfig would put them);
3. creates each ``--link`` (``libcuda.so -> libcuda.so.1``) when its target exists and the name is free.

The runtime shim does the same work itself before ``runc create`` (``hostprog.shim``); this hook is what
engines that read the CDI spec themselves (docker 25+, podman, containerd, CRI-O) run.

It runs as root on the host, in the container's mount namespace before ``pivot_root``, with the
container's ``/proc`` already mounted, on a root file system the image's author controls. So
(CVE-2024-0132, CVE-2025-23266, CVE-2025-23267):

* No program runs. The host's ``ldconfig -r <root>`` would be no boundary: its chroot does not stop a
  root process that can reach ``<root>/proc/1/root`` (the host's ``/``), and it reads the image's
  ``ld.so.conf``, follows its links and blocks on its FIFOs. The cache is written here, from the
  spec's list of libraries; the image's ``ld.so.conf`` is never read.
* It decides nothing from the container: the container root comes from the bundle's ``config.json``
  (``root.path``), named by the runtime's state on stdin; ``process.env`` is never read. Its own
  environment is replaced by a fixed minimal one first (the launcher also starts Python with ``-I -S``,
  so ``PYTHON*`` variables are ignored).
* Every container path is resolved inside the root (``base.pathsafe.resolve_in_root``: absolute link
  targets restart at the root, ``..`` stops there, so ``/proc/1/root`` leads back into the root), then
  opened one component at a time with ``O_NOFOLLOW`` from a descriptor of the root; meeting a link on
  that walk means the tree changed under us, and the hook refuses. Files are created with
  ``O_EXCL | O_NOFOLLOW`` under a temporary name and renamed within the same directory descriptor;
  links are created with ``symlinkat``. Nothing is written through a path string that crosses the root.
* The only file of the image it reads is ``/etc/ld.so.cache``, and only when it is a regular file
  (never a FIFO, device or socket: it is checked without being opened, then opened ``O_NONBLOCK``) of at
  most ``cdi.ldcache.MAX_CACHE_BYTES``; its parsing is linear in its size.
"""

from __future__ import annotations

import errno
import os
import stat
import sys

from ..base.jsonio import loads
from ..base.pathsafe import resolve_in_root
from ..cdi.ldcache import FLAGS_BY_ARCH, MAX_CACHE_BYTES, LdCacheError, add_entries
from .oci_config import RequestError, read_config, read_fd

NAME = "gpufleet-cdi-hook"
CONF_NAME = "00-gpufleet-nvidia.conf"
CACHE_NAME = "ld.so.cache"
SAFE_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}
MAX_STATE_BYTES = 1 << 20  # the OCI state runc writes is a few hundred bytes
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class HookError(Exception):
    """The container must not start; the message says why."""


def sanitize_environment() -> None:
    """Replace this process's environment by ``SAFE_ENV`` (no ``LD_*``, no ``PYTHON*``, nothing else)."""
    os.environ.clear()
    os.environ.update(SAFE_ENV)


def parse_args(argv: list[str]) -> dict:
    """The hook's options: ``folders``, ``libraries`` (``(arch, soname, container path)``) and ``links``
    (``(target name, container path)``)."""
    args = list(argv[1:])
    if args and args[0] == "apply":
        args = args[1:]
    options = {"folders": [], "libraries": [], "links": []}
    i = 0
    while i < len(args):
        flag = args[i]
        if i + 1 >= len(args):
            raise HookError(f"{flag} needs a value")
        value = args[i + 1]
        if "\0" in value or "\n" in value:
            raise HookError(f"{flag} {value!r}: a newline or NUL in a value")
        if flag == "--folder":
            if not value.startswith("/"):
                raise HookError(f"--folder {value!r}: not an absolute path")
            options["folders"].append(value)
        elif flag == "--library":
            arch, sep1, rest = value.partition("::")
            soname, sep2, path = rest.partition("::")
            malformed = not (sep1 and sep2) or arch not in FLAGS_BY_ARCH or not soname or "/" in soname
            if malformed or not path.startswith("/") or path.endswith("/"):
                raise HookError(f"--library {value!r}: expected <arch>::<soname>::<absolute container path>")
            options["libraries"].append((arch, soname, path))
        elif flag == "--link":
            target, sep, link = value.partition("::")
            if not sep or "/" in target or not link.startswith("/"):
                raise HookError(f"--link {value!r}: expected <target name>::<absolute link path>")
            options["links"].append((target, link))
        else:
            raise HookError(f"unknown option {flag!r}")
        i += 2
    return options


def read_state(stream: object) -> str:
    """The OCI state runc writes on the hook's stdin: a JSON object naming an absolute ``bundle``."""
    state = loads(stream.read(MAX_STATE_BYTES + 1) or "{}", MAX_STATE_BYTES, "the OCI state on stdin")
    bundle = state.get("bundle") if isinstance(state, dict) else None
    if not isinstance(bundle, str) or not os.path.isabs(bundle):
        raise HookError("the OCI state names no absolute bundle")
    return bundle


def container_root(bundle: str) -> tuple[str | None, set[str]]:
    """``(root, mount destinations)`` of the container from the bundle's ``config.json``."""
    config = read_config(os.path.join(bundle, "config.json"))  # refuses a config.json without root.path
    return root_of(bundle, config), mount_destinations(config)


def root_of(bundle: str, config: dict) -> str | None:
    """The container's root on this machine (``root.path`` of a type-checked ``config``, relative to the
    bundle), or None when ``config`` names none."""
    path = (config.get("root") or {}).get("path")
    return os.path.normpath(os.path.join(bundle, path)) if path else None


def mount_destinations(config: dict) -> set[str]:
    """The normalized destinations of the bind mounts in an OCI ``config`` (already type-checked)."""
    return {os.path.normpath(m["destination"]) for m in config.get("mounts") or () if m.get("destination")}


def open_dir(root_fd: int, root: str, path: str, create: bool = False) -> int | None:
    """A descriptor of directory ``path`` (container terms) inside the root, never leaving it.

    ``path`` is first resolved inside ``root``; the result is then opened component by component with
    ``O_NOFOLLOW`` relative to ``root_fd``. Missing components are created (0755) when ``create``;
    otherwise None is returned. A link met on the walk (the tree changed since the resolution) raises
    ``HookError``.
    """
    resolved = resolve_in_root(root, path)
    fd = os.dup(root_fd)
    try:
        for part in [p for p in resolved.split("/") if p]:
            try:
                next_fd = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    os.close(fd)
                    return None
                try:  # noqa: SIM105  # not contextlib.suppress: its import costs every GPU container start
                    os.mkdir(part, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
                next_fd = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise HookError(f"{path} changed while the hook ran (a link appeared at {part})") from None
                raise
            os.close(fd)
            fd = next_fd
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_file(dir_fd: int, name: str, data: bytes) -> None:
    """Replace ``name`` in ``dir_fd`` by ``data`` (bytes): O_EXCL|O_NOFOLLOW temp file, then renameat."""
    tmp = f".{name}.{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=dir_fd)
    try:
        os.write(fd, data)
        os.fchmod(fd, 0o644)
    finally:
        os.close(fd)
    try:
        os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        os.unlink(tmp, dir_fd=dir_fd)
        raise


def create_link(root_fd: int, root: str, target: str, link: str) -> bool:
    """``link -> target`` (same directory) inside the root, when ``target`` exists there and ``link`` is free.

    Returns True when created. An existing link with the same target is kept; any other existing file
    is left alone (the image's own file wins over a convenience link).
    """
    directory, name = os.path.split(link)
    dir_fd = open_dir(root_fd, root, directory)
    if dir_fd is None:
        return False
    try:
        try:
            os.stat(target, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return False
        try:
            os.symlink(target, name, dir_fd=dir_fd)
        except FileExistsError:
            return False
        return True
    finally:
        os.close(dir_fd)


def _ensure_soname_link(dir_fd: int, name: str, target: str) -> bool:
    """``name -> target`` in ``dir_fd``; True when it is that link now. An image's link of the same name is
    replaced (as ldconfig would); any other file there is the image's own and is left alone (False)."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        try:
            os.symlink(target, name, dir_fd=dir_fd)
            return True
        except FileExistsError:  # appeared meanwhile: look again below
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if not stat.S_ISLNK(st.st_mode):
        return False
    if os.readlink(name, dir_fd=dir_fd) == target:
        return True
    tmp = f".{name}.gpufleet-{os.getpid()}"
    os.symlink(target, tmp, dir_fd=dir_fd)
    try:
        os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        os.unlink(tmp, dir_fd=dir_fd)
        raise
    return True


def read_image_cache(etc_fd: int) -> bytes:
    """The image's ``ld.so.cache`` bytes, or ``b""`` when it has none that is a regular file. A link, FIFO,
    device or socket there is never opened (it is replaced by the new cache); a file larger than
    ``MAX_CACHE_BYTES`` is an ``LdCacheError`` (at most one byte more is read)."""
    try:
        st = os.stat(CACHE_NAME, dir_fd=etc_fd, follow_symlinks=False)
    except FileNotFoundError:
        return b""
    if not stat.S_ISREG(st.st_mode):
        return b""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(CACHE_NAME, flags, dir_fd=etc_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOENT):  # replaced meanwhile
            return b""
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return b""
        return read_fd(fd, MAX_CACHE_BYTES, "the image's /etc/ld.so.cache")
    except RequestError as exc:  # too large to be a real cache: not merged, like any other it cannot read
        raise LdCacheError(str(exc)) from None
    finally:
        os.close(fd)


def mounted(libraries: list[tuple[str, str, str]], destinations: set[str] | None) -> list[tuple[str, str, str]]:
    """The ``--library`` entries whose file this container gets (a mount lands on its path)."""
    if destinations is None:
        return list(libraries)
    return [lib for lib in libraries if os.path.normpath(lib[2]) in destinations]


def _say_fallback(exc: LdCacheError) -> None:
    """One line on stderr (the engine's log): why the container's cache lists the driver's libraries alone."""
    from ..base.oneline import error_line  # noqa: PLC0415  # a crafted cache only

    reason = (
        f"the image's /etc/ld.so.cache is not merged ({exc}): the container's cache lists the driver's libraries alone"
    )
    sys.stderr.write(error_line(NAME, reason))


def apply(options: dict, root: str, destinations: set[str] | None = None) -> None:
    """Do the hook's work in the container ``root`` (a path on this machine). ``destinations``: the mount
    destinations of the container (only libraries mounted there are made known); None for all."""
    root_fd = os.open(root, _DIR_FLAGS & ~os.O_NOFOLLOW)
    try:
        if options["folders"]:
            conf_fd = open_dir(root_fd, root, "/etc/ld.so.conf.d", create=True)
            try:
                text = "# gpufleet-cdi-hook: NVIDIA driver libraries\n" + "".join(f + "\n" for f in options["folders"])
                write_file(conf_fd, CONF_NAME, text.encode())
            finally:
                os.close(conf_fd)
        entries: list[tuple[str, str, str]] = []
        for arch, soname, path in mounted(options["libraries"], destinations):
            directory, base = os.path.split(path)
            dir_fd = open_dir(root_fd, root, directory, create=True)
            try:
                linked = soname != base and _ensure_soname_link(dir_fd, soname, base)
            finally:
                os.close(dir_fd)
            entries.append((soname, directory + "/" + soname if linked else path, arch))
        if entries:
            etc_fd = open_dir(root_fd, root, "/etc", create=True)
            try:
                try:
                    data = add_entries(read_image_cache(etc_fd), entries)
                except LdCacheError as exc:  # the image's cache is unreadable: the driver's entries alone
                    _say_fallback(exc)
                    data = add_entries(b"", entries)
                write_file(etc_fd, CACHE_NAME, data)
            finally:
                os.close(etc_fd)
        for target, link in options["links"]:
            create_link(root_fd, root, target, link)
    finally:
        os.close(root_fd)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv if argv is None else argv
    sanitize_environment()
    try:
        options = parse_args(argv)
        root, destinations = container_root(read_state(sys.stdin))
        apply(options, root, destinations)
    except (HookError, OSError, ValueError) as exc:
        message = str(exc)
    except Exception as exc:  # never a traceback in the engine's log: one line, the start fails
        message = f"internal error ({type(exc).__name__}: {exc})"
    else:
        return 0
    from ..base.oneline import error_line  # noqa: PLC0415  # failure path only

    sys.stderr.write(error_line(NAME, message))  # a name from the image may hold a newline: still one line
    return 1
