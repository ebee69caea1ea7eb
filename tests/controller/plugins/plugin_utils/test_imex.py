# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""NVLink domains from the inventory and the IMEX settings (plugins/plugin_utils/imex.py), and their filters."""

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.nvidia.plugins.filter.imex_domain import FilterModule
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils import imex

GROUPS = {"nvl0": ["a", "b"], "nvl1": ["c"], "gpu": ["a", "b", "c", "d"]}
HOSTVARS = {
    "a": {"group_names": ["gpu", "nvl0"], "imex_address": "10.0.0.2", "ansible_host": "a.example"},
    "b": {"group_names": ["gpu", "nvl0"], "ansible_host": "10.0.0.1"},
    "c": {"group_names": ["gpu", "nvl1"]},
    "d": {"group_names": ["gpu"]},
}


def test_members_addresses_sorted_from_imex_address_ansible_host_or_name():
    assert imex.imex_domain("a", GROUPS, HOSTVARS, "nvl0, nvl1") == {
        "domain": "nvl0",
        "members": ["a", "b"],
        "addresses": ["10.0.0.1", "10.0.0.2"],
        "address": "10.0.0.2",
    }
    assert imex.imex_domain("c", GROUPS, HOSTVARS, ["nvl0", "nvl1"])["addresses"] == ["c"]
    assert imex.imex_domain("d", GROUPS, HOSTVARS, ["nvl0", "nvl1"])["domain"] is None
    assert imex.imex_domain("a", GROUPS, HOSTVARS, [])["domain"] is None


def test_two_domains_or_a_bad_address_fail_through_the_filter():
    filters = FilterModule().filters()
    hostvars = dict(HOSTVARS, a={"group_names": ["nvl0", "nvl1"]})
    with pytest.raises(AnsibleFilterError, match="in 2 NVLink domain groups"):
        filters["imex_domain"]("a", GROUPS, hostvars, ["nvl0", "nvl1"])
    hostvars = dict(HOSTVARS, b={"group_names": ["nvl0"], "imex_address": "10.0.0.1 10.0.0.3"})
    with pytest.raises(AnsibleFilterError, match="host b's imex_address"):
        filters["imex_domain"]("a", GROUPS, hostvars, ["nvl0"])


def test_config_settings_in_order_and_checked():
    settings = imex.config_settings("/etc/nvidia-imex/nodes_config.cfg", "50001", "RECOVERY", {"LOG_LEVEL": 2})
    assert list(settings.items()) == [
        ("IMEX_NODE_CONFIG_FILE", "/etc/nvidia-imex/nodes_config.cfg"),
        ("SERVER_PORT", "50001"),
        ("IMEX_WAIT_FOR_QUORUM", "RECOVERY"),
        ("LOG_LEVEL", "2"),
    ]
    filters = FilterModule().filters()
    with pytest.raises(AnsibleFilterError, match="not a TCP port"):
        filters["imex_config"]("/x", 70000, "RECOVERY", {})
    with pytest.raises(AnsibleFilterError, match="one KEY=value line"):
        filters["imex_config"]("/x", 50000, "RECOVERY", {"log level": 1})
    with pytest.raises(AnsibleFilterError, match="one KEY=value line"):
        filters["imex_config"]("/x", 50000, "RECOVERY\nSERVER_PORT=1", {})
