# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""ctr's ``--gpus`` hook read as a GPU request, and dropped."""

from ansible_collections.gpufleet.nvidia.plugins.module_utils.hostprog.ctr_hook import (
    CTR_SOURCE,
    ctr_hook_request,
    fit_ctr_capabilities,
    has_ctr_hook,
    remove_ctr_hooks,
)


def test_ctr_hook_request_from_containerds_hook_args():
    # containerd contrib/nvidia/nvidia.go config.args() for `ctr run --gpus 0 --gpus 1` (WithAllCapabilities)
    args = ["containerd", "oci-hook", "--", "/usr/local/bin/nvidia-container-cli", "--load-kmods", "configure"]
    args += ["--device=0,1", "--compute", "--compat32", "--graphics", "--utility", "--video", "--display"]
    args += ["--pid={{pid}}", "{{rootfs}}"]
    other = {"path": "/bin/true"}
    config = {"hooks": {"prestart": [other, {"path": "/usr/bin/containerd", "args": args}]}}
    request = ctr_hook_request(config)
    assert request.devices == ["0", "1"] and request.source == CTR_SOURCE and request.env == {}
    assert request.capabilities == ("utility", "compute", "video", "graphics", "display", "compat32")
    assert fit_ctr_capabilities(request, {"capabilities": ["utility", "compute", "video"]}).capabilities == (
        "utility",
        "compute",
        "video",
    )
    assert has_ctr_hook(config) and remove_ctr_hooks(config) and config["hooks"] == {"prestart": [other]}
    assert ctr_hook_request(config) is None and not remove_ctr_hooks(config)
    # no --device: driver files only; no capability flag: the default
    bare = {"hooks": {"prestart": [{"path": "/c", "args": [*args[:6], "{{rootfs}}"]}]}}
    request = ctr_hook_request(bare)
    assert request.devices == [] and request.capabilities == ("utility", "compute")
    assert remove_ctr_hooks(bare) and bare == {}
