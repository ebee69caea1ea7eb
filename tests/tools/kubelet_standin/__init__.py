# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A kubelet stand-in for the GPU path only, for tests: no kubelet or API server can run on the build machines.

It does what the kubelet does between a device plugin and the container runtime, and nothing else:

* ``api``: the device plugin API ``v1beta1`` messages (hand-encoded protobuf, as ``tests/sim/cri.py`` does for CRI);
* ``devicemanager``: the Registration service, each plugin's ListAndWatch (health), GetPreferredAllocation and
  Allocate with the kubelet device manager's accounting (allocatable and in-use per resource, a pod asking for more
  than is free is refused, devices freed when a pod ends, a restarted plugin registers again).

Each behaviour names the kubelet source it follows. What it replaces, and what it does not do (scheduling, the API
server, topology manager hints, checkpoints), is in docs/kubernetes.md.
"""
