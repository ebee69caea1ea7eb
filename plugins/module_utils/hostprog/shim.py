# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""``gpufleet-container-runtime``: the OCI runtime shim, and the ``nvidia-container-runtime-hook`` entry point.

The engine calls the shim exactly as it calls runc (``runc [global flags] <command> [flags] <id>``).
Only ``create`` does work: when the bundle's ``config.json`` asks for GPUs (``NVIDIA_VISIBLE_DEVICES``,
CDI annotations, or docker's ``--gpus`` hook), the CDI edits from the index ``cdi_spec`` wrote are applied
to ``config.json`` (atomically), NVIDIA's legacy prestart hook is removed, and then the real runtime is
exec'd with the same arguments. Every other command is exec'd at once: this module imports only ``os``
and ``sys`` on that path, and nothing else is read but the small runtime configuration.

A request that cannot be satisfied fails the start: one line on stderr (and in runc's ``--log`` file,
where containerd looks for the reason), exit status 1. A GPU container never starts without its GPUs.

The installed launcher (``hostprog.install``) is a shell script that execs the runtime itself for every
command but ``create``/``run``, and passes the runtime it was installed with in ``GPUFLEET_RUNTIME``.

Configuration: ``/etc/gpufleet/runtime.json`` (``GPUFLEET_RUNTIME_CONFIG`` overrides the path; both
variables come from the engine's own environment, never from a container's), a JSON object with the
optional keys ``runtime`` (runc or crun, absolute; ``GPUFLEET_RUNTIME`` wins), ``index`` (the CDI index,
``/etc/gpufleet/cdi-nvidia.json``), ``accept_envvar_unprivileged`` (default true),
``accept_volume_mounts`` (default false) and ``accept_cdi_annotations_unprivileged`` (default true): see
``hostprog.oci.gpu_request``; ``debug_log`` (a file; absent or empty: off):
one JSON line per GPU container start, see ``debuglog``. The toolkit role writes it.

