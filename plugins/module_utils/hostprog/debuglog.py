# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The host programs' debug log: one JSON line per GPU container start, like NVIDIA's ``debug`` option of
``/etc/nvidia-container-runtime/config.toml``.

On only when ``/etc/gpufleet/runtime.json`` names a file in ``debug_log`` (the toolkit role's ``toolkit_debug_log``);
off, nothing of this module is imported. The file is opened ``O_WRONLY|O_APPEND|O_CREAT|O_NOFOLLOW|O_NONBLOCK``
(mode 0600) only inside a directory that is no link, is owned by root (or the program's own user) and is not writable
by group or others, and it must be a regular file: a planted link, FIFO or device is never written through. A line
that cannot be written is dropped; the log never fails or delays a container start.
"""

from __future__ import annotations

import os
import stat

MAX_LINE = 64 << 10


def append(path: object, fields: dict) -> bool:
    """Append ``fields`` as one JSON line (with ``time``, UTC) to ``path``; True when written."""
    if not isinstance(path, str) or not os.path.isabs(path):
        return False
    try:
        folder = os.lstat(os.path.dirname(path) or "/")
        if not stat.S_ISDIR(folder.st_mode) or folder.st_uid not in (0, os.geteuid()) or folder.st_mode & 0o022:
            return False
        import time  # noqa: PLC0415  # only with the log on

        from ..base.jsonio import dumps  # noqa: PLC0415

        line = dumps({"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **fields})
        data = (" ".join(line.splitlines())[:MAX_LINE] + "\n").encode("utf-8", "backslashreplace")
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        fd = os.open(path, flags, 0o600)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return False
            os.write(fd, data)
        finally:
            os.close(fd)
    except (OSError, ValueError, TypeError):
        return False
    return True
