# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The device plugin's and GFD's ``config.yaml`` (NVIDIA's ``version: v1`` format), from the settings."""

from __future__ import annotations

import json
from typing import Any

CONFIG_PATH = "/config/config.yaml"
FEATURES_DIR = "/etc/kubernetes/node-feature-discovery/features.d"


def _sharing_config(sharing: dict[str, Any], with_fail_flag: bool) -> dict[str, Any]:
    out = {"renameByDefault": sharing["rename_by_default"]}
    if with_fail_flag:
        out["failRequestsGreaterThanOne"] = sharing["fail_requests_greater_than_one"]
    out["resources"] = [dict(r) for r in sharing["resources"]]
    return out


def plugin_config(s: dict[str, Any]) -> dict[str, Any]:
    """The device plugin's and GFD's ``config.yaml`` (NVIDIA's ``version: v1`` format) as a dict."""
    strategies = s["device_list_strategy"]
    config = {
        "version": "v1",
        "flags": {
            "migStrategy": s["mig_strategy"],
            "failOnInitError": bool(s["fail_on_init_error"]),
            "nvidiaDriverRoot": s["nvidia_driver_root"],
            # GFD's output: NodeFeature objects or the features.d file. GFD's own default is the NodeFeature API since
            # v0.19.0, and NVIDIA's chart 0.20.0 has no value for it, so the choice travels in the file, which GFD
            # reads unless the flag or its variable is set (k8s-device-plugin v0.20.0, 2026-08-19: api/config/v1/
            # flags.go CommandLineFlags.UseNodeFeatureAPI and updateFromCLIFlag).
            "useNodeFeatureAPI": bool(s["gfd_node_feature_api"]),
            "plugin": {
                "passDeviceSpecs": bool(s["pass_device_specs"]),
                "deviceListStrategy": strategies[0] if len(strategies) == 1 else list(strategies),
                "deviceIDStrategy": s["device_id_strategy"],
                # Which replicas or MIG devices an allocation takes (k8s-device-plugin v0.20.0, 2026-08-19:
                # api/config/v1/flags.go PluginCommandLineFlags.SharedDevicesAllocationPolicy).
                "sharedDevicesAllocationPolicy": s["allocation_policy"],
            },
            "gfd": {
                "oneshot": False,
                "noTimestamp": False,
                "sleepInterval": s["gfd_sleep_interval"],
                "outputFile": FEATURES_DIR + "/gfd",
                "machineTypeFile": "/sys/class/dmi/id/product_name",
            },
        },
    }
    sharing = {}
    if s["time_slicing"]:
        sharing["timeSlicing"] = _sharing_config(s["time_slicing"], True)
    if s["mps"]:
        sharing["mps"] = _sharing_config(s["mps"], False)
    if sharing:
        config["sharing"] = sharing
    return config


def config_map_data(s: dict[str, Any], dump: Any) -> dict[str, str]:
    """The ConfigMap's files: the role's configuration as ``config.yaml`` alone, or, with ``device_plugin_configs``,
    one key per configuration (``default`` the role's own), from which NVIDIA's config-manager copies the one the
    node's ``nvidia.com/device-plugin.config`` label names (k8s-device-plugin v0.20.0, cmd/config-manager/main.go;
    chart values.yaml config.map)."""
    if not s["configs"]:
        return {"config.yaml": dump(plugin_config(s))}
    data = {"default": dump(plugin_config(s))}
    for name in sorted(s["configs"]):
        data[name] = dump(plugin_config(s["configs"][name]))
    return data


def dump_config(config: dict[str, Any]) -> str:
    """The config as file text: JSON is YAML, so the plugin reads it; sorted for stable checksums."""
    return json.dumps(config, indent=2, sort_keys=True) + "\n"
