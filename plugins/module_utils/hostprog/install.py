# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Install the native toolkit's host programs: the one place that knows their launchers.

The programs' code is the collection's own ``module_utils``: the programs' modules (``hostprog/``) and what they
import (``payload``, computed from the sources), copied with their subpackages into ``<libdir>/gpufleet_nvidia/``
(the relative imports between them work the same there); each program
is a three-line launcher in ``<bindir>`` that starts the system Python isolated (``-I``: no
``PYTHON*`` variables, no user site; ``-S``: no site module, which is also faster) and calls ``main``.
Used by the ``toolkit`` role and by the tests, so the installed programs are the tested ones.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import json
import os
import pkgutil
import shutil
from dataclasses import dataclass, field
from dataclasses import fields as dataclass_fields
from typing import Any, Callable

from ..base.fileio import atomic_write
from ..base.names import SHIM
from ..base.runner import Failure, Host, Result

PACKAGE = "gpufleet_nvidia"
PYTHON = "/usr/bin/python3"
DEFAULT_RUNTIME = "/usr/sbin/runc"
# program name -> (module, function)
PROGRAMS = {
    SHIM: ("hostprog.shim", "main"),
    "gpufleet-cdi-hook": ("hostprog.cdi_hook", "main"),
    "nvidia-container-runtime-hook": ("hostprog.shim", "legacy_hook_main"),
    "gpufleet-cdi-refresh": ("hostprog.cdi_refresh", "main"),
    "gpufleet-dev-char-links": ("hostprog.dev_char", "main"),
    "nvidia-container-cli": ("hostprog.container_cli", "main"),
    "nvidia-docker": ("hostprog.nvidia_docker", "main"),
    "gpufleet-nvidia-devices": ("hostprog.dev_nodes", "main"),
    "gpufleet-mig-boot": ("mig.boot", "main"),
    "gpufleet-gpu-watch": ("hostprog.gpu_watch", "main"),
}
# Programs a role installs where it needs them (the mig role's boot unit runs gpufleet-mig-boot, the gpu_watch role's
# timer gpufleet-gpu-watch), not part of the default installation; removing with no programs named still removes them.
ROLE_PROGRAMS = ("gpufleet-mig-boot", "gpufleet-gpu-watch")
DEFAULT_PROGRAMS = tuple(name for name in PROGRAMS if name not in ROLE_PROGRAMS)
# The runtime shim's configuration (``hostprog.shim.CONFIG_PATH``): written when the shim is installed. The shim
# trusts it only when it is owned by root (or the shim's euid) and not writable by group or others, in a directory
# alike.
RUNTIME_CONFIG = "/etc/gpufleet/runtime.json"
RUNTIME_CONFIG_MODE = 0o644
# What the shim does with a container's own device request. ``accept_envvar_unprivileged``: honour
# NVIDIA_VISIBLE_DEVICES from a container without CAP_SYS_ADMIN in its bounding set (NVIDIA's
# ``accept-nvidia-visible-devices-envvar-when-unprivileged``); ``accept_volume_mounts``: read ``/dev/null`` mounts
# on ``/var/run/nvidia-container-devices/<device>`` as the request (NVIDIA's
# ``accept-nvidia-visible-devices-as-volume-mounts``, what the device plugin's ``volume-mounts`` strategy passes);
# ``accept_cdi_annotations_unprivileged``: honour ``cdi.k8s.io/*`` / ``nvidia.cdi.k8s.io/*`` annotations of a container
# without CAP_SYS_ADMIN (NVIDIA has no such setting: its runtime honours them in its cdi mode; CRI-O copies every pod
# annotation into the container's spec, so on a Kubernetes node a pod could name any GPU; docs/security.md).
# The defaults are NVIDIA's (and the shim's when the file is missing); Kubernetes nodes get the opposite.
RUNTIME_CONFIG_DEFAULTS = {
    "accept_cdi_annotations_unprivileged": True,
    "accept_envvar_unprivileged": True,
    "accept_volume_mounts": False,
}
# The programs the toolkit's ``nvidia`` provider still needs from this collection (NVIDIA's packages bring
# their own runtime and legacy hook; the CDI spec's hook, its boot refresh, the /dev/char links and the boot-time
# device nodes are ours).
HELPER_PROGRAMS = ("gpufleet-cdi-hook", "gpufleet-cdi-refresh", "gpufleet-dev-char-links", "gpufleet-nvidia-devices")


