# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""A small client of the Kubernetes CRI API (``runtime.v1``), for tests: what the kubelet asks containerd.

Debian packages no ``crictl``, so the tests speak the few CRI calls they need themselves:
``RuntimeService`` Version, RunPodSandbox, StopPodSandbox, RemovePodSandbox, CreateContainer, StartContainer,
StopContainer, RemoveContainer, ContainerStatus, ExecSync; ``ImageService`` ImageStatus.

* Messages: a hand-written protobuf encoder and decoder of just the fields used here (no protoc, no generated
  code). Field numbers from kubernetes/cri-api ``pkg/apis/runtime/v1/api.proto`` at tag ``v0.36.3``
  (commit 1733b6a9, 2026-07-01); the fields used are unchanged since ``runtime.v1`` appeared (cri-api v0.20),
  so containerd 1.6, 1.7 and 2.1 read them the same.
* Transport: ``grpcio``'s generic ``Channel.unary_unary`` with raw bytes (no serializers), imported only when a
  channel is opened, so the encoding is testable without it (``tests/unit/sim/test_cri.py``).
* Reaching a node's socket: containerd listens on ``/run/containerd/containerd.sock`` inside the simulated node
  (its ``/run`` is a tmpfs of the node). ``NodeSocket`` listens on a unix socket here and relays each connection
  through ``docker exec -i <node> python3 -c <relay>`` (the node's own Python, standard library), so it needs no
  more than the ``docker`` command the tests already use: no root, no ``/proc/<pid>/root``.

    with NodeSocket("gf1-cri-bookworm") as target, Cri(target) as cri:
        cri.version()["runtime_version"]
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import threading
from dataclasses import dataclass, field
from typing import Any

CONTAINERD_SOCKET = "/run/containerd/containerd.sock"
RUNTIME = "/runtime.v1.RuntimeService/"
IMAGES = "/runtime.v1.ImageService/"
# NamespaceMode (api.proto): POD = 0, CONTAINER = 1, NODE = 2, TARGET = 3.
NAMESPACE_POD, NAMESPACE_NODE = 0, 2
# ContainerState (api.proto).
CONTAINER_STATES = {0: "CONTAINER_CREATED", 1: "CONTAINER_RUNNING", 2: "CONTAINER_EXITED", 3: "CONTAINER_UNKNOWN"}

# --------------------------------------------------------------------------------------------------
# protobuf wire format (https://protobuf.dev/programming-guides/encoding/): a key is (field << 3) | wire type;
# wire type 0 is a varint, 2 is length-delimited (strings, bytes, messages, packed repeats). Proto3 leaves out
# fields that hold their default (0, "", false, empty).

VARINT, LEN = 0, 2


def varint(value: int) -> bytes:
    """A base-128 varint; a negative int64 is its 64-bit two's complement (ten bytes), as protobuf sends it."""
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def key(number: int, wire_type: int) -> bytes:
    return varint((number << 3) | wire_type)


def f_int(number: int, value: int | bool) -> bytes:
    """A varint field (int32/int64/uint32/bool/enum), left out when 0/false."""
    return key(number, VARINT) + varint(int(value)) if value else b""


def f_bytes(number: int, value: bytes | str) -> bytes:
    """A string or bytes field, left out when empty."""
    data = value.encode() if isinstance(value, str) else value
    return key(number, LEN) + varint(len(data)) + data if data else b""


def f_message(number: int, body: bytes, always: bool = False) -> bytes:
    """An embedded message field; an empty one is left out unless ``always`` (its presence then counts)."""
    return key(number, LEN) + varint(len(body)) + body if body or always else b""


def f_repeated(number: int, values: list[str] | tuple[str, ...]) -> bytes:
    """``repeated string``: one field per element (empty strings included, as protobuf sends them)."""
    return b"".join(key(number, LEN) + varint(len(v.encode())) + v.encode() for v in values)


def f_map(number: int, mapping: dict[str, str] | None) -> bytes:
    """``map<string, string>``: one entry message per pair (key = 1, value = 2), sorted for stable bytes."""
    return b"".join(
        f_message(number, f_bytes(1, k) + f_bytes(2, v), always=True) for k, v in sorted((mapping or {}).items())
    )


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise ValueError("protobuf: truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("protobuf: varint longer than 10 bytes")


def decode(data: bytes) -> dict[int, list[int | bytes]]:
    """Every field of a message: number -> values in order (varints as int, length-delimited as bytes).
    Fixed 32/64-bit fields (none in the messages read here) are kept as bytes."""
    fields: dict[int, list[int | bytes]] = {}
    pos = 0
    while pos < len(data):
        tag, pos = read_varint(data, pos)
        number, wire = tag >> 3, tag & 7
        if wire == VARINT:
            value, pos = read_varint(data, pos)
        elif wire == LEN:
            size, pos = read_varint(data, pos)
            if pos + size > len(data):
                raise ValueError(f"protobuf: field {number} runs past the end")
            value, pos = data[pos : pos + size], pos + size
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            value, pos = data[pos : pos + size], pos + size
        else:
            raise ValueError(f"protobuf: field {number} has wire type {wire} (groups are not used by the CRI API)")
        fields.setdefault(number, []).append(value)
    return fields


def _str(fields: dict[int, list[Any]], number: int) -> str:
    values = fields.get(number)
    return values[-1].decode() if values else ""


def _int(fields: dict[int, list[Any]], number: int, signed: bool = True) -> int:
    values = fields.get(number)
    value = values[-1] if values else 0
    return value - (1 << 64) if signed and value >= 1 << 63 else value


def _map(fields: dict[int, list[Any]], number: int) -> dict[str, str]:
    out = {}
    for entry in fields.get(number, ()):
        pair = decode(entry)
        out[_str(pair, 1)] = _str(pair, 2)
    return out


# --------------------------------------------------------------------------------------------------
# The messages (field numbers: api.proto at v0.36.3).


@dataclass
class Pod:
    """A ``PodSandboxConfig``: metadata (name = 1, uid = 2, namespace = 3, attempt = 4), hostname = 2,
    log_directory = 3, labels = 6, annotations = 7, linux = 8 -> security_context = 2 -> namespace_options = 1
    (network = 1, pid = 2, ipc = 3). ``host_network`` (NODE) keeps CNI out: the nodes have no pod network."""

    name: str
    uid: str
    namespace: str = "default"
    hostname: str = ""
    log_directory: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    host_network: bool = True

    def encode(self) -> bytes:
        metadata = f_bytes(1, self.name) + f_bytes(2, self.uid) + f_bytes(3, self.namespace)
        namespaces = f_int(1, NAMESPACE_NODE if self.host_network else NAMESPACE_POD)
        linux = f_message(2, f_message(1, namespaces, always=True), always=True)
        return (
            f_message(1, metadata)
            + f_bytes(2, self.hostname)
            + f_bytes(3, self.log_directory)
            + f_map(6, self.labels)
            + f_map(7, self.annotations)
            + f_message(8, linux, always=True)
        )


@dataclass
class Mount:
    """A CRI ``Mount``: container_path = 1, host_path = 2, readonly = 3."""

    container_path: str
    host_path: str
    readonly: bool = False

    def encode(self) -> bytes:
        return f_bytes(1, self.container_path) + f_bytes(2, self.host_path) + f_int(3, self.readonly)


@dataclass
class Container:
    """A ``ContainerConfig``: metadata = 1 (name = 1, attempt = 2), image = 2 (ImageSpec.image = 1),
    command = 3, args = 4, working_dir = 5, envs = 6 (KeyValue key = 1, value = 2), mounts = 7, labels = 9,
    annotations = 10, log_path = 11, linux = 15 (LinuxContainerConfig.security_context = 2:
    LinuxContainerSecurityContext run_as_user = 5, run_as_group = 12, each an Int64Value, value = 1; what a pod's
    ``securityContext.runAsUser``/``runAsGroup`` become), CDI_devices = 17 (CDIDevice.name = 1)."""

    name: str
    image: str
    command: list[str] = field(default_factory=list)
    args: list[str] = field(default_factory=list)
    envs: dict[str, str] = field(default_factory=dict)
    mounts: list[Mount] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    log_path: str = ""
    cdi_devices: list[str] = field(default_factory=list)
    run_as_user: int | None = None
    run_as_group: int | None = None

    def encode(self) -> bytes:
        security = b""
        if self.run_as_user is not None:
            security += f_message(5, f_int(1, self.run_as_user), always=True)
        if self.run_as_group is not None:
            security += f_message(12, f_int(1, self.run_as_group), always=True)
        linux = f_message(15, f_message(2, security, always=True), always=True) if security else b""
        return (
            f_message(1, f_bytes(1, self.name))
            + f_message(2, f_bytes(1, self.image))
            + f_repeated(3, self.command)
            + f_repeated(4, self.args)
            + b"".join(f_message(6, f_bytes(1, k) + f_bytes(2, v), always=True) for k, v in self.envs.items())
            + b"".join(f_message(7, m.encode(), always=True) for m in self.mounts)
            + f_map(9, self.labels)
            + f_map(10, self.annotations)
            + f_bytes(11, self.log_path)
            + linux
            + b"".join(f_message(17, f_bytes(1, name), always=True) for name in self.cdi_devices)
        )


class CriError(RuntimeError):
    """A CRI call that failed: the method and gRPC's status and message."""


class Cri:
    """The CRI calls the tests need, over one gRPC channel to ``target`` (e.g. ``unix:///path/to.sock``)."""

    def __init__(self, target: str, timeout: float = 120.0) -> None:
        # Imported only where a channel is opened: the encoding needs no grpcio.
        import grpc

        self._grpc = grpc
        self.timeout = timeout
        self.channel = grpc.insecure_channel(target)

    def __enter__(self) -> Cri:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.channel.close()

    def call(self, method: str, request: bytes, timeout: float | None = None) -> dict[int, list[Any]]:
        stub = self.channel.unary_unary(method)  # no serializers: bytes in, bytes out
        try:
            return decode(stub(request, timeout=timeout or self.timeout))
        except self._grpc.RpcError as exc:
            raise CriError(f"{method}: {exc.code().name}: {exc.details()}") from None

    # RuntimeService

    def version(self) -> dict[str, str]:
        """VersionRequest.version = 1 -> VersionResponse version = 1, runtime_name = 2, runtime_version = 3,
        runtime_api_version = 4."""
        got = self.call(RUNTIME + "Version", f_bytes(1, "v1"))
        names = ("version", "runtime_name", "runtime_version", "runtime_api_version")
        return {name: _str(got, number) for number, name in enumerate(names, 1)}

    def run_pod_sandbox(self, pod: Pod, runtime_handler: str = "") -> str:
        """RunPodSandboxRequest config = 1, runtime_handler = 2 -> RunPodSandboxResponse.pod_sandbox_id = 1."""
        got = self.call(
            RUNTIME + "RunPodSandbox", f_message(1, pod.encode(), always=True) + f_bytes(2, runtime_handler)
        )
        return _str(got, 1)

    def stop_pod_sandbox(self, sandbox_id: str) -> None:
        self.call(RUNTIME + "StopPodSandbox", f_bytes(1, sandbox_id))

    def remove_pod_sandbox(self, sandbox_id: str) -> None:
        self.call(RUNTIME + "RemovePodSandbox", f_bytes(1, sandbox_id))

    def create_container(self, sandbox_id: str, container: Container, pod: Pod) -> str:
        """CreateContainerRequest pod_sandbox_id = 1, config = 2, sandbox_config = 3 -> container_id = 1."""
        request = f_bytes(1, sandbox_id) + f_message(2, container.encode(), always=True)
        return _str(self.call(RUNTIME + "CreateContainer", request + f_message(3, pod.encode(), always=True)), 1)

    def start_container(self, container_id: str) -> None:
        self.call(RUNTIME + "StartContainer", f_bytes(1, container_id))

    def stop_container(self, container_id: str, timeout: int = 0) -> None:
        """StopContainerRequest container_id = 1, timeout = 2 (seconds before SIGKILL)."""
        self.call(RUNTIME + "StopContainer", f_bytes(1, container_id) + f_int(2, timeout))

    def remove_container(self, container_id: str) -> None:
        self.call(RUNTIME + "RemoveContainer", f_bytes(1, container_id))

    def container_status(self, container_id: str) -> dict[str, Any]:
        """ContainerStatusResponse.status = 1: id = 1, state = 3, exit_code = 7, reason = 10, message = 11,
        annotations = 13, log_path = 15."""
        status = decode(self.call(RUNTIME + "ContainerStatus", f_bytes(1, container_id)).get(1, [b""])[-1])
        return {
            "id": _str(status, 1),
            "state": CONTAINER_STATES.get(_int(status, 3), str(_int(status, 3))),
            "exit_code": _int(status, 7),
            "reason": _str(status, 10),
            "message": _str(status, 11),
            "annotations": _map(status, 13),
            "log_path": _str(status, 15),
        }

    def exec_sync(self, container_id: str, cmd: list[str], timeout: int = 60) -> tuple[int, bytes, bytes]:
        """ExecSyncRequest container_id = 1, cmd = 2, timeout = 3 -> ExecSyncResponse stdout = 1, stderr = 2,
        exit_code = 3; -> (exit code, stdout, stderr)."""
        request = f_bytes(1, container_id) + f_repeated(2, cmd) + f_int(3, timeout)
        got = self.call(RUNTIME + "ExecSync", request, timeout=timeout + 30)
        return _int(got, 3), b"".join(got.get(1, ())), b"".join(got.get(2, ()))

    # ImageService

    def image_status(self, image: str) -> str:
        """ImageStatusRequest.image = 1 (ImageSpec.image = 1) -> ImageStatusResponse.image = 1 (Image.id = 1);
        "" when the runtime does not have the image."""
        got = self.call(IMAGES + "ImageStatus", f_message(1, f_bytes(1, image), always=True))
        return _str(decode(got[1][-1]), 1) if got.get(1) else ""


# --------------------------------------------------------------------------------------------------
# A node's socket, reached through `docker exec`.

# Runs in the node (its python3, standard library): one connection to the socket, bytes both ways.
RELAY = """
import os, socket, sys, threading
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
def up():
    while True:
        data = os.read(0, 65536)
        if not data:
            break
        s.sendall(data)
    s.shutdown(socket.SHUT_WR)
threading.Thread(target=up, daemon=True).start()
out = sys.stdout.buffer
while True:
    data = s.recv(65536)
    if not data:
        break
    out.write(data)
    out.flush()
"""


class NodeSocket:
    """A unix socket here whose connections reach ``path`` in the container ``container`` (``docker exec``).

    A context manager; its value is the gRPC target (``unix:///tmp/.../cri.sock``)."""

    def __init__(self, container: str, path: str = CONTAINERD_SOCKET, docker: str = "docker") -> None:
        self.container = container
        self.path = path
        self.docker = shutil.which(docker) or docker
        self._dir = tempfile.mkdtemp(prefix="gpufleet-cri-")
        self.local = os.path.join(self._dir, "cri.sock")
        self._server = socket.socket(socket.AF_UNIX)
        self._procs: list[subprocess.Popen] = []
        self._conns: list[socket.socket] = []
        self._closed = False

    def __enter__(self) -> str:
        self._server.bind(self.local)
        self._server.listen(8)
        threading.Thread(target=self._accept, daemon=True).start()
        return f"unix://{self.local}"

    def __exit__(self, *exc: object) -> None:
        self._closed = True
        self._server.close()
        for conn in self._conns:
            conn.close()
        for proc in self._procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        shutil.rmtree(self._dir, ignore_errors=True)

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _addr = self._server.accept()
            except OSError:
                return
            argv = [self.docker, "exec", "-i", self.container, "python3", "-c", RELAY, self.path]
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            self._procs.append(proc)
            self._conns.append(conn)
            threading.Thread(target=self._upstream, args=(conn, proc), daemon=True).start()
            threading.Thread(target=self._downstream, args=(conn, proc), daemon=True).start()

    @staticmethod
    def _upstream(conn: socket.socket, proc: subprocess.Popen) -> None:
        """Bytes from the gRPC client to the node, then end the relay's stdin."""
        with contextlib.suppress(OSError):
            while data := conn.recv(65536):
                proc.stdin.write(data)
                proc.stdin.flush()
        with contextlib.suppress(OSError):
            proc.stdin.close()

    @staticmethod
    def _downstream(conn: socket.socket, proc: subprocess.Popen) -> None:
        """Bytes from the node's socket back to the gRPC client, then end its side."""
        with contextlib.suppress(OSError):
            while data := proc.stdout.read1(65536):
                conn.sendall(data)
        with contextlib.suppress(OSError):
            conn.shutdown(socket.SHUT_WR)
