# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""runtime_default_problem: nvidia as the default runtime on a Kubernetes node only with the toolkit's rule."""

import pytest

from ansible_collections.gpufleet.nvidia.plugins.filter.runtime_default_problem import FilterModule

problem = FilterModule().filters()["runtime_default_problem"]
NATIVE_K8S = {"provider": "native", "accept_envvar_unprivileged": False, "accept_volume_mounts": True}


@pytest.mark.parametrize(
    ("toolkit", "default", "node"),
    [
        (NATIVE_K8S, True, True),  # the toolkit role's default on a Kubernetes node
        ({"provider": "native", "accept_envvar_unprivileged": True}, True, False),  # a docker host: NVIDIA's behaviour
        ({"provider": "native", "accept_envvar_unprivileged": True}, False, True),  # not the default: no question
        (None, "false", "true"),  # strings, as from -e or a survey
    ],
)
def test_allowed(toolkit, default, node):
    assert problem(toolkit, default, node, "gpu1") == ""


@pytest.mark.parametrize(
    ("toolkit", "fix"),
    [
        ({"provider": "native", "accept_envvar_unprivileged": True}, "leave toolkit_accept_envvar_unprivileged unset"),
        ({"provider": "native"}, "leave toolkit_accept_envvar_unprivileged unset"),  # runtime.json without the key
        (
            {"provider": "nvidia", "accept_envvar_unprivileged": True},
            "accept-nvidia-visible-devices-envvar-when-unprivileged=false",
        ),
    ],
)
def test_kubernetes_node_that_takes_the_variable_is_refused(toolkit, fix):
    msg = problem(toolkit, "true", True, "gpu1")
    assert msg.startswith("gpu1: runtime_set_as_default is true on a Kubernetes node")
    assert fix in msg and "runtime_set_as_default: false" in msg and "Nothing was changed" in msg
