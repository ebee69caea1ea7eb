#!/usr/bin/python
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: mig_layout
short_description: Partition NVIDIA GPUs with MIG from a layout in mig-parted's vocabulary
version_added: 1.0.0
description:
  - Takes the GPUs the O(layout) names to the MIG mode and MIG instances it asks for, through NVML (ctypes, no
    Python package), as NVIDIA's mig-parted does - a GPU whose instances already match (the same count of each
    profile) is left alone; any difference destroys its instances and creates the layout's, each GPU instance
    with one compute instance spanning it.
  - A GPU is changed only while no process holds it (C(/dev/nvidia<minor>), as C(gpu_facts)' C(gpu_users) sees
    them); otherwise the module fails naming the processes, and changes nothing on any GPU.
  - Refuses a profile the GPU model does not offer (the message lists those it offers), a combination that does not
    fit on one GPU and a GPU without MIG, before any change.
  - Each GPU's profiles and placements are read from the GPU through NVML
    (C(nvmlDeviceGetGpuInstanceProfileInfo), C(nvmlDeviceGetGpuInstancePossiblePlacements_v2)), so any MIG-capable
    model works, a new one included; profiles are named as C(nvidia-smi) and mig-parted name them, for instance
    1g.5gb, 1g.5gb+me, 1g.10gb, 2g.10gb, 3g.20gb, 4g.20gb, 7g.40gb on an A100-40GB.
  - Where NVML lists no profiles while MIG is off, apply a layout with C(mig-enabled) and no C(mig-devices) first.
  - After a change, regenerate the CDI spec (M(gpufleet.nvidia.cdi_spec)) so that containers see the MIG devices.
author:
  - gpufleet.nvidia contributors (@gpufleet)
options:
  layout:
    description:
      - One layout, the list of entries of one named item of mig-parted's C(mig-configs). Each entry has
        C(devices) (V(all), the default, or a list of GPU indices), optionally C(device-filter) (a PCI device id
        such as V(0x20B010DE), or a product name such as V(A100-SXM4-40GB), or a list of them), C(mig-enabled)
        (required) and C(mig-devices) (a dict of profile to count, for instance 7 of V(1g.5gb)).
      - A GPU no entry names is left as it is; a GPU two entries name is an error.
    type: list
    elements: dict
    required: true
extends_documentation_fragment:
  - gpufleet.nvidia.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
  idempotent:
    support: full
notes:
  - Enabling or disabling MIG mode resets the GPU on bare metal; where NVML says the mode is pending (a GPU reset
    that could not happen, some virtual machines), the module fails and says to reset the GPU or reboot.
seealso:
  - name: NVIDIA mig-parted
    description: The layout vocabulary.
    link: https://github.com/NVIDIA/mig-parted
  - name: NVIDIA MIG user guide
    description: Profiles and placements per GPU model (what NVML reports on each).
    link: https://docs.nvidia.com/datacenter/tesla/mig-user-guide/
"""

EXAMPLES = r"""
- name: Seven 1g.5gb instances on every A100
  gpufleet.nvidia.mig_layout:
    layout:
      - devices: all
        device-filter: A100-SXM4-40GB
        mig-enabled: true
        mig-devices:
          1g.5gb: 7
  register: mig

- name: Regenerate the CDI spec after a change
  gpufleet.nvidia.cdi_spec: {}
  when: mig is changed

- name: MIG off on GPU 1
  gpufleet.nvidia.mig_layout:
    layout:
      - devices: [1]
        mig-enabled: false
"""

RETURN = r"""
gpus:
  description: Per GPU the layout names, what it had and what it has now (or would have, in check mode).
  type: list
  elements: dict
  returned: always
  contains:
    index:
      description: GPU index.
      type: int
      returned: always
    uuid:
      description: GPU UUID.
      type: str
      returned: always
    before:
      description: "For instance C(MIG disabled) or C(MIG enabled: 1g.5gb x7)."
      type: str
      returned: always
    after:
      description: The same, after the layout.
      type: str
      returned: always
    changed:
      description: Whether this GPU changed (or would).
      type: bool
      returned: always
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.nvidia.plugins.module_utils.base.runner import run_module
from ansible_collections.gpufleet.nvidia.plugins.module_utils.mig.apply import LayoutRequest, apply_layout


def argspec() -> dict:
    return {"layout": {"type": "list", "elements": "dict", "required": True}}


def main() -> None:
    module = AnsibleModule(argument_spec=argspec(), supports_check_mode=True)
    run_module(module, LayoutRequest.from_params, apply_layout)


if __name__ == "__main__":
    main()
