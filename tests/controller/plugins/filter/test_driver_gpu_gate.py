# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The driver_gpu_gate filter: the plugin_utils rule behind a Jinja entry point that checks its arguments."""

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.nvidia.plugins.filter.driver_gpu_gate import FilterModule

driver_gpu_gate = FilterModule().filters()["driver_gpu_gate"]
USERS = {"processes": [{"pid": 9, "command": "sleep", "devices": ["/dev/nvidia0"], "container": None}]}


def test_refuses_and_passes():
    assert driver_gpu_gate(USERS)["refuse"] is True
    assert driver_gpu_gate(USERS, ignore=["sleep"])["refuse"] is False


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"drain": "yes"}, "drain must be a bool"), ({"ignore": "sleep"}, "ignore must be a list")],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(AnsibleFilterError, match=match):
        driver_gpu_gate(USERS, **kwargs)
    with pytest.raises(AnsibleFilterError, match="gpu_users must be"):
        driver_gpu_gate("x")
