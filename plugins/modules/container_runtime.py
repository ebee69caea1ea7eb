#!/usr/bin/python
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
module: container_runtime
short_description: Register an OCI runtime (nvidia) with docker, containerd or CRI-O
version_added: 0.1.0
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
  - For containerd before 2.1, an imported file replaces the whole C(plugins.<id>) table of earlier files,
    so the drop-in carries a copy of the complete CRI plugin table (every key and sub-table the main file, or
    the last earlier import that defines it, sets), refreshed on every run. From 2.1 on the drop-in only
    holds the runtime.
  - A C(runtimes) table in a containerd file replaces containerd's built-in one (C(runc)); when no file
    defines any runtime, the built-in default is written out next to ours.
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
    description: Make the runtime the engine's default runtime.
    type: bool
    default: false
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
notes:
  - Unchanged files are never rewritten. Changed JSON is re-serialised with the file's indentation and key order,
    so inline arrays of an admin's C(daemon.json) come out one item per line.
  - O(state=absent) after O(state=present) gives back the original bytes when present added the runtime. When the
    runtime already existed and present updated it, absent removes it.
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
files:
  description: The files written or removed.
  returned: always
  type: list
  elements: str
  sample: [/etc/containerd/config.toml, /etc/containerd/conf.d/99-gpufleet-nvidia.toml]
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
    - How the candidate configuration was checked
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

import glob
import os
import shutil
import tempfile
import time
import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible.module_utils.common.text.converters import to_native
from ansible.module_utils.parsing.convert_bool import BOOLEANS_FALSE, BOOLEANS_TRUE

from ansible_collections.gpufleet.nvidia.plugins.module_utils.runtime import containerd as ctd
from ansible_collections.gpufleet.nvidia.plugins.module_utils.runtime import crio
from ansible_collections.gpufleet.nvidia.plugins.module_utils.runtime import docker as dock
from ansible_collections.gpufleet.nvidia.plugins.module_utils.runtime.common import (
    RuntimeConfigError,
    parse_version,
)
from ansible_collections.gpufleet.nvidia.plugins.module_utils.runtime.toml import (
    MISSING_TOMLKIT_HINT,
    TOMLKIT_IMPORT_ERROR,
)

DEFAULTS = {
    "docker": {"config": dock.DEFAULT_PATH, "drop_in": None, "unit": "docker", "binary": "dockerd"},
    "containerd": {
        "config": ctd.DEFAULT_PATH,
        "drop_in": ctd.DEFAULT_DROP_IN,
        "unit": "containerd",
        "binary": "containerd",
    },
    "crio": {"config": crio.DEFAULT_PATH, "drop_in": crio.DEFAULT_DROP_IN, "unit": "crio", "binary": "crio"},
}


