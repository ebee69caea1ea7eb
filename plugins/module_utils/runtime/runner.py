# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""One run of the ``container_runtime`` module against one engine adapter: plan, validate, write, restart.

``run(request, host, engine, records)`` takes the typed ``base.Request``, the ``host`` that runs commands
(``run_command``, ``get_bin_path``, ``warn``, ``selinux_context``, ``set_context_if_different``, ``check_mode`` and
``_diff``: an ``AnsibleModule`` is one) and ``records``, the takeover record's functions (``discovery.takeover``,
passed in because ``runtime`` sits below ``discovery``). It returns the typed ``base.Result`` or raises the
``Failure`` of ``module_utils.base.runner`` (the module's failure message and fields), ``MissingLibrary``
(tomlkit) or the adapters' ``common.RuntimeConfigError``.

Standard library only (Python 3.8+); no ansible import.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any, NoReturn

from ..base.fileio import atomic_write, backup, read_text, remove_stale_temporaries, stale_temporaries
from ..base.runner import Failure
from ..base.version import parse as parse_version
from ..base.version import text_of
from .base import Engine, Job, Request, Result
from .service import PendingRestart, Service, restart_with_rollback
from .toml import TOMLKIT_IMPORT_ERROR


class MissingLibrary(Exception):
    """An engine's files need a library the target lacks (``name``; ``error``: the import's traceback)."""

    def __init__(self, name: str, error: str) -> None:
        super().__init__(name)
        self.name = name
        self.error = error


def run(request: Request, host: Any, engine: Engine, records: Any) -> Result:
    return Runner(request, host, engine, records).run()


class Runner(Job):
    """The ``base.Job`` the adapters plan and validate with, and the steps of one run."""

    def __init__(self, request: Request, host: Any, engine: Engine, records: Any) -> None:
        self.host = host
        self.request = request
        self.records = records
        self.engine = engine
        self.config_path = request.config_path or engine.config_path
        self.drop_in = self._drop_in()
        self.unit = request.unit or engine.unit
        self.pending = PendingRestart(self.unit)
        self.version = parse_version(request.engine_version) if request.engine_version else self._detect_version()
        self.changes: list[str] = []
        self.planned: dict[str, tuple[str, bool, str | None]] = {}  # path -> (old_text, existed, new_text or None)
        self._loaded: dict | None = None  # the takeover record, once read
        self._remembered: tuple[str, dict] | None = None  # (path, values present replaced)
        self.result = Result(
            config_file=engine.target(self.config_path, self.drop_in), engine_version=text_of(self.version)
        )

    def _drop_in(self) -> str | None:
        value = self.request.drop_in
        if self.engine.drop_in is None:
            return None
        if value is None:
            return self.engine.drop_in
        if isinstance(value, bool):
            return self.engine.drop_in if value else None
        if not os.path.isabs(value):
            raise Failure(f"drop_in must be an absolute path or false, got {value!r}")
        return value

    def _detect_version(self) -> tuple[int, int, int] | None:
        binary = self.host.get_bin_path(self.engine.binary)
        if not binary:
            return None
        rc, out, err = self.host.run_command([binary, "--version"])
        return parse_version(out or err) if rc == 0 else None

    # ---- what the adapters call -----------------------------------------------------------------------
    def recorded(self, path: str) -> dict | None:
        """The values of ``path`` before ``present`` first replaced them (the takeover record), if recorded."""
        return self._record().get("engines", {}).get(path)

    def remember(self, path: str, was: dict) -> None:
        """Keep ``was`` (the values ``present`` replaces in ``path``) in the takeover record once written."""
        self._remembered = (path, was)

    def _record(self) -> dict:
        path = self.request.record_path
        if not path:
            return self.records.empty()
        if self._loaded is None:
            try:
                self._loaded = self.records.load(read_text(path), path)
            except (OSError, ValueError) as exc:
                self.fail(f"cannot read the takeover record {path}: {exc}; fix or move it aside", path=path)
        return self._loaded

    def _update_record(self) -> None:
        """After the files were written: the values ``present`` replaced go into the record (the first ones stay),
        ``absent`` drops the entry it gave back."""
        path = self.request.record_path
        if not path:
            return
        record = self._record()
        if self.request.state == "present" and self._remembered:
            new = self.records.with_engine(record, *self._remembered)
        elif self.request.state == "absent":
            new = self.records.given_back(record, self.config_path)
        else:
            return
        if new == record:
            return
        if self.records.is_empty(new):
            if os.path.exists(path):
                os.unlink(path)
        else:
            atomic_write(path, self.records.dump(new), 0o644, makedirs=True)
        self._loaded = new

    def read(self, path: str) -> tuple[str, bool]:
        """(text, existed)."""
        text = read_text(path)
        return ("", False) if text is None else (text, True)

    def warn(self, msg: str) -> None:
        self.host.warn(msg)

    def bin_path(self, name: str) -> str | None:
        return self.host.get_bin_path(name)

    def new_text(self, path: str) -> str:
        """The candidate text of ``path`` ("" for a file about to be removed)."""
        if path in self.planned:
            return self.planned[path][2] or ""
        return self.read(path)[0]

    def check(self, cmd: list[str], how: str) -> str:
        rc, out, err = self.host.run_command(cmd)
        self.result.validated_by = how
        if rc != 0:
            self.fail(
                f"{how} refused the candidate configuration; nothing was written: {(err or out).strip()}",
                rc=rc,
                stdout=out,
                stderr=err,
            )
        return out

    def fail(self, msg: str, **extra: Any) -> NoReturn:
        raise Failure(msg, changes=self.changes, **extra)

    # ---- planning -------------------------------------------------------------------------------------
    def compute(self) -> None:
        if self.request.state == "present" and self.request.cdi:
            warning = self.engine.cdi_warning(self.version)
            if warning:
                self.warn(warning)
        if self.engine.config_format == "toml" and TOMLKIT_IMPORT_ERROR:
            raise MissingLibrary("tomlkit", TOMLKIT_IMPORT_ERROR)
        for path, edit, old, existed in self.engine.plan(self):
            self.changes += edit.changes
            if not edit.changed:
                continue
            new = edit.text
            if new == "" and self.engine.empty_main_is_default and path == self.config_path:
                new = None  # an empty main file means the built-in defaults, as a missing one does
            if new is None and not existed:
                continue
            self.planned[path] = (old, existed, new)

    def validate(self) -> None:
        with tempfile.TemporaryDirectory(prefix="gpufleet-runtime-") as tmp:
            self.engine.validate(self, tmp)

    # ---- writing --------------------------------------------------------------------------------------
    def write_all(self) -> None:
        """Write every planned file, or none: when one cannot be written (a full disk), the ones written before it
        get their old text back and the run fails naming the file."""
        written = []
        for path, (_old, existed, new) in self.planned.items():
            try:
                # A copy inside a drop-in folder (conf.d, crio.conf.d) could be read by the engine as more
                # configuration (CRI-O reads every file there): the drop-ins are ours, only the admin's main
                # file is backed up.
                if self.request.backup and existed and not os.path.dirname(path).endswith(".d"):
                    self.result.backup_files.append(backup(path))
                self.write(path, new)
            except OSError as exc:
                undone = self._undo(written)
                self.pending.clear()
                self.fail(
                    f"cannot write {path}: {exc.strerror or exc}; "
                    + (f"{', '.join(undone)} got their previous text back, " if undone else "")
                    + "no file of this engine changed and it was not restarted. Free space (or fix the permissions) "
                    f"in {os.path.dirname(path)} and rerun.",
                    path=path,
                )
            written.append(path)

    def _undo(self, paths: list[str]) -> list[str]:
        for path in paths:
            old, existed, _new = self.planned[path]
            self.write(path, old if existed else None)
        return paths

    def write(self, path: str, new: str | None) -> None:
        if new is None:
            if os.path.exists(path):
                os.unlink(path)
            return
        context = self.host.selinux_context(path) if os.path.exists(path) else None

        def keep_context(tmp: str) -> None:
            if context is not None:
                self.host.set_context_if_different(tmp, context, False)

        atomic_write(path, new, makedirs=True, prepare=keep_context)

    def restore(self) -> None:
        self._undo(list(self.planned))

    # ---- restart --------------------------------------------------------------------------------------
    def restart(self) -> None:
        unit = self.unit
        service = Service(
            self.host.run_command,
            self.host.get_bin_path("systemctl", required=True),
            unit,
            probe=self.engine.probe(self.bin_path),
            timeout=self.request.restart_timeout,
            journalctl=self.host.get_bin_path("journalctl"),
        )
        outcome = restart_with_rollback(service, self.restore)
        self.pending.clear()  # it runs the new files, or the old ones again
        if outcome.restarted:
            self.result.restarted = True
            return
        self.fail(
            f"{unit} did not come back within {self.request.restart_timeout}s with the new configuration; "
            f"the previous files were put back and {unit} was restarted "
            f"({'it answers again' if outcome.engine_back else 'it does NOT answer either: look at the journal'}). "
            f"Engine output: {outcome.journal}",
            rolled_back=True,
            engine_back=outcome.engine_back,
        )

    def sweep(self) -> None:
        """Remove the temporary files an earlier run killed inside its atomic write left next to this engine's
        files (``base.fileio.stale_temporaries``: only our own names, only when their writer is gone)."""
        paths = sorted({self.config_path, *([self.drop_in] if self.drop_in else []), *self.planned})
        stale = [tmp for path in paths for tmp in stale_temporaries(path)]
        if not stale:
            return
        if not self.host.check_mode:
            stale = [tmp for path in paths for tmp in remove_stale_temporaries(path)]
        self.result.changed = True
        self.result.removed_temporary_files = stale
        self.changes += [f"remove {tmp}: left by an earlier run killed while it wrote" for tmp in stale]

    def run(self) -> Result:
        self.compute()
        self.sweep()
        self.result.changes = self.changes
        self.result.files = sorted(self.planned)
        if not self.planned:
            if self.request.restart and self.pending:
                # an earlier run wrote these files and was killed before the engine restarted with them
                self.result.changed = True
                self.result.changes = [
                    *self.changes,
                    f"restart {self.unit}: an earlier run changed its files and "
                    f"ended before the restart ({self.pending.path})",
                ]
                if not self.host.check_mode:
                    self.restart()
            if not self.host.check_mode:
                self._update_record()
            return self.result
        self.result.changed = True
        if self.host._diff:
            self.result.diff = [
                {
                    "before": old if existed else "",
                    "after": new or "",
                    "before_header": path if existed else f"{path} (absent)",
                    "after_header": path if new is not None else f"{path} (removed)",
                }
                for path, (old, existed, new) in sorted(self.planned.items())
            ]
        if self.request.validate:
            self.validate()
        if self.host.check_mode:
            return self.result
        if self.request.restart:
            self.pending.set(sorted(self.planned))
        self.write_all()
        self._update_record()
        if self.request.restart:
            self.restart()
        return self.result
