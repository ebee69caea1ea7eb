# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""nvidia_toolkit_packages: the nvidia provider's package requests, hold and whether anything is to change."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.controller

from ansible.errors import AnsibleFilterError  # noqa: E402

from ansible_collections.gpufleet.nvidia.plugins.filter.nvidia_toolkit_packages import (  # noqa: E402
    PACKAGES,
    FilterModule,
    nvidia_toolkit_packages,
)


def _facts(version: str, release: str = "", names: tuple[str, ...] = PACKAGES) -> dict:
    """ansible_facts.packages as package_facts sets it (apt: no release; rpm: version and release apart)."""
    facts = {name: [{"name": name, "version": version, "release": release, "source": "apt"}] for name in names}
    facts["bash"] = [{"name": "bash", "version": "5.2.15-2+b7"}]
    return facts


def test_apt_pin_names_every_package_at_the_version_and_holds_them() -> None:
    plan = nvidia_toolkit_packages({}, "1.18.0-1")
    assert plan["install"] == [
        "nvidia-container-toolkit=1.18.0-1",
        "nvidia-container-toolkit-base=1.18.0-1",
        "libnvidia-container-tools=1.18.0-1",
        "libnvidia-container1=1.18.0-1",
    ]
    assert plan["names"] == list(PACKAGES) and plan["selection"] == "hold"
    assert plan["pending"] is True and plan["installed"] == {}


@pytest.mark.parametrize(
    ("facts", "pin", "pending"),
    [
        (_facts("1.18.0-1"), "1.18.0-1", False),  # at the pin: nothing to do, no index refresh
        (_facts("1.17.8-1"), "1.18.0-1", True),  # a new pin: upgrade
        (_facts("1.18.0-1"), "1.17.8-1", True),  # or downgrade
        (_facts("1.18.0-1", names=PACKAGES[:3]), "1.18.0-1", True),  # one of the four missing
        (_facts("1.17.8-1"), "", False),  # no pin: whatever is installed stays
        (_facts("1.17.8-1", names=PACKAGES[1:]), "", True),
        (None, "", True),
    ],
)
def test_pending(facts: dict | None, pin: str, pending: bool) -> None:
    assert nvidia_toolkit_packages(facts, pin)["pending"] is pending


def test_no_pin_installs_the_names_and_releases_the_hold() -> None:
    plan = nvidia_toolkit_packages(_facts("1.17.8-1"), "")
    assert plan["install"] == list(PACKAGES) and plan["selection"] == "install"
    assert plan["installed"] == dict.fromkeys(PACKAGES, "1.17.8-1")


def test_dnf_pin_takes_the_version_with_or_without_the_release() -> None:
    facts = _facts("1.18.0", "1")
    plan = nvidia_toolkit_packages(facts, "1.18.0", "RedHat")
    assert plan["install"][0] == "nvidia-container-toolkit-1.18.0"
    assert plan["installed"]["libnvidia-container1"] == "1.18.0-1" and plan["pending"] is False
    assert nvidia_toolkit_packages(facts, "1.18.0-1", "RedHat")["pending"] is False
    assert nvidia_toolkit_packages(facts, "1.17.8", "RedHat")["pending"] is True


@pytest.mark.parametrize("bad", ["1.18.0-1 libc6", "=1.18.0", "-1"])
def test_a_version_that_is_not_one_is_an_error(bad: str) -> None:
    with pytest.raises(AnsibleFilterError, match="toolkit_nvidia_version"):
        nvidia_toolkit_packages({}, bad)


def test_registered_under_its_name() -> None:
    assert FilterModule().filters()["nvidia_toolkit_packages"] is nvidia_toolkit_packages
