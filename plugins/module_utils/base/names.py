# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The names of the collection's own programs on a host, one home for each.

Discovery looks for them, the installer writes them, the container CLI finds the shim beside itself, and the docker
adapter tells the collection's runtime entry from NVIDIA's by them. Standard library only (target Pythons 3.8+).
"""

from __future__ import annotations

# the OCI runtime shim registered as the engines' ``nvidia`` runtime
SHIM = "gpufleet-container-runtime"
