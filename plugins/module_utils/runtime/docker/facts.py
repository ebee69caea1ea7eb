# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""docker as this collection knows it: ``INFO`` (plain data, read by the registry) and the read side
(``DockerFacts``: ``/etc/docker/daemon.json``, and the flags the docker unit passes to dockerd). The write side is
``edit.Docker``. Standard library only (target Pythons 3.8+).
"""

from __future__ import annotations

import json
import os
from typing import Any, Mapping, Sequence

from ...base.pathsafe import host_path
from ..base import Engine, EngineInfo, Version, runtime_paths

DOCKER_PATH = "/etc/docker/daemon.json"

INFO = EngineInfo(
    name="docker",
    service="docker.service",
    configurable=True,
    config_paths=(DOCKER_PATH,),
    config_format="json",
    cdi_from=(25, 0, 0),
    cdi_0_6_from=(25, 0, 0),
    cdi_additional_gids_from=(29, 5, 0),
    # moby daemon/oci_linux.go: scope prefix ``docker`` (systemd cgroup driver), cgroupfs parent ``/docker``
    cgroup_patterns=(r"docker-({id})\.scope", r"/docker/({id})(?:/|$)"),
    shim_namespace="moby",
    stop_cli="docker",
    validate_rank=0,
    validate_check="cli",
    validate_image_present=("image", "inspect"),
    validate_modes=("runtime", "gpus", "cdi"),
)


class DockerFacts(Engine):
    """docker: ``/etc/docker/daemon.json`` (no drop-ins). ``features.cdi`` when set, else CDI is on by default
    from 28.2."""

    info = INFO
    name = INFO.name
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

    def unit_facts(self, root: str) -> dict[str, Any]:
        """``unit_flags``: the flags of the docker unit that conflict with daemon.json's runtime registration."""
        return {"unit_flags": dockerd_flags(root, self.unit + ".service")}

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
