# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The toolkit role on the controller (local connection, check mode: nothing is written): what the runtime shim
trusts on each kind of host reaches host_programs and the gpufleet_toolkit fact. A Kubernetes node (by group or by
device_plugin_enabled) ignores NVIDIA_VISIBLE_DEVICES from unprivileged containers and takes the device plugin's
volume mounts; every other host keeps NVIDIA's behaviour; the role variables override both."""

import json
import sys
from pathlib import Path

import pytest
import yaml

from ansible_collections.gpufleet.nvidia.tests.controller.playbook import run_playbook

pytestmark = pytest.mark.controller
REPO = Path(__file__).resolve().parents[3]

PLAY = """
- hosts: all
  gather_facts: false
  tasks:
    - name: A GPU host, as gpu_facts would say (cacheable, so it lands in ansible_facts)
      ansible.builtin.set_fact:
        nvidia: {{pci_gpu_count: 1, gpu_node: true}}
        cacheable: true

- hosts: all
  gather_facts: false
  roles:
    - role: gpufleet.nvidia.toolkit
      toolkit_provider: native
      toolkit_bindir: "{tmp}/bin/{{{{ inventory_hostname }}}}"
      toolkit_libdir: "{tmp}/lib/{{{{ inventory_hostname }}}}"
      toolkit_oci_runtime: /usr/bin/runc
  post_tasks:
    - name: Dump the published facts
      ansible.builtin.copy:
        content: >-
          {{{{ dict(ansible_play_hosts | zip(ansible_play_hosts | map('extract', hostvars, 'gpufleet_toolkit')))
               | to_json }}}}
        dest: "{tmp}/facts.json"
        mode: "0644"
      run_once: true
      delegate_to: localhost
      check_mode: false
"""

# host -> (its inventory variables,
#          expected (accept_envvar_unprivileged, accept_volume_mounts, accept_cdi_annotations_unprivileged))
HOSTS = {
    "k8s-node": ({}, (False, True, False)),
    "k8s-node-override": ({"toolkit_accept_envvar_unprivileged": True}, (True, True, False)),
    "k8s-node-annotations": ({"toolkit_accept_cdi_annotations_unprivileged": "true"}, (False, True, True)),
    "k8s-node-excluded": ({"device_plugin_enabled": False}, (True, False, True)),
    "docker-host": ({}, (True, False, True)),
    "plugin-enabled": ({"device_plugin_enabled": True}, (False, True, False)),
    "docker-host-volume-mounts": ({"toolkit_accept_volume_mounts": "yes"}, (True, True, True)),
}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("toolkit")
    base = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    kube = {h: v for h, (v, _e) in HOSTS.items() if h.startswith("k8s-")}
    other = {h: v for h, (v, _e) in HOSTS.items() if not h.startswith("k8s-")}
    inventory = {"all": {"vars": base, "children": {"kube_nodes": {"hosts": kube}, "docker": {"hosts": other}}}}
    (tmp / "inventory.yml").write_text(yaml.safe_dump(inventory))
    (tmp / "play.yml").write_text(PLAY.format(tmp=tmp))
    proc = run_playbook(
        "-i", tmp / "inventory.yml", tmp / "play.yml", "--check", "--diff", ANSIBLE_STDOUT_CALLBACK="default"
    )
    facts = json.loads((tmp / "facts.json").read_text()) if (tmp / "facts.json").exists() else {}
    return proc, facts, tmp


def test_check_mode_runs_and_writes_nothing(run):
    proc, _facts, tmp = run
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert not (tmp / "bin").exists() and not (tmp / "lib").exists()


@pytest.mark.parametrize("host", sorted(HOSTS))
def test_each_kind_of_host_gets_its_settings_in_the_fact(run, host):
    _proc, facts, _tmp = run
    envvar, mounts, annotations = HOSTS[host][1]
    fact = facts[host]
    assert fact["provider"] == "native"
    assert (fact["accept_envvar_unprivileged"], fact["accept_volume_mounts"]) == (envvar, mounts)
    assert fact["accept_cdi_annotations_unprivileged"] is annotations
    assert isinstance(fact["accept_envvar_unprivileged"], bool) and isinstance(fact["accept_volume_mounts"], bool)


def test_the_diff_shows_the_runtime_json_each_host_would_get(run):
    proc, _facts, _tmp = run
    k8s = (
        '+  "accept_cdi_annotations_unprivileged": false,\n+  "accept_envvar_unprivileged": false,\n'
        '+  "accept_volume_mounts": true\n'
    )
    docker = (
        '+  "accept_cdi_annotations_unprivileged": true,\n+  "accept_envvar_unprivileged": true,\n'
        '+  "accept_volume_mounts": false\n'
    )
    assert "+++ after: /etc/gpufleet/runtime.json" in proc.stdout
    assert k8s in proc.stdout and docker in proc.stdout
