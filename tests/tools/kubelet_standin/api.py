# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The device plugin API (``v1beta1``) as the kubelet speaks it: message encoders and decoders, method names.

Field numbers from ``k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1/api.proto`` and the constants from its
``constants.go`` as vendored by NVIDIA's k8s-device-plugin v0.20.0 (2026-08-19; read 2026-11-27, constants checked
again 2026-11-28): ``k8s.io/kubelet v0.36.3`` in its ``vendor/modules.txt``, the staging copy of Kubernetes v1.36.3's
``staging/src/k8s.io/kubelet``, so the API the stand-in speaks is the one that release's kubelet serves. The wire
format helpers are ``tests/sim/cri.py``'s.
"""

from __future__ import annotations

from typing import Any

from tests.sim.cri import decode, f_bytes, f_int, f_map, f_message, f_repeated

VERSION = "v1beta1"  # constants.go Version
DEVICE_PLUGIN_PATH = "/var/lib/kubelet/device-plugins/"  # constants.go DevicePluginPath
KUBELET_SOCKET = "kubelet.sock"  # constants.go KubeletSocket, under DevicePluginPath
HEALTHY, UNHEALTHY = "Healthy", "Unhealthy"  # constants.go
REGISTER = "/v1beta1.Registration/Register"
PLUGIN = "/v1beta1.DevicePlugin/"


def _strs(fields: dict[int, list[Any]], number: int) -> list[str]:
    return [v.decode() for v in fields.get(number, [])]


def _first(fields: dict[int, list[Any]], number: int, default: Any = None) -> Any:
    values = fields.get(number)
    return values[0] if values else default


# --- Registration ------------------------------------------------------------------------------------------------


def options_decode(data: bytes) -> dict[str, bool]:
    """DevicePluginOptions: pre_start_required = 1, get_preferred_allocation_available = 2."""
    f = decode(data)
    return {"pre_start_required": bool(_first(f, 1, 0)), "get_preferred_allocation_available": bool(_first(f, 2, 0))}


def options_encode(pre_start: bool = False, preferred: bool = False) -> bytes:
    return f_int(1, pre_start) + f_int(2, preferred)


def register_request_decode(data: bytes) -> dict[str, Any]:
    """RegisterRequest: version = 1, endpoint = 2 (a socket name under DevicePluginPath), resource_name = 3,
    options = 4."""
    f = decode(data)
    return {
        "version": _first(f, 1, b"").decode(),
        "endpoint": _first(f, 2, b"").decode(),
        "resource_name": _first(f, 3, b"").decode(),
        "options": options_decode(_first(f, 4, b"")),
    }


def register_request_encode(version: str, endpoint: str, resource: str, preferred: bool = False) -> bytes:
    options = f_message(4, options_encode(False, preferred))
    return f_bytes(1, version) + f_bytes(2, endpoint) + f_bytes(3, resource) + options


# --- ListAndWatch ------------------------------------------------------------------------------------------------


def devices_decode(data: bytes) -> list[dict[str, Any]]:
    """ListAndWatchResponse: devices = 1; Device: ID = 1, health = 2, topology = 3 (TopologyInfo: nodes = 1,
    NUMANode: ID = 1)."""
    out = []
    for raw in decode(data).get(1, []):
        d = decode(raw)
        numa = []
        for node in decode(_first(d, 3, b"")).get(1, []):
            numa.append(int(_first(decode(node), 1, 0)))
        out.append({"ID": _first(d, 1, b"").decode(), "health": _first(d, 2, b"").decode(), "numa": numa})
    return out


def devices_encode(devices: list[dict[str, Any]]) -> bytes:
    out = b""
    for d in devices:
        topo = b"".join(f_message(1, f_int(1, n), always=True) for n in d.get("numa", []))
        body = f_bytes(1, d["ID"]) + f_bytes(2, d["health"]) + (f_message(3, topo) if topo else b"")
        out += f_message(1, body, always=True)
    return out


# --- GetPreferredAllocation and Allocate ----------------------------------------------------------------------------


def preferred_request_encode(available: list[str], must_include: list[str], size: int) -> bytes:
    """PreferredAllocationRequest: container_requests = 1; ContainerPreferredAllocationRequest: available_deviceIDs = 1,
    must_include_deviceIDs = 2, allocation_size = 3 (one container per call, as the kubelet asks)."""
    body = f_repeated(1, available) + f_repeated(2, must_include) + f_int(3, size)
    return f_message(1, body, always=True)


def preferred_response_decode(data: bytes) -> list[list[str]]:
    """PreferredAllocationResponse: container_responses = 1; each deviceIDs = 1."""
    return [_strs(decode(raw), 1) for raw in decode(data).get(1, [])]


def preferred_request_decode(data: bytes) -> list[dict[str, Any]]:
    out = []
    for raw in decode(data).get(1, []):
        f = decode(raw)
        out.append({"available": _strs(f, 1), "must_include": _strs(f, 2), "size": int(_first(f, 3, 0))})
    return out


def preferred_response_encode(choices: list[list[str]]) -> bytes:
    return b"".join(f_message(1, f_repeated(1, ids), always=True) for ids in choices)


def allocate_request_encode(containers: list[list[str]]) -> bytes:
    """AllocateRequest: container_requests = 1; ContainerAllocateRequest: devices_ids = 1."""
    return b"".join(f_message(1, f_repeated(1, ids), always=True) for ids in containers)


def allocate_request_decode(data: bytes) -> list[list[str]]:
    return [_strs(decode(raw), 1) for raw in decode(data).get(1, [])]


def _map_decode(entries: list[bytes]) -> dict[str, str]:
    out = {}
    for raw in entries:
        e = decode(raw)
        out[_first(e, 1, b"").decode()] = _first(e, 2, b"").decode()
    return out


def allocate_response_decode(data: bytes) -> list[dict[str, Any]]:
    """AllocateResponse: container_responses = 1; ContainerAllocateResponse: envs = 1 (map), mounts = 2 (Mount:
    container_path = 1, host_path = 2, read_only = 3), devices = 3 (DeviceSpec: container_path = 1, host_path = 2,
    permissions = 3), annotations = 4 (map), cdi_devices = 5 (CDIDevice: name = 1)."""
    out = []
    for raw in decode(data).get(1, []):
        f = decode(raw)
        mounts = []
        for m in f.get(2, []):
            mf = decode(m)
            mounts.append(
                {
                    "container_path": _first(mf, 1, b"").decode(),
                    "host_path": _first(mf, 2, b"").decode(),
                    "read_only": bool(_first(mf, 3, 0)),
                }
            )
        devices = []
        for d in f.get(3, []):
            df = decode(d)
            devices.append(
                {
                    "container_path": _first(df, 1, b"").decode(),
                    "host_path": _first(df, 2, b"").decode(),
                    "permissions": _first(df, 3, b"").decode(),
                }
            )
        out.append(
            {
                "envs": _map_decode(f.get(1, [])),
                "mounts": mounts,
                "devices": devices,
                "annotations": _map_decode(f.get(4, [])),
                "cdi_devices": [_first(decode(c), 1, b"").decode() for c in f.get(5, [])],
            }
        )
    return out


def allocate_response_encode(responses: list[dict[str, Any]]) -> bytes:
    out = b""
    for r in responses:
        body = f_map(1, r.get("envs"))
        for m in r.get("mounts", []):
            body += f_message(
                2, f_bytes(1, m["container_path"]) + f_bytes(2, m["host_path"]) + f_int(3, m.get("read_only", False))
            )
        for d in r.get("devices", []):
            body += f_message(
                3, f_bytes(1, d["container_path"]) + f_bytes(2, d["host_path"]) + f_bytes(3, d.get("permissions", ""))
            )
        body += f_map(4, r.get("annotations"))
        for name in r.get("cdi_devices", []):
            body += f_message(5, f_bytes(1, name))
        out += f_message(1, body, always=True)
    return out
