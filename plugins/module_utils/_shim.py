# Copyright (c) gpufleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""``gpufleet-container-runtime``: the OCI runtime shim, and the ``nvidia-container-runtime-hook`` entry point.

The engine calls the shim exactly as it calls runc (``runc [global flags] <command> [flags] <id>``).
Only ``create`` does work: when the bundle's ``config.json`` asks for GPUs (``NVIDIA_VISIBLE_DEVICES``,
CDI annotations, or docker's ``--gpus`` hook), the CDI edits from the index ``cdi_spec`` wrote are applied
to ``config.json`` (atomically), NVIDIA's legacy prestart hook is removed, and then the real runtime is
exec'd with the same arguments. Every other command is exec'd at once: this module imports only ``os``
and ``sys`` on that path, and nothing else is read but the small runtime configuration.

A request that cannot be satisfied fails the start: one line on stderr (and in runc's ``--log`` file,
where containerd looks for the reason), exit status 1. A GPU container never starts without its GPUs.

The installed launcher (``_host_programs``) is a shell script that execs the runtime itself for every
command but ``create``/``run``, and passes the runtime it was installed with in ``GPUFLEET_RUNTIME``.

Configuration: ``/etc/gpufleet/runtime.json`` (``GPUFLEET_RUNTIME_CONFIG`` overrides the path; both
variables come from the engine's own environment, never from a container's):
``{"runtime": "/usr/sbin/runc", "index": "/etc/gpufleet/cdi-nvidia.json"}``; both optional,
``GPUFLEET_RUNTIME`` wins over ``runtime``.
"""

import os
import sys

CONFIG_PATH = "/etc/gpufleet/runtime.json"
DEFAULT_INDEX = "/etc/gpufleet/cdi-nvidia.json"
RUNTIME_CANDIDATES = ("/usr/bin/runc", "/usr/sbin/runc", "/usr/local/bin/runc", "/usr/local/sbin/runc", "/usr/bin/crun")
NAME = "gpufleet-container-runtime"
# runc's global flags that take a value (``--flag value``); everything else starting with - is boolean.
_VALUE_FLAGS = frozenset(("--root", "--log", "--log-format", "--criu", "--rootless"))
# Cheap byte-level hints that a config.json may ask for GPUs; a match is then parsed properly.
_HINTS = (b"NVIDIA_VISIBLE_DEVICES", b"cdi.k8s.io/", b"nvidia-container-runtime-hook")


class ShimError(Exception):
    """The container start must fail; the message is the reason."""


def _config():
    path = os.environ.get("GPUFLEET_RUNTIME_CONFIG", CONFIG_PATH)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return {}
    from ._jsonio import loads  # noqa: PLC0415  # only when a configuration exists

    value = loads(data)
    if not isinstance(value, dict):
        raise ShimError("%s: not a JSON object" % path)
    return value


def _runtime(config):
    runtime = os.environ.get("GPUFLEET_RUNTIME") or config.get("runtime")
    if runtime:
        if not os.path.isabs(runtime):
            raise ShimError("runtime %r in the configuration is not an absolute path" % runtime)
        return runtime
    for candidate in RUNTIME_CANDIDATES:
        if os.access(candidate, os.X_OK):
            return candidate
    raise ShimError(
        'no low-level runtime found (tried %s); set "runtime" in %s' % (", ".join(RUNTIME_CANDIDATES), CONFIG_PATH)
    )


def parse_args(args):
    """``(command, index of the command, global flags dict)`` of a runc command line (``args`` without argv[0])."""
    flags = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("-") or arg == "-":
            return arg, i, flags
        name, sep, value = arg.partition("=")
        name = "--" + name.lstrip("-")
        if sep:
            flags[name] = value
        elif name in _VALUE_FLAGS and i + 1 < len(args):
            flags[name] = args[i + 1]
            i += 1
        else:
            flags[name] = True
        i += 1
    return None, len(args), flags


def bundle_of(args):
    """The ``--bundle``/``-b`` of a ``create``/``run`` command's own arguments, else the current directory."""
    for i, arg in enumerate(args):
        if arg in ("--bundle", "-b", "-bundle") and i + 1 < len(args):
            return args[i + 1]
        for prefix in ("--bundle=", "-b=", "-bundle="):
            if arg.startswith(prefix):
                return arg[len(prefix) :]
    return os.getcwd()


