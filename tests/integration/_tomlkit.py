# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""tomlkit on a simulated node, for the runtime role (containerd's config), as python3-tomlkit would be: the node
images do not carry it and no Debian mirror is reachable from them, so the controller's pure-Python copy goes on the
node's path. Put it there before a snapshot, so that no package comes and stays with ``site.yml``."""

from __future__ import annotations

import io
import os
import tarfile
from typing import Any

INSTALL = (
    "mkdir -p /usr/local/lib/gpufleet-test && tar -C /usr/local/lib/gpufleet-test -xf /tmp/gpufleet-tomlkit.tar && "
    "rm /tmp/gpufleet-tomlkit.tar && echo /usr/local/lib/gpufleet-test > "
    '"$(python3 -c "import sysconfig; print(sysconfig.get_paths()[\'purelib\'])")/gpufleet-test.pth" && '
    'python3 -c "import tomlkit"'
)


def tomlkit_tar() -> bytes:
    """The controller's tomlkit package as a tar (no ``__pycache__``): build it once for several nodes."""
    import tomlkit  # the controller's copy

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(
            os.path.dirname(tomlkit.__file__),
            arcname="tomlkit",
            filter=lambda t: None if "__pycache__" in t.name else t,
        )
    return buf.getvalue()


def install_tomlkit(node: Any, tar: bytes | None = None) -> None:
    """Unpack ``tar`` (default: a fresh ``tomlkit_tar()``) on ``node`` and put it on the target Python's path."""
    node.put("/tmp/gpufleet-tomlkit.tar", tomlkit_tar() if tar is None else tar)
    node.run(INSTALL, check=True)
