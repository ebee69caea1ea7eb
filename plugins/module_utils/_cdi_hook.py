# Copyright (c) gpufleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""``gpufleet-cdi-hook``: the createContainer hook the CDI spec calls.

``gpufleet-cdi-hook apply --ldconfig /sbin/ldconfig --folder /usr/lib/x86_64-linux-gnu
--link libcuda.so.1::/usr/lib/x86_64-linux-gnu/libcuda.so ...`` with the OCI state on stdin:

1. writes ``/etc/ld.so.conf.d/00-gpufleet-nvidia.conf`` (the folders) in the container root;
2. rebuilds the container's ld cache (which also creates the soname links, ``libcuda.so.1``...);
3. creates each ``--link`` (``libcuda.so -> libcuda.so.1``) when its target exists and the name is free.

It runs as root on the host, in the container's mount namespace before ``pivot_root``, on a root file
system the image's author controls. So (CVE-2024-0132, CVE-2025-23266, CVE-2025-23267):

* It decides nothing from the container: the container root comes from the bundle's ``config.json``
  (``root.path``), named by the runtime's state on stdin; ``process.env`` is never read. Its own
  environment is replaced by a fixed minimal one before anything runs (the launcher also starts
  Python with ``-I -S``, so ``PYTHON*`` variables are ignored).
* Every container path is resolved inside the root (``_pathsafe.resolve_in_root``: absolute link
  targets restart at the root, ``..`` stops there), then opened one component at a time with
  ``O_NOFOLLOW`` from a descriptor of the root; meeting a link on that walk means the tree changed under
  us, and the hook refuses. Files are created with ``O_EXCL | O_NOFOLLOW`` under a temporary name and
  renamed within the same directory descriptor; links are created with ``symlinkat``. Nothing is ever
  written through a path string that crosses the container root.
* No code from the image runs: ``ldconfig`` is the host's. A static ldconfig (Debian's, Fedora's) is
  opened *before* we ``chroot`` into the container root in a child, then executed through its descriptor
  (``fexecve``), so every path it touches is confined by the kernel and no loader from the image is
  involved. A dynamically linked ldconfig is instead run as ``ldconfig -r <root>``: its loader and
  libraries come from the host before glibc's ldconfig ``chroot``s itself. Either way, only ELF headers
  from the image are read, never executed or loaded.
"""

import errno
import os
import struct
import sys

from ._jsonio import loads
from ._pathsafe import resolve_in_root

NAME = "gpufleet-cdi-hook"
CONF_NAME = "00-gpufleet-nvidia.conf"
SAFE_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class HookError(Exception):
    """The container must not start; the message says why."""


def sanitize_environment():
    """Replace this process's environment by ``SAFE_ENV`` (no ``LD_*``, no ``PYTHON*``, nothing else)."""
    os.environ.clear()
    os.environ.update(SAFE_ENV)


def parse_args(argv):
    args = list(argv[1:])
    if args and args[0] == "apply":
        args = args[1:]
    options = {"ldconfig": "/sbin/ldconfig", "folders": [], "links": []}
    i = 0
    while i < len(args):
        flag = args[i]
        if i + 1 >= len(args):
            raise HookError("%s needs a value" % flag)
        value = args[i + 1]
        if flag == "--ldconfig":
            options["ldconfig"] = value
        elif flag == "--folder":
            options["folders"].append(value)
        elif flag == "--link":
            target, sep, link = value.partition("::")
            if not sep or "/" in target or not link.startswith("/"):
                raise HookError("--link %r: expected <target name>::<absolute link path>" % value)
            options["links"].append((target, link))
        else:
            raise HookError("unknown option %r" % flag)
        i += 2
    for folder in options["folders"]:
        if not folder.startswith("/") or "\n" in folder:
            raise HookError("--folder %r: not an absolute path" % folder)
    if not os.path.isabs(options["ldconfig"]):
        raise HookError("--ldconfig %r: not an absolute path" % options["ldconfig"])
    return options