def _log_error(flags, message):
    sys.stderr.write("%s: %s\n" % (NAME, message))
    sys.stderr.flush()
    log = flags.get("--log")
    if isinstance(log, str) and log:
        import json  # noqa: PLC0415
        import time  # noqa: PLC0415

        line = {
            "level": "error",
            "msg": "%s: %s" % (NAME, message),
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        if flags.get("--log-format") != "json":
            line = None
        try:
            with open(log, "a", encoding="utf-8") as f:
                f.write((json.dumps(line) if line else "%s: %s" % (NAME, message)) + "\n")
        except OSError:
            pass


def prepare(bundle, index_path):
    """Apply the GPU request of ``<bundle>/config.json``; True when the file was rewritten."""
    config_file = os.path.join(bundle, "config.json")
    with open(config_file, "rb") as f:
        raw = f.read()
    if not any(hint in raw for hint in _HINTS):
        return False
    from ._jsonio import loads  # noqa: PLC0415
    from ._oci import RequestError  # noqa: PLC0415

    try:
        return _prepare(config_file, loads(raw), index_path)
    except RequestError as exc:
        raise ShimError(str(exc)) from None


def _prepare(config_file, config, index_path):
    from ._jsonio import dumps, loads  # noqa: PLC0415  # not ``json``: it imports ``re`` (~5 ms a start)
    from ._oci import gpu_request, has_legacy_hook, inject  # noqa: PLC0415

    if gpu_request(config) is None and not has_legacy_hook(config):
        return False
    try:
        with open(index_path, "rb") as f:
            index = loads(f.read())
    except FileNotFoundError:
        if gpu_request(config) is None:
            index = {}
        else:
            raise ShimError(
                "GPUs requested but %s is missing: run gpufleet.nvidia.cdi_spec on this host" % index_path
            ) from None
    if not inject(config, index):
        return False
    inline_hook(config, os.path.dirname(config_file))
    st = os.stat(config_file)
    tmp = "%s.gpufleet-%d" % (config_file, os.getpid())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, st.st_mode & 0o7777)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(dumps(config))
        os.replace(tmp, config_file)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return True


HOOK_NAME = "gpufleet-cdi-hook"


def _predicted(target, directory, mounts):
    """True when ``ldconfig`` will make ``target`` (a soname like ``libcuda.so.1``) in ``directory``: a
    library mounted there carries that stem (``libcuda.so.<version>``)."""
    stem = target.rsplit(".so.", 1)[0] + ".so."
    if ".so." not in target:
        return False
    return any(
        m.get("destination", "").startswith(directory + "/" + stem)
        and "/" not in m["destination"][len(directory) + 1 :]
        for m in mounts
    )