def _imports(module: str, source: str) -> set[str]:
    """The collection modules ``module`` (dotted, relative to ``module_utils``) imports, anywhere in its source.

    Only relative imports count: everything the host programs share lives under ``module_utils``. A name that is
    itself a module (``from . import cdi_hook``) counts as that module.
    """
    package = module.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package[: len(package) - (node.level - 1)] + (node.module.split(".") if node.module else [])
            if node.module:
                found.add(".".join(base))
            else:
                found.update(".".join([*base, alias.name]) for alias in node.names)
    return found


def payload(read: Callable[[str], str]) -> list[str]:
    """Every module the programs need: their own modules and, recursively, what those import (sorted).

    ``read(module)`` gives a module's source text. Computed, not listed: a new import reaches the targets.
    """
    todo = sorted({module for module, _function in PROGRAMS.values()})
    seen = set()
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        todo.extend(sorted(_imports(module, read(module)) - seen))
    return sorted(seen)


def packages(modules: list[str]) -> list[str]:
    """The packages (dotted; ``""`` is the top) that hold ``modules``, each needing its ``__init__.py``."""
    found = {""}
    for module in modules:
        parts = module.split(".")[:-1]
        found.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return sorted(found)


_PYTHON_LAUNCHER = """#!{python} -IS
# {name}: installed by gpufleet.nvidia; the code is in {libdir}/{package}/{path}
import sys
sys.path.insert(0, {libdir!r})
from {package}.{module} import {function}
sys.exit({function}(sys.argv))
"""

# The runtime shim is called for every command of every container (create, start, state, kill, delete...),
# so its launcher is a POSIX shell script that starts Python (hostprog.shim.main) only for a ``create``/``run``
# whose config.json contains one of hostprog.shim._HINTS (one grep, ~1 ms); every other call is exec'd straight
# to the real runtime, the ~10 ms of a Python start saved each time. The flag names with a value must
# match hostprog.shim._VALUE_FLAGS (a unit test checks it).
_SHIM_LAUNCHER = """#!/bin/sh
# {name}: installed by gpufleet.nvidia; the code is in {libdir}/{package}/hostprog/shim.py
GPUFLEET_RUNTIME="${{GPUFLEET_RUNTIME:-{runtime}}}"
code='import sys; sys.path.insert(0, "{libdir}"); from {package}.hostprog.shim import main; sys.exit(main(sys.argv))'
cmd=
bundle=
skip=
for arg in "$@"; do
  if [ -n "$skip" ]; then
    if [ "$skip" = bundle ]; then bundle="$arg"; fi
    skip=
    continue
  fi
  if [ -z "$cmd" ]; then
    case "$arg" in
      --root|--log|--log-format|--criu|--rootless) skip=1 ;;
      -*) ;;
      create|run) cmd="$arg" ;;
      *) exec "$GPUFLEET_RUNTIME" "$@" ;;
    esac
  else
    case "$arg" in
      --bundle|-b|-bundle) skip=bundle ;;
      --bundle=*|-bundle=*|-b=*) bundle="${{arg#*=}}" ;;
    esac
  fi
done
if [ -n "$cmd" ] && {grep} -qsE '{hints}' "${{bundle:-.}}/config.json"; then
  export GPUFLEET_RUNTIME
  exec {python} -IS -c "$code" "$@"
fi
exec "$GPUFLEET_RUNTIME" "$@"
"""


def _grep() -> str:
    return "/bin/grep" if os.path.exists("/bin/grep") else "/usr/bin/grep"


def launcher(name: str, libdir: str, python: str = PYTHON, runtime: str = DEFAULT_RUNTIME) -> str:
    """The text of program ``name``'s launcher; ``runtime`` is the real OCI runtime the shim execs."""
    module, function = PROGRAMS[name]
    if name == SHIM:
        for what, path in (("runtime", runtime), ("libdir", libdir), ("python", python)):
            if not os.path.isabs(path) or any(c in path for c in "\"'$`\\\n "):
                raise ValueError(f"{what} {path!r}: expected a plain absolute path")
        from .shim import _HINTS  # noqa: PLC0415  # one list of hints for the shell and for Python

        hints = "|".join(h.decode().replace(".", "\\.") for h in _HINTS)
        return _SHIM_LAUNCHER.format(
            name=name, libdir=libdir, package=PACKAGE, python=python, runtime=runtime, grep=_grep(), hints=hints
        )
    return _PYTHON_LAUNCHER.format(
        name=name,
        libdir=libdir,
        package=PACKAGE,
        module=module,
        function=function,
        python=python,
        path=module.replace(".", "/") + ".py",
    )


