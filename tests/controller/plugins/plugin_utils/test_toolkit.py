# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The toolkit role's decisions (plugins/plugin_utils/toolkit.py) without Jinja: the plan, the package requests and
NVIDIA's config.toml, and ToolkitError for what cannot work."""

import pytest

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.toolkit import (
    NVIDIA_REPO_URL,
    PACKAGES,
    ToolkitError,
    device_requests,
    packages,
    plan,
)


def test_plan_auto_picks_nvidia_with_a_repository_and_derives_trust_from_the_node():
    out = plan({}, kubernetes_node=True, repo_files=1)
    assert (out["provider"], out["adopt"], out["repo"]) == ("nvidia", False, NVIDIA_REPO_URL)
    assert (out["accept_envvar_unprivileged"], out["accept_volume_mounts"]) == (False, True)
    assert out["key"] == NVIDIA_REPO_URL.rsplit("/", 1)[0] + "/gpgkey"
    assert plan({}, nvidia_installed="yes")["adopt"] is True
    assert plan(None)["provider"] == "native"
    assert "nvidia-docker" not in plan({"nvidia_docker": "no"})["programs"]


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"nvidia_state": "latest"}, "toolkit_nvidia_state: 'latest' is not present or absent"),
        ({"provider": "apt"}, "toolkit_provider: 'apt' is not auto, native or nvidia"),
        ({"provider": "nvidia", "nvidia_state": "absent"}, "toolkit_provider=nvidia with toolkit_nvidia_state=absent"),
    ],
)
def test_plan_refuses(settings, message):
    with pytest.raises(ToolkitError) as exc:
        plan(settings)
    assert str(exc.value).startswith(message)


def test_packages_pins_holds_and_sees_what_is_installed():
    facts = {name: [{"version": "1.18.0", "release": "1"}] for name in PACKAGES}
    rpm = packages(facts, "1.18.0", "RedHat")
    assert rpm["install"] == [f"{n}-1.18.0" for n in PACKAGES] and rpm["pending"] is False
    assert rpm["installed"] == dict.fromkeys(PACKAGES, "1.18.0-1")
    apt = packages(facts, " 1.18.0-1 ")
    assert (apt["install"][0], apt["selection"], apt["pending"]) == (f"{PACKAGES[0]}=1.18.0-1", "hold", True)
    assert packages(None) == {
        "names": list(PACKAGES),
        "install": list(PACKAGES),
        "selection": "install",
        "installed": {},
        "pending": True,
    }
    with pytest.raises(ToolkitError, match=r"^toolkit_nvidia_version: '=1' is not a package version"):
        packages({}, "=1")


def test_device_requests_reads_nvidia_defaults_and_refuses_bad_files():
    assert device_requests(None) == {"accept_envvar_unprivileged": True, "accept_volume_mounts": False}
    assert device_requests("accept-nvidia-visible-devices-as-volume-mounts = true")["accept_volume_mounts"] is True
    with pytest.raises(ToolkitError, match=r"^/x\.toml is not valid TOML \("):
        device_requests("[", "/x.toml")
    with pytest.raises(ToolkitError, match=r"^/x\.toml: accept-nvidia-visible-devices-as-volume-mounts is 1, not"):
        device_requests("accept-nvidia-visible-devices-as-volume-mounts = 1", "/x.toml")
