# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""nvidia_toolkit_device_requests: what NVIDIA's config.toml says about a container's own device requests."""

import pytest

pytestmark = pytest.mark.controller

from ansible.errors import AnsibleFilterError  # noqa: E402

from ansible_collections.gpufleet.nvidia.plugins.filter.nvidia_toolkit_device_requests import (  # noqa: E402
    nvidia_toolkit_device_requests as read,
)

# The top of the file nvidia-container-toolkit 1.17 installs: both settings commented out (NVIDIA's defaults).
PACKAGED = """#accept-nvidia-visible-devices-as-volume-mounts = false
#accept-nvidia-visible-devices-envvar-when-unprivileged = true
disable-require = false
supported-driver-capabilities = "compat32,compute,display,graphics,ngx,utility,video"

[nvidia-container-cli]
environment = []
ldconfig = "@/sbin/ldconfig.real"
load-kmods = true
"""


def test_no_file_and_the_packaged_file_are_nvidias_defaults():
    defaults = {"accept_envvar_unprivileged": True, "accept_volume_mounts": False}
    assert read("") == defaults
    assert read(None) == defaults
    assert read(PACKAGED) == defaults


def test_the_kubernetes_settings_as_nvidia_ctk_writes_them():
    text = (
        "accept-nvidia-visible-devices-as-volume-mounts = true\n"
        "accept-nvidia-visible-devices-envvar-when-unprivileged = false\n" + PACKAGED
    )
    assert read(text) == {"accept_envvar_unprivileged": False, "accept_volume_mounts": True}


def test_a_key_inside_a_table_is_not_the_top_level_setting():
    text = PACKAGED + "accept-nvidia-visible-devices-as-volume-mounts = true\n"  # under [nvidia-container-cli]
    assert read(text)["accept_volume_mounts"] is False


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("accept-nvidia-visible-devices-as-volume-mounts = 1\n", r"as-volume-mounts is 1, not true or false"),
        ("this is not = = toml\n", r"/x/config.toml is not valid TOML"),
    ],
)
def test_errors_name_the_file_and_the_key(text, message):
    with pytest.raises(AnsibleFilterError, match=message):
        read(text, "/x/config.toml")