def render_runtime_config(
    accept_envvar_unprivileged: bool = True,
    accept_volume_mounts: bool = False,
    debug_log: str = "",
    *,
    accept_cdi_annotations_unprivileged: bool = True,
) -> str:
    """The text of the shim's ``runtime.json``: the three ``accept_*`` keys always, ``debug_log`` only when set (an
    absolute path: the shim's debug log is on), sorted, indented, a newline at the end.

    The same settings give the same bytes, so the file is rewritten only when a setting changes.
    """
    values: dict[str, object] = {
        "accept_cdi_annotations_unprivileged": accept_cdi_annotations_unprivileged,
        "accept_envvar_unprivileged": accept_envvar_unprivileged,
        "accept_volume_mounts": accept_volume_mounts,
    }
    for key, value in values.items():
        if not isinstance(value, bool):
            raise ValueError(f"{key} must be true or false, got {value!r}")
    if debug_log:
        if not isinstance(debug_log, str) or not os.path.isabs(debug_log) or debug_log.endswith("/"):
            raise ValueError(f"debug_log must be the absolute path of a file, got {debug_log!r}")
        values["debug_log"] = debug_log
    return json.dumps(values, indent=2, sort_keys=True) + "\n"


def _read_source(source: str) -> Callable[[str], str]:
    def read(module: str) -> str:
        with open(os.path.join(source, *module.split(".")) + ".py", encoding="utf-8") as f:
            return f.read()

    return read


def render_files(
    bindir: str,
    libdir: str,
    read: Callable[[str], str],
    python: str = PYTHON,
    *,
    programs: list[str] | tuple[str, ...] | None = None,
    runtime: str = DEFAULT_RUNTIME,
) -> list[tuple[str, str, int]]:
    """``[(path, text, mode)]`` of everything an installation holds: the package, then the launchers.

    ``read(module)`` gives a module's source text (from a checkout, or from inside an AnsiballZ payload).
    """
    package = os.path.join(libdir, PACKAGE)
    modules = payload(read)
    files = [(os.path.join(package, *name.split("."), "__init__.py"), "", 0o644) for name in packages(modules)]
    files += [(os.path.join(package, *module.split(".")) + ".py", read(module), 0o644) for module in modules]
    files += [
        (os.path.join(bindir, name), launcher(name, libdir, python, runtime), 0o755) for name in programs or PROGRAMS
    ]
    return files


def install(
    bindir: str,
    libdir: str,
    python: str = PYTHON,
    *,
    source: str | None = None,
    programs: list[str] | tuple[str, ...] | None = None,
    runtime: str = DEFAULT_RUNTIME,
) -> list[str]:
    """Copy the modules into ``<libdir>/gpufleet_nvidia`` and write the launchers into ``bindir``.

    Returns the paths written (the package's ``__init__.py`` aside). ``source`` is the folder holding the
    ``module_utils`` folder (the parent of this one).
    """
    source = source or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    files = render_files(bindir, libdir, _read_source(source), python, programs=programs, runtime=runtime)
    written = []
    for path, text, mode in files:
        os.makedirs(os.path.dirname(path), 0o755, exist_ok=True)
        atomic_write(path, text, mode)
        if not path.endswith("__init__.py"):
            written.append(path)
    return written


# The host_programs module's work: install or remove the programs from the module's own payload.

# The package whose modules the payload holds, as the module imports them.
MODULE_UTILS = "ansible_collections.gpufleet.nvidia.plugins.module_utils"
# The second line of every launcher this module writes (_PYTHON_LAUNCHER, _SHIM_LAUNCHER).
_MARKER = b": installed by gpufleet.nvidia;"


def read_payload_source(module: str) -> str:
    """A module's source text, from wherever this code was loaded (an AnsiballZ payload or a checkout)."""
    data = pkgutil.get_data(MODULE_UTILS, module.replace(".", "/") + ".py")  # a regular package (the payload's)
    if data is not None:
        return data.decode("utf-8")
    loaded = importlib.import_module(MODULE_UTILS + "." + module)  # a namespace package (a collection checkout)
    source = loaded.__loader__.get_source(loaded.__name__) if hasattr(loaded.__loader__, "get_source") else None
    if source is None:
        raise OSError(f"cannot read {module}.py from the module's payload")
    return source


def default_runtime() -> str:
    from .shim import RUNTIME_CANDIDATES  # noqa: PLC0415  # the shim's own list

    for candidate in RUNTIME_CANDIDATES:
        if os.access(candidate, os.X_OK):
            return candidate
    return DEFAULT_RUNTIME


