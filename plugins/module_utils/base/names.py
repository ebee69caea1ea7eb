# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The names of the collection's own programs on a host, one home for each.

Discovery looks for them, the installer writes them, the container CLI finds the shim beside itself, and the docker
adapter tells the collection's runtime entry from NVIDIA's by them. Also the collection's version, as the host programs
print it. Standard library only (target Pythons 3.8+); no imports at all (``nvidia-container-cli --version`` and
``nvidia-docker version`` read it).
"""

from __future__ import annotations

# the OCI runtime shim registered as the engines' ``nvidia`` runtime
SHIM = "gpufleet-container-runtime"

# galaxy.yml's ``version`` (a unit test keeps them equal): ``nvidia-container-cli --version``, ``nvidia-docker version``
COLLECTION_VERSION = "1.0.0"
