# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The engines filter: the runtime role's lists of engines and the units' Before= come from the registry."""

from ansible_collections.gpufleet.nvidia.plugins.filter.engines import FilterModule

engines = FilterModule().filters()["engines"]


def test_what_the_runtime_role_asks():
    installed = ["docker", "containerd", "podman"]
    assert engines(installed, "configurable") == ["docker", "containerd"]  # what container_runtime registers with
    assert engines(installed, "toml") == ["containerd"]  # what needs tomlkit on the target
    assert engines(("crio",), "toml") == ["crio"]
    assert engines("all") == ["docker", "containerd", "crio", "podman"]
    assert " ".join(engines("all", field="service")) == "docker.service containerd.service crio.service podman.service"
    assert engines("all", field="created_dirs") == ["/etc/containerd/conf.d"]
