#!/usr/bin/python
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: container_runtime
short_description: Register an OCI runtime (nvidia) with docker, containerd or CRI-O
version_added: 1.0.0
description:
  - Registers an OCI runtime, by default named C(nvidia), with docker (C(daemon.json)), containerd
    (C(config.toml) version 1, 2 or 3, directly or through a drop-in listed in C(imports)) or CRI-O
    (a drop-in under C(/etc/crio/crio.conf.d/)), and removes it again with O(state=absent).
  - "Keeps what the admin wrote. JSON keeps every other key, the key order and the indentation. TOML keeps
    comments, key order and layout; a key changed in an admin's TOML file carries a trailing
    C(# gpufleet.nvidia: was <old value>) comment so that O(state=absent) restores it exactly."
  - "Files this module owns outright (drop-ins) start with the comment
    C(# Managed by gpufleet.nvidia.container_runtime); O(state=absent) deletes only such files.
    In the main file the runtime is ours when its binary is O(path)."
  - The candidate configuration is checked by the engine itself before it replaces the live one when the
    engine offers a way (C(dockerd --validate) on docker 23 and later, C(containerd config dump) on the
    candidate main file together with the candidate drop-in, C(crio config)); otherwise by parsing it.
    A refused configuration is never written.
  - "docker: when the docker unit (its C(ExecStart), drop-ins, and the C(Environment)/C(EnvironmentFile) they
    expand, such as C($DOCKER_OPTS)) passes C(--add-runtime) or C(--default-runtime) and the new C(daemon.json)
    sets C(runtimes) or C(default-runtime), dockerd would refuse to start (the following directives are specified
    both as a flag and in the configuration file). The module fails before writing, naming the unit file, the flag
    and the fix; a flag hidden in a wrapper script is not seen (the restart rollback covers it)."
  - For containerd before 2.1, an imported file replaces the whole C(plugins.<id>) table of earlier files,
    so the drop-in carries a copy of the complete CRI plugin table (every key and sub-table the main file, or
    the last earlier import that defines it, sets), refreshed on every run. From 2.1 on the drop-in only
    holds the runtime.
  - A C(runtimes) table in a containerd file replaces containerd's built-in one (C(runc)); when no file
    defines any runtime, the built-in default is written out next to ours.
  - "containerd: as NVIDIA's C(nvidia-ctk runtime configure) does, the runtime is a copy of the default runtime's
    table (else C(runc)'s, else C(crun)'s): its C(runtime_type) (C(io.containerd.runc.v1) stays v1),
    C(runtime_root), C(privileged_without_host_devices), annotations and options such as C(SystemdCgroup), with
    C(BinaryName) set to O(path) (and C(Runtime) on config version 1 and for C(io.containerd.runtime.v1.linux)).
    A default runtime that runs no OCI runtime binary (Kata, gVisor) is not copied. An existing runtime of that
    name keeps its keys and gets the type and the missing keys of the default runtime."
  - "CDI: O(cdi=true) sets C(features.cdi) for docker (25 and later honour it) and C(enable_cdi) for containerd
    (1.7 and later). CRI-O has CDI on by itself since 1.23 and has no switch: nothing is written for it.
    On docker before 25 and containerd before 1.7 the key is written anyway and the module warns that the
    engine ignores it."
author:
  - gpufleet.nvidia contributors (@gpufleet)
extends_documentation_fragment:
  - gpufleet.nvidia.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
  idempotent:
    support: full
requirements:
  - tomlkit on the target for containerd and CRI-O (C(python3-tomlkit) on Debian, Ubuntu, RHEL/EPEL; or pip)
options:
  engine:
    description: The container engine to register the runtime with.
    type: str
    required: true
    choices: [docker, containerd, crio]
  name:
    description:
      - Name of the runtime.
      - For docker, the names of its built-in runtimes (C(runc), C(io.containerd.runc.v2),
        C(io.containerd.runtime.v1.linux)) are refused; dockerd would not start with them in C(runtimes).
    type: str
    default: nvidia
  path:
    description:
      - Absolute path of the runtime binary (OCI runtime, e.g. the nvidia shim).
      - Required with O(state=present). With O(state=absent), the runtime is removed only when it points at this
        path; when not given, whatever runtime has O(name) is removed.
    type: path
  set_as_default:
    description:
      - V(true) makes the runtime the engine's default runtime (docker C(default-runtime), containerd
        C(default_runtime_name), CRI-O C(default_runtime)), so that C(docker run --gpus) and Kubernetes pods reach it
        with no C(--runtime) flag or RuntimeClass.
      - V(false) takes a default that names this runtime away again (the way back from V(true)), back to the value
        our comment recorded in a TOML file, else to the engine's built-in default (docker drops C(default-runtime)).
        A default that names another runtime is never touched.
      - Not set, the default runtime is left as it is.
    type: bool
  cdi:
    description:
      - Turn on the engine's CDI support (docker C(features.cdi), containerd C(enable_cdi); nothing for CRI-O).
      - With O(state=absent), C(true) also turns it off again when this module had turned it on.
    type: bool
    default: false
  config_path:
    description:
      - The engine's main config file. Defaults to C(/etc/docker/daemon.json), C(/etc/containerd/config.toml),
        C(/etc/crio/crio.conf).
    type: path
  drop_in:
    description:
      - containerd and CRI-O only. Where the drop-in goes, or V(false) to edit the main file instead.
      - Defaults to C(/etc/containerd/conf.d/99-gpufleet-nvidia.toml) and
        C(/etc/crio/crio.conf.d/99-gpufleet-nvidia.conf).
      - For CRI-O the drop-in must be in the directory CRI-O reads (C(crio.conf.d) next to the main file).
    type: raw
  state:
    description: Whether the runtime is registered.
    type: str
    default: present
    choices: [present, absent]
  backup:
    description:
      - Leave a timestamped copy of the engine's main configuration file before it is changed.
      - Drop-in files in a C(.d) folder are this module's own and are not copied (an engine could read the copy
        as more configuration).
    type: bool
    default: false
  validate:
    description:
      - Have the engine (or, where it has no way, a parser) check the candidate configuration before it is written.
    type: bool
    default: true
  restart:
    description:
      - When something changed, restart the engine with C(systemctl restart) and wait until it answers.
      - If it does not come back within O(restart_timeout) (or systemd reports the unit C(failed) before that), the
        previous files are put back, the engine is restarted again and the module fails with the engine's own error
        (the unit's journal since the restart).
      - A mark under C(/run/gpufleet-nvidia/restart-pending/) says the files changed and the restart has not finished
        yet; a run that finds the files as wanted and the mark there (the run before was killed between the write
        and the restart) restarts the engine and reports a change. A reboot clears the mark (the engine starts
        with the files on disk).
      - When a file cannot be written (a full disk), the files written before it get their old text back, the engine
        is not restarted and the module fails naming the file.
    type: bool
    default: false
  restart_timeout:
    description: Seconds to wait for the engine to answer after a restart.
    type: int
    default: 60
  unit:
    description: The systemd unit to restart. Defaults to C(docker), C(containerd), C(crio).
    type: str
  engine_version:
    description:
      - The engine's version (for example V(1.7.24)). Detected with C(dockerd --version), C(containerd --version),
        C(crio --version) when not given. containerd's version decides the config version of an empty file
        (3 on 2.x) and whether the drop-in carries the whole CRI table (before 2.1).
    type: str
  record_path:
    description:
      - docker only. Where O(state=present) keeps the values it replaces in a C(daemon.json) that already named
        the runtime, turned CDI on or set a default (NVIDIA's C(nvidia-ctk runtime configure) wrote them; JSON keeps
        no comment), and where O(state=absent) reads them back to restore them exactly (then drops them). The first
        values recorded stay. An empty string keeps no record.
    type: path
    default: /var/lib/gpufleet-nvidia/takeover.json
notes:
  - Unchanged files are never rewritten. Changed JSON is re-serialised with the file's indentation and key order,
    so inline arrays of an admin's C(daemon.json) come out one item per line.
  - O(state=absent) after O(state=present) gives back the original bytes when present added the runtime. When the
    runtime already existed and present updated it, absent puts back what O(record_path) recorded (docker; containerd
    and CRI-O keep it in their own files), else removes it.
  - Writes are atomic (a temporary file in the same directory, renamed over the original, keeping its mode and owner).
"""

EXAMPLES = r"""
- name: Register the nvidia runtime with docker and make it the default
  gpufleet.nvidia.container_runtime:
    engine: docker
    path: /usr/bin/nvidia-container-runtime
    set_as_default: true
    cdi: true
    restart: true

- name: Register the nvidia runtime with containerd through a drop-in, keep a backup
  gpufleet.nvidia.container_runtime:
    engine: containerd
    path: /usr/local/bin/nvidia-shim
    backup: true
    restart: true

- name: Edit the k3s-generated containerd config directly (no drop-in)
  gpufleet.nvidia.container_runtime:
    engine: containerd
    config_path: /var/lib/rancher/k3s/agent/etc/containerd/config.toml.tmpl
    drop_in: false
    path: /usr/local/bin/nvidia-shim
    validate: false

- name: CRI-O drop-in
  gpufleet.nvidia.container_runtime:
    engine: crio
    path: /usr/local/bin/nvidia-shim

- name: Remove what present added
  gpufleet.nvidia.container_runtime:
    engine: containerd
    path: /usr/local/bin/nvidia-shim
    state: absent
"""

RETURN = r"""
changes:
  description: What was (or, in check mode, would be) changed, one line each.
  returned: always
  type: list
  elements: str
  sample:
    - 'plugins.io.containerd.grpc.v1.cri.containerd.runtimes.nvidia: added with BinaryName /usr/bin/nvidia-shim'
config_file:
  description:
    - The file that holds the runtime's registration, the drop-in or (with no drop-in, and always for docker)
      the main file. Returned whether or not it changed; the runtime role records it.
  returned: always
  type: str
  sample: /etc/containerd/conf.d/99-gpufleet-nvidia.toml
files:
  description: The files written or removed.
  returned: always
  type: list
  elements: str
  sample: [/etc/containerd/config.toml, /etc/containerd/conf.d/99-gpufleet-nvidia.toml]
removed_temporary_files:
  description:
    - The temporary files (C(.<name>.gpufleet-<PID>-<hex>)) an earlier run killed between writing and renaming
      left next to the engine's files, removed by this run (listed, not removed, in check mode). Only files of
      that exact name whose writer process is gone or that are over an hour old; an admin's file never.
  returned: when there were any
  type: list
  elements: str
  sample: [/etc/docker/.daemon.json.gpufleet-4242-0badc0de]
backup_files:
  description: The timestamped copies left by O(backup=true).
  returned: always
  type: list
  elements: str
config_version:
  description: containerd's config version of the main file (1, 2 or 3).
  returned: when O(engine=containerd)
  type: int
  sample: 2
engine_version:
  description: The engine version used for the decisions above (empty when unknown).
  returned: always
  type: str
  sample: 1.6.20
validated_by:
  description:
    - How the candidate configuration was checked.
    - One of C(dockerd --validate), C(containerd config dump), C(crio config), C(parse).
  returned: when something changed and O(validate=true)
  type: str
restarted:
  description: Whether the engine was restarted.
  returned: always
  type: bool
diff:
  description: Before and after text of every changed file (with C(--diff)).
  returned: when something changed and diff mode is on
  type: list
  elements: dict
"""

import os
import tempfile
import traceback
from typing import Any, NoReturn

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible.module_utils.common.text.converters import to_native
from ansible.module_utils.parsing.convert_bool import BOOLEANS_FALSE, BOOLEANS_TRUE

from ansible_collections.gpufleet.nvidia.plugins.module_utils.base.fileio import (
    atomic_write,
    backup,
    read_text,
    remove_stale_temporaries,
    stale_temporaries,
)
from ansible_collections.gpufleet.nvidia.plugins.module_utils.base.version import parse as parse_version
from ansible_collections.gpufleet.nvidia.plugins.module_utils.base.version import text_of
from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery import takeover
from ansible_collections.gpufleet.nvidia.plugins.module_utils.runtime.base import Engine
from ansible_collections.gpufleet.nvidia.plugins.module_utils.runtime.common import RuntimeConfigError
from ansible_collections.gpufleet.nvidia.plugins.module_utils.runtime.registry import CONFIGURABLE, adapter
from ansible_collections.gpufleet.nvidia.plugins.module_utils.runtime.service import (
    PendingRestart,
    Service,
    restart_with_rollback,
)
from ansible_collections.gpufleet.nvidia.plugins.module_utils.runtime.toml import (
    MISSING_TOMLKIT_HINT,
    TOMLKIT_IMPORT_ERROR,
)


class Runner:
    """One run of the module against one engine adapter: plan, validate, write, restart (the ``job`` of
    ``runtime.base.Engine``)."""

    def __init__(self, module: AnsibleModule, engine: Engine) -> None:
        self.module = module
        self.p = module.params
        self.engine = engine
        self.config_path = self.p["config_path"] or engine.config_path
        self.drop_in = self._drop_in()
        self.unit = self.p["unit"] or engine.unit
        self.pending = PendingRestart(self.unit)
        self.version = parse_version(self.p["engine_version"]) if self.p["engine_version"] else self._detect_version()
        self.changes = []
        self.planned = {}  # path -> (old_text, existed, new_text or None to delete)
        self._loaded = None  # the takeover record, once read
        self._remembered = None  # (path, values present replaced)
        self.result = {
            "changed": False,
            "config_file": engine.target(self.config_path, self.drop_in),
            "files": [],
            "backup_files": [],
            "restarted": False,
            "changes": [],
            "engine_version": text_of(self.version),
        }

    def _drop_in(self) -> str | None:
        value = self.p["drop_in"]
        if self.engine.drop_in is None:
            return None
        if value is None:
            return self.engine.drop_in
        if isinstance(value, bool) or str(value).lower() in BOOLEANS_FALSE or str(value).lower() in BOOLEANS_TRUE:
            truthy = value is True or str(value).lower() in BOOLEANS_TRUE
            return self.engine.drop_in if truthy else None
        value = str(value)
        if not os.path.isabs(value):
            self.module.fail_json(msg=f"drop_in must be an absolute path or false, got {value!r}")
        return value

    def _detect_version(self) -> tuple[int, int, int] | None:
        binary = self.module.get_bin_path(self.engine.binary)
        if not binary:
            return None
        rc, out, err = self.module.run_command([binary, "--version"])
        return parse_version(out or err) if rc == 0 else None

    # ---- what the adapters call -----------------------------------------------------------------------
    def recorded(self, path: str) -> dict | None:
        """The values of ``path`` before ``present`` first replaced them (the takeover record), if recorded."""
        return self._record().get("engines", {}).get(path)

    def remember(self, path: str, was: dict) -> None:
        """Keep ``was`` (the values ``present`` replaces in ``path``) in the takeover record once written."""
        self._remembered = (path, was)

    def _record(self) -> dict:
        if not self.p["record_path"]:
            return takeover.empty()
        if self._loaded is None:
            try:
                self._loaded = takeover.load(read_text(self.p["record_path"]), self.p["record_path"])
            except (OSError, ValueError) as exc:
                self.fail(
                    f"cannot read the takeover record {self.p['record_path']}: {exc}; fix or move it aside",
                    path=self.p["record_path"],
                )
        return self._loaded

    def _update_record(self) -> None:
        """After the files were written: the values ``present`` replaced go into the record (the first ones stay),
        ``absent`` drops the entry it gave back."""
        if not self.p["record_path"]:
            return
        record = self._record()
        if self.p["state"] == "present" and self._remembered:
            new = takeover.with_engine(record, *self._remembered)
        elif self.p["state"] == "absent":
            new = takeover.given_back(record, self.config_path)
        else:
            return
        if new == record:
            return
        path = self.p["record_path"]
        if takeover.is_empty(new):
            if os.path.exists(path):
                os.unlink(path)
        else:
            atomic_write(path, takeover.dump(new), 0o644, makedirs=True)
        self._loaded = new

    def read(self, path: str) -> tuple[str, bool]:
        """(text, existed)."""
        text = read_text(path)
        return ("", False) if text is None else (text, True)

    def warn(self, msg: str) -> None:
        self.module.warn(msg)

    def bin_path(self, name: str) -> str | None:
        return self.module.get_bin_path(name)

    def new_text(self, path: str) -> str:
        """The candidate text of ``path`` ("" for a file about to be removed)."""
        if path in self.planned:
            return self.planned[path][2] or ""
        return self.read(path)[0]

    def check(self, cmd: list[str], how: str) -> str:
        rc, out, err = self.module.run_command(cmd)
        self.result["validated_by"] = how
        if rc != 0:
            self.fail(
                f"{how} refused the candidate configuration; nothing was written: {(err or out).strip()}",
                rc=rc,
                stdout=out,
                stderr=err,
            )
        return out

    def fail(self, msg: str, **extra: Any) -> NoReturn:
        self.module.fail_json(msg=msg, changes=self.changes, **extra)

    # ---- planning -------------------------------------------------------------------------------------
    def compute(self) -> None:
        p = self.p
        if p["state"] == "present" and p["cdi"]:
            warning = self.engine.cdi_warning(self.version)
            if warning:
                self.warn(warning)
        if self.engine.config_format == "toml" and TOMLKIT_IMPORT_ERROR:
            self.module.fail_json(
                msg=missing_required_lib("tomlkit") + " " + MISSING_TOMLKIT_HINT, exception=TOMLKIT_IMPORT_ERROR
            )
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
        get their old text back and the module fails naming the file."""
        written = []
        for path, (_old, existed, new) in self.planned.items():
            try:
                # A copy inside a drop-in folder (conf.d, crio.conf.d) could be read by the engine as more
                # configuration (CRI-O reads every file there): the drop-ins are ours, only the admin's main
                # file is backed up.
                if self.p["backup"] and existed and not os.path.dirname(path).endswith(".d"):
                    self.result["backup_files"].append(backup(path))
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
        context = self.module.selinux_context(path) if os.path.exists(path) else None

        def keep_context(tmp: str) -> None:
            if context is not None:
                self.module.set_context_if_different(tmp, context, False)

        atomic_write(path, new, makedirs=True, prepare=keep_context)

    def restore(self) -> None:
        self._undo(list(self.planned))

    # ---- restart --------------------------------------------------------------------------------------
    def restart(self) -> None:
        unit = self.unit
        systemctl = self.module.get_bin_path("systemctl", required=True)
        service = Service(
            self.module.run_command,
            systemctl,
            unit,
            probe=self.engine.probe(self.bin_path),
            timeout=self.p["restart_timeout"],
            journalctl=self.module.get_bin_path("journalctl"),
        )
        outcome = restart_with_rollback(service, self.restore)
        self.pending.clear()  # it runs the new files, or the old ones again
        if outcome.restarted:
            self.result["restarted"] = True
            return
        self.fail(
            f"{unit} did not come back within {self.p['restart_timeout']}s with the new configuration; "
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
        if not self.module.check_mode:
            stale = [tmp for path in paths for tmp in remove_stale_temporaries(path)]
        self.result["changed"] = True
        self.result["removed_temporary_files"] = stale
        self.changes += [f"remove {tmp}: left by an earlier run killed while it wrote" for tmp in stale]

    def run(self) -> NoReturn:
        self.compute()
        self.sweep()
        self.result["changes"] = self.changes
        self.result["files"] = sorted(self.planned)
        if not self.planned:
            if self.p["restart"] and self.pending:
                # an earlier run wrote these files and was killed before the engine restarted with them
                self.result["changed"] = True
                self.result["changes"] = [
                    *self.changes,
                    f"restart {self.unit}: an earlier run changed its files and "
                    f"ended before the restart ({self.pending.path})",
                ]
                if not self.module.check_mode:
                    self.restart()
            if not self.module.check_mode:
                self._update_record()
            self.module.exit_json(**self.result)
        self.result["changed"] = True
        if self.module._diff:
            self.result["diff"] = [
                {
                    "before": old if existed else "",
                    "after": new or "",
                    "before_header": path if existed else f"{path} (absent)",
                    "after_header": path if new is not None else f"{path} (removed)",
                }
                for path, (old, existed, new) in sorted(self.planned.items())
            ]
        if self.p["validate"]:
            self.validate()
        if self.module.check_mode:
            self.module.exit_json(**self.result)
        if self.p["restart"]:
            self.pending.set(sorted(self.planned))
        self.write_all()
        self._update_record()
        if self.p["restart"]:
            self.restart()
        self.module.exit_json(**self.result)


ARGUMENT_SPEC = {
    "engine": {"type": "str", "required": True, "choices": list(CONFIGURABLE)},
    "name": {"type": "str", "default": "nvidia"},
    "path": {"type": "path"},
    "set_as_default": {"type": "bool"},
    "cdi": {"type": "bool", "default": False},
    "config_path": {"type": "path"},
    "drop_in": {"type": "raw"},
    "state": {"type": "str", "default": "present", "choices": ["present", "absent"]},
    "backup": {"type": "bool", "default": False},
    "validate": {"type": "bool", "default": True},
    "restart": {"type": "bool", "default": False},
    "restart_timeout": {"type": "int", "default": 60},
    "unit": {"type": "str"},
    "engine_version": {"type": "str"},
    "record_path": {"type": "path", "default": takeover.RECORD_PATH},
}


def main() -> None:
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        required_if=[("state", "present", ["path"])],
        supports_check_mode=True,
    )
    if module.params["path"] and not os.path.isabs(module.params["path"]):
        module.fail_json(msg=f"path must be absolute, got {module.params['path']!r}")
    try:
        Runner(module, adapter(module.params["engine"])).run()
    except RuntimeConfigError as exc:
        module.fail_json(msg=str(exc), path=exc.path, line=exc.line, hint=exc.hint)
    except (OSError, ValueError) as exc:
        module.fail_json(msg=to_native(exc), exception=traceback.format_exc())


if __name__ == "__main__":
    main()
