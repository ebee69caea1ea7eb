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
import json
import os
from typing import Callable

from ..base.fileio import atomic_write
from ..base.names import SHIM

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
}
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
