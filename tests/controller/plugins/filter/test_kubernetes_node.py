# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""kubernetes_node: the one rule for "this host is a Kubernetes node" (site.yml, device_plugin and toolkit roles)."""

import pytest

pytestmark = pytest.mark.controller

from ansible.errors import AnsibleFilterError  # noqa: E402

from ansible_collections.gpufleet.nvidia.plugins.filter.kubernetes_node import FilterModule, is_kubernetes_node  # noqa: E402

GROUPS = {"all": ["a", "b", "c"], "kube_nodes": ["a"], "gpu_workers": ["b"], "ungrouped": []}


@pytest.mark.parametrize(
    ("host", "node_group", "enabled", "expected"),
    [
        ("a", "kube_nodes", None, True),  # in the group
        ("b", "kube_nodes", None, False),  # not in it
        ("b", "gpu_workers", None, True),  # device_plugin_node_group names another group
        ("a", "no_such_group", None, False),  # a missing group holds no host
        ("a", "kube_nodes", False, False),  # device_plugin_enabled: false takes a host out of the group
        ("c", "kube_nodes", True, True),  # device_plugin_enabled: true makes any host a node
        ("c", "kube_nodes", "yes", True),  # -e device_plugin_enabled=yes
        ("a", "kube_nodes", "false", False),
        ("a", "kube_nodes", "", True),  # an unanswered survey: the group decides
        ("a", None, None, True),  # no group given: kube_nodes
    ],
)
def test_rule(host, node_group, enabled, expected):
    assert is_kubernetes_node(host, GROUPS, node_group, enabled) is expected


def test_a_value_that_is_no_boolean_names_the_variable():
    with pytest.raises(AnsibleFilterError, match=r"device_plugin_enabled: 'maybe' is not true, false or null"):
        is_kubernetes_node("a", GROUPS, "kube_nodes", "maybe")


def test_registered_under_its_name():
    assert FilterModule().filters()["kubernetes_node"] is is_kubernetes_node


def test_site_and_roles_use_the_filter_not_a_copy_of_the_rule():
    """The rules live in the filters: site.yml's device_plugin stage takes its hosts from the site_groups filter,
    whose rule is device_plugin_node's; the device_plugin role calls device_plugin_node, the toolkit role
    kubernetes_node; no other task file tests membership of device_plugin_node_group itself, and none compares
    pci_gpu_count (gpu_facts' gpu_node says it)."""
    from pathlib import Path

    repo = Path(__file__).resolve().parents[4]
    users = {
        "playbooks/site.yml": "gpufleet.nvidia.site_groups(",
        "plugins/plugin_utils/site_stages.py": "kubernetes_node.device_plugin_node(",
        "roles/device_plugin/tasks/main.yml": "gpufleet.nvidia.device_plugin_node(",
        "roles/toolkit/tasks/toolkit.yml": "gpufleet.nvidia.kubernetes_node(",
    }
    for name, call in users.items():
        assert call in (repo / name).read_text(), name
    for path in [*repo.glob("playbooks/**/*.yml"), *repo.glob("roles/*/tasks/*.yml")]:
        text = path.read_text()
        assert "groups[device_plugin_node_group" not in text, path
        assert "pci_gpu_count |" not in text, path
