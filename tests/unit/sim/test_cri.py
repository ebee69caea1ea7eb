# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The CRI test client (tests/sim/cri.py): its protobuf bytes, its relay, and (with grpcio) a call to a local server.

Known bytes: the examples of https://protobuf.dev/programming-guides/encoding/ (150 as field 1 is ``08 96 01``,
"testing" as field 2 is ``12 07 74 65 73 74 69 6e 67``), and CRI messages spelled out field by field from
kubernetes/cri-api ``pkg/apis/runtime/v1/api.proto`` (v0.36.3).
"""

from __future__ import annotations

import os
import socket
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.sim import cri  # noqa: E402


def test_the_encoding_guide_examples():
    assert cri.f_int(1, 150) == bytes.fromhex("089601")
    assert cri.f_bytes(2, "testing") == bytes.fromhex("120774657374696e67")
    assert cri.varint(0) == b"\x00"
    assert cri.varint(300) == bytes.fromhex("ac02")
    # A negative int64 is ten bytes (two's complement), as protobuf sends it.
    assert cri.varint(-2) == bytes.fromhex("feffffffffffffffff01")


def test_defaults_are_left_out_and_empty_messages_kept_only_when_asked():
    assert cri.f_int(3, 0) == b"" and cri.f_int(3, False) == b""
    assert cri.f_bytes(1, "") == b""
    assert cri.f_message(8, b"") == b""
    assert cri.f_message(8, b"", always=True) == b"\x42\x00"
    assert cri.f_int(3, True) == b"\x18\x01"


def test_repeated_and_map_fields():
    assert cri.f_repeated(3, ["ls", ""]) == b"\x1a\x02ls\x1a\x00"
    # map<string, string> = repeated entry {key = 1; value = 2;}, one per pair, sorted.
    assert cri.f_map(7, {"b": "2", "a": "1"}) == b"\x3a\x06\x0a\x01a\x12\x011" + b"\x3a\x06\x0a\x01b\x12\x012"
    assert cri.f_map(7, {}) == b""


def test_pod_sandbox_config_bytes():
    pod = cri.Pod(name="p", uid="u", namespace="ns", annotations={"k": "v"})
    expected = (
        bytes([0x0A, 10])
        + b"\x0a\x01p\x12\x01u\x1a\x02ns"
        + bytes([0x3A, 6])
        + b"\x0a\x01k\x12\x01v"
        # linux = 8 { security_context = 2 { namespace_options = 1 { network = 1: NODE (2) } } }
        + bytes([0x42, 6, 0x12, 4, 0x0A, 2, 0x08, 2])
    )
    assert pod.encode() == expected
    # network POD (0) is the default and left out; the empty NamespaceOption is still sent.
    assert cri.Pod(name="p", uid="u", namespace="", host_network=False).encode() == (
        bytes([0x0A, 6]) + b"\x0a\x01p\x12\x01u" + bytes([0x42, 4, 0x12, 2, 0x0A, 0])
    )


def test_container_config_bytes():
    container = cri.Container(
        name="c",
        image="img",
        command=["sh"],
        args=["-c", "x"],
        envs={"NVIDIA_VISIBLE_DEVICES": "GPU-1"},
        mounts=[cri.Mount("/var/run/nvidia-container-devices/GPU-1", "/dev/null", readonly=True)],
        annotations={"cdi.k8s.io/a": "nvidia.com/gpu=GPU-1"},
        cdi_devices=["nvidia.com/gpu=0"],
    )
    env = b"\x0a\x16NVIDIA_VISIBLE_DEVICES\x12\x05GPU-1"
    mount = b"\x0a\x27/var/run/nvidia-container-devices/GPU-1\x12\x09/dev/null\x18\x01"
    annotation = b"\x0a\x0ccdi.k8s.io/a\x12\x14nvidia.com/gpu=GPU-1"
    assert container.encode() == (
        b"\x0a\x03\x0a\x01c"  # metadata = 1 { name = 1 }
        + b"\x12\x05\x0a\x03img"  # image = 2 { image = 1 }
        + b"\x1a\x02sh"  # command = 3
        + b"\x22\x02-c\x22\x01x"  # args = 4
        + b"\x32"
        + bytes([len(env)])
        + env  # envs = 6 { key = 1, value = 2 }
        + b"\x3a"
        + bytes([len(mount)])
        + mount  # mounts = 7 { container_path = 1, host_path = 2, readonly = 3 }
        + b"\x52"
        + bytes([len(annotation)])
        + annotation  # annotations = 10
        + b"\x8a\x01\x12\x0a\x10nvidia.com/gpu=0"  # CDI_devices = 17 (key 0x8a 0x01) { name = 1 }
    )


def test_decode_reads_every_field_and_signed_ints():
    # ContainerStatus { id = 1: "abc", state = 3: EXITED (2), exit_code = 7: -1, annotations = 13: {a: b} }
    status = b"\x0a\x03abc\x18\x02" + b"\x38" + cri.varint(-1) + b"\x6a\x06\x0a\x01a\x12\x01b"
    fields = cri.decode(status)
    assert fields[1] == [b"abc"] and fields[3] == [2]
    assert cri._int(fields, 7) == -1
    assert cri._map(fields, 13) == {"a": "b"}
    assert cri._str(fields, 99) == "" and cri._int(fields, 99) == 0


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\x08", "truncated varint"),
        (b"\x0a\x05ab", "runs past the end"),
        (b"\x0b", "wire type 3"),
        (b"\x08" + b"\xff" * 11, "longer than 10"),
    ],
)
def test_decode_refuses_malformed_bytes(data, message):
    with pytest.raises(ValueError, match=message):
        cri.decode(data)


def _echo_server(path: str) -> socket.socket:
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    server.listen(1)

    def serve() -> None:
        conn, _addr = server.accept()
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data.upper())

    threading.Thread(target=serve, daemon=True).start()
    return server


def test_node_socket_relays_bytes_both_ways(tmp_path):
    """The relay as ``docker exec`` runs it, with a stand-in ``docker`` that runs the command here."""
    fake = tmp_path / "docker"
    fake.write_text(
        f'#!/bin/sh\n# docker exec -i CONTAINER python3 -c RELAY PATH\nshift 3\nshift\nexec {sys.executable} "$@"\n'
    )
    fake.chmod(0o755)
    target_path = str(tmp_path / "target.sock")
    server = _echo_server(target_path)
    try:
        with cri.NodeSocket("node", target_path, docker=str(fake)) as target:
            assert target.startswith("unix://")
            with socket.socket(socket.AF_UNIX) as client:
                client.connect(target[len("unix://") :])
                payload = os.urandom(200_000).hex().encode()
                client.sendall(payload)
                client.shutdown(socket.SHUT_WR)
                got = b""
                while data := client.recv(65536):
                    got += data
            assert got == payload.upper()
    finally:
        server.close()


def test_calls_through_grpc_to_a_local_server(tmp_path):
    grpc = pytest.importorskip("grpc", reason="grpcio (requirements/dev.in) is needed for the CRI channel")
    from concurrent import futures

    seen = {}

    def version(request: bytes, _context: object) -> bytes:
        seen["Version"] = request
        return cri.f_bytes(1, "0.1.0") + cri.f_bytes(2, "containerd") + cri.f_bytes(3, "1.7.24") + cri.f_bytes(4, "v1")

    def exec_sync(request: bytes, _context: object) -> bytes:
        seen["ExecSync"] = request
        return cri.f_bytes(1, b"out") + cri.f_bytes(2, b"err") + cri.f_int(3, 3)

    def run_pod_sandbox(_request: bytes, context: object) -> bytes:
        context.abort(grpc.StatusCode.UNKNOWN, "failed to get sandbox image")

    handler = grpc.method_handlers_generic_handler(
        "runtime.v1.RuntimeService",
        {
            name: grpc.unary_unary_rpc_method_handler(fn)
            for name, fn in (("Version", version), ("ExecSync", exec_sync), ("RunPodSandbox", run_pod_sandbox))
        },
    )
    server = grpc.server(futures.ThreadPoolExecutor(2))
    server.add_generic_rpc_handlers((handler,))
    address = f"unix://{tmp_path}/cri.sock"
    server.add_insecure_port(address)
    server.start()
    try:
        with cri.Cri(address, timeout=30) as client:
            assert client.version() == {
                "version": "0.1.0",
                "runtime_name": "containerd",
                "runtime_version": "1.7.24",
                "runtime_api_version": "v1",
            }
            assert seen["Version"] == b"\x0a\x02v1"
            assert client.exec_sync("abc", ["ls", "/dev"], timeout=5) == (3, b"out", b"err")
            assert seen["ExecSync"] == b"\x0a\x03abc\x12\x02ls\x12\x04/dev\x18\x05"
            with pytest.raises(cri.CriError, match="RunPodSandbox: UNKNOWN: failed to get sandbox image"):
                client.run_pod_sandbox(cri.Pod(name="p", uid="u"))
    finally:
        server.stop(None)
