# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What each container engine is and what it reads: the read side of the engine adapters.

One class per engine: where it lives (binaries, packages, unit, main file, our drop-in), which files it reads
in which order (``config_files``) and what it makes of them (``read``: runtimes, default runtime, CDI on or
off, by engine version). gpu_facts' discovery reads hosts through these; the container_runtime module's
adapters (``docker.Docker``, ``containerd.Containerd``, ``crio.Crio``, subclasses of these) add how to change
the configuration. Kept apart from the editors so that the host programs (which run discovery) ship no editor.

Standard library only (target Pythons 3.8+; TOML through ``base.toml_loader``).
"""

from __future__ import annotations

import json
import os
from typing import Any, Mapping, Sequence

from ..base.pathsafe import host_path
from .base import Engine, Glob, Version, dig

DOCKER_PATH = "/etc/docker/daemon.json"
CONTAINERD_PATH = "/etc/containerd/config.toml"
CONTAINERD_DROP_IN = "/etc/containerd/conf.d/99-gpufleet-nvidia.toml"
CRIO_PATH = "/etc/crio/crio.conf"
CRIO_DROP_IN = "/etc/crio/crio.conf.d/99-gpufleet-nvidia.conf"
PODMAN_DEFAULTS = "/usr/share/containers/containers.conf"
PODMAN_PATH = "/etc/containers/containers.conf"
PODMAN_DROP_IN_DIR = "/etc/containers/containers.conf.d"
CRI_PLUGIN = {1: "cri", 2: "io.containerd.grpc.v1.cri", 3: "io.containerd.cri.v1.runtime"}


def runtime_paths(runtimes: Any, keys: Sequence[str]) -> dict[str, str]:
    """``{runtime name: the program the engine runs for it}`` from a runtimes table (docker's ``path``,
    containerd's ``options.BinaryName``, CRI-O's ``runtime_path``); a runtime that names none is left out (the
    engine finds it on ``PATH`` by name)."""
    found = {}
    for name, table in runtimes.items() if isinstance(runtimes, Mapping) else ():
        path = dig(table, *keys)
        if isinstance(path, str) and path:
            found[str(name)] = path
    return found


class DockerFacts(Engine):
    """docker: ``/etc/docker/daemon.json`` (no drop-ins). ``features.cdi`` when set, else CDI is on by default
    from 28.2."""

    name = "docker"
    binaries = ("dockerd", "docker")
    packages = ("docker-ce", "docker.io", "moby-engine")
    binary = "dockerd"
    unit = "docker"
    config_path = DOCKER_PATH
    config_format = "json"
    empty_main_is_default = True
    CDI_DEFAULT_FROM = (28, 2, 0)

    def parse(self, text: str) -> dict[str, Any]:
        data = json.loads(text) if text and text.strip() else {}
        if not isinstance(data, dict):
            raise ValueError("daemon.json is not a JSON object")
        return data

    def read(self, files: Sequence[tuple[str, Mapping[str, Any] | None]], version: Version) -> dict[str, Any]:
        data = (files[0][1] if files else None) or {}
        runtimes = data.get("runtimes") if isinstance(data.get("runtimes"), Mapping) else {}
        features = data.get("features") if isinstance(data.get("features"), Mapping) else {}
        cdi = features.get("cdi")
        return {
            "runtimes": sorted(set(runtimes) | {"runc"}),
            "runtime_paths": runtime_paths(runtimes, ("path",)),
            "default_runtime": data.get("default-runtime") or "runc",
            "cdi_enabled": cdi if isinstance(cdi, bool) else (version or ()) >= self.CDI_DEFAULT_FROM,
        }


# systemd's unit search path, highest precedence first (systemd.unit(5), "Unit File Load Path"): the unit is the first
# docker.service found; drop-ins (docker.service.d/*.conf) come from every folder, a name in an earlier folder hiding
# the same name in later ones, applied in the order of their file names.
UNIT_DIRS = ("/etc/systemd/system", "/run/systemd/system", "/usr/local/lib/systemd/system", "/lib/systemd/system",
             "/usr/lib/systemd/system")  # fmt: skip
# dockerd's flags that set what daemon.json's runtime registration sets: dockerd refuses to start when a flag and the
# file's key are both given ("the following directives are specified both as a flag and in the configuration file",
# moby daemon/config/config.go findConfigurationConflicts; --add-runtime is the named option "runtimes").
DOCKERD_FLAGS = {"--add-runtime": "runtimes", "--default-runtime": "default-runtime"}
MAX_UNIT_BYTES = 1 << 20


def _unit_text(root: str, inner: str) -> str | None:
    try:
        with open(host_path(root, inner), encoding="utf-8", errors="replace") as f:
            return f.read(MAX_UNIT_BYTES)
    except OSError:
        return None


def unit_files(root: str, unit: str) -> list[str]:
    """The files systemd reads for ``unit`` (the unit, then its drop-ins in order), as paths inside ``root``."""
    files = []
    for folder in UNIT_DIRS:
        if os.path.isfile(host_path(root, f"{folder}/{unit}")):
            files.append(f"{folder}/{unit}")
            break
    drop_ins: dict[str, str] = {}
    for folder in UNIT_DIRS:
        try:
            names = os.listdir(host_path(root, f"{folder}/{unit}.d"))
        except OSError:
            continue
        for name in names:
            if name.endswith(".conf") and name not in drop_ins:
                drop_ins[name] = f"{folder}/{unit}.d/{name}"
    return files + [drop_ins[name] for name in sorted(drop_ins)]


def _service_lines(text: str) -> list[tuple[str, str]]:
    """``(key, value)`` of the ``[Service]`` section, in order, continuation lines joined."""
    out, section, pending = [], "", ""
    for raw in text.splitlines():
        line = pending + raw.strip()
        pending = ""
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
        elif section == "Service" and "=" in line:
            key, _sep, value = line.partition("=")
            out.append((key.strip(), value.strip()))
    return out


def _env_assignments(value: str) -> list[tuple[str, str]]:
    """``Environment=`` (``A=1 "B=two words"``) or an environment file's line -> [(name, value)]."""
    import shlex  # noqa: PLC0415  # discovery and the module only, never a container start

    try:
        words = shlex.split(value, comments=False)
    except ValueError:
        words = value.split()
    return [(w.partition("=")[0], w.partition("=")[2]) for w in words if "=" in w]


