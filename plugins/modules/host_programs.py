#!/usr/bin/python
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: host_programs
short_description: Install the collection's host programs (runtime shim, CDI hook, CDI refresh, /dev/char links)
version_added: 1.0.0
description:
  - Installs the native container toolkit of this collection on the target, from the module's own payload, so the
    programs on the host are exactly this collection's C(plugins/module_utils) code (one source, no copy in a role).
  - The code goes to C(<libdir>/gpufleet_nvidia/) (the programs' modules and what they import, with their
    subpackages, as in C(plugins/module_utils)); each program is a small launcher in
    O(bindir) that starts the system Python isolated (C(-I -S)) and calls the program's C(main). The runtime shim's
    launcher is a shell script that hands every call but C(create)/C(run) of a GPU container straight to the real
    OCI runtime.
  - "Programs: C(gpufleet-container-runtime) (the OCI runtime shim, registered as runtime C(nvidia)),
    C(gpufleet-cdi-hook) (the createContainer hook the CDI spec calls), C(nvidia-container-runtime-hook) (the
    legacy prestart hook entry point that C(docker run --gpus) calls), C(gpufleet-cdi-refresh) (regenerates the CDI
    spec when the installed driver or the device nodes are not the ones it was made for), C(gpufleet-dev-char-links)
    (creates the C(/dev/char/<major>:<minor>) links of the NVIDIA device nodes) and C(gpufleet-nvidia-devices)
    (creates the device nodes the loaded driver provides, run at boot by the C(runtime) role's unit) and
    C(gpufleet-mig-boot) (applies the host's MIG layout again at boot, run by the C(mig) role's unit) and
    C(gpufleet-gpu-watch) (reads GPU health and new XIDs, writes node exporter metrics and its state file, run every
    interval by the C(gpu_watch) role's timer)."
  - When the runtime shim is among O(programs), also writes the shim's configuration O(config_path) (JSON, sorted
    keys) - whether the shim honours C(NVIDIA_VISIBLE_DEVICES) from an unprivileged container
    (O(accept_envvar_unprivileged)), whether it reads the device plugin's volume mounts as a device request
    (O(accept_volume_mounts)) and whether it honours CDI annotations from an unprivileged container
    (O(accept_cdi_annotations_unprivileged)). The shim trusts the file only when it is owned by root and not writable
    by group or others, so it is written with mode C(0644) by the connecting user (use become), in a directory
    created C(0755).
  - A file is written (atomically, a temporary file renamed over it) only when its bytes, mode or (for the
    configuration) owner differ.
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
options:
  state:
    description:
      - C(present) installs the programs; C(absent) removes the launchers of O(programs) and the package, and
        O(config_path) when the runtime shim is among O(programs).
      - With C(absent), a file in O(bindir) that is not a launcher this module wrote (no C(installed by gpufleet.nvidia)
        line) is left in place with a warning, and O(libdir) and the folder of O(config_path) are removed when
        nothing else is left in them.
    type: str
    choices: [present, absent]
    default: present
  programs:
    description:
      - The programs to install; by default all of them but C(gpufleet-mig-boot) and C(gpufleet-gpu-watch), which the
        C(mig) and C(gpu_watch) roles install where their units run them. With O(state=absent) and no programs
        named, every program's launcher is removed. The package always holds every module.
    type: list
    elements: str
    choices: [gpufleet-container-runtime, gpufleet-cdi-hook, nvidia-container-runtime-hook, gpufleet-cdi-refresh,
      gpufleet-dev-char-links, nvidia-container-cli, nvidia-docker, gpufleet-nvidia-devices, gpufleet-mig-boot,
      gpufleet-gpu-watch]
  bindir:
    description: Where the launchers go.
    type: path
    default: /usr/local/bin
  libdir:
    description: Where the C(gpufleet_nvidia) package goes.
    type: path
    default: /usr/local/lib/gpufleet
  python:
    description: The target's Python 3 (3.8 or later) the programs run with.
    type: path
    default: /usr/bin/python3
  runtime:
    description:
      - The real OCI runtime the shim execs (runc or crun). By default the first of C(/usr/bin/runc),
        C(/usr/sbin/runc), C(/usr/local/bin/runc), C(/usr/local/sbin/runc), C(/usr/bin/crun) that exists, else
        C(/usr/sbin/runc).
    type: path
  accept_envvar_unprivileged:
    description:
      - Whether the runtime shim honours C(NVIDIA_VISIBLE_DEVICES) (the image's or the pod's own) from a container
        without C(CAP_SYS_ADMIN) in its bounding capability set, as an allocation of those GPUs (NVIDIA's
        C(accept-nvidia-visible-devices-envvar-when-unprivileged)).
      - Set C(false) on a Kubernetes node, where the device plugin hands out GPUs; any pod could otherwise take every
        GPU by setting the variable. Privileged containers are honoured either way; CDI annotations as
        O(accept_cdi_annotations_unprivileged) says.
      - Keep C(true) on hosts where only docker or podman start GPU containers (NVIDIA's CUDA images rely on their
        C(ENV NVIDIA_VISIBLE_DEVICES)).
      - Written to O(config_path) only when the runtime shim is among O(programs).
    type: bool
    default: true
  accept_volume_mounts:
    description:
      - Whether the runtime shim reads mounts of C(/dev/null) on C(/var/run/nvidia-container-devices/<device>) as a
        request for those devices (NVIDIA's C(accept-nvidia-visible-devices-as-volume-mounts)); this is what
        NVIDIA's device plugin passes with C(deviceListStrategy=volume-mounts). An unprivileged container cannot
        make such a mount itself.
      - Written to O(config_path) only when the runtime shim is among O(programs).
    type: bool
    default: false
  accept_cdi_annotations_unprivileged:
    description:
      - Whether the runtime shim honours C(cdi.k8s.io/<key>) and C(nvidia.cdi.k8s.io/<key>) annotations
        (C(nvidia.com/gpu=<device>)) in the C(config.json) of a container without C(CAP_SYS_ADMIN) in its bounding
        capability set, as an allocation of those GPUs. C(false) - they are ignored there (not even parsed); a
        privileged container's still count. NVIDIA's runtime has no such setting (it honours them in its C(cdi) mode).
      - Set C(false) on a Kubernetes node, since CRI-O copies every pod annotation into every container's OCI spec,
        and containerd those its runtime's C(pod_annotations) match, so any pod could otherwise take every GPU with
        C(cdi.k8s.io/x=nvidia.com/gpu=all). The device plugin's CDI strategies do not need the shim there, since the
        engine applies the plugin's CDI annotations itself (the C(device_plugin) role requires CDI in the engine).
      - Keep C(true) (the default) on hosts where only docker or podman start GPU containers (C(--annotation)).
      - Written to O(config_path) only when the runtime shim is among O(programs).
    type: bool
    default: true
  debug_log:
    description:
      - A file the runtime shim appends one JSON line to per GPU container start (what was asked for, the devices, how
        many mounts were added, the time it took in ms, the error when the start failed), like the C(debug) option of
        NVIDIA's C(config.toml). Empty (the default) turns it off, at no cost to a container start.
      - Written to O(config_path) as C(debug_log) only when set. The shim writes only into a directory owned by root
        and not writable by group or others, never through a link, FIFO or device (O_APPEND, O_NOFOLLOW).
    type: str
    default: ""
  config_path:
    description:
      - The runtime shim's configuration file. The shim reads C(/etc/gpufleet/runtime.json); another path is only
        for a shim told to read its configuration there (tests).
      - Its directory must be owned by root and not writable by group or others (the module fails otherwise, as the
        shim would refuse the file).
    type: path
    default: /etc/gpufleet/runtime.json
"""

EXAMPLES = r"""
- name: Install every host program
  gpufleet.nvidia.host_programs:
  register: toolkit

- name: Install them on a Kubernetes node (devices only through the device plugin's volume mounts or CDI)
  gpufleet.nvidia.host_programs:
    accept_envvar_unprivileged: false
    accept_volume_mounts: true
    accept_cdi_annotations_unprivileged: false

- name: Only the helpers NVIDIA's packages do not bring
  gpufleet.nvidia.host_programs:
    programs: [gpufleet-cdi-hook, gpufleet-cdi-refresh, gpufleet-dev-char-links]

- name: Remove them
  gpufleet.nvidia.host_programs:
    state: absent
"""

RETURN = r"""
programs:
  description: Program name to the path of its launcher.
  returned: always
  type: dict
  sample: {gpufleet-container-runtime: /usr/local/bin/gpufleet-container-runtime}
files:
  description: Every file the installation holds (package, launchers and, with the runtime shim, O(config_path)).
  returned: always
  type: list
  elements: str
changed_files:
  description: The files written or removed (or, in check mode, that would be).
  returned: always
  type: list
  elements: str
digest:
  description:
    - SHA-256 of the programs installed (paths and contents), short; changes exactly when the programs do (a change
      of the shim's configuration alone leaves it as it is).
  returned: when state is present
  type: str
  sample: 3f2a9c01d4e5
runtime:
  description: The real OCI runtime the shim execs.
  returned: when state is present
  type: str
  sample: /usr/sbin/runc
runtime_config:
  description: The runtime shim's configuration as written to O(config_path) (or, in check mode, as it would be).
  returned: when state is present and the runtime shim is among O(programs)
  type: dict
  contains:
    path:
      description: O(config_path).
      type: str
      sample: /etc/gpufleet/runtime.json
    accept_envvar_unprivileged:
      description: O(accept_envvar_unprivileged).
      type: bool
      sample: false
    accept_volume_mounts:
      description: O(accept_volume_mounts).
      type: bool
      sample: true
    accept_cdi_annotations_unprivileged:
      description: O(accept_cdi_annotations_unprivileged).
      type: bool
      sample: false
    debug_log:
      description: O(debug_log) (empty when off).
      type: str
      sample: ""
  sample:
    path: /etc/gpufleet/runtime.json
    accept_envvar_unprivileged: false
    accept_volume_mounts: true
    accept_cdi_annotations_unprivileged: false
    debug_log: ""
diff:
  description: Before and after of every changed file (with C(--diff)).
  returned: when something changed and diff mode is on
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule

# The programs' own modules are imported here, so that Ansible puts them, and everything they import, into this
# module's payload; the work reads their sources back from the payload (``install.read_payload_source``), never from
# the controller or a copy. ``install.payload`` computes the same closure from the sources (a unit test checks they
# agree).
from ansible_collections.gpufleet.nvidia.plugins.module_utils.base.runner import STATE, run_module
from ansible_collections.gpufleet.nvidia.plugins.module_utils.hostprog import cdi_hook as _cdi_hook  # noqa: F401
from ansible_collections.gpufleet.nvidia.plugins.module_utils.hostprog import cdi_refresh as _cdi_refresh  # noqa: F401
from ansible_collections.gpufleet.nvidia.plugins.module_utils.hostprog import container_cli as _container_cli  # noqa: F401
from ansible_collections.gpufleet.nvidia.plugins.module_utils.hostprog import dev_char as _dev_char  # noqa: F401
from ansible_collections.gpufleet.nvidia.plugins.module_utils.hostprog import dev_nodes as _dev_nodes  # noqa: F401
from ansible_collections.gpufleet.nvidia.plugins.module_utils.hostprog import gpu_watch as _gpu_watch  # noqa: F401
from ansible_collections.gpufleet.nvidia.plugins.module_utils.hostprog import install as _host_programs
from ansible_collections.gpufleet.nvidia.plugins.module_utils.hostprog import nvidia_docker as _nvidia_docker  # noqa: F401
from ansible_collections.gpufleet.nvidia.plugins.module_utils.hostprog import shim as _shim  # noqa: F401
from ansible_collections.gpufleet.nvidia.plugins.module_utils.mig import boot as _mig_boot  # noqa: F401


def argspec() -> dict:
    return {
        "state": STATE,
        "programs": {"type": "list", "elements": "str", "choices": list(_host_programs.PROGRAMS)},
        "bindir": {"type": "path", "default": "/usr/local/bin"},
        "libdir": {"type": "path", "default": "/usr/local/lib/gpufleet"},
        "python": {"type": "path", "default": _host_programs.PYTHON},
        "runtime": {"type": "path"},
        "accept_envvar_unprivileged": {"type": "bool", "default": True},
        "accept_volume_mounts": {"type": "bool", "default": False},
        "accept_cdi_annotations_unprivileged": {"type": "bool", "default": True},
        "debug_log": {"type": "str", "default": ""},
        "config_path": {"type": "path", "default": _host_programs.RUNTIME_CONFIG},
    }


def main() -> None:
    module = AnsibleModule(argument_spec=argspec(), supports_check_mode=True)
    run_module(module, _host_programs.ProgramsRequest.from_params, _host_programs.install_programs)


if __name__ == "__main__":
    main()