def read(path):
    """(text, existed)."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read(), True
    except FileNotFoundError:
        return "", False


class Runner:
    def __init__(self, module):
        self.module = module
        self.p = module.params
        self.engine = self.p["engine"]
        self.defaults = DEFAULTS[self.engine]
        self.config_path = self.p["config_path"] or self.defaults["config"]
        self.drop_in = self._drop_in()
        self.version = parse_version(self.p["engine_version"]) if self.p["engine_version"] else self._detect_version()
        self.changes = []
        self.planned = {}  # path -> (old_text, existed, new_text or None to delete)
        self.result = {"changed": False, "files": [], "backup_files": [], "restarted": False, "changes": []}
        self.result["engine_version"] = ".".join(str(n) for n in self.version) if self.version else ""

    def _drop_in(self):
        value = self.p["drop_in"]
        if self.engine == "docker":
            return None
        if value is None:
            return self.defaults["drop_in"]
        if isinstance(value, bool) or str(value).lower() in BOOLEANS_FALSE or str(value).lower() in BOOLEANS_TRUE:
            truthy = value is True or str(value).lower() in BOOLEANS_TRUE
            return self.defaults["drop_in"] if truthy else None
        value = str(value)
        if not os.path.isabs(value):
            self.module.fail_json(msg=f"drop_in must be an absolute path or false, got {value!r}")
        return value

    def _detect_version(self):
        binary = self.module.get_bin_path(self.defaults["binary"])
        if not binary:
            return None
        rc, out, err = self.module.run_command([binary, "--version"])
        return parse_version(out or err) if rc == 0 else None

    # ---- planning -------------------------------------------------------------------------------------
    def plan(self, path, edit, old, existed):
        self.changes += edit.changes
        if not edit.changed:
            return
        new = edit.text
        if new == "" and self.engine in ("docker", "containerd") and path == self.config_path:
            new = None  # an empty main file means the built-in defaults, as a missing one does
        if new is None and not existed:
            return
        self.planned[path] = (old, existed, new)

    def compute(self):
        p = self.p
        present = p["state"] == "present"
        main_text, main_exists = read(self.config_path)
        if present and p["cdi"] and self.engine in ("docker", "containerd"):
            warning = (dock if self.engine == "docker" else ctd).cdi_warning(self.version)
            if warning:
                self.module.warn(warning)
        if self.engine == "docker":
            if present:
                edit = dock.present(
                    main_text,
                    p["path"],
                    name=p["name"],
                    set_as_default=p["set_as_default"],
                    cdi=p["cdi"],
                    path=self.config_path,
                )
            else:
                edit = dock.absent(main_text, p["path"], name=p["name"], cdi=p["cdi"], path=self.config_path)
            self.plan(self.config_path, edit, main_text, main_exists)
            return
        if TOMLKIT_IMPORT_ERROR:
            self.module.fail_json(
                msg=missing_required_lib("tomlkit") + " " + MISSING_TOMLKIT_HINT, exception=TOMLKIT_IMPORT_ERROR
            )
        if self.engine == "containerd":
            empty_version = ctd.default_version(self.version)
            self.result["config_version"] = ctd.detect_version(main_text, self.config_path, empty_version)
            if self.drop_in is None:
                kw = {"name": p["name"], "cdi": p["cdi"], "path": self.config_path, "empty_version": empty_version}
                if present:
                    edit = ctd.present_main(main_text, p["path"], set_as_default=p["set_as_default"], **kw)
                else:
                    edit = ctd.absent_main(main_text, p["path"], **kw)
                self.plan(self.config_path, edit, main_text, main_exists)
                return
            drop_text, drop_exists = read(self.drop_in)
            if present:
                m_edit, d_edit = ctd.present_drop_in(
                    main_text,
                    drop_text if drop_exists else None,
                    p["path"],
                    name=p["name"],
                    set_as_default=p["set_as_default"],
                    cdi=p["cdi"],
                    path=self.config_path,
                    drop_in=self.drop_in,
                    empty_version=empty_version,
                    whole_table=ctd.whole_table_needed(self.version),
                    imports=self._containerd_imports(main_text),
                )
            else:
                m_edit, d_edit = ctd.absent_drop_in(
                    main_text,
                    drop_text if drop_exists else None,
                    path=self.config_path,
                    drop_in=self.drop_in,
                    empty_version=empty_version,
                )
            self.plan(self.config_path, m_edit, main_text, main_exists)
            self.plan(self.drop_in, d_edit, drop_text, drop_exists)
            return
        # crio
        if p["cdi"]:
            self.module.warn(crio.CDI_NOTE)
        if self.drop_in is None:
            if present:
                edit = crio.present_main(
                    main_text, p["path"], name=p["name"], set_as_default=p["set_as_default"], path=self.config_path
                )
            else:
                edit = crio.absent_main(main_text, p["path"], name=p["name"], path=self.config_path)
            self.plan(self.config_path, edit, main_text, main_exists)
            return
        drop_text, drop_exists = read(self.drop_in)
        if present:
            configs = [(self.config_path, main_text)] + [
                (f, read(f)[0])
                for f in sorted(glob.glob(os.path.join(os.path.dirname(self.drop_in), "*.conf")))
                if f != self.drop_in
            ]
            edit = crio.present_drop_in(
                drop_text if drop_exists else None,
                p["path"],
                name=p["name"],
                set_as_default=p["set_as_default"],
                configs=configs,
                drop_in=self.drop_in,
            )
        else:
            edit = crio.absent_drop_in(drop_text if drop_exists else None, drop_in=self.drop_in)
        self.plan(self.drop_in, edit, drop_text, drop_exists)

    def _containerd_imports(self, main_text):
        """The other imported files (path, text), in containerd's order, ours excluded."""
        if not main_text.strip():
            return []
        try:
            import tomlkit  # noqa: PLC0415 - only reached when tomlkit imported fine above

            entries = tomlkit.parse(main_text).get("imports") or []
        except Exception:  # the editor reports parse errors with the line
            return []
        found = []
        for entry in entries:
            if not isinstance(entry, str):
                continue
            pattern = entry if os.path.isabs(entry) else os.path.join(os.path.dirname(self.config_path), entry)
            for f in sorted(glob.glob(pattern)):
                if f != self.drop_in and os.path.isfile(f):
                    found.append((f, read(f)[0]))
        return found

    # ---- validation -----------------------------------------------------------------------------------
    def validate(self):
        present = self.p["state"] == "present"
        with tempfile.TemporaryDirectory(prefix="gpufleet-runtime-") as tmp:
            if self.engine == "docker":
                new = self.planned[self.config_path][2] or "{}"
                cand = os.path.join(tmp, "daemon.json")
                with open(cand, "w", encoding="utf-8") as f:
                    f.write(new)
                dockerd = self.module.get_bin_path("dockerd")
                if dockerd and self.version and self.version >= (23, 0, 0):
                    self._check([dockerd, "--validate", "--config-file", cand], "dockerd --validate")
                else:
                    self.result["validated_by"] = "parse"  # the editor parsed and re-serialised it
                return
            if self.engine == "containerd":
                binary = self.module.get_bin_path("containerd")
                if not binary:
                    self.result["validated_by"] = "parse"
                    return
                main_new = self._new_text(self.config_path)
                drop_new = self._new_text(self.drop_in) if self.drop_in else None
                cand_main = os.path.join(tmp, "config.toml")
                text = main_new
                if self.drop_in and drop_new is not None:
                    cand_drop = os.path.join(tmp, os.path.basename(self.drop_in))
                    with open(cand_drop, "w", encoding="utf-8") as f:
                        f.write(drop_new)
                    text = self._retarget_imports(main_new, cand_drop)
                elif self.drop_in:
                    text = self._retarget_imports(main_new, None)
                with open(cand_main, "w", encoding="utf-8") as f:
                    f.write(text)
                out = self._check([binary, "--config", cand_main, "config", "dump"], "containerd config dump")
                if present and f"runtimes.{self.p['name']}]" not in out:
                    self.module.fail_json(
                        msg=(
                            "containerd reads the candidate config but does not see runtime "
                            f"{self.p['name']!r} in it (a config version this containerd does not know, or an "
                            "import after the drop-in that replaces the CRI plugin table); nothing was written"
                        ),
                        config_dump=out,
                        changes=self.changes,
                    )
                return
            binary = self.module.get_bin_path("crio")
            if not binary:
                self.result["validated_by"] = "parse"
                return
            conf_dir = os.path.join(tmp, "crio.conf.d")
            os.mkdir(conf_dir)
            main_new = self._new_text(self.config_path)
            cand_main = os.path.join(tmp, "crio.conf")
            with open(cand_main, "w", encoding="utf-8") as f:
                f.write(main_new)
            if self.drop_in:
                for f in glob.glob(os.path.join(os.path.dirname(self.drop_in), "*.conf")):
                    if f != self.drop_in:
                        shutil.copy(f, conf_dir)
                drop_new = self._new_text(self.drop_in)
                if drop_new is not None:
                    with open(os.path.join(conf_dir, os.path.basename(self.drop_in)), "w", encoding="utf-8") as f:
                        f.write(drop_new)
            self._check([binary, "--config", cand_main, "--config-dir", conf_dir, "config"], "crio config")

    def _new_text(self, path):
        if path in self.planned:
            return self.planned[path][2] or ""
        return read(path)[0]

    def _retarget_imports(self, text, cand_drop):
        """The candidate main file with our drop-in's import pointing at the candidate drop-in, and
        relative imports made absolute (the candidate lives in a temporary directory)."""
        if not text.strip():
            return text
        import tomlkit  # noqa: PLC0415

        doc = tomlkit.parse(text)
        imports = doc.get("imports")
        if not isinstance(imports, list):
            return text
        base = os.path.dirname(self.config_path)
        new = []
        for entry in imports:
            if entry == self.drop_in:
                if cand_drop:
                    new.append(cand_drop)
                continue
            new.append(entry if os.path.isabs(entry) else os.path.join(base, entry))
        if cand_drop and cand_drop not in new:
            new.append(cand_drop)  # our drop-in matched through a glob: the candidate must win over the live copy
        doc["imports"] = new
        return tomlkit.dumps(doc)

    def _check(self, cmd, how):
        rc, out, err = self.module.run_command(cmd)
        self.result["validated_by"] = how
        if rc != 0:
            self.module.fail_json(
                msg=f"{how} refused the candidate configuration; nothing was written: {(err or out).strip()}",
                rc=rc,
                stdout=out,
                stderr=err,
                changes=self.changes,
            )
        return out

    # ---- writing --------------------------------------------------------------------------------------
    def write_all(self):
        for path, (_old, existed, new) in self.planned.items():
            # A copy inside a drop-in folder (conf.d, crio.conf.d) could be read by the engine as more
            # configuration (CRI-O reads every file there): the drop-ins are ours, only the admin's main
            # file is backed up.
            if self.p["backup"] and existed and not os.path.dirname(path).endswith(".d"):
                self.result["backup_files"].append(self.module.backup_local(path))
            self.write(path, new)

    def write(self, path, new):
        if new is None:
            if os.path.exists(path):
                os.unlink(path)
            return
        directory = os.path.dirname(path)
        if not os.path.isdir(directory):
            os.makedirs(directory, mode=0o755)
        fd, tmp = tempfile.mkstemp(prefix=".gpufleet-", dir=directory)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(new)
            if not os.path.exists(path):
                os.chmod(tmp, 0o644)
            self.module.atomic_move(tmp, path, unsafe_writes=False)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def restore(self):
        for path, (old, existed, _new) in self.planned.items():
            self.write(path, old if existed else None)

    # ---- restart --------------------------------------------------------------------------------------
    def restart(self):
        unit = self.p["unit"] or self.defaults["unit"]
        systemctl = self.module.get_bin_path("systemctl", required=True)
        since = int(time.time())
        # systemd refuses a start after a few in a short time (StartLimitBurst, 3 in 60s for docker 26 and later)
        # without ever running the engine: clear that counter so the engine itself judges the new configuration.
        self.module.run_command([systemctl, "reset-failed", unit])
        self.module.run_command([systemctl, "restart", unit])
        if self._wait(systemctl, unit):
            self.result["restarted"] = True
            return
        journal = self._journal(unit, since)
        self.restore()
        self.module.run_command([systemctl, "reset-failed", unit])
        self.module.run_command([systemctl, "restart", unit])
        back = self._wait(systemctl, unit)
        self.module.fail_json(
            msg=(
                f"{unit} did not come back within {self.p['restart_timeout']}s with the new configuration; "
                f"the previous files were put back and {unit} was restarted "
                f"({'it answers again' if back else 'it does NOT answer either: look at the journal'}). "
                f"Engine output: {journal}"
            ),
            changes=self.changes,
            rolled_back=True,
            engine_back=back,
        )

    def _probe(self, systemctl, unit):
        if self.engine == "docker" and self.module.get_bin_path("docker"):
            return [self.module.get_bin_path("docker"), "info"]
        if self.engine == "containerd" and self.module.get_bin_path("ctr"):
            return [self.module.get_bin_path("ctr"), "version"]
        if self.engine == "crio" and self.module.get_bin_path("crictl"):
            return [
                self.module.get_bin_path("crictl"),
                "--runtime-endpoint",
                "unix:///var/run/crio/crio.sock",
                "version",
            ]
        return [systemctl, "is-active", unit]

    def _wait(self, systemctl, unit):
        probe = self._probe(systemctl, unit)
        deadline = time.monotonic() + self.p["restart_timeout"]
        while True:
            rc, _out, _err = self.module.run_command(probe)
            if rc == 0:
                return True
            if time.monotonic() >= deadline:
                return False
            # A unit that systemd gave up on (no Restart=, or its start limit hit) will not answer: no use waiting
            # out the timeout. "activating" (an automatic restart pending) keeps us waiting.
            _rc, state, _err = self.module.run_command([systemctl, "is-active", unit])
            if state.strip() == "failed":
                return False
            time.sleep(1)

    def _journal(self, unit, since=None):
        """The unit's journal from the restart on (what the engine said when it refused to start)."""
        journalctl = self.module.get_bin_path("journalctl")
        if not journalctl:
            return "(no journalctl)"
        cmd = [journalctl, "-u", unit, "-n", "20", "--no-pager", "-o", "cat"]
        if since is not None:
            cmd += ["--since", f"@{since}"]
        _rc, out, _err = self.module.run_command(cmd)
        return out.strip()

    def run(self):
        self.compute()
        self.result["changes"] = self.changes
        self.result["files"] = sorted(self.planned)
        if not self.planned:
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
        self.write_all()
        if self.p["restart"]:
            self.restart()
        self.module.exit_json(**self.result)


def main():
    module = AnsibleModule(
        argument_spec={
            "engine": {"type": "str", "required": True, "choices": ["docker", "containerd", "crio"]},
            "name": {"type": "str", "default": "nvidia"},
            "path": {"type": "path"},
            "set_as_default": {"type": "bool", "default": False},
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
        },
        required_if=[("state", "present", ["path"])],
        supports_check_mode=True,
    )
    if module.params["path"] and not os.path.isabs(module.params["path"]):
        module.fail_json(msg=f"path must be absolute, got {module.params['path']!r}")
    try:
        Runner(module).run()
    except RuntimeConfigError as exc:
        module.fail_json(msg=str(exc), path=exc.path, line=exc.line, hint=exc.hint)
    except (OSError, ValueError) as exc:
        module.fail_json(msg=to_native(exc), exception=traceback.format_exc())


if __name__ == "__main__":
    main()