def _expand(word: str, env: dict[str, tuple[str, str]]) -> list[tuple[str, str | None]]:
    """One ExecStart word -> [(word, file that set the variable or None)]: ``$VAR`` splits on whitespace, as systemd
    does; ``${VAR}`` stays one word."""
    if word.startswith("${") and word.endswith("}"):
        value, source = env.get(word[2:-1], ("", None))
        return [(value, source)] if value else []
    if word.startswith("$") and len(word) > 1:
        value, source = env.get(word[1:], ("", None))
        return [(w, source) for w in value.split()]
    return [(word, None)]


def dockerd_flags(root: str = "/", unit: str = "docker.service") -> list[dict[str, str]]:
    """dockerd's flags that daemon.json's runtime registration conflicts with (``DOCKERD_FLAGS``), as the docker
    unit starts it: ``[{flag, option, file}]``, ``flag`` as written (``--add-runtime nvidia=/usr/bin/...``),
    ``option`` the daemon.json key it conflicts with, ``file`` the unit file or drop-in (or the ``EnvironmentFile``)
    it comes from. Reads the unit's last ``ExecStart=`` (an empty one resets the list) with ``$VAR``/``${VAR}``
    expanded from ``Environment=`` and ``EnvironmentFile=`` (which wins, as in systemd). A flag hidden in a wrapper
    script is not seen."""
    import shlex  # noqa: PLC0415

    exec_start: list[tuple[str, str]] = []
    env: dict[str, tuple[str, str]] = {}
    file_env: dict[str, tuple[str, str]] = {}
    for inner in unit_files(root, unit):
        text = _unit_text(root, inner) or ""
        for key, value in _service_lines(text):
            if key == "ExecStart":
                if value:
                    exec_start.append((value, inner))
                else:
                    exec_start = []
            elif key == "Environment":
                env.update({k: (v, inner) for k, v in _env_assignments(value)})
            elif key == "EnvironmentFile" and value:
                path = value.lstrip("-")
                for line in (_unit_text(root, path) or "").splitlines():
                    if line.strip() and not line.lstrip().startswith(("#", ";")):
                        file_env.update({k: (v, path) for k, v in _env_assignments(line.strip())})
    env.update(file_env)
    found = []
    for command, inner in exec_start[-1:]:
        try:
            raw = shlex.split(command.lstrip("-@:+!"))
        except ValueError:
            raw = command.split()
        words = [(w, src or inner) for word in raw for w, src in _expand(word, env)]
        for i, (word, source) in enumerate(words):
            name, sep, value = word.partition("=")
            if name not in DOCKERD_FLAGS:
                continue
            if not sep and i + 1 < len(words):
                value = words[i + 1][0]
            found.append({"flag": f"{name} {value}".strip(), "option": DOCKERD_FLAGS[name], "file": source})
    return found