@dataclass(frozen=True)
class ProgramsRequest:
    """What ``host_programs`` is asked to do (``programs`` and ``runtime`` resolved to their defaults)."""

    state: str
    programs: list[str]
    bindir: str
    libdir: str
    python: str
    runtime: str
    accept_envvar_unprivileged: bool
    accept_volume_mounts: bool
    accept_cdi_annotations_unprivileged: bool
    debug_log: str
    config_path: str

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> ProgramsRequest:
        names = [f.name for f in dataclass_fields(cls)]
        values = {name: params[name] for name in names}
        values["programs"] = params["programs"] or list(
            PROGRAMS if params.get("state") == "absent" else DEFAULT_PROGRAMS
        )
        values["runtime"] = params["runtime"] or default_runtime()
        values["debug_log"] = params["debug_log"] or ""
        return cls(**values)

    @property
    def with_config(self) -> bool:
        """Whether the shim's configuration is part of the installation (the shim is among the programs)."""
        return SHIM in self.programs


@dataclass
class ProgramsResult(Result):
    """``host_programs``' return values (RETURN); ``None``: not returned."""

    programs: dict[str, str]
    changed: bool = False
    changed_files: list[str] = field(default_factory=list)
    files: list[str] | None = None
    runtime: str | None = None
    digest: str | None = None
    runtime_config: dict[str, Any] | None = None
    diff: list[dict[str, str]] | None = None


def _current(path: str) -> tuple[str | None, int | None, int | None]:
    """``(text or None, mode or None, owner uid or None)`` of a file; a non-regular file counts as absent."""
    try:
        with open(path, "rb") as f:
            data = f.read()
            info = os.fstat(f.fileno())
        return data.decode("utf-8", "replace"), info.st_mode & 0o7777, info.st_uid
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None, None, None


def _ours(path: str) -> bool:
    """Whether the launcher at ``path`` is one this module wrote (a link or another program's file is not)."""
    if os.path.islink(path) or not os.path.isfile(path):
        return False
    try:
        with open(path, "rb") as f:
            return _MARKER in f.read(512)
    except OSError:
        return False


def _empty_after(folder: str, gone: list[str]) -> bool:
    """Whether ``folder`` is a real folder that holds nothing but what ``gone`` removes."""
    if os.path.islink(folder) or not os.path.isdir(folder):
        return False
    try:
        return all(os.path.join(folder, name) in gone for name in os.listdir(folder))
    except OSError:
        return False


def config_dir_problem(path: str) -> str | None:
    """Why the shim would refuse a configuration written in ``path``'s directory; ``None`` when it would not.

    A missing directory is created ``0755`` by the writer, which is fine.
    """
    directory = os.path.dirname(path) or "."
    try:
        info = os.stat(directory)
    except FileNotFoundError:
        return None
    if info.st_uid not in (0, os.geteuid()):
        return (
            f"{directory} is owned by uid {info.st_uid}, not root: the runtime shim refuses a configuration there; "
            f"chown root {directory}"
        )
    if info.st_mode & 0o022:
        return (
            f"{directory} is writable by group or others (mode {info.st_mode & 0o7777:o}): the runtime shim refuses "
            f"a configuration there; chmod go-w {directory}, or choose another config_path"
        )
    return None


def remove_programs(request: ProgramsRequest, host: Host, result: ProgramsResult) -> ProgramsResult:
    """``state=absent``: our launchers, the package, the configuration, and the folders they leave empty."""
    package_dir = os.path.join(request.libdir, PACKAGE)
    gone, kept = [], []
    for path in result.programs.values():
        if os.path.lexists(path):
            (gone if _ours(path) else kept).append(path)
    if kept:
        host.warn(f"left in place, not installed by gpufleet.nvidia (no marker line): {', '.join(kept)}")
    if os.path.isdir(package_dir):
        gone.append(package_dir)
    config = request.config_path
    if request.with_config and os.path.lexists(config) and (os.path.islink(config) or not os.path.isdir(config)):
        gone.append(config)
    # The folders the install created go too once nothing else is left in them (the libdir, the
    # configuration's folder); a folder that holds anything else stays.
    for folder in [request.libdir] + ([os.path.dirname(config)] if request.with_config else []):
        if _empty_after(folder, gone):
            gone.append(folder)
    result.changed, result.changed_files = bool(gone), gone
    if host.diff:
        result.diff = [{"before_header": path, "before": "present\n", "after": "absent\n"} for path in gone]
    if not host.check_mode:
        try:
            for path in gone:
                if path in (request.libdir, os.path.dirname(config)):
                    os.rmdir(path)  # empty by now; rmdir refuses anything else
                elif os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path)
                else:
                    os.unlink(path)
        except OSError as exc:
            raise Failure(f"cannot remove {exc.filename}: {exc.strerror or exc}", **result.fields()) from None
    return result


