# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The kubelet's device manager, for the GPU path: plugins register, list their devices, and containers get them.

Behaviour follows kubernetes ``pkg/kubelet/cm/devicemanager`` (the ``sets.Set`` generation of the code, Kubernetes
1.27 and later, read 2026-11-27 from the code index). No release tag is named for these files: the code index keeps
versions by commit with no tags, Kubernetes' repository (1.9 GB) is over what can be fetched here, and Debian's
``kubernetes`` source package (1.36.4+ds-1, which would give v1.36.4's files) is not on the reachable mirror (404 for
its orig tarball, 2026-11-28). The API it speaks is tagged: see ``api.py`` (Kubernetes v1.36.3's ``k8s.io/kubelet``).

* ``plugin/v1beta1/server.go`` (``Register``): a request with a version other than ``v1beta1`` is refused; the
  kubelet then dials ``DevicePluginPath + endpoint`` and reads ``GetDevicePluginOptions``; a plugin that registers
  again for the same resource replaces the old endpoint (``handler.go`` ``RegisterPlugin`` /
  ``manager.go`` ``PluginConnected``).
* ``endpoint.go`` / ``manager.go`` ``genericDeviceUpdateCallback``: every ListAndWatch answer replaces the resource's
  device list; capacity is every device, allocatable the healthy ones (``GetCapacity``).
* ``manager.go`` ``devicesToAllocate``: the healthy devices not in use are available; fewer than needed fails with
  "requested number of devices unavailable for <resource>. Requested: <n>, Available: <m>" (the pod is not started;
  the scheduler would have kept it Pending); when more are available than needed and the plugin offers
  GetPreferredAllocation, the kubelet asks it (available, must-include = already chosen, size) and takes the
  preferred devices that are available first, then any; then ``allocateContainerResources`` calls Allocate with the
  chosen IDs and keeps the response for the container (``pod_devices.go``).
* ``manager.go`` ``UpdateAllocatedDevices``: devices of pods that are no longer active are freed.
"""

from __future__ import annotations

import os
import threading
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any, Callable

from tests.tools.kubelet_standin import api


class AdmissionError(RuntimeError):
    """What the kubelet reports as UnexpectedAdmissionError; the pod does not start."""


@dataclass
class Endpoint:
    """One registered plugin: its resource, socket, options, and the devices its ListAndWatch last sent."""

    resource: str
    socket: str
    options: dict[str, bool]
    devices: dict[str, dict[str, Any]] = field(default_factory=dict)
    channel: Any = None
    updates: int = 0
    stopped: bool = False
    changed: threading.Condition = field(default_factory=threading.Condition)

    def call(self, method: str, request: bytes, timeout: float = 30.0) -> bytes:
        return self.channel.unary_unary(api.PLUGIN + method)(request, timeout=timeout)

    def healthy(self) -> set[str]:
        return {i for i, d in self.devices.items() if d["health"] == api.HEALTHY}


class DeviceManager:
    """Registration server on ``<root>/kubelet.sock`` and the accounting of every registered resource."""

    def __init__(self, root: str, on_event: Callable[[str], None] | None = None) -> None:
        self.root = root
        self.endpoints: dict[str, Endpoint] = {}
        # (pod, container) -> resource -> device IDs, and the Allocate response (pod_devices.go).
        self.pod_devices: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
        self.lock = threading.Lock()
        self.events: list[str] = []
        self.on_event = on_event
        self.server: Any = None

    # --- Registration (plugin/v1beta1/server.go) ------------------------------------------------------------------

    def start(self) -> None:
        import grpc

        os.makedirs(self.root, exist_ok=True)
        path = os.path.join(self.root, api.KUBELET_SOCKET)
        if os.path.exists(path):
            os.unlink(path)
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        handler = grpc.method_handlers_generic_handler(
            "v1beta1.Registration", {"Register": grpc.unary_unary_rpc_method_handler(self._register)}
        )
        self.server.add_generic_rpc_handlers((handler,))
        self.server.add_insecure_port(f"unix://{path}")
        self.server.start()

    def stop(self) -> None:
        for e in list(self.endpoints.values()):
            self._close(e)
        if self.server is not None:
            self.server.stop(0)

    def _event(self, text: str) -> None:
        self.events.append(text)
        if self.on_event:
            self.on_event(text)

    def _register(self, request: bytes, context: Any) -> bytes:
        import grpc

        req = api.register_request_decode(request)
        if req["version"] != api.VERSION:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"invalid version {req['version']!r}")
        # Connect after answering, as the kubelet does (the plugin serves its socket before registering).
        threading.Thread(target=self._connect, args=(req,), daemon=True).start()
        return b""

    def _connect(self, req: dict[str, Any]) -> None:
        import grpc

        socket = os.path.join(self.root, req["endpoint"])
        channel = grpc.insecure_channel(f"unix://{socket}")
        endpoint = Endpoint(req["resource_name"], socket, req["options"], channel=channel)
        try:
            endpoint.options = api.options_decode(endpoint.call("GetDevicePluginOptions", b""))
        except grpc.RpcError as exc:
            self._event(f"register {req['resource_name']}: options failed: {exc}")
            channel.close()
            return
        with self.lock:
            old = self.endpoints.get(req["resource_name"])
            self.endpoints[req["resource_name"]] = endpoint
        if old is not None:
            self._close(old)
            self._event(f"re-registered {req['resource_name']}")
        else:
            self._event(f"registered {req['resource_name']}")
        threading.Thread(target=self._list_and_watch, args=(endpoint,), daemon=True).start()

    def _close(self, e: Endpoint) -> None:
        e.stopped = True
        if e.channel is not None:
            e.channel.close()

    def _list_and_watch(self, e: Endpoint) -> None:
        import grpc

        stream = e.channel.unary_stream(api.PLUGIN + "ListAndWatch")(b"")
        try:
            for message in stream:
                devices = {d["ID"]: d for d in api.devices_decode(message)}
                with e.changed:
                    e.devices = devices
                    e.updates += 1
                    e.changed.notify_all()
                unhealthy = sorted(i for i, d in devices.items() if d["health"] != api.HEALTHY)
                self._event(f"{e.resource}: {len(devices)} devices, unhealthy {unhealthy}")
        except grpc.RpcError as exc:
            if not e.stopped:
                self._event(f"{e.resource}: ListAndWatch ended: {exc.code()}")

    # --- What the node reports (manager.go GetCapacity) ---------------------------------------------------------

    def wait_for(self, resource: str, updates: int = 1, timeout: float = 60.0) -> Endpoint:
        """The resource's endpoint once its ListAndWatch has answered ``updates`` times."""
        deadline = threading.Event()
        timer = threading.Timer(timeout, deadline.set)
        timer.start()
        try:
            while not deadline.is_set():
                e = self.endpoints.get(resource)
                if e is not None:
                    with e.changed:
                        if e.updates >= updates:
                            return e
                        e.changed.wait(0.2)
                else:
                    deadline.wait(0.2)
        finally:
            timer.cancel()
        raise TimeoutError(f"no ListAndWatch answer for {resource} within {timeout}s (events: {self.events[-5:]})")

    def capacity(self) -> dict[str, int]:
        return {r: len(e.devices) for r, e in self.endpoints.items()}

    def allocatable(self) -> dict[str, int]:
        return {r: len(e.healthy()) for r, e in self.endpoints.items()}

    def in_use(self, resource: str) -> set[str]:
        return {i for per in self.pod_devices.values() for i in per.get(resource, {}).get("ids", [])}

    # --- Admission (manager.go devicesToAllocate, allocateContainerResources) -----------------------------------

    def allocate(self, pod: str, container: str, limits: dict[str, int]) -> dict[str, dict[str, Any]]:
        """Devices and the plugin's Allocate answer for each device-plugin resource of ``limits``; on failure nothing
        stays allocated for the container (the kubelet restores its accounting from pod_devices)."""
        chosen: dict[str, dict[str, Any]] = {}
        try:
            for resource, needed in sorted(limits.items()):
                if resource not in self.endpoints or needed <= 0:
                    continue
                ids = self._devices_to_allocate(pod, container, resource, needed)
                e = self.endpoints[resource]
                try:
                    raw = e.call("Allocate", api.allocate_request_encode([ids]))
                except Exception as exc:
                    raise AdmissionError(f"Allocate {resource} {ids}: {exc}") from exc
                responses = api.allocate_response_decode(raw)
                if not responses:
                    raise AdmissionError(f"no containers return in allocation response for {resource}")
                chosen[resource] = {"ids": ids, "response": responses[0]}
                with self.lock:
                    self.pod_devices.setdefault((pod, container), {})[resource] = chosen[resource]
        except AdmissionError:
            with self.lock:
                self.pod_devices.pop((pod, container), None)
            raise
        return chosen

    def _devices_to_allocate(self, pod: str, container: str, resource: str, needed: int) -> list[str]:
        e = self.endpoints[resource]
        with self.lock:
            available = e.healthy() - self.in_use(resource)
        if len(available) < needed:
            raise AdmissionError(
                f"requested number of devices unavailable for {resource}. Requested: {needed}, "
                f"Available: {len(available)}"
            )
        picked: list[str] = []
        if needed < len(available) and e.options.get("get_preferred_allocation_available"):
            try:
                raw = e.call("GetPreferredAllocation", api.preferred_request_encode(sorted(available), [], needed))
            except Exception as exc:  # the kubelet fails the admission with the plugin's error
                raise AdmissionError(f"GetPreferredAllocation {resource}: {exc}") from exc
            (preferred,) = api.preferred_response_decode(raw) or [[]]
            picked = [i for i in preferred if i in available][:needed]
        for i in sorted(available):
            if len(picked) == needed:
                break
            if i not in picked:
                picked.append(i)
        return picked

    def pod_ended(self, pod: str) -> None:
        """UpdateAllocatedDevices: a pod that is no longer active gives its devices back."""
        with self.lock:
            for key in [k for k in self.pod_devices if k[0] == pod]:
                del self.pod_devices[key]