def default_version(engine_version: tuple[int, int, int] | None) -> int:
    """The config version containerd assumes for a missing or empty file: 3 on 2.x, else 2."""
    return 3 if engine_version and engine_version[0] >= 2 else 2


def whole_table_needed(engine_version: tuple[int, int, int] | None) -> bool:
    """Whether imports replace plugin tables wholesale (before 2.1; unknown versions count as old)."""
    return not engine_version or tuple(engine_version[:2]) < (2, 1)


def file_version(data: Mapping[str, Any], main_version: int | None = None) -> Any:
    """A file's config version as containerd reads it: its ``version``; without one, the main file's for an
    imported file (containerd merges imports into the main file before it reads the version), 1 for the main
    file itself."""
    if "version" in data:
        return data["version"]
    return main_version if main_version is not None else 1


def effective_cri(
    docs: Sequence[Mapping[str, Any] | None], version: int, replace_tables: bool = True
) -> Mapping[str, Any] | None:
    """The CRI plugin table containerd uses, from ``docs`` (the main file, then the imports in containerd's
    order; empty or None ones are skipped). The one rule of the editor and of discovery:

    * an imported file of another config version (``file_version``) does not count;
    * before 2.1 (``replace_tables``) the last file that defines the table replaces it whole (the very
      table object of that file is returned, so that the editor can copy it with its comments);
    * from 2.1 on the tables are merged key by key (a new plain dict).
    """
    found: Mapping[str, Any] | None = None
    for index, doc in enumerate(docs):
        if not doc:
            continue
        if file_version(doc, version if index else None) != version:
            continue
        cri = dig(doc, "plugins", CRI_PLUGIN[version])
        if not isinstance(cri, Mapping):
            continue
        found = cri if replace_tables or found is None else _merged(found, cri)
    return found


