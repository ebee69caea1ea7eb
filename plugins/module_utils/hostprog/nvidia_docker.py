# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""``nvidia-docker``: nvidia-docker2's wrapper around the docker client, for the commands old guides still show.

Behaviour of NVIDIA's script (NVIDIA/nvidia-docker, file ``nvidia-docker``, the 2.x wrapper; read 2026-11-23):
the arguments are scanned in order up to the first ``run``/``create`` (then ``--runtime=nvidia`` is added after
it, and ``-e NVIDIA_VISIBLE_DEVICES=<NV_GPU with spaces turned into commas>`` when ``NV_GPU`` is set and not
empty), ``version`` (then ``NVIDIA Docker: <version>`` is printed before docker's own output) or ``--``; everything
is passed to docker unchanged otherwise. ``NV_DOCKER`` names the docker client (default ``docker``; split on
blanks as the script's unquoted ``$NV_DOCKER`` is, so ``NV_DOCKER="sudo docker"`` works). The client is exec'd.

``--runtime=nvidia`` is the runtime the ``runtime`` role registers (the collection's shim), so ``NV_GPU=1
nvidia-docker run ...`` gets GPU 1 as it did with nvidia-docker2. Nothing here runs as anything but the user,
and the docker client checks what it is given.

Standard library only (target Pythons 3.8+).
"""

from __future__ import annotations

import os
import sys

from ..base.names import COLLECTION_VERSION
from ..base.oneline import error_line

NAME = "nvidia-docker"
VERSION_LINE = f"NVIDIA Docker: {COLLECTION_VERSION} (gpufleet.nvidia)"


def docker_argv(args: list[str], env: dict[str, str]) -> tuple[list[str], bool]:
    """``(the docker command line, whether to print the version line first)`` for ``nvidia-docker args``."""
    docker = (env.get("NV_DOCKER") or "docker").split() or ["docker"]
    head: list[str] = []
    added: list[str] = []
    version = False
    rest: list[str] = []
    for i, arg in enumerate(args):
        head.append(arg)
        if arg in ("run", "create"):
            added = ["--runtime=nvidia"]
            gpus = env.get("NV_GPU") or ""
            if gpus:
                added += ["-e", "NVIDIA_VISIBLE_DEVICES=" + gpus.replace(" ", ",")]
            rest = args[i + 1 :]
            break
        if arg == "version":
            version = True
            rest = args[i + 1 :]
            break
        if arg == "--":
            rest = args[i + 1 :]
            break
    return [*docker, *head, *added, *rest], version


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv if argv is None else argv
    command, version = docker_argv(list(argv[1:]), dict(os.environ))
    if version:
        sys.stdout.write(VERSION_LINE + "\n")
        sys.stdout.flush()
    try:
        os.execvp(command[0], command)  # noqa: S606  # the user's own docker client, as nvidia-docker2 ran it
    except OSError as exc:
        sys.stderr.write(error_line(NAME, f"cannot run {command[0]}: {exc.strerror or exc}"))
        return 127
    return 0  # not reached
