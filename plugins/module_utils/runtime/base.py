# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The container engine adapter: everything this collection knows about one engine, in one place.

One folder per engine, shaped after nvidia-container-toolkit's ``pkg/config/engine/<engine>/``: its ``facts.py``
holds ``INFO`` (an ``EngineInfo``, plain data) and the read side (``DockerFacts``, ``ContainerdFacts``,
``CrioFacts``, ``Podman``; what gpu_facts uses, no editor imported), its ``edit.py`` the write side (``Docker``,
``Containerd``, ``Crio``, subclasses of the facts). ``registry.FACTS`` names the read sides (and derives every list
of engines from their ``INFO``), ``adapters.ADAPTERS`` the write sides.

An adapter says:

* where the engine lives: ``binaries`` and ``packages`` (discovery), ``binary`` (``--version``), ``unit``,
  ``config_path`` (main file), ``drop_in`` (where this collection writes, None: in the main file);
* what the engine reads: ``config_files`` (the files after the main one, in the engine's order) and
  ``read`` (the runtimes, the default runtime, whether CDI is on) -- the same reading for gpu_facts and for
  the container_runtime module;
* how to change it: ``plan`` (the edits, through the editor functions of its module), ``validate`` (the
  engine's own check of a candidate configuration) and ``probe`` (a command that answers once the engine
  is up after a restart).

``plan`` and ``validate`` get a ``Job`` (``runner.Runner`` is the one the module uses): its ``request`` (the typed
``Request``), ``config_path``, ``drop_in``, ``version``, ``result`` (the typed ``Result``), ``read(path)`` ->
``(text, existed)``, ``warn(msg)``, ``recorded(path)``/``remember(path, was)`` (the takeover record); and for
``validate``: ``bin_path(name)``, ``check(argv, how)`` (runs it, fails the run when it refuses, returns stdout),
``new_text(path)`` and ``fail(msg, **extra)``.

Standard library only (target Pythons 3.8+; ``tomlkit`` or Python 3.11's ``tomllib`` to read TOML).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, List, Mapping, NamedTuple, NoReturn, Optional, Sequence, Tuple

try:
    import tomllib as _tomllib
except ImportError:  # Python < 3.11
    _tomllib = None

# A files lister: inner glob pattern -> the matching regular files, sorted (the engine's own order).
Glob = Callable[[str], List[str]]
Version = Optional[Tuple[int, int, int]]


def toml_loader() -> Callable[[str], dict[str, Any]] | None:
    """A ``text -> plain dict`` TOML parser: ``tomllib`` (3.11+), else ``tomlkit``; None with neither."""
    if _tomllib is not None:
        return _tomllib.loads
    try:
        import tomlkit  # noqa: PLC0415  # optional on the target
    except ImportError:
        return None
    return lambda text: tomlkit.parse(text).unwrap()


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


class EngineInfo(NamedTuple):
    """What this collection knows about one engine as plain data (``<engine>/facts.py``'s ``INFO``): the registry
    derives every list of engines from these, so a controller reads them without the editors (or ``tomlkit``)."""

    name: str
    # its systemd unit: the collection's units start before it (``Before=``)
    service: str
    # the container_runtime module registers a runtime with it
    configurable: bool = False
    # a Kubernetes CRI engine (the device plugin's runtimes)
    cri: bool = False
    # the files (glob patterns) of its configuration that the runtime stage may change, and the folders it creates
    # for them (removed again when left empty)
    config_paths: tuple[str, ...] = ()
    created_dirs: tuple[str, ...] = ()
    # its configuration's format (``toml``: editing it needs ``tomlkit`` on the target)
    config_format: str = "toml"
    # the first version that reads CDI specs (None: every version does), whose CDI library reads cdiVersion 0.6.0,
    # and whose containers keep a spec's ``additionalGids`` (``common.cdi_spec_version``)
    cdi_from: Version = None
    cdi_0_6_from: Version = None
    cdi_additional_gids_from: Version = None
    # the first version NVIDIA's DRA driver takes as reading CDI (discovery/dra.py; None: the engine serves no kubelet)
    dra_cdi_from: Version = None
    # regular expressions over a cgroup path that name one of its containers, group 1 the id (``{id}``: 64 hex)
    cgroup_patterns: tuple[str, ...] = ()
    # the containerd namespace its containers run in (a ``containerd-shim`` ancestor's ``-namespace``), and whether
    # a shim of any other namespace is its own
    shim_namespace: str | None = None
    owns_shims: bool = False
    # the command that stops one of its containers by id (``<stop_cli> stop <id>``; None: the driver role does not)
    stop_cli: str | None = None
    # validate: the order engines are checked in, how a container is run (``cli``: ``<engine> run``; ``ctr``:
    # containerd's ``ctr run``; None: no container check), the command that says an image is there
    # (``<engine> <validate_image_present> <image>``) and the modes it runs (``runtime``, ``gpus``, ``cdi``)
    validate_rank: int = 99
    validate_check: str | None = None
    validate_image_present: tuple[str, ...] = ()
    validate_modes: tuple[str, ...] = ()


def older_than(engine_version: Version, minimum: tuple[int, int, int]) -> str | None:
    """The engine version as text when it is known and older than ``minimum``, else ``None``
    (an unknown version is never reported as too old)."""
    if engine_version and tuple(engine_version) < minimum:
        return ".".join(str(n) for n in engine_version)
    return None


def dig(data: Any, *keys: str) -> Any:
    """``data[k1][k2]...``, None as soon as a level is not a table."""
    for key in keys:
        if not isinstance(data, Mapping):
            return None
        data = data.get(key)
    return data


class Planned(NamedTuple):
    """One file ``plan`` would change: its path, the editor's ``common.Edit``, and the current text."""

    path: str
    edit: Any
    old: str
    existed: bool


class Request(NamedTuple):
    """What one run of ``container_runtime`` asks of an engine (the module's options, read once)."""

    engine: str
    name: str = "nvidia"
    path: str | None = None
    set_as_default: bool | None = None
    cdi: bool = False
    config_path: str | None = None
    # None: the engine's default drop-in; False: write into the main file; True: the default; text: that path
    drop_in: bool | str | None = None
    state: str = "present"
    backup: bool = False
    validate: bool = True
    restart: bool = False
    restart_timeout: int = 60
    unit: str | None = None
    engine_version: str | None = None
    record_path: str | None = None

    @classmethod
    def of(cls, options: Mapping[str, Any]) -> Request:
        """The request in ``options`` (a mapping with every field, such as a module's parameters)."""
        return cls(**{name: options[name] for name in cls._fields})


@dataclass
class Result:
    """What one run reports (the module's RETURN); ``as_dict`` gives the fields set, in the documented order."""

    config_file: str
    engine_version: str
    changed: bool = False
    files: list[str] = field(default_factory=list)
    backup_files: list[str] = field(default_factory=list)
    restarted: bool = False
    changes: list[str] = field(default_factory=list)
    config_version: int | None = None
    removed_temporary_files: list[str] | None = None
    diff: list[dict[str, str]] | None = None
    validated_by: str | None = None

    ALWAYS = ("changed", "config_file", "files", "backup_files", "restarted", "changes", "engine_version")
    WHEN_SET = ("config_version", "removed_temporary_files", "diff", "validated_by")

    def as_dict(self) -> dict[str, Any]:
        out = {name: getattr(self, name) for name in self.ALWAYS}
        out.update((name, getattr(self, name)) for name in self.WHEN_SET if getattr(self, name) is not None)
        return out


class Job:
    """What ``Engine.plan`` and ``Engine.validate`` work with (see the module docstring); ``runner.Runner`` is it."""

    request: Request
    config_path: str
    drop_in: str | None
    version: Version
    result: Result
    # where the engine's unit files are read (a test's tree; a host: "/")
    unit_root: str = "/"

    def read(self, path: str) -> tuple[str, bool]:
        raise NotImplementedError

    def warn(self, msg: str) -> None:
        raise NotImplementedError

    def recorded(self, path: str) -> dict[str, Any] | None:
        return None

    def remember(self, path: str, was: dict[str, Any]) -> None:
        return None

    def bin_path(self, name: str) -> str | None:
        raise NotImplementedError

    def new_text(self, path: str) -> str:
        raise NotImplementedError

    def check(self, cmd: list[str], how: str) -> str:
        raise NotImplementedError

    def fail(self, msg: str, **extra: Any) -> NoReturn:
        raise NotImplementedError


class Engine:
    """The adapter interface (see the module docstring). Subclasses set the attributes and override what
    their engine supports; the defaults describe an engine this collection only reads."""

    info: EngineInfo
    name = ""
    binaries: tuple[str, ...] = ()
    packages: tuple[str, ...] = ()
    binary = ""
    unit = ""
    config_path = ""
    drop_in: str | None = None
    config_format = "toml"
    # An empty main file means the built-in defaults, as a missing one does: an edit that empties it deletes it.
    empty_main_is_default = False
    # An unreadable main file leaves every configuration field unknown (it decides which other files count).
    main_decides_all = False
    # What ``cdi=true`` does on a version too old to read CDI specs (``{shown}``: that version); None: nothing to say.
    cdi_ignored: str | None = None

    def parse(self, text: str) -> dict[str, Any]:
        """A config file's text as plain data; raises ``ValueError`` (or the TOML parser's error)."""
        loads = toml_loader()
        if loads is None:
            raise ValueError("no TOML parser (tomllib needs Python 3.11, or install tomlkit)")
        return loads(text) if text.strip() else {}

    def files_before_main(self) -> list[str]:
        """Files the engine reads before its main file (podman's distribution defaults)."""
        return []

    def config_files(self, main: Mapping[str, Any] | None, glob: Glob, config_path: str = "") -> list[str]:
        """The files the engine reads after its main file (``main`` parsed, or None), in its order."""
        return []

    def read(self, files: Sequence[tuple[str, Mapping[str, Any] | None]], version: Version) -> dict[str, Any]:
        """``{runtimes, default_runtime, cdi_enabled}`` from the parsed files (main first; None: missing or
        unreadable) as the engine at ``version`` (None: unknown) sees them."""
        raise NotImplementedError

    def plan(self, job: Job) -> list[Planned]:
        raise NotImplementedError(f"{self.name}: this collection does not configure it")

    def validate(self, job: Job, tmp: str) -> None:
        """Check the candidate files (``job.new_text``) with the engine itself, in the scratch folder ``tmp``;
        sets ``job.result.validated_by``."""
        job.result.validated_by = "parse"

    def unit_facts(self, root: str) -> dict[str, Any]:
        """More facts from the engine's systemd unit under ``root`` (discovery adds them to the engine's)."""
        return {}

    def probe(self, bin_path: Callable[[str], str | None]) -> list[str] | None:
        """A command that succeeds once the engine answers (None: only systemd's view is left)."""
        return None

    def cdi_warning(self, version: Version) -> str | None:
        """The warning for ``cdi=true`` on a version older than the first that reads CDI (``info.cdi_from``):
        ``cdi_ignored``, with ``{shown}`` for the version, else None; an unknown version gives no warning."""
        minimum = self.info.cdi_from
        shown = older_than(version, minimum) if self.cdi_ignored and minimum else None
        return self.cdi_ignored.format(shown=shown) if shown and self.cdi_ignored else None

    def target(self, config_path: str, drop_in: str | None) -> str:
        """The file that holds the runtime's registration: the drop-in when there is one, else the main file."""
        return drop_in or config_path

    def __repr__(self) -> str:
        return f"<Engine {self.name}>"