def _merged(low: Mapping[str, Any], high: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(low)
    for key, value in high.items():
        out[key] = (
            _merged(out[key], value) if isinstance(out.get(key), Mapping) and isinstance(value, Mapping) else value
        )
    return out


def import_patterns(main: Mapping[str, Any] | None, config_path: str) -> list[str]:
    """The main file's ``imports`` as absolute patterns (relative ones are relative to the main file's folder)."""
    entries = (main or {}).get("imports")
    base = os.path.dirname(config_path)
    return [
        entry if os.path.isabs(entry) else os.path.join(base, entry)
        for entry in (entries if isinstance(entries, list) else [])
        if isinstance(entry, str)
    ]


class ContainerdFacts(Engine):
    """containerd: ``/etc/containerd/config.toml`` and the files its ``imports`` name (globs, in order), config
    v1, v2 or v3. ``enable_cdi`` when set, else CDI is on by default from 2.0."""

    name = "containerd"
    binaries = ("containerd",)
    packages = ("containerd.io", "containerd")
    binary = "containerd"
    unit = "containerd"
    config_path = CONTAINERD_PATH
    drop_in = CONTAINERD_DROP_IN
    empty_main_is_default = True

    def config_files(self, main: Mapping[str, Any] | None, glob: Glob, config_path: str = "") -> list[str]:
        found: list[str] = []
        for pattern in import_patterns(main, config_path or self.config_path):
            found += [f for f in glob(pattern) if f not in found]
        return found

    def read(self, files: Sequence[tuple[str, Mapping[str, Any] | None]], version: Version) -> dict[str, Any]:
        main = (files[0][1] if files else None) or {}
        raw = file_version(main) if main else default_version(version)
        config_version = raw if raw in CRI_PLUGIN and not isinstance(raw, bool) else None
        cri = (
            effective_cri([data for _path, data in files], config_version, whole_table_needed(version))
            if config_version
            else None
        ) or {}
        runtimes = dig(cri, "containerd", "runtimes")
        cdi = cri.get("enable_cdi")
        return {
            "config_version": config_version,
            "runtimes": sorted(set(runtimes if isinstance(runtimes, Mapping) else ()) | {"runc"}),
            "runtime_paths": runtime_paths(runtimes, ("options", "BinaryName")),
            "default_runtime": dig(cri, "containerd", "default_runtime_name") or "runc",
            "cdi_enabled": bool(cdi) if cdi is not None else (version or ())[:1] >= (2,),
        }


def drop_in_dir(config_path: str) -> str:
    """The folder of drop-ins CRI-O reads next to its main file."""
    return os.path.join(os.path.dirname(config_path), "crio.conf.d")


class CrioFacts(Engine):
    """CRI-O: ``/etc/crio/crio.conf`` then ``crio.conf.d/*.conf`` in lexical order, merged key by key. CDI is
    always on (1.23 and later); the built-in default runtime is runc, crun from 1.31 on."""

    name = "crio"
    binaries = ("crio",)
    packages = ("cri-o",)
    binary = "crio"
    unit = "crio"
    config_path = CRIO_PATH
    drop_in = CRIO_DROP_IN
    CRUN_DEFAULT_FROM = (1, 31, 0)

    def config_files(self, main: Mapping[str, Any] | None, glob: Glob, config_path: str = "") -> list[str]:
        return glob(os.path.join(drop_in_dir(config_path or self.config_path), "*.conf"))

    def read(self, files: Sequence[tuple[str, Mapping[str, Any] | None]], version: Version) -> dict[str, Any]:
        runtimes: set = set()
        paths: dict[str, str] = {}
        default = None
        for _path, data in files:
            runtime = dig(data, "crio", "runtime") or {}
            runtimes.update(runtime.get("runtimes") or {})
            paths.update(runtime_paths(runtime.get("runtimes"), ("runtime_path",)))
            default = runtime.get("default_runtime") or default
        default = default or ("crun" if (version or ()) >= self.CRUN_DEFAULT_FROM else "runc")
        return {
            "runtimes": sorted(runtimes | {default}),
            "runtime_paths": paths,
            "default_runtime": default,
            "cdi_enabled": True,
        }


class Podman(Engine):
    """podman, read only: it has no daemon to register a runtime with (containers use the CDI spec).
    ``containers.conf``: the distribution's defaults, then ``/etc/containers`` and its ``.d`` folder. CDI is
    always on (4.1 and later); the default runtime is crun."""

    name = "podman"
    binaries = ("podman",)
    packages = ("podman",)
    binary = "podman"
    config_path = PODMAN_PATH

    def config_files(self, main: Mapping[str, Any] | None, glob: Glob, config_path: str = "") -> list[str]:
        return glob(PODMAN_DROP_IN_DIR + "/*.conf")

    def files_before_main(self) -> list[str]:
        """Read before the main file: the distribution's defaults."""
        return [PODMAN_DEFAULTS]

    def read(self, files: Sequence[tuple[str, Mapping[str, Any] | None]], version: Version) -> dict[str, Any]:
        runtimes: set = set()
        default = None
        for _path, data in files:
            engine = (data or {}).get("engine") or {}
            runtimes.update(engine.get("runtimes") or {})
            default = engine.get("runtime") or default
        return {
            "runtimes": sorted(runtimes | {"crun", "runc"}),
            "default_runtime": default or "crun",
            "cdi_enabled": True,
        }


FACTS: dict[str, Engine] = {e.name: e for e in (DockerFacts(), ContainerdFacts(), CrioFacts(), Podman())}
