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
import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible.module_utils.common.text.converters import to_native
from ansible.module_utils.parsing.convert_bool import BOOLEANS_FALSE, BOOLEANS_TRUE

from ansible_collections.gpufleet.nvidia.plugins.module_utils.base.runner import Failure
from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery import takeover
from ansible_collections.gpufleet.nvidia.plugins.module_utils.runtime.adapters import adapter
from ansible_collections.gpufleet.nvidia.plugins.module_utils.runtime.base import Request
from ansible_collections.gpufleet.nvidia.plugins.module_utils.runtime.common import RuntimeConfigError
from ansible_collections.gpufleet.nvidia.plugins.module_utils.runtime.registry import CONFIGURABLE
from ansible_collections.gpufleet.nvidia.plugins.module_utils.runtime.runner import MissingLibrary, run
from ansible_collections.gpufleet.nvidia.plugins.module_utils.runtime.toml import MISSING_TOMLKIT_HINT

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


def argspec() -> dict:
    return {
        "argument_spec": ARGUMENT_SPEC,
        "required_if": [("state", "present", ["path"])],
        "supports_check_mode": True,
    }


def request_of(params: dict) -> Request:
    """The typed request in the module's parameters; ``drop_in`` as a boolean when it spells one, else its text."""
    drop_in = params["drop_in"]
    if drop_in is not None:
        word = str(drop_in).lower()
        if isinstance(drop_in, bool) or word in BOOLEANS_FALSE or word in BOOLEANS_TRUE:
            drop_in = drop_in is True or word in BOOLEANS_TRUE
        else:
            drop_in = str(drop_in)
    return Request.of(dict(params, drop_in=drop_in))


def run_module(module: AnsibleModule) -> None:
    if module.params["path"] and not os.path.isabs(module.params["path"]):
        module.fail_json(msg=f"path must be absolute, got {module.params['path']!r}")
    try:
        result = run(request_of(module.params), module, adapter(module.params["engine"]), takeover)
    except Failure as exc:
        module.fail_json(msg=exc.msg, **exc.fields)
    except MissingLibrary as exc:
        module.fail_json(msg=missing_required_lib(exc.name) + " " + MISSING_TOMLKIT_HINT, exception=exc.error)
    except RuntimeConfigError as exc:
        module.fail_json(msg=str(exc), path=exc.path, line=exc.line, hint=exc.hint)
    except (OSError, ValueError) as exc:
        module.fail_json(msg=to_native(exc), exception=traceback.format_exc())
    module.exit_json(**result.as_dict())


def main() -> None:
    run_module(AnsibleModule(**argspec()))


if __name__ == "__main__":
    main()
