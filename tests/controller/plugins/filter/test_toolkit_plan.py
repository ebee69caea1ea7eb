# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""toolkit_plan: the toolkit role's provider, trusted device requests and NVIDIA repository, decided in Python."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.controller

from ansible.errors import AnsibleFilterError  # noqa: E402

from ansible_collections.gpufleet.nvidia.plugins.filter.toolkit_plan import FilterModule, toolkit_plan  # noqa: E402

DEFAULTS = {
    "provider": "auto",
    "nvidia_mirror_url": "",
    "nvidia_repo_url": "https://nvidia.github.io/libnvidia-container/stable",
    "nvidia_key_url": "",
    "accept_envvar_unprivileged": None,
    "accept_volume_mounts": None,
    "accept_cdi_annotations_unprivileged": None,
}


@pytest.mark.parametrize(
    ("provider", "mirror", "repo_files", "expected"),
    [
        ("auto", "", 0, "native"),  # nothing of NVIDIA's on the host: the collection's own toolkit
        ("auto", "", 2, "nvidia"),  # NVIDIA's repository is already configured
        ("auto", "https://mirror.example/nct/", 0, "nvidia"),  # a mirror asks for NVIDIA's packages
        ("native", "https://mirror.example/nct", 3, "native"),  # an explicit provider wins
        ("nvidia", "", 0, "nvidia"),
    ],
)
def test_provider(provider: str, mirror: str, repo_files: int, expected: str) -> None:
    settings = dict(DEFAULTS, provider=provider, nvidia_mirror_url=mirror)
    assert toolkit_plan(settings, repo_files=repo_files)["provider"] == expected


def test_unknown_provider_is_an_error() -> None:
    with pytest.raises(AnsibleFilterError, match="toolkit_provider"):
        toolkit_plan(dict(DEFAULTS, provider="docker"))


@pytest.mark.parametrize(
    ("node", "envvar", "volume", "expected"),
    [
        (True, None, None, (False, True)),  # a Kubernetes node: the device plugin's volume mounts only
        (False, None, None, (True, False)),  # elsewhere NVIDIA's behaviour
        (True, True, None, (True, True)),  # the role variables win
        (False, None, "yes", (True, True)),
        (True, "false", "no", (False, False)),
        ("True", None, None, (False, True)),  # kubernetes_node as Jinja may hand it over
    ],
)
def test_trusted_requests(node: object, envvar: object, volume: object, expected: tuple) -> None:
    plan = toolkit_plan(
        dict(DEFAULTS, accept_envvar_unprivileged=envvar, accept_volume_mounts=volume), kubernetes_node=node
    )
    assert (plan["accept_envvar_unprivileged"], plan["accept_volume_mounts"]) == expected
    assert plan["kubernetes_node"] is (node in (True, "True"))


@pytest.mark.parametrize(
    ("node", "annotations", "expected"),
    [
        (True, None, False),  # a Kubernetes node: a pod's own cdi.k8s.io/ annotation is no allocation
        (False, None, True),  # docker/podman hosts: as before (docker run --annotation)
        (True, "yes", True),  # the role variable wins
        (False, False, False),
        ("True", None, False),
    ],
)
def test_cdi_annotations_are_trusted_only_off_kubernetes_nodes(
    node: object, annotations: object, expected: bool
) -> None:
    # One rule for every device list strategy: the device_plugin role accepts the CDI strategies only where the
    # engine applies the plugin's CDI annotations itself, so the shim never needs them on a Kubernetes node.
    plan = toolkit_plan(dict(DEFAULTS, accept_cdi_annotations_unprivileged=annotations), kubernetes_node=node)
    assert plan["accept_cdi_annotations_unprivileged"] is expected
    # independent of the other two settings
    plan = toolkit_plan(
        dict(DEFAULTS, accept_envvar_unprivileged=True, accept_volume_mounts=False), kubernetes_node=node
    )
    assert plan["accept_cdi_annotations_unprivileged"] is (node not in (True, "True"))


