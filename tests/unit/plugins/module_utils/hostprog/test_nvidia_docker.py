# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""nvidia-docker: nvidia-docker2's argument rewriting (NVIDIA/nvidia-docker, file ``nvidia-docker``)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.base import names
from ansible_collections.gpufleet.nvidia.plugins.module_utils.hostprog import nvidia_docker as nd

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))))


@pytest.mark.parametrize(
    ("args", "env", "expected", "version"),
    [
        (["run", "--rm", "img"], {}, ["docker", "run", "--runtime=nvidia", "--rm", "img"], False),
        (
            ["run", "--rm", "img", "ls"],
            {"NV_GPU": "1"},
            ["docker", "run", "--runtime=nvidia", "-e", "NVIDIA_VISIBLE_DEVICES=1", "--rm", "img", "ls"],
            False,
        ),
        (
            ["-H", "unix:///x.sock", "create", "img"],
            {"NV_GPU": "0 2"},
            ["docker", "-H", "unix:///x.sock", "create", "--runtime=nvidia", "-e", "NVIDIA_VISIBLE_DEVICES=0,2", "img"],
            False,
        ),
        (["run", "img"], {"NV_GPU": ""}, ["docker", "run", "--runtime=nvidia", "img"], False),
        (["ps", "-a"], {"NV_GPU": "1"}, ["docker", "ps", "-a"], False),
        (["version"], {}, ["docker", "version"], True),
        (["--", "run", "x"], {}, ["docker", "--", "run", "x"], False),
        (["image", "ls"], {"NV_DOCKER": "sudo  /opt/docker"}, ["sudo", "/opt/docker", "image", "ls"], False),
        # only the first run/create counts: a later one is an argument of that command
        (["run", "img", "run"], {}, ["docker", "run", "--runtime=nvidia", "img", "run"], False),
    ],
)
def test_docker_argv(args, env, expected, version):
    assert nd.docker_argv(args, env) == (expected, version)


def test_version_line_and_exec(tmp_path):
    fake = tmp_path / "docker"
    fake.write_text('#!/bin/sh\necho "docker $*"\n')
    fake.chmod(0o755)
    # In a fresh interpreter, imported as a package, as the launcher does it (hostprog/install.py).
    top = nd.__file__[: nd.__file__.index("/ansible_collections/")]
    code = f"import sys; sys.path.insert(0, {top!r}); from {nd.__name__} import main"
    code += "; sys.exit(main(['nvidia-docker'] + sys.argv[1:]))"
    env = dict(os.environ, NV_DOCKER=str(fake), NV_GPU="1")
    out = subprocess.run([sys.executable, "-c", code, "version"], env=env, capture_output=True, text=True, check=True)
    assert out.stdout == f"{nd.VERSION_LINE}\ndocker version\n"
    out = subprocess.run([sys.executable, "-c", code, "run", "i"], env=env, capture_output=True, text=True, check=True)
    assert out.stdout == "docker run --runtime=nvidia -e NVIDIA_VISIBLE_DEVICES=1 i\n"
    env["NV_DOCKER"] = str(tmp_path / "missing")
    out = subprocess.run([sys.executable, "-c", code, "ps"], env=env, capture_output=True, text=True, check=False)
    assert out.returncode == 127 and out.stderr.startswith("nvidia-docker: cannot run ") and out.stderr.count("\n") == 1


def test_version_line_carries_the_collections_version():
    assert f"NVIDIA Docker: {names.COLLECTION_VERSION} (gpufleet.nvidia)" == nd.VERSION_LINE
