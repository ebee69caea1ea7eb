# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""runtime_fact: the runtime role's gpufleet_runtime fact from its tasks' results."""

import json
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.nvidia.plugins.filter.runtime_fact import FilterModule

runtime_fact = FilterModule().filters()["runtime_fact"]
ROLE = Path(__file__).resolve().parents[4] / "roles" / "runtime"
NVIDIA = {
    "engines": {
        "docker": {"installed": True, "version": "20.10.24"},
        "containerd": {"installed": True, "version": "1.7.24"},
        "crio": {"installed": True, "version": "1.30.4"},
        "podman": {"installed": True, "version": "4.3.1"},
    },
    "device_nodes": [{"path": "/dev/nvidia0"}, {"path": "/dev/nvidiactl"}],
}
SETTINGS = {
    "set_as_default": True,
    "cdi": True,
    "cdi_spec_path": "/etc/cdi/nvidia.yaml",
    "tomlkit_package": "python3-tomlkit",
    "driver": "535.261.03",
}


def _registered(engine, changes=(), config_file=None, version=None, changed=None):
    result = {"item": engine, "changed": bool(changes) if changed is None else changed, "changes": list(changes)}
    if config_file:
        result["config_file"] = config_file
    if version:
        result["engine_version"] = version
    return result


def test_each_registered_engine_is_recorded_from_the_module_return():
    results = [
        _registered("docker", ["runtimes.nvidia: added"], "/etc/docker/daemon.json", "20.10.24"),
        _registered("containerd", [], "/srv/containerd/conf.d/nvidia.toml", "1.7.24"),
    ]
    fact = runtime_fact(results, NVIDIA, ["docker", "containerd"], SETTINGS)
    assert fact["engines"] == {
        "docker": {
            "registered": True,
            "default": True,
            "cdi": False,  # docker 20.10 does not read CDI specs
            "config_path": "/etc/docker/daemon.json",
            "version": "20.10.24",
            "changed": True,
            "message": "runtimes.nvidia: added",
        },
        "containerd": {
            "registered": True,
            "default": True,
            "cdi": True,
            "config_path": "/srv/containerd/conf.d/nvidia.toml",  # the module's own answer, not a default
            "version": "1.7.24",
            "changed": False,
            "message": "registered, unchanged",
        },
    }


def test_changes_are_joined_and_the_version_falls_back_to_discovery():
    results = [_registered("crio", ["a", "b"], "/etc/crio/crio.conf.d/99-gpufleet-nvidia.conf")]
    record = runtime_fact(results, NVIDIA, ["crio"], SETTINGS)["engines"]["crio"]
    assert record["message"] == "a; b" and record["version"] == "1.30.4" and record["cdi"] is True


def test_an_engine_skipped_in_check_mode_would_register_at_the_default_path():
    results = [{"item": "containerd", "skipped": True, "changed": False}]
    record = runtime_fact(results, NVIDIA, ["containerd"], SETTINGS)["engines"]["containerd"]
    assert record["registered"] is False and record["changed"] is True
    assert record["config_path"] == "/etc/containerd/conf.d/99-gpufleet-nvidia.toml"
    assert record["message"] == "would register once python3-tomlkit is installed (check mode)"


def test_cdi_only_when_wanted():
    results = [_registered("containerd", [], "/x")]
    record = runtime_fact(results, NVIDIA, ["containerd"], dict(SETTINGS, cdi=False))["engines"]["containerd"]
    assert record["cdi"] is False


def test_podman_points_at_the_cdi_spec_and_needs_a_driver():
    fact = runtime_fact([], NVIDIA, ["podman"], SETTINGS)
    assert fact["engines"] == {
        "podman": {
            "registered": False,
            "default": False,
            "cdi": True,
            "config_path": None,
            "version": "4.3.1",
            "changed": False,
            "message": "uses the CDI spec /etc/cdi/nvidia.yaml (--device nvidia.com/gpu=...)",
        }
    }
    assert runtime_fact([], NVIDIA, ["podman"], dict(SETTINGS, driver=""))["engines"]["podman"]["cdi"] is False
    assert runtime_fact([], NVIDIA, ["docker"], SETTINGS)["engines"] == {}


def test_cdi_spec_and_links():
    spec = {"changed": True, "driver_version": "535.261.03", "devices": ["0", "all"]}
    links = {"stdout": json.dumps({"links": 5, "created": [], "replaced": []})}
    fact = runtime_fact([], NVIDIA, [], SETTINGS, spec=spec, links=links)
    assert fact["cdi_spec"] == {"path": "/etc/cdi/nvidia.yaml", "driver_version": "535.261.03", "devices": ["0", "all"]}
    assert fact["dev_char_links"] == 5
    # no link program run (check mode, or links off): the device nodes discovery knows
    skipped = runtime_fact([], NVIDIA, [], SETTINGS, spec={"skipped": True}, links={"skipped": True})
    assert skipped["cdi_spec"] == {"path": "/etc/cdi/nvidia.yaml", "driver_version": None, "devices": []}
    assert skipped["dev_char_links"] == 2


def test_malformed_input_is_a_filter_error():
    with pytest.raises(AnsibleFilterError, match="runtime_fact"):
        runtime_fact([{"changed": True}], NVIDIA, [], SETTINGS)


def test_the_role_publishes_through_the_filter():
    tasks = yaml.safe_load((ROLE / "tasks" / "runtime.yml").read_text())
    publish = next(t for t in tasks if t["name"].startswith("Publish the runtime fact"))
    assert "gpufleet.nvidia.runtime_fact(" in publish["ansible.builtin.set_fact"]["gpufleet_runtime"]
    assert not [t for t in tasks if t["name"] == "Record each engine"]
    assert "_runtime_config_paths" not in (ROLE / "vars" / "main.yml").read_text()
