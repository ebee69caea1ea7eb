# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A device plugin served over a real gRPC unix socket that answers as NVIDIA's k8s-device-plugin v0.20.0 answered
with the role's default config (exchanges recorded in tests/unit/sim/fixtures/kubelet_standin/): options with
GetPreferredAllocation, the devices with their NUMA node, and for Allocate the volume-mounts answer (``/dev/null``
on ``/var/run/nvidia-container-devices/<id>`` per device and ``NVIDIA_VISIBLE_DEVICES`` pointing there). Health
changes are pushed through ListAndWatch; every GetPreferredAllocation and Allocate request is recorded. Where
NVIDIA's binary is not at hand (CI), this is what the stand-in's tests run against."""

from __future__ import annotations

import os
import queue
from concurrent import futures
from typing import Any

from tests.tools.kubelet_standin import api

DEVICE_MOUNTS = "/var/run/nvidia-container-devices"


class ReplayPlugin:
    def __init__(self, root: str, name: str, ids: list[str], resource: str = "nvidia.com/gpu") -> None:
        import grpc

        self.root, self.name, self.resource = root, name, resource
        self.devices = [{"ID": i, "health": api.HEALTHY, "numa": [n % 2]} for n, i in enumerate(ids)]
        self.updates: queue.Queue = queue.Queue()
        self.preferred: list[dict[str, Any]] = []
        self.allocated: list[list[str]] = []
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        methods = {
            "GetDevicePluginOptions": grpc.unary_unary_rpc_method_handler(lambda r, c: api.options_encode(False, True)),
            "ListAndWatch": grpc.unary_stream_rpc_method_handler(self._list_and_watch),
            "GetPreferredAllocation": grpc.unary_unary_rpc_method_handler(self._preferred),
            "Allocate": grpc.unary_unary_rpc_method_handler(self._allocate),
        }
        self.server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("v1beta1.DevicePlugin", methods),))
        self.server.add_insecure_port(f"unix://{os.path.join(root, name)}")

    def _list_and_watch(self, request: bytes, context: Any) -> Any:
        yield api.devices_encode(self.devices)
        while context.is_active():
            try:
                self.updates.get(timeout=0.1)
            except queue.Empty:
                continue
            yield api.devices_encode(self.devices)

    def _preferred(self, request: bytes, context: Any) -> bytes:
        (req,) = api.preferred_request_decode(request)
        self.preferred.append(req)
        return api.preferred_response_encode([req["available"][-req["size"] :]])  # the last ones

    def _allocate(self, request: bytes, context: Any) -> bytes:
        responses = []
        for ids in api.allocate_request_decode(request):
            self.allocated.append(ids)
            mounts = [{"container_path": f"{DEVICE_MOUNTS}/{i}", "host_path": "/dev/null"} for i in ids]
            responses.append({"envs": {"NVIDIA_VISIBLE_DEVICES": DEVICE_MOUNTS}, "mounts": mounts})
        return api.allocate_response_encode(responses)

    def start_and_register(self, version: str = api.VERSION) -> None:
        import grpc

        self.server.start()
        with grpc.insecure_channel(f"unix://{os.path.join(self.root, api.KUBELET_SOCKET)}") as channel:
            channel.unary_unary(api.REGISTER)(api.register_request_encode(version, self.name, self.resource, True))

    def set_health(self, device_id: str, health: str) -> None:
        next(d for d in self.devices if d["ID"] == device_id)["health"] = health
        self.updates.put(1)

    def stop(self) -> None:
        self.server.stop(0)
