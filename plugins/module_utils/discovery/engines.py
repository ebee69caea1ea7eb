# Copyright (c) gpufleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Container engines on the host under ``root``: docker, containerd, CRI-O and podman.

For each: ``installed`` (its binary is in the root), ``version`` (from the dpkg database, which costs
no process; on ``/`` only, ``<binary> --version`` when dpkg does not know it), ``config_path``,
``runtimes`` (names registered), ``default_runtime`` and ``cdi_enabled``:

* docker: ``/etc/docker/daemon.json``; ``features.cdi`` when set, else on by default from 28.2 on.
* containerd: ``/etc/containerd/config.toml`` and its ``imports`` drop-ins, config v1 (``plugins.cri``),
  v2 (``plugins."io.containerd.grpc.v1.cri"``), v3 (``plugins."io.containerd.cri.v1.runtime"``);
  ``enable_cdi`` when set, else on by default from 2.0 on.
* CRI-O: ``/etc/crio/crio.conf`` and ``/etc/crio/crio.conf.d/*``; CDI is always on (1.23 and later).
* podman: ``containers.conf`` (``/usr/share/containers``, then ``/etc/containers`` and its ``.d``);
  CDI is always on (4.1 and later).

TOML is read with ``tomllib`` (3.11+), else ``tomlkit`` when importable; with neither, the TOML-derived
fields stay None and a warning says why. Nothing here raises for a host state.

Standard library only (target Pythons 3.8+; ``tomlkit`` optional).
"""

import glob
import json
import os
import re

from ..base.pathsafe import host_path
from ..base.version import parse as parse_version

try:
    import tomllib as _toml

    def _toml_loads(text):
        return _toml.loads(text)

except ImportError:  # Python < 3.11
    try:
        import tomlkit as _toml

        def _toml_loads(text):
            return _toml.parse(text).unwrap()

    except ImportError:
        _toml = None
        _toml_loads = None

BINARY_DIRS = ("/usr/local/bin", "/usr/bin", "/usr/sbin", "/bin", "/sbin")
ENGINES = {
    "docker": {"binaries": ("dockerd", "docker"), "packages": ("docker-ce", "docker.io", "moby-engine")},
    "containerd": {"binaries": ("containerd",), "packages": ("containerd.io", "containerd")},
    "crio": {"binaries": ("crio",), "packages": ("cri-o",)},
    "podman": {"binaries": ("podman",), "packages": ("podman",)},
}
_VERSION = re.compile(r"(\d+\.\d+(?:\.\d+)?)")
CRI_PLUGINS = {1: ("cri",), 2: ("io.containerd.grpc.v1.cri",), 3: ("io.containerd.cri.v1.runtime",)}


def _read(root, inner):
    try:
        with open(host_path(root, inner), encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError):
        return None


def _find_binary(root, names):
    for name in names:
        for directory in BINARY_DIRS:
            path = host_path(root, directory + "/" + name)
            if os.path.isfile(path) and os.access(path, os.X_OK):
                return directory + "/" + name
    return None


def dpkg_versions(text, packages):
    """``{package: upstream version}`` of the installed packages among ``packages`` in a dpkg status
    file (``2:20.10.24+dfsg1-1+deb12u1`` -> ``20.10.24``)."""
    wanted = set(packages)
    found = {}
    for stanza in (text or "").split("\n\n"):
        if not stanza.startswith("Package: "):
            continue
        name = stanza[9 : stanza.find("\n")] if "\n" in stanza else stanza[9:]
        if name.strip() not in wanted or "Status: install ok installed" not in stanza:
            continue
        match = re.search(r"^Version: (?:\d+:)?(\S+)", stanza, re.MULTILINE)
        if match:
            version = _VERSION.match(match.group(1))
            found[name.strip()] = version.group(1) if version else match.group(1)
    return found


def _toml_file(root, inner, warnings, label):
    text = _read(root, inner)
    if text is None:
        return None
    if _toml_loads is None:
        warnings.append(
            "%s: cannot read %s: no TOML parser (tomllib needs Python 3.11, or install tomlkit)" % (label, inner)
        )
        return None
    try:
        return _toml_loads(text)
    except Exception as exc:  # each parser raises its own error type
        warnings.append("%s: %s is not valid TOML: %s" % (label, inner, exc))
        return None


def _dig(data, *keys):
    for key in keys:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def docker_config(text):
    """``(runtimes, default_runtime, cdi)`` from daemon.json text (``cdi`` None when not set)."""
    data = json.loads(text) if text and text.strip() else {}
    if not isinstance(data, dict):
        raise ValueError("daemon.json is not a JSON object")
    runtimes = data.get("runtimes") if isinstance(data.get("runtimes"), dict) else {}
    features = data.get("features") if isinstance(data.get("features"), dict) else {}
    cdi = features.get("cdi")
    return sorted(runtimes), data.get("default-runtime"), cdi if isinstance(cdi, bool) else None


def containerd_config_version(data):
    """The config schema version: ``version`` when set; a non-empty file without one is v1."""
    if not data:
        return None
    version = data.get("version")
    return int(version) if isinstance(version, int) else 1


def containerd_cri(data):
    """``(runtimes, default_runtime, enable_cdi)`` from one parsed containerd config (or drop-in)."""
    version = containerd_config_version(data)
    if version is None:
        return [], None, None
    plugin = _dig(data, "plugins", CRI_PLUGINS.get(version, CRI_PLUGINS[2])[0]) or {}
    runtimes = _dig(plugin, "containerd", "runtimes") or {}
    return sorted(runtimes), _dig(plugin, "containerd", "default_runtime_name"), plugin.get("enable_cdi")


def _docker(root, info, warnings):
    info["config_path"] = "/etc/docker/daemon.json"
    text = _read(root, info["config_path"])
    runtimes, default, cdi = [], None, None
    if text is not None:
        try:
            runtimes, default, cdi = docker_config(text)
        except ValueError as exc:
            warnings.append("docker: %s: %s" % (info["config_path"], exc))
    info["runtimes"] = sorted(set(runtimes) | {"runc"})
    info["default_runtime"] = default or "runc"
    info["cdi_enabled"] = cdi if cdi is not None else (parse_version(info["version"]) or ()) >= (28, 2, 0)


def _containerd(root, info, warnings):
    info["config_path"] = "/etc/containerd/config.toml"
    data = _toml_file(root, info["config_path"], warnings, "containerd")
    if data is None and _read(root, info["config_path"]) is not None:
        return  # unreadable: leave the fields None
    runtimes, default, cdi = containerd_cri(data or {})
    runtimes = set(runtimes)
    imports = (data or {}).get("imports") or []
    for pattern in imports if isinstance(imports, list) else []:
        for path in sorted(glob.glob(host_path(root, str(pattern)))):
            inner = "/" + os.path.relpath(path, host_path(root, "/"))
            drop_in = _toml_file(root, inner, warnings, "containerd") or {}
            if "version" not in drop_in and data:
                drop_in = dict(drop_in, version=containerd_config_version(data))
            more, more_default, more_cdi = containerd_cri(drop_in)
            runtimes.update(more)
            default = more_default or default
            cdi = more_cdi if more_cdi is not None else cdi
    major = (parse_version(info["version"]) or ())[:1]
    info["config_version"] = containerd_config_version(data) or (3 if major >= (2,) else 2)
    info["runtimes"] = sorted(runtimes | {"runc"})
    info["default_runtime"] = default or "runc"
    info["cdi_enabled"] = bool(cdi) if cdi is not None else major >= (2,)


def _crio(root, info, warnings):
    info["config_path"] = "/etc/crio/crio.conf"
    files = [
        "/etc/crio/crio.conf",
        *sorted(
            "/etc/crio/crio.conf.d/" + n
            for n in _listdir(host_path(root, "/etc/crio/crio.conf.d"))
            if not n.startswith(".")
        ),
    ]
    runtimes, default = set(), None
    for inner in files:
        data = _toml_file(root, inner, warnings, "crio") or {}
        runtime = _dig(data, "crio", "runtime") or {}
        runtimes.update(runtime.get("runtimes") or {})
        default = runtime.get("default_runtime") or default
    # CRI-O's built-in default runtime: runc, crun from 1.31 on.
    info["default_runtime"] = default or ("crun" if (parse_version(info["version"]) or ()) >= (1, 31, 0) else "runc")
    info["runtimes"] = sorted(runtimes | {info["default_runtime"]})
    info["cdi_enabled"] = True


def _podman(root, info, warnings):
    info["config_path"] = "/etc/containers/containers.conf"
    files = [
        "/usr/share/containers/containers.conf",
        "/etc/containers/containers.conf",
        *sorted(
            "/etc/containers/containers.conf.d/" + n
            for n in _listdir(host_path(root, "/etc/containers/containers.conf.d"))
            if n.endswith(".conf")
        ),
    ]
    runtimes, default = set(), None
    for inner in files:
        data = _toml_file(root, inner, warnings, "podman") or {}
        engine = data.get("engine") or {}
        runtimes.update(engine.get("runtimes") or {})
        default = engine.get("runtime") or default
    info["runtimes"] = sorted(runtimes | {"crun", "runc"})
    info["default_runtime"] = default or "crun"
    info["cdi_enabled"] = True


def _listdir(path):
    try:
        return os.listdir(path)
    except OSError:
        return []


_DETECTORS = {"docker": _docker, "containerd": _containerd, "crio": _crio, "podman": _podman}


def detect(root, run_command=None, warnings=None):
    """``{engine: {installed, binary, version, config_path, runtimes, default_runtime, cdi_enabled}}``."""
    warnings = [] if warnings is None else warnings
    status = None
    engines = {}
    for name, spec in ENGINES.items():
        info = {
            "installed": False,
            "binary": None,
            "version": None,
            "config_path": None,
            "runtimes": [],
            "default_runtime": None,
            "cdi_enabled": None,
        }
        engines[name] = info
        binary = _find_binary(root, spec["binaries"])
        if binary is None:
            continue
        info["installed"] = True
        info["binary"] = binary
        if status is None:
            status = _read(root, "/var/lib/dpkg/status") or ""
        versions = dpkg_versions(status, spec["packages"])
        for package in spec["packages"]:
            if package in versions:
                info["version"] = versions[package]
                break
        if info["version"] is None and run_command is not None and os.path.abspath(root) == "/":
            rc, out, _err = run_command([binary, "--version"])
            match = _VERSION.search(out or "") if rc == 0 else None
            info["version"] = match.group(1) if match else None
        _DETECTORS[name](root, info, warnings)
    return engines
