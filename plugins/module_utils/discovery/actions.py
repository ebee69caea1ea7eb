# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a GPU problem asks of remediation, as one class: the one home of that fact, read by the GPU watch (the
``action`` label of its metrics) and by the remediation plan.

* ``RESET_GPU``: drain the GPU, then reset it (``nvidia-smi -r``) or, when that is not possible, reboot;
* ``RESTART_BM``: drain the node and reboot it;
* ``CONTACT_SUPPORT``: drain and leave out of service (an RMA case);
* ``NONE``: nothing remediation does (an application's fault, cooling or power to check).

For an XID (``gpu_xid_<n>``) the class follows the resolution bucket of NVIDIA's Xid catalog (``xid.ACTIONS``;
https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, read 2026-11-28): RESET_GPU, RESTART_BM and
CONTACT_SUPPORT as the catalog names them; WORKFLOW_XID_48 (double-bit ECC) and WORKFLOW_NVLINK_ERR end in a GPU
reset in the catalog's procedures; RESTART_APP, IGNORE and WORKFLOW_XID_45 are an application's (NONE). For the
health counters as the problems' fixes say (NVIDIA's "GPU Memory Error Management",
https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/, read 2026-11-28: a pending remap or retirement takes effect
at the next GPU reset; a remapping failure is an RMA case).

Standard library only (target Pythons 3.8+).
"""

from __future__ import annotations

from .xid import action as xid_action

RESET_GPU = "RESET_GPU"
RESTART_BM = "RESTART_BM"
CONTACT_SUPPORT = "CONTACT_SUPPORT"
NONE = "NONE"
CLASSES = (RESET_GPU, RESTART_BM, CONTACT_SUPPORT, NONE)

# Problem code -> class, for the codes that are no XID.
BY_CODE = {
    "gpu_ecc_uncorrectable": RESET_GPU,
    "gpu_row_remap_pending": RESET_GPU,
    "gpu_retired_pages_pending": RESET_GPU,
    "gpu_row_remap_failed": CONTACT_SUPPORT,
    # A GPU NVML calls lost answers no reset (nvidia-smi -r needs the GPU on the bus): the node reboots, as for Xid 79.
    "gpu_lost": RESTART_BM,
    "gpu_clocks_throttled": NONE,
}
# Xid catalog bucket -> class.
BY_BUCKET = {
    "RESET_GPU": RESET_GPU,
    "RESTART_BM": RESTART_BM,
    "CONTACT_SUPPORT": CONTACT_SUPPORT,
    "WORKFLOW_XID_48": RESET_GPU,
    "WORKFLOW_NVLINK_ERR": RESET_GPU,
}


def xid_class(xid: int) -> str:
    """The class of XID ``xid`` (its catalog bucket's); NONE for an application's XID or one not in the table."""
    return BY_BUCKET.get(xid_action(xid)[0], NONE)


def action_class(code: str) -> str:
    """The class of the problem ``code`` (``gpu_xid_79``, ``gpu_row_remap_pending``, ...); NONE for any other code."""
    if code.startswith("gpu_xid_") and code[len("gpu_xid_") :].isdigit():
        return xid_class(int(code[len("gpu_xid_") :]))
    return BY_CODE.get(code, NONE)