def test_repository_and_key() -> None:
    plan = toolkit_plan(DEFAULTS)
    assert plan["repo"] == "https://nvidia.github.io/libnvidia-container/stable"
    assert plan["key"] == "https://nvidia.github.io/libnvidia-container/gpgkey"
    mirrored = toolkit_plan(dict(DEFAULTS, nvidia_mirror_url="https://mirror.example/lnc/stable//"))
    assert (mirrored["repo"], mirrored["key"]) == (
        "https://mirror.example/lnc/stable",
        "https://mirror.example/lnc/gpgkey",
    )
    keyed = toolkit_plan(dict(DEFAULTS, nvidia_key_url="https://keys.example/k.gpg"))
    assert keyed["key"] == "https://keys.example/k.gpg"


def test_registered_under_its_name() -> None:
    assert FilterModule().filters()["toolkit_plan"] is toolkit_plan


def test_programs_all_native_ones_and_nvidia_docker_is_an_option():
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.hostprog.install import DEFAULT_PROGRAMS

    assert toolkit_plan(DEFAULTS)["programs"] == list(DEFAULT_PROGRAMS)
    assert "nvidia-container-cli" in DEFAULT_PROGRAMS and "nvidia-docker" in DEFAULT_PROGRAMS
    for off in (False, "false", "no"):
        programs = toolkit_plan(dict(DEFAULTS, nvidia_docker=off))["programs"]
        assert programs == [name for name in DEFAULT_PROGRAMS if name != "nvidia-docker"]
    assert toolkit_plan(dict(DEFAULTS, nvidia_docker="true"))["programs"] == list(DEFAULT_PROGRAMS)


@pytest.mark.parametrize(
    ("provider", "mirror", "repo_files", "expected"),
    [
        ("auto", "https://mirror.example/nct", 1, "native"),  # removing NVIDIA's packages: the native toolkit follows
        ("native", "", 0, "native"),
    ],
)
def test_nvidia_state_absent(provider: str, mirror: str, repo_files: int, expected: str) -> None:
    settings = dict(DEFAULTS, provider=provider, nvidia_mirror_url=mirror, nvidia_state="absent")
    plan = toolkit_plan(settings, repo_files=repo_files)
    assert (plan["provider"], plan["nvidia_state"]) == (expected, "absent")
    assert toolkit_plan(DEFAULTS)["nvidia_state"] == "present"


def test_nvidia_provider_cannot_be_absent() -> None:
    with pytest.raises(AnsibleFilterError, match="toolkit_nvidia_state=absent"):
        toolkit_plan(dict(DEFAULTS, provider="nvidia", nvidia_state="absent"))
    with pytest.raises(AnsibleFilterError, match="toolkit_nvidia_state"):
        toolkit_plan(dict(DEFAULTS, nvidia_state="removed"))


@pytest.mark.parametrize(
    ("settings", "repo_files", "installed", "expected"),
    [
        ({}, 0, True, ("nvidia", True)),  # NVIDIA's packages are there: its stack stays, as it is
        ({}, 0, "false", ("native", False)),
        ({}, 1, True, ("nvidia", False)),  # its repository too: managed from there
        ({"nvidia_mirror_url": "http://m/stable"}, 0, True, ("nvidia", False)),
        ({"nvidia_version": "1.17.8-1"}, 0, True, ("nvidia", False)),  # a pin: installed from the repository
        ({"provider": "native"}, 0, True, ("native", False)),  # taking over is asked for
        ({"provider": "nvidia"}, 0, True, ("nvidia", False)),
        ({"nvidia_state": "absent"}, 0, True, ("native", False)),
    ],
)
def test_auto_adopts_an_installed_nvidia_toolkit(settings: dict, repo_files: int, installed: object, expected) -> None:
    plan = toolkit_plan(dict(DEFAULTS, **settings), repo_files=repo_files, nvidia_installed=installed)
    assert (plan["provider"], plan["adopt"]) == expected
