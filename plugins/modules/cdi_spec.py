#!/usr/bin/python
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: cdi_spec
short_description: Write the CDI spec that injects the NVIDIA driver into containers
version_added: 1.0.0
description:
  - Writes a Container Device Interface (CDI) spec of kind C(nvidia.com/gpu) that every CDI-aware engine
    (podman, containerd 1.7 and later, CRI-O, docker 25 and later) reads to give a container its GPUs.
  - One device per GPU by index and by UUID, one per MIG device when MIG is enabled, and C(all). The
    common edits hold the control device nodes, every driver library of the chosen capabilities (found
    through the driver root's C(ld.so.cache)), the driver binaries, the IPC sockets that exist, the GSP
    firmware and a createContainer hook that updates the container's ld cache and creates the
    C(libcuda.so) links.
  - The driver version is stamped in the spec's top-level annotation C(gpufleet.nvidia/driver-version)
    (a comment line at O(cdi_version=0.5.0)), so a spec left over from an older driver can be detected.
  - Also writes a compact JSON index next to it (O(index_path)), which the collection's runtime shim
    C(gpufleet-container-runtime) reads on every GPU container start.
  - The files are written atomically with mode C(0644); a second run on an unchanged host changes nothing.
  - With O(disable_others=true) (the default) it never leaves two specs for one device - every other spec in the
    directories the engines read (C(/etc/cdi), C(/var/run/cdi)) that claims one of its devices, NVIDIA's
    C(nvidia-ctk cdi generate) output among them, is moved aside to C(<path>.gpufleet-disabled) in its own folder
    (a name the CDI cache does not load), and a spec at O(path) that this module did not write is kept there as a
    backup before it is replaced. Two specs of one directory for one device make the CDI cache drop the device for
    every engine; across directories the one in C(/var/run/cdi) silently wins (container-device-interface
    C(pkg/cdi/cache.go)). NVIDIA's C(nvidia-cdi-refresh) units write C(/var/run/cdi/nvidia.yaml) again; the
    C(gpufleet.nvidia.runtime) role masks them first.
author:
  - gpufleet.nvidia contributors (@gpufleet)
attributes:
  check_mode:
    support: full
    description: Reports what would change and writes nothing.
  diff_mode:
    support: full
    description: Shows the spec before and after, and each spec moved aside (its path and its backup).
  idempotent:
    support: full
    description: The same host renders the same bytes.
options:
  path:
    description: Where the CDI spec goes (in the terms of O(root)).
    type: path
    default: /etc/cdi/nvidia.yaml
  state:
    description: C(present) writes the spec and index, C(absent) removes both.
    type: str
    choices: [present, absent]
    default: present
  format:
    description: The spec's format. The index is always JSON.
    type: str
    choices: [yaml, json]
    default: yaml
  index_path:
    description:
      - Where the runtime shim's JSON index goes (in the terms of O(root)); outside C(/etc/cdi) so CDI
        engines do not read it as a second spec.
      - An empty string writes no index.
    type: path
    default: /etc/gpufleet/cdi-nvidia.json
  root:
    description: Where the host's file system is mounted (C(/host) when running in a container).
    type: path
    default: /
  driver_root:
    description:
      - The root of the driver installation, in host terms (C(/run/nvidia/driver) for a containerized driver).
      - Its libraries are found through its C(etc/ld.so.cache); a root without one (a driver kept in a tree of its
        own, such as C(/usr/local/nvidia) with C(lib64/) and C(bin/)) is searched in the library directories NVIDIA's
        C(nvidia-ctk) searches (C(lib64), C(usr/lib64), C(lib/x86_64-linux-gnu), ...).
    type: path
    default: /
  dev_root:
    description: The root under which the C(/dev/nvidia*) nodes are found, in host terms.
    type: path
    default: /
  device_name_strategy:
    description: How devices are named; both by default (C(nvidia.com/gpu=0) and C(nvidia.com/gpu=GPU-<uuid>)).
    type: list
    elements: str
    choices: [index, uuid]
    default: [index, uuid]
  capabilities:
    description:
      - The driver capabilities whose files the spec mounts; C(all) is every capability the driver provides.
      - One of C(utility), C(compute), C(video), C(graphics), C(display), C(ngx), C(compat32), C(all).
    type: list
    elements: str
    default: [all]
  disable_others:
    description:
      - Move every other CDI spec that claims one of this spec's devices aside (C(<path>.gpufleet-disabled)), and keep
        a spec at O(path) this module did not write as that backup before replacing it. RV(disabled) lists them.
    type: bool
    default: true
  record_path:
    description:
      - The takeover record (in the terms of O(root)) where each spec moved aside (O(disable_others)) is recorded, so
        that M(gpufleet.nvidia.takeover) O(state=absent) (C(uninstall.yml)) moves it back. An empty string keeps no
        record.
    type: path
    default: /var/lib/gpufleet-nvidia/takeover.json
  hook_path:
    description: The createContainer hook the spec calls (installed by the C(toolkit) role).
    type: path
    default: /usr/local/bin/gpufleet-cdi-hook
  gpus:
    description:
      - The GPUs, as in C(ansible_facts.nvidia.gpus) (C(index), C(minor), C(uuid), C(mig_mode), C(mig_devices)).
      - When omitted, the GPUs C(gpu_facts)' discovery finds under O(root) that have a device minor; when it
        finds none, one GPU per C(/dev/nvidia<N>) node under O(dev_root), without UUIDs.
    type: list
    elements: dict
  driver_version:
    description: The driver version to select files for; by default the installed userspace's.
    type: str
  cuda_version:
    description:
      - The CUDA version the driver supports (V(12.2)), for C(NVIDIA_REQUIRE_CUDA); by default from the driver branch.
      - A value that is no C(major.minor) version (nvidia-smi's C(Not Found)) is refused.
    type: str
  cdi_version:
    description:
      - The spec's C(cdiVersion). C(0.7.0) is needed where the driver's device files are not readable and writable by
        everyone (the nvidia module's C(NVreg_DeviceFileGID)/C(NVreg_DeviceFileMode), such as C(0660) for group
        C(video); read from C(/proc/driver/nvidia/params), else the C(options nvidia) lines of C(modprobe.d)) - the GPU
        device nodes then carry the host's owner, group and mode, and the spec's C(additionalGids) puts the
        container's process in that group, so a non-root container opens its GPU as a member of the group would on
        the host. Engines that read it and keep the group for the container's process - podman 5.1, containerd
        1.7.16, CRI-O 1.30, docker 29.5 and later (docker 26.1 to 29.4 read it but drop the group).
      - C(0.6.0) carries the driver version, CUDA version and device-node fingerprint as
        top-level annotations. C(0.5.0) is for engines whose CDI library reads no newer spec (podman before 4.7,
        such as Debian 12's 4.3; containerd before 1.7.12; CRI-O before 1.28); it has no annotations, so the YAML
        spec carries those stamps as comment lines under its header (C(0.5.0) with O(format=json) is refused).
      - V(auto) picks the newest version that every engine found on the host (installed, at a version that reads CDI
        specs) reads, up to C(0.7.0) where the device files need it and C(0.6.0) elsewhere, as C(gpu_facts) finds the
        engines and their versions; a podman of unknown version counts as old. Below C(0.7.0) the spec keeps the
        nodes as before (the engine makes them mode 0666 and owned by the container's user, so non-root containers
        keep their GPU, without the host's group and mode); RV(cdi_version_reason) names the engines that held it.
      - The shim's index (O(index_path)) always carries the host's owner, group and mode and the group.
    type: str
    choices: [auto, "0.5.0", "0.6.0", "0.7.0"]
    default: auto
notes:
  - Regenerate the spec after every driver change; compare C(driver_version) with the annotation to find stale specs.
"""

EXAMPLES = r"""
- name: Write the CDI spec from the facts gpu_facts gathered
  gpufleet.nvidia.cdi_spec:
    gpus: "{{ ansible_facts.nvidia.gpus }}"

- name: Only utility and compute, names by UUID, JSON
  gpufleet.nvidia.cdi_spec:
    path: /etc/cdi/nvidia.json
    format: json
    capabilities: [utility, compute]
    device_name_strategy: [uuid]

- name: Remove the spec
  gpufleet.nvidia.cdi_spec:
    state: absent
"""

RETURN = r"""
path:
  description: The spec's path.
  returned: always
  type: str
  sample: /etc/cdi/nvidia.yaml
disabled:
  description: The specs moved aside (O(disable_others)), each C({path, backup, devices}) - would be, in check mode.
  returned: when state is present
  type: list
  elements: dict
  sample: [{path: /var/run/cdi/nvidia.yaml, backup: /var/run/cdi/nvidia.yaml.gpufleet-disabled, devices: ["0", all]}]
index_path:
  description: The index's path (empty when none is written).
  returned: always
  type: str
  sample: /etc/gpufleet/cdi-nvidia.json
driver_version:
  description: The driver version stamped in the spec.
  returned: when state is present
  type: str
  sample: 535.261.03
cuda_version:
  description: The CUDA version recorded for requirement checks.
  returned: when state is present
  type: str
  sample: "12.2"
cdi_version:
  description: The spec's C(cdiVersion) (what V(auto) chose).
  returned: when state is present
  type: str
  sample: "0.6.0"
cdi_version_reason:
  description: Why that version (the engines that held V(auto) below C(0.6.0) or below the C(0.7.0) the device files
    need, or the value given).
  returned: when state is present
  type: str
  sample: "auto: podman 4.3.1+ds1-8+deb12u1 reads cdiVersion 0.5.0 at most"
device_files:
  description:
    - The driver's device-file parameters the spec follows - C(uid), C(gid), C(mode) (octal text), C(source)
      (C(/proc/driver/nvidia/params), C(modprobe.d) or C(default)) - and C(additional_gids), the groups a container's
      process is given (empty where the files are open to everyone).
  returned: when state is present
  type: dict
  sample: {uid: 0, gid: 44, mode: "0660", source: modprobe.d, additional_gids: [44]}
devices:
  description: The device names in the spec (qualify them as C(nvidia.com/gpu=<name>)).
  returned: when state is present
  type: list
  elements: str
  sample: ["0", "GPU-4b6c5f0e-0000-0000-0000-000000000000", "all"]
spec:
  description: The spec written, as data.
  returned: when state is present
  type: dict
removed_temporary_files:
  description:
    - The temporary files (C(.<name>.gpufleet-<PID>-<hex>)) an earlier run killed between writing and renaming
      left next to the spec or the index, removed by this run (listed, not removed, in check mode). Only files of
      that exact name whose writer process is gone or that are over an hour old; an admin's file never.
  returned: when there were any
  type: list
  elements: str
  sample: [/etc/cdi/.nvidia.yaml.gpufleet-4242-0badc0de]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.nvidia.plugins.module_utils.base.runner import ROOT, STATE, run_module
from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi.spec import DEFAULT_INDEX_PATH, HOOK_PATH
from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery import takeover
from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery.cdi_writer import SpecRequest, write_spec
from ansible_collections.gpufleet.nvidia.plugins.module_utils.runtime.common import CDI_SPEC_VERSIONS


def argspec() -> dict:
    return {
        "path": {"type": "path", "default": "/etc/cdi/nvidia.yaml"},
        "state": STATE,
        "format": {"type": "str", "choices": ["yaml", "json"], "default": "yaml"},
        "index_path": {"type": "path", "default": DEFAULT_INDEX_PATH},
        "root": ROOT,
        "driver_root": {"type": "path", "default": "/"},
        "dev_root": {"type": "path", "default": "/"},
        "device_name_strategy": {
            "type": "list",
            "elements": "str",
            "choices": ["index", "uuid"],
            "default": ["index", "uuid"],
        },
        "capabilities": {"type": "list", "elements": "str", "default": ["all"]},
        "hook_path": {"type": "path", "default": HOOK_PATH},
        "disable_others": {"type": "bool", "default": True},
        "record_path": takeover.RECORD_PATH_OPTION,
        "gpus": {"type": "list", "elements": "dict"},
        "driver_version": {"type": "str"},
        "cuda_version": {"type": "str"},
        "cdi_version": {"type": "str", "choices": ["auto", *CDI_SPEC_VERSIONS], "default": "auto"},
    }


def main() -> None:
    module = AnsibleModule(argument_spec=argspec(), supports_check_mode=True)
    run_module(module, SpecRequest.from_params, write_spec)


if __name__ == "__main__":
    main()
