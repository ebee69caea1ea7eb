# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""stage_toolkit and stage_runtime: an earlier stage's published fact when it ran in this play, else what gpu_facts
read from the host."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.validate.stage_facts import stage_runtime, stage_toolkit
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.device_plugin.problems import runtime_problems

pytestmark = pytest.mark.controller

DISCOVERED_TOOLKIT = {
    "provider": "native",
    "runtime_path": "/usr/local/bin/gpufleet-container-runtime",
    "hook_path": "/usr/local/bin/gpufleet-cdi-hook",
    "programs": ["/usr/local/bin/gpufleet-container-runtime"],
    "version": None,
    "accept_envvar_unprivileged": False,
    "accept_volume_mounts": True,
    "source": "discovered",
}
NVIDIA = {
    "toolkit": DISCOVERED_TOOLKIT,
    "cdi_spec": {"path": "/etc/cdi/nvidia.yaml", "driver_version": "550.127.05"},
    "device_nodes": [{"char_link_present": True}, {"char_link_present": False}],
    "engines": {
        "docker": {
            "installed": True,
            "version": "26.1.5",
            "config_path": "/etc/docker/daemon.json",
            "runtimes": ["nvidia"],
            "default_runtime": "nvidia",
            "cdi_enabled": True,
        },
        "containerd": {
            "installed": True,
            "version": "1.6.20",
            "config_path": "/etc/containerd/config.toml",
            "runtimes": ["runc"],
            "default_runtime": "runc",
            "cdi_enabled": True,
        },
        "crio": {"installed": False},
        "podman": {"installed": True, "version": "5.4.2"},
    },
}


def test_the_published_toolkit_wins() -> None:
    published = {"provider": "nvidia", "runtime_path": "/usr/bin/nvidia-container-runtime"}
    assert stage_toolkit(published, NVIDIA) == published


@pytest.mark.parametrize("published", [None, {}])
def test_else_the_toolkit_on_the_host(published) -> None:
    assert stage_toolkit(published, NVIDIA) == DISCOVERED_TOOLKIT


def test_no_toolkit_anywhere() -> None:
    assert stage_toolkit(None, {"toolkit": None}) is None
    assert stage_toolkit(None, None) is None


def test_the_published_runtime_wins() -> None:
    published = {"engines": {"containerd": {"registered": True}}}
    assert stage_runtime(published, NVIDIA) == published


def test_else_the_engines_as_the_host_configures_them() -> None:
    fact = stage_runtime(None, NVIDIA)
    assert fact["source"] == "discovered"
    assert sorted(fact["engines"]) == ["containerd", "docker", "podman"]
    docker, containerd, podman = (fact["engines"][e] for e in ("docker", "containerd", "podman"))
    assert (docker["registered"], docker["default"], docker["cdi"]) == (True, True, True)
    # containerd 1.6 reads no CDI spec, whatever its config says
    assert (containerd["registered"], containerd["default"], containerd["cdi"]) == (False, False, False)
    assert podman["cdi"] is True and podman["registered"] is False
    assert fact["cdi_spec"] == {"path": "/etc/cdi/nvidia.yaml", "driver_version": "550.127.05", "devices": []}
    assert fact["dev_char_links"] == 1
    assert all(e["changed"] is False for e in fact["engines"].values())


def test_another_runtime_name() -> None:
    fact = stage_runtime(None, NVIDIA, "gpu")
    assert fact["engines"]["docker"]["registered"] is False


def test_nothing_to_read() -> None:
    assert stage_runtime(None, {"engines": {"docker": {"installed": False}}, "cdi_spec": None}) is None
    assert stage_runtime(None, None) is None


def test_the_device_plugin_check_reads_the_host_when_the_runtime_stage_did_not_run() -> None:
    problems = runtime_problems(stage_runtime(None, NVIDIA), "containerd", ["volume-mounts"])
    assert problems and "containerd does not have the nvidia runtime registered" in problems[0]
    registered = dict(
        NVIDIA, engines=dict(NVIDIA["engines"], containerd=dict(NVIDIA["engines"]["containerd"], runtimes=["nvidia"]))
    )
    assert runtime_problems(stage_runtime(None, registered), "containerd", ["volume-mounts"]) == []
