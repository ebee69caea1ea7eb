# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Crafted ``/etc/ld.so.cache`` files, as an image could ship them: for the merge's unit tests and ``make bench``.

``crafted`` writes a new-format cache (the layout in ``plugins/module_utils/cdi/ldcache.py``) with the given names
in the given order; ``WORST_CASES`` the shapes that cost the old merge minutes to hours, each within the merge's
size bound.
"""

import struct

MAX_CACHE_BYTES = 8 << 20
# The driver libraries a GPU start adds (a Debian 535 spec's utility+compute+video+graphics list, as sonames).
DRIVER_LIBRARIES = [
    (soname, "/usr/lib/x86_64-linux-gnu/" + soname, "x86_64")
    for soname in (
        "libcuda.so.1",
        "libcudadebugger.so.1",
        "libnvidia-ml.so.1",
        "libnvidia-cfg.so.1",
        "libnvidia-nvvm.so.4",
        "libnvidia-ptxjitcompiler.so.1",
        "libnvidia-opencl.so.1",
        "libnvidia-allocator.so.1",
        "libnvidia-encode.so.1",
        "libnvcuvid.so.1",
        "libnvidia-opticalflow.so.1",
        "libvdpau_nvidia.so.1",
        "libGLX_nvidia.so.0",
        "libEGL_nvidia.so.0",
        "libGLESv2_nvidia.so.2",
        "libGLESv1_CM_nvidia.so.1",
        "libnvidia-eglcore.so.535.216.01",
        "libnvidia-glcore.so.535.216.01",
        "libnvidia-tls.so.535.216.01",
        "libnvidia-glsi.so.535.216.01",
        "libnvidia-glvkspirv.so.535.216.01",
        "libnvidia-rtcore.so.535.216.01",
        "libnvoptix.so.1",
        "libnvidia-fbc.so.1",
        "libnvidia-ngx.so.1",
    )
]


def crafted(names, *, key_offsets=None, flags=0x0303):
    """A new-format cache with ``names`` (bytes) in the given order, each with the path ``/x/<i>``; ``key_offsets``
    replaces the key offsets as they are written (for offsets outside the file)."""
    table = 48 + 24 * len(names)
    strings = bytearray()
    rows = []
    for i, name in enumerate(names):
        key = table + len(strings)
        strings += name + b"\0"
        value = table + len(strings)
        strings += b"/x/%d\0" % i
        rows.append((key if key_offsets is None else key_offsets[i], value))
    head = struct.pack("<17s3sIIB3xI12x", b"glibc-ld.so.cache", b"1.1", len(names), len(strings), 2, 0)
    return head + b"".join(struct.pack("<iIIIQ", flags, k, v, 0, 0) for k, v in rows) + bytes(strings)


def _one_name_many_offsets(count, name):
    """``count`` entries whose names all start inside one ``name``, at distinct offsets."""
    table = 48 + 24 * count
    head = struct.pack("<17s3sIIB3xI12x", b"glibc-ld.so.cache", b"1.1", count, len(name) + 1, 2, 0)
    rows = b"".join(struct.pack("<iIIIQ", 0x0303, table + i % len(name), table, 0, 0) for i in range(count))
    return head + rows + name + b"\0"


# The shapes an image can use against the merge, each within its 8 MiB bound: {description: builder}.
WORST_CASES = {
    "libcuda.so.<300,000 digits>": lambda: crafted([b"libcuda.so." + b"7" * 300_000, b"libc.so.6"]),
    "2,000 value-equal libcuda.so.0...01 of 4 KB": lambda: crafted(
        [b"libcuda.so." + b"0" * (4000 - i) + b"1" for i in range(2000)]
    ),
    "170,000 x libcuda.so.1": lambda: crafted([b"libcuda.so.1"] * 170_000),
    "300,000 names inside one 4 KB name": lambda: _one_name_many_offsets(300_000, b"libcuda.so." + b"1" * 4000),
    "150,000 distinct names": lambda: crafted([b"libx%06d.so.1" % i for i in range(150_000)]),
    "string offsets past the file": lambda: crafted([b"libz.so.1"] * 1000, key_offsets=[0xFFFFFFF0] * 1000),
}


def worst_case(description):
    data = WORST_CASES[description]()
    assert len(data) <= MAX_CACHE_BYTES, (description, len(data))
    return data
