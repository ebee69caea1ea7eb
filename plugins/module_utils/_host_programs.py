# Copyright (c) gpufleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Install the native toolkit's host programs: the one place that knows their launchers.

The programs' code is the collection's own ``module_utils/_*.py`` files, copied as a flat package
(``<libdir>/gpufleet_nvidia/``; the relative imports between them work the same there); each program
is a three-line launcher in ``<bindir>`` that starts the system Python isolated (``-I``: no
``PYTHON*`` variables, no user site; ``-S``: no site module, which is also faster) and calls ``main``.
Used by the ``toolkit`` role and by the tests, so the installed programs are the tested ones.
"""

import os

PACKAGE = "gpufleet_nvidia"
PYTHON = "/usr/bin/python3"
# program name -> (module, function)
PROGRAMS = {
    "gpufleet-container-runtime": ("_shim", "main"),
    "gpufleet-cdi-hook": ("_cdi_hook", "main"),
    "nvidia-container-runtime-hook": ("_shim", "legacy_hook_main"),
}
# Every module the programs import (directly or through each other).
MODULES = ("_cdi_hook", "_devices", "_driver_files", "_ldcache", "_oci", "_pathsafe", "_shim")


def launcher(name, libdir, python=PYTHON):
    module, function = PROGRAMS[name]
    return (
        "#!%s -IS\n"
        "# %s: installed by gpufleet.nvidia; the code is in %s/%s/%s.py\n"
        "import sys\n"
        "sys.path.insert(0, %r)\n"
        "from %s.%s import %s\n"
        "sys.exit(%s(sys.argv))\n"
    ) % (python, name, libdir, PACKAGE, module, libdir, PACKAGE, module, function, function)


def _write(path, data, mode):
    tmp = "%s.tmp-%d" % (path, os.getpid())
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(data)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def install(bindir, libdir, python=PYTHON, source=None, programs=None):
    """Copy the modules into ``<libdir>/gpufleet_nvidia`` and write the launchers into ``bindir``.

    Returns the paths written. ``source`` is the folder holding the ``_*.py`` files (this one).
    """
    source = source or os.path.dirname(os.path.abspath(__file__))
    package = os.path.join(libdir, PACKAGE)
    os.makedirs(package, 0o755, exist_ok=True)
    os.makedirs(bindir, 0o755, exist_ok=True)
    written = []
    _write(os.path.join(package, "__init__.py"), "", 0o644)
    for module in MODULES:
        with open(os.path.join(source, module + ".py"), encoding="utf-8") as f:
            text = f.read()
        path = os.path.join(package, module + ".py")
        _write(path, text, 0o644)
        written.append(path)
    for name in programs or PROGRAMS:
        path = os.path.join(bindir, name)
        _write(path, launcher(name, libdir, python), 0o755)
        written.append(path)
    return written
