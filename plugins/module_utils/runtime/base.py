# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The container engine adapter: everything this collection knows about one engine, in one place.

One adapter per engine, shaped after nvidia-container-toolkit's ``pkg/config/engine`` interface: the read
side in ``facts`` (``DockerFacts``, ``ContainerdFacts``, ``CrioFacts``, ``Podman``; what gpu_facts uses, no
editor imported), the write side in the module of that engine's editor (``docker.Docker``,
``containerd.Containerd``, ``crio.Crio``, subclasses of the facts). ``registry.ENGINES`` names them.

An adapter says:

* where the engine lives: ``binaries`` and ``packages`` (discovery), ``binary`` (``--version``), ``unit``,
  ``config_path`` (main file), ``drop_in`` (where this collection writes, None: in the main file);
* what the engine reads: ``config_files`` (the files after the main one, in the engine's order) and
  ``read`` (the runtimes, the default runtime, whether CDI is on) -- the same reading for gpu_facts and for
  the container_runtime module;
* how to change it: ``plan`` (the edits, through the editor functions of its module), ``validate`` (the
  engine's own check of a candidate configuration) and ``probe`` (a command that answers once the engine
  is up after a restart).

``plan`` and ``validate`` get a ``job`` (the module's runner): ``job.p`` (the module's parameters),
``job.config_path``, ``job.drop_in``, ``job.version``, ``job.read(path)`` -> ``(text, existed)``,
``job.warn(msg)``, ``job.result``; and for ``validate``: ``job.bin_path(name)``, ``job.check(argv, how)``
(runs it, fails the module when it refuses, returns stdout), ``job.new_text(path)`` and ``job.fail(msg, **extra)``.

Standard library only (target Pythons 3.8+; ``tomlkit`` or Python 3.11's ``tomllib`` to read TOML).
"""

from __future__ import annotations

from typing import Any, Callable, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from .common import CDI_MIN_VERSIONS, older_than

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


class Engine:
    """The adapter interface (see the module docstring). Subclasses set the attributes and override what
    their engine supports; the defaults describe an engine this collection only reads."""

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

    def plan(self, job: Any) -> list[Planned]:
        raise NotImplementedError(f"{self.name}: this collection does not configure it")

    def validate(self, job: Any, tmp: str) -> None:
        """Check the candidate files (``job.new_text``) with the engine itself, in the scratch folder ``tmp``;
        sets ``job.result['validated_by']``."""
        job.result["validated_by"] = "parse"

    def probe(self, bin_path: Callable[[str], str | None]) -> list[str] | None:
        """A command that succeeds once the engine answers (None: only systemd's view is left)."""
        return None

    def cdi_warning(self, version: Version) -> str | None:
        """The warning for ``cdi=true`` on a version older than ``CDI_MIN_VERSIONS`` says reads CDI (``cdi_ignored``,
        with ``{shown}`` for the version), else None; an unknown version gives no warning."""
        minimum = CDI_MIN_VERSIONS.get(self.name)
        shown = older_than(version, minimum) if self.cdi_ignored and minimum else None
        return self.cdi_ignored.format(shown=shown) if shown and self.cdi_ignored else None

    def target(self, config_path: str, drop_in: str | None) -> str:
        """The file that holds the runtime's registration: the drop-in when there is one, else the main file."""
        return drop_in or config_path

    def __repr__(self) -> str:
        return f"<Engine {self.name}>"
