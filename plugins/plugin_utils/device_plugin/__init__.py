# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
# Private to this collection: no compatibility promise (docs/architecture.md, "Public surface").
"""The device_plugin role's Kubernetes documents, built from its settings (pure functions).

One package builds every document the role applies or writes for GitOps: the namespace, the device
plugin's ConfigMap (its ``config.yaml`` in NVIDIA's ``version: v1`` format) and DaemonSet, GPU feature
discovery, the MPS control daemon when MPS sharing is on, RBAC where a component talks to the API,
the ``nvidia`` RuntimeClass, the optional DCGM exporter with its Service and ServiceMonitor, a partial
Node per GPU node carrying ``gpu_facts``' labels, and a validation pod per GPU node. The Helm values
for NVIDIA's chart come from the same settings.

One module per job:

* ``settings``: the role's defaults, the checks on every setting (``normalize``) and ``DevicePluginError``;
* ``config``: the plugin's ``config.yaml``;
* ``objects``: the small builders the Kubernetes objects share (labels, metadata, pod specs, DaemonSets);
* ``daemonsets``: the device plugin, GFD, the MPS control daemon, the DCGM exporter and the RuntimeClass;
* ``labels``: the labels the role puts on each GPU node;
* ``validation``: the validation pod per GPU node;
* ``documents``: every document in apply order, and the Helm values;
* ``render``: those documents as YAML files by group, with the config, the Helm values and the node labels;
* ``problems``: why a node's runtime or toolkit cannot serve the plugin's device list strategies.

Controller-only (plugin_utils): the standard library and PyYAML.
"""
