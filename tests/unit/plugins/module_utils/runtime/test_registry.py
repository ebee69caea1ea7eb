# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The engine registry: every list of engines the collection uses, derived from each engine's ``INFO``."""

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.runtime import common, registry


def test_the_lists_of_engines():
    assert registry.NAMES == ("docker", "containerd", "crio", "podman")  # discovery's order
    assert registry.CONFIGURABLE == ("docker", "containerd", "crio")
    assert registry.TOML == ("containerd", "crio")
    assert registry.CRI == ("containerd", "crio")
    assert registry.STOPPABLE == {"docker": "docker", "podman": "podman"}
    assert registry.VALIDATE_ORDER == ("docker", "podman", "containerd", "crio")
    assert registry.units() == ["docker.service", "containerd.service", "crio.service", "podman.service"]
    assert registry.units(registry.CONFIGURABLE) == ["docker.service", "containerd.service", "crio.service"]


def test_the_cdi_tables():
    assert common.CDI_MIN_VERSIONS == {"docker": (25, 0, 0), "containerd": (1, 7, 0), "crio": (1, 23, 0)}
    assert common.CDI_0_6_MIN_VERSIONS == {
        "podman": (4, 7, 0),
        "containerd": (1, 7, 12),
        "crio": (1, 28, 0),
        "docker": (25, 0, 0),
    }
    assert common.CDI_ADDITIONAL_GIDS_MIN_VERSIONS == {
        "podman": (5, 1, 0),
        "containerd": (1, 7, 16),
        "crio": (1, 30, 0),
        "docker": (29, 5, 0),
    }


def test_cgroup_patterns_name_each_engine():
    hex64 = "a" * 64
    found = {}
    for pattern, engine in registry.cgroup_patterns():
        for path in (f"/docker-{hex64}.scope", f"/docker/{hex64}", f"/cri-containerd-{hex64}.scope",
                     f"/crio-{hex64}.scope", f"/libpod-{hex64}.scope"):  # fmt: skip
            if pattern.search(path):
                found.setdefault(engine, set()).add(path.split(hex64, maxsplit=1)[0])
    assert found == {
        "docker": {"/docker-", "/docker/"},
        "containerd": {"/cri-containerd-"},
        "crio": {"/crio-"},
        "podman": {"/libpod-"},
    }


def test_selected_by_trait_and_field():
    assert registry.selected(["podman", "crio", "docker"], "configurable") == ["docker", "crio"]
    assert registry.selected("all", "toml") == ["containerd", "crio"]
    assert registry.selected(None, field="service")[0] == "docker.service"
    assert registry.selected("all", field="created_dirs") == ["/etc/containerd/conf.d"]
    assert registry.selected("all", "stoppable") == ["docker", "podman"]
    with pytest.raises(ValueError, match="trait"):
        registry.selected("all", "fast")
    with pytest.raises(ValueError, match="field"):
        registry.selected("all", field="colour")
    with pytest.raises(ValueError, match="a list of engine names"):
        registry.selected("docker")