def container_root(state):
    """The container's root file system on this machine, from the bundle's config.json."""
    bundle = state.get("bundle")
    if not bundle or not os.path.isabs(bundle):
        raise HookError("the OCI state names no absolute bundle")
    with open(os.path.join(bundle, "config.json"), "rb") as f:
        config = loads(f.read())
    root = (config.get("root") or {}).get("path")
    if not root:
        raise HookError("config.json has no root.path")
    return os.path.normpath(os.path.join(bundle, root))


def open_dir(root_fd, root, path, create=False):
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
                    raise HookError("%s changed while the hook ran (a link appeared at %s)" % (path, part)) from None
                raise
            os.close(fd)
            fd = next_fd
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_file(dir_fd, name, data):
    """Replace ``name`` in ``dir_fd`` by ``data`` (bytes): O_EXCL|O_NOFOLLOW temp file, then renameat."""
    tmp = ".%s.%d" % (name, os.getpid())
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


def create_link(root_fd, root, target, link):
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


def is_static_elf(fd):
    """True when the ELF file open at ``fd`` has no program interpreter (PT_INTERP), i.e. needs no loader."""
    header = os.pread(fd, 64, 0)
    if header[:4] != b"\x7fELF" or header[4] != 2 or header[5] != 1:  # 64-bit little-endian only
        return False
    (phoff,) = struct.unpack_from("<Q", header, 32)
    phentsize, phnum = struct.unpack_from("<HH", header, 54)
    table = os.pread(fd, phentsize * phnum, phoff)
    return all(struct.unpack_from("<I", table, i * phentsize)[0] != 3 for i in range(phnum))  # 3 = PT_INTERP


def run_ldconfig(ldconfig, root, folders):
    """Rebuild the container's ld cache with the host's ``ldconfig``, confined to ``root``."""
    fd = os.open(ldconfig, os.O_RDONLY | os.O_CLOEXEC)
    try:
        static = is_static_elf(fd)
        if not static:
            argv = [ldconfig, "-r", root, *folders]
            pid = os.fork()
            if pid == 0:  # pragma: no cover - child
                try:
                    os.execve(fd, argv, SAFE_ENV)  # noqa: S606  # the host's ldconfig, by descriptor
                finally:
                    os._exit(127)
        else:
            argv = ["ldconfig", *folders]
            pid = os.fork()
            if pid == 0:  # pragma: no cover - child
                try:
                    os.chroot(root)
                    os.chdir("/")
                    os.execve(fd, argv, SAFE_ENV)  # noqa: S606  # fexecve: the host's binary, opened before chroot
                finally:
                    os._exit(127)
        status = os.waitpid(pid, 0)[1]
    finally:
        os.close(fd)
    code = os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") else status >> 8
    if code != 0:
        raise HookError("%s exited with %d updating the ld cache in %s" % (ldconfig, code, root))


def apply(options, root):
    root_fd = os.open(root, _DIR_FLAGS & ~os.O_NOFOLLOW)
    try:
        if options["folders"]:
            conf_fd = open_dir(root_fd, root, "/etc/ld.so.conf.d", create=True)
            try:
                text = "# gpufleet-cdi-hook: NVIDIA driver libraries\n" + "".join(f + "\n" for f in options["folders"])
                write_file(conf_fd, CONF_NAME, text.encode())
            finally:
                os.close(conf_fd)
        run_ldconfig(options["ldconfig"], root, options["folders"])
        for target, link in options["links"]:
            create_link(root_fd, root, target, link)
    finally:
        os.close(root_fd)


def main(argv=None):
    argv = sys.argv if argv is None else argv
    sanitize_environment()
    try:
        options = parse_args(argv)
        state = loads(sys.stdin.read(1 << 20) or "{}")
        apply(options, container_root(state))
    except (HookError, OSError, ValueError) as exc:
        sys.stderr.write("%s: %s\n" % (NAME, exc))
        return 1
    return 0