def inline_hook(config, bundle):
    """Do ``gpufleet-cdi-hook``'s file work here and let runc run only the host's ldconfig (one Python
    start less per GPU container, about 20 ms of a ~60 ms overhead on the 2-core bench machine).

    The createContainer hook ``gpufleet-cdi-hook apply --ldconfig L --folder F... --link T::P...`` becomes
    ``L -r <root> F...`` (glibc's ldconfig ``chroot``s into ``-r`` itself: what the hook did, with the same
    host binary and the spec's fixed environment), after this process wrote the ``ld.so.conf.d`` file and
    the ``--link`` names with the hook's own confined code (``_cdi_hook.open_dir``: resolved inside the
    root, walked with ``O_NOFOLLOW``). Only when everything is predictable: the root is already mounted
    (docker/containerd, podman, CRI-O mount it before ``create``), ``L`` is a static ELF (no loader from
    anywhere), and each link's target is a soname that ldconfig will create from a library mounted into
    that folder. Otherwise the hook entry stays as it was. True when the hook was replaced.
    """
    hooks = (config.get("hooks") or {}).get("createContainer") or []
    ours = [h for h in hooks if os.path.basename(str(h.get("path", ""))) == HOOK_NAME]
    if len(ours) != 1:
        return False
    from . import _cdi_hook  # noqa: PLC0415

    hook = ours[0]
    try:
        options = _cdi_hook.parse_args(list(hook.get("args") or [HOOK_NAME]))
    except _cdi_hook.HookError:
        return False
    root_path = (config.get("root") or {}).get("path")
    if not root_path:
        return False
    root = os.path.normpath(os.path.join(bundle, root_path))
    mounts = config.get("mounts") or []
    links = options["links"]
    if not all(_predicted(t, os.path.dirname(link), mounts) for t, link in links):
        return False
    try:
        with open(options["ldconfig"], "rb") as f:
            if not _cdi_hook.is_static_elf(f.fileno()):
                return False
        root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        if options["folders"]:
            conf_fd = _cdi_hook.open_dir(root_fd, root, "/etc/ld.so.conf.d", create=True)
            try:
                text = "# gpufleet-cdi-hook: NVIDIA driver libraries\n" + "".join(f + "\n" for f in options["folders"])
                _cdi_hook.write_file(conf_fd, _cdi_hook.CONF_NAME, text.encode())
            finally:
                os.close(conf_fd)
        for target, link in links:
            directory, name = os.path.split(link)
            dir_fd = _cdi_hook.open_dir(root_fd, root, directory)
            if dir_fd is None:
                continue
            try:
                os.symlink(target, name, dir_fd=dir_fd)
            except FileExistsError:
                pass  # the image's own file (or an earlier link) wins, as in the hook
            finally:
                os.close(dir_fd)
    except _cdi_hook.HookError as exc:
        raise ShimError(str(exc)) from None
    finally:
        os.close(root_fd)
    env = ["%s=%s" % kv for kv in sorted(_cdi_hook.SAFE_ENV.items())]
    hooks[hooks.index(hook)] = {
        "path": options["ldconfig"],
        "args": ["ldconfig", "-r", root, *options["folders"]],
        "env": env,
    }
    return True


def main(argv=None):
    argv = sys.argv if argv is None else argv
    args = list(argv[1:])
    command, at, flags = parse_args(args)
    try:
        config = _config()
        runtime = _runtime(config)
        if command in ("create", "run"):
            try:
                prepare(bundle_of(args[at + 1 :]), config.get("index") or DEFAULT_INDEX)
            except (OSError, ValueError) as exc:
                raise ShimError("cannot prepare the bundle: %s" % exc) from None
    except ShimError as exc:
        _log_error(flags, str(exc))
        return 1
    os.execv(runtime, [runtime, *args])  # noqa: S606  # the runtime the admin configured, by absolute path
    return 127  # not reached


# --------------------------------------------------------------------------------------------------
# nvidia-container-runtime-hook: what docker --gpus puts in config.json as a prestart hook.

LEGACY_MESSAGE = (
    "nvidia-container-runtime-hook (gpufleet): this container asks for GPUs (docker --gpus) but was not "
    "started through the gpufleet runtime; register gpufleet-container-runtime as the 'nvidia' runtime "
    "(gpufleet.nvidia.container_runtime with path /usr/local/bin/gpufleet-container-runtime) and run with "
    "--runtime=nvidia, or make it the default runtime"
)


def legacy_hook_main(argv=None):
    """Succeed when the shim already injected this container (its annotation is in the OCI state);
    otherwise fail the start: a ``--gpus`` container must not run without its GPUs."""
    argv = sys.argv if argv is None else argv
    if len(argv) > 1 and argv[1] not in ("prestart", "createRuntime"):
        return 0  # poststart/poststop or an unknown phase: nothing to do
    from ._jsonio import loads  # noqa: PLC0415
    from ._oci import INJECTED_ANNOTATION  # noqa: PLC0415

    try:
        state = loads(sys.stdin.read(1 << 20) or "{}")
    except ValueError:
        state = {}
    if INJECTED_ANNOTATION in (state.get("annotations") or {}):
        return 0
    sys.stderr.write(LEGACY_MESSAGE + "\n")
    return 1