What it trusts (docs/security.md): the configuration, the index and the runtime decide what
runs as root, so each is used only when owned by root (or by the shim's own user, for a rootless engine)
and not writable by group or others, checked on the open file. Everything from the bundle and the image
is bounded (``hostprog.oci.MAX_*``, ``cdi.ldcache.MAX_CACHE_BYTES``), type-checked, and parsed in linear time; every
failure is one line and exit status 1, never a traceback.
"""

from __future__ import annotations

import os
import sys

CONFIG_PATH = "/etc/gpufleet/runtime.json"
DEFAULT_INDEX = "/etc/gpufleet/cdi-nvidia.json"
RUNTIME_CANDIDATES = ("/usr/bin/runc", "/usr/sbin/runc", "/usr/local/bin/runc", "/usr/local/sbin/runc", "/usr/bin/crun")
NAME = "gpufleet-container-runtime"
MAX_SMALL_FILE = 64 << 10  # runtime.json
MAX_INDEX_BYTES = 16 << 20  # the index of a node with 16 GPUs in MIG mode is well under 1 MiB
CONFIG_KEYS = {
    "runtime": str,
    "index": str,
    "accept_envvar_unprivileged": bool,
    "accept_volume_mounts": bool,
    "accept_cdi_annotations_unprivileged": bool,
    "debug_log": str,
}
# runc's global flags that take a value (``--flag value``); everything else starting with - is boolean.
_VALUE_FLAGS = frozenset(("--root", "--log", "--log-format", "--criu", "--rootless"))
# Cheap byte-level hints that a config.json may ask for GPUs; a match is then parsed properly.
_HINTS = (b"NVIDIA_VISIBLE_DEVICES", b"cdi.k8s.io/", b"nvidia-container-runtime-hook", b"nvidia-container-cli")


class ShimError(Exception):
    """The container start must fail; the message is the reason."""


def check_trusted(st: os.stat_result, path: str, what: str) -> None:
    """Refuse a file that decides what runs as root unless root (or this process's user) owns it and
    neither group nor others may write it."""
    if st.st_uid not in (0, os.geteuid()):
        raise ShimError(f"{what} {path} is owned by uid {st.st_uid}, not root: refusing it (chown root:root {path})")
    if st.st_mode & 0o022:
        raise ShimError(
            f"{what} {path} is writable by group or others (mode {st.st_mode & 0o7777:o}): "
            f"refusing it (chmod go-w {path})"
        )


def read_trusted(path: str, limit: int, what: str) -> bytes | None:
    """The bytes of a trusted file (``check_trusted``, on the open file) of at most ``limit`` bytes; None
    when it is missing."""
    from .oci_config import RequestError, read_limited  # noqa: PLC0415

    try:
        return read_limited(path, limit, f"{what} {path}", lambda st: check_trusted(st, path, what))
    except FileNotFoundError:
        return None
    except RequestError as exc:
        raise ShimError(str(exc)) from None


def _config() -> dict:
    path = os.environ.get("GPUFLEET_RUNTIME_CONFIG", CONFIG_PATH)
    data = read_trusted(path, MAX_SMALL_FILE, "the configuration")
    if data is None:
        return {}
    from ..base.jsonio import loads  # noqa: PLC0415  # only when a configuration exists

    try:
        value = loads(data, None, path)
    except ValueError as exc:
        raise ShimError(str(exc)) from None
    if not isinstance(value, dict):
        raise ShimError(f"{path}: not a JSON object")
    for key, item in value.items():
        kind = CONFIG_KEYS.get(key)
        if kind is None:
            raise ShimError("{}: unknown key {!r} (known: {})".format(path, key, ", ".join(sorted(CONFIG_KEYS))))
        if not isinstance(item, kind):
            raise ShimError("{}: {} must be a {}".format(path, key, "boolean" if kind is bool else "string"))
    return value


def _runtime(config: dict) -> str:
    runtime = os.environ.get("GPUFLEET_RUNTIME") or config.get("runtime")
    if runtime:
        if not os.path.isabs(runtime):
            raise ShimError(f"runtime {runtime!r} in the configuration is not an absolute path")
    else:
        runtime = next((c for c in RUNTIME_CANDIDATES if os.access(c, os.X_OK)), None)
        if runtime is None:
            raise ShimError(
                'no low-level runtime found (tried {}); set "runtime" in {}'.format(
                    ", ".join(RUNTIME_CANDIDATES), CONFIG_PATH
                )
            )
    try:
        check_trusted(os.stat(runtime), runtime, "the runtime")
    except OSError as exc:
        raise ShimError(f"the runtime {runtime} cannot be used: {exc.strerror or exc}") from None
    return runtime


def parse_args(args: list[str]) -> tuple[str | None, int, dict[str, str | bool]]:
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


def bundle_of(args: list[str]) -> str:
    """The ``--bundle``/``-b`` of a ``create``/``run`` command's own arguments, else the current directory."""
    for i, arg in enumerate(args):
        if arg in ("--bundle", "-b", "-bundle") and i + 1 < len(args):
            return args[i + 1]
        for prefix in ("--bundle=", "-b=", "-bundle="):
            if arg.startswith(prefix):
                return arg[len(prefix) :]
    return os.getcwd()


def _log_error(flags: dict[str, str | bool], message: str) -> None:
    """One line on stderr, and in runc's ``--log`` file in its ``--log-format`` (where containerd and
    CRI-O look for the reason a start failed). The message may carry a name from the image: ``one_line`` makes it
    one line (control characters escaped, bounded) for both, so it can never forge a second log entry."""
    from ..base.oneline import one_line  # noqa: PLC0415  # failure path only

    text = one_line(f"{NAME}: {message}")
    sys.stderr.write(text + "\n")
    sys.stderr.flush()
    log = flags.get("--log")
    if not isinstance(log, str) or not log:
        return
    import time  # noqa: PLC0415  # failure path only

    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    if flags.get("--log-format") == "json":
        from ..base.jsonio import dumps  # noqa: PLC0415

        line = dumps({"level": "error", "msg": text, "time": stamp})
    else:  # logrus's text format, as runc writes it
        line = 'time="{}" level=error msg="{}"'.format(stamp, text.replace("\\", "\\\\").replace('"', '\\"'))
    try:
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, (line + "\n").encode("utf-8", "backslashreplace"))
        finally:
            os.close(fd)
    except OSError:
        pass


def prepare(bundle: str, config: dict, record: dict | None = None) -> bool:
    """Apply the GPU request of ``<bundle>/config.json``; True when the file was rewritten. ``config``:
    the shim's configuration (``_config``); ``record`` (the debug log's, None when it is off) gets what a GPU
    start asked for and got."""
    from .oci_config import MAX_CONFIG_BYTES, RequestError, read_limited  # noqa: PLC0415

    config_file = os.path.join(bundle, "config.json")
    try:
        raw = read_limited(config_file, MAX_CONFIG_BYTES)
        if not any(hint in raw for hint in _HINTS):
            return False
        return _prepare(config_file, raw, config, record)
    except RequestError as exc:
        raise ShimError(str(exc)) from None


def _read_index(path: str, required: bool) -> dict:
    from ..base.jsonio import loads  # noqa: PLC0415

    data = read_trusted(path, MAX_INDEX_BYTES, "the CDI index")
    if data is None:
        if required:
            raise ShimError(f"GPUs requested but {path} is missing: run gpufleet.nvidia.cdi_spec on this host")
        return {}
    try:
        index = loads(data, None, path)
    except ValueError as exc:
        raise ShimError(f"{exc}; regenerate it with gpufleet.nvidia.cdi_spec") from None
    if not isinstance(index, dict) or not isinstance(index.get("devices", {}), dict):
        raise ShimError(f"{path} is not a gpufleet CDI index; regenerate it with gpufleet.nvidia.cdi_spec")
    return index


def _prepare(config_file: str, raw: bytes, shim_config: dict, record: dict | None = None) -> bool:
    from ..base.fileio import atomic_write  # noqa: PLC0415  # imports only ``os``
    from ..base.jsonio import dumps, loads  # noqa: PLC0415  # not ``json``: it imports ``re`` (~5 ms a start)
    from .oci import gpu_request  # noqa: PLC0415
    from .oci_config import check_config  # noqa: PLC0415
    from .oci_edits import has_legacy_hook, inject  # noqa: PLC0415

    try:
        config = check_config(loads(raw, None, config_file), config_file)
    except ValueError as exc:  # RequestError is one too
        raise ShimError(str(exc)) from None
    policy = {
        "accept_envvar_unprivileged": shim_config.get("accept_envvar_unprivileged", True),
        "accept_volume_mounts": shim_config.get("accept_volume_mounts", False),
        "accept_cdi_annotations_unprivileged": shim_config.get("accept_cdi_annotations_unprivileged", True),
    }
    if record is not None:
        record["request"] = "unreadable"  # what a failure below leaves in the line
    request = gpu_request(config, **policy)
    ctr = _ctr_request(config)
    if ctr is not None and (request is None or request.source != "CDI annotations"):
        request = ctr
    if record is not None:
        record.clear()
        if request is not None:
            record.update(request=request.source, devices=request.devices, capabilities=list(request.capabilities))
            record.update(mig=list(request.mig_caps), imex=list(request.imex_channels))
    if request is None and not has_legacy_hook(config):
        return False
    mounts_before = len(config.get("mounts") or ())
    index_path = shim_config.get("index") or DEFAULT_INDEX
    index = _read_index(index_path, request is not None)
    if ctr is not None:
        _drop_ctr_hook(config, ctr if request is ctr else None, index)
    try:
        if not inject(config, index, request=request, **policy):
            return False
        if record:
            record["mounts"] = len(config.get("mounts") or ()) - mounts_before
    except (TypeError, KeyError, AttributeError) as exc:  # config.json is checked: the index is malformed
        raise ShimError(
            f"{index_path} is malformed ({type(exc).__name__}: {exc}); regenerate it with gpufleet.nvidia.cdi_spec"
        ) from None
    inline_hook(config, os.path.dirname(config_file))
    # Atomic, with the file's mode; no fsync: the file lives as long as this container start.
    atomic_write(config_file, dumps(config), fsync=False)
    return True


def _ctr_request(config: dict) -> object:
    """The request of ctr's ``--gpus`` hook (``hostprog.ctr_hook``), or None; ``ShimError`` for a malformed one."""
    from .ctr_hook import ctr_hook_request  # noqa: PLC0415
    from .oci_config import RequestError  # noqa: PLC0415

    try:
        return ctr_hook_request(config)
    except RequestError as exc:
        raise ShimError(str(exc)) from None


def _drop_ctr_hook(config: dict, request: object, index: dict) -> None:
    """Remove ctr's hook (the GPUs are injected here instead); fit the capabilities of its ``request`` (None when
    CDI annotations won over it) to the spec. The hook goes either way: run, it would only fail the start."""
    from .ctr_hook import fit_ctr_capabilities, remove_ctr_hooks  # noqa: PLC0415

    remove_ctr_hooks(config)
    if request is not None:
        fit_ctr_capabilities(request, index)


HOOK_NAME = "gpufleet-cdi-hook"


def inline_hook(config: dict, bundle: str) -> bool:
    """Do ``gpufleet-cdi-hook``'s whole work here, before ``runc create``, and drop its hook entry: no
    process is started for it, and runc runs no hook at all for the GPU (a Python start and an
    ``ldconfig`` less per GPU container than the hook path).

    ``_cdi_hook.apply`` is the hook's own code on the same root (docker, containerd, podman and CRI-O
    mount the root before ``create``), with the libraries the container gets after capability filtering
    (the mounts ``inject`` applied). The work cannot depend on the bind mounts being in place: the soname
    links may dangle until runc mounts the files, and the cache only names paths. True when the hook
    entry was replaced; any failure fails the start (one line), as the hook would.

    Not in a user namespace (``linux.uidMappings``: docker's ``userns-remap``, a Kubernetes pod with
    ``hostUsers: false``, ``ctr run --uidmap``): there the hook entry stays, and runc runs it inside the
    container's user namespace (OCI: createContainer hooks run in the container's namespaces), so what it
    writes belongs to the container's root. Written from here, as the host's root, the cache, the soname
    links and any folder made for them would be owned by an id the container does not map (``nobody``), and
    a folder made here would be closed to the container's root (docs/security.md, "User namespaces").
    """
    if (config.get("linux") or {}).get("uidMappings"):
        return False
    hooks = (config.get("hooks") or {}).get("createContainer") or []
    ours = [h for h in hooks if os.path.basename(str(h.get("path", ""))) == HOOK_NAME]
    if len(ours) != 1:
        return False
    from . import cdi_hook as _cdi_hook  # noqa: PLC0415

    root = _cdi_hook.root_of(bundle, config)
    if root is None or not os.path.isdir(root):
        return False  # not prepared yet: the hook entry stays (runc reports a missing root itself)
    try:
        options = _cdi_hook.parse_args([HOOK_NAME, *[str(a) for a in (ours[0].get("args") or [])[1:]]])
        _cdi_hook.apply(options, root, _cdi_hook.mount_destinations(config))
    except (_cdi_hook.HookError, OSError) as exc:
        raise ShimError(f"cannot prepare the container's driver libraries: {exc}") from None
    hooks.remove(ours[0])
    if not hooks:
        config["hooks"].pop("createContainer", None)
        if not config["hooks"]:
            del config["hooks"]
    return True


def _clock() -> float:
    import time  # noqa: PLC0415  # the debug log only

    return time.monotonic()


def _debug(config: dict, record: dict | None, started: float, args: list[str], error: str | None) -> None:
    """The debug log's line of a GPU start (``record`` filled by ``prepare``); nothing for other starts."""
    if not record:
        return
    from .debuglog import append  # noqa: PLC0415

    fields = {"program": NAME, "container": args[-1] if args else "", **record}
    fields["ms"] = round((_clock() - started) * 1000, 2)
    if error is not None:
        fields["error"] = error
    append(config.get("debug_log"), fields)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv if argv is None else argv
    args = list(argv[1:])
    command, at, flags = parse_args(args)
    try:
        config = _config()
        runtime = _runtime(config)
        if command in ("create", "run"):
            record = {} if config.get("debug_log") else None  # off: no clock, no import, no line
            started = _clock() if record is not None else 0.0
            try:
                prepare(bundle_of(args[at + 1 :]), config, record)
            except (OSError, ValueError) as exc:
                error = ShimError(f"cannot prepare the bundle: {exc}")
                _debug(config, record, started, args, str(error))
                raise error from None
            except ShimError as exc:
                _debug(config, record, started, args, str(exc))
                raise
            _debug(config, record, started, args, None)
    except ShimError as exc:
        _log_error(flags, str(exc))
        return 1
    except Exception as exc:  # never a traceback instead of the reason: one line, no start
        _log_error(flags, f"internal error ({type(exc).__name__}: {exc})")
        return 1
    os.execv(runtime, [runtime, *args])  # noqa: S606  # the runtime the admin configured, by absolute path
    return 127  # not reached


# --------------------------------------------------------------------------------------------------
# nvidia-container-runtime-hook: what docker --gpus puts in config.json as a prestart hook.

LEGACY_MESSAGE = (
    "nvidia-container-runtime-hook (gpufleet): this container asks for GPUs (docker --gpus) but was not "
    "started through the gpufleet runtime, and nvidia is not docker's default runtime here; run it with "
    "--runtime=nvidia, or make nvidia the default runtime again (role gpufleet.nvidia.runtime: "
    "runtime_set_as_default: true, its default; or gpufleet.nvidia.container_runtime with set_as_default: true)"
)


def legacy_hook_main(argv: list[str] | None = None) -> int:
    """Succeed when the shim already injected this container (its annotation is in the OCI state);
    otherwise fail the start: a ``--gpus`` container must not run without its GPUs."""
    argv = sys.argv if argv is None else argv
    if len(argv) > 1 and argv[1] not in ("prestart", "createRuntime"):
        return 0  # poststart/poststop or an unknown phase: nothing to do
    from ..base.jsonio import loads  # noqa: PLC0415
    from .oci_edits import INJECTED_ANNOTATION  # noqa: PLC0415

    try:
        state = loads(sys.stdin.read(1 << 20) or "{}")
    except ValueError:
        state = {}
    annotations = state.get("annotations") if isinstance(state, dict) else None
    if isinstance(annotations, dict) and INJECTED_ANNOTATION in annotations:
        return 0
    from ..base.oneline import one_line  # noqa: PLC0415  # failure path only

    sys.stderr.write(one_line(LEGACY_MESSAGE) + "\n")
    return 1