def _runtime_config(request: ProgramsRequest, result: ProgramsResult) -> str:
    """The shim's configuration text; ``result.runtime_config`` says what it holds."""
    try:
        text = render_runtime_config(
            request.accept_envvar_unprivileged,
            request.accept_volume_mounts,
            request.debug_log,
            accept_cdi_annotations_unprivileged=request.accept_cdi_annotations_unprivileged,
        )
    except ValueError as exc:  # debug_log that is no absolute file path
        raise Failure(f"cannot render {request.config_path}: {exc}", **result.fields()) from None
    result.runtime_config = {
        "path": request.config_path,
        "accept_envvar_unprivileged": request.accept_envvar_unprivileged,
        "accept_volume_mounts": request.accept_volume_mounts,
        "accept_cdi_annotations_unprivileged": request.accept_cdi_annotations_unprivileged,
        "debug_log": request.debug_log,
    }
    problem = config_dir_problem(request.config_path)
    if problem:
        raise Failure(f"cannot write the runtime shim's configuration: {problem}", **result.fields())
    return text


def _file_change(path: str, text: str, mode: int) -> dict[str, str] | None:
    """The diff of a package file or launcher to write; ``None`` when its bytes and mode are right."""
    before, before_mode, _uid = _current(path)
    if before == text and before_mode == mode:
        return None
    return {
        "before_header": path if before is not None else "/dev/null",
        "after_header": path,
        "before": before or "",
        "after": text if before != text else text + f"(mode {before_mode or 0:o} -> {mode:o})\n",
    }


def _config_change(path: str, text: str, mode: int) -> dict[str, str] | None:
    """The diff of the shim's configuration to write; ``None`` when it is right.

    The shim trusts its configuration only when owned by root (the user the engines run it as): a file of the right
    bytes owned by someone else, or a symbolic link, is replaced by a regular file of the writer's (root's under
    become).
    """
    before, before_mode, before_uid = _current(path)
    wrong_owner = before is not None and before_uid != os.geteuid()
    link = os.path.islink(path)
    if before == text and before_mode == mode and not wrong_owner and not link:
        return None
    note = ""
    if before == text:
        note = f"(mode {before_mode or 0:o} -> {mode:o})\n" if before_mode != mode else ""
        note += f"(owner uid {before_uid} -> {os.geteuid()})\n" if wrong_owner else ""
        note += "(a symbolic link -> a regular file)\n" if link else ""
    return {
        "before_header": path if before is not None else "/dev/null",
        "after_header": path,
        "before": before or "",
        "after": text + note,
    }


def install_programs(request: ProgramsRequest, host: Host) -> ProgramsResult:
    """``host_programs``: install (``state=present``) or remove the programs, from the module's own payload."""
    result = ProgramsResult(programs={name: os.path.join(request.bindir, name) for name in request.programs})
    try:
        files = render_files(
            request.bindir,
            request.libdir,
            read_payload_source,
            request.python,
            programs=request.programs,
            runtime=request.runtime,
        )
    except (OSError, ValueError, KeyError) as exc:
        raise Failure(f"cannot render the host programs: {exc}", **result.fields()) from None
    result.files = [path for path, _text, _mode in files] + ([request.config_path] if request.with_config else [])
    if request.state == "absent":
        return remove_programs(request, host, result)

    result.runtime = request.runtime
    digest = hashlib.sha256()
    for path, text, mode in files:
        digest.update(f"{path}\0{mode:o}\0".encode() + text.encode("utf-8") + b"\0")
    result.digest = digest.hexdigest()[:12]
    todo = [(path, text, mode, _file_change) for path, text, mode in files]
    if request.with_config:
        todo.append((request.config_path, _runtime_config(request, result), RUNTIME_CONFIG_MODE, _config_change))
    changes, diffs = [], []
    for path, text, mode, change in todo:
        diff = change(path, text, mode)
        if diff is not None:
            changes.append((path, text, mode))
            diffs.append(diff)
    result.changed, result.changed_files = bool(changes), [c[0] for c in changes]
    if host.diff:
        result.diff = diffs
    if changes and not host.check_mode:
        try:
            for path, text, mode in changes:
                atomic_write(path, text, mode, makedirs=True)  # the one atomic writer of the host programs
        except OSError as exc:
            raise Failure(
                f"cannot write {exc.filename or '?'}: {exc.strerror or exc} (is "
                f"{os.path.dirname(exc.filename or request.bindir)} writable by the connecting user? use become)",
                **result.fields(),
            ) from None
    return result
