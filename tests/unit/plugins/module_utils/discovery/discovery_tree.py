# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Builders of host trees (``sys/``, ``proc/``, ``dev/``, ``etc/``) for the discovery tests.

Each call writes what the kernel or the driver would show; device nodes are real (``os.mknod``, the
tests run as root). The NVML stub is the simulated fleet's (tests/sim/nvml/nvml_stub.c), compiled once
per session and installed as the tree's ``libnvidia-ml.so.<version>`` with an ld.so.cache from the real
``ldconfig``; it answers for the GPUs of a JSON config in its own format (``stub_config``), found
through ``$GPUFLEET_SIM_GPUS_JSON``.
"""

import json
import os
import shutil
import stat
import subprocess

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
LIBDIR = "usr/lib/x86_64-linux-gnu"
REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..", ".."))
STUB_SOURCE = os.path.join(REPO, "tests", "sim", "nvml", "nvml_stub.c")
H100 = {"name": "NVIDIA H100 80GB HBM3", "pci_device_id": 0x233010DE, "mib": 81559, "cc": (9, 0), "arch": 9}
A100 = {"name": "NVIDIA A100-SXM4-40GB", "pci_device_id": 0x20B010DE, "mib": 40960, "cc": (8, 0), "arch": 7}
MIB = 1024 * 1024


def fixture_text(name):
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as f:
        return f.read()


def compile_nvml_stub(dest_dir):
    """Path of the compiled stub, or None without a C compiler."""
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        return None
    out = os.path.join(dest_dir, "libnvidia-ml-stub.so")
    cmd = [gcc, "-shared", "-fPIC", "-O1", "-fvisibility=hidden", "-Wl,-soname,libnvidia-ml.so.1"]
    subprocess.run([*cmd, "-o", out, STUB_SOURCE, "-ldl"], check=True)
    return out


def stub_config(count=2, mig=False, lost=None, init_error=0, version="535.261.03", *, health=None):
    """The stub's JSON config (tests/sim/model.py's node_config format): GPU i at 0000:<5+i>:00.0,
    minor i, an H100 (with ``mig``, GPU 0 an A100 with MIG on and two MIG devices: 1g.5gb gi 7/ci 0
    and 3g.20gb gi 2/ci 0); ``lost``: the index whose handle is lost; ``init_error``: nvmlInit's rc;
    ``health``: {index: the GPU's "health" object (the stub's health counters)}.
    ``all_devices``: the stub answers whatever /dev of this machine holds (the tree's /dev is not it)."""
    gpus = []
    for i in range(count):
        model = A100 if mig and i == 0 else H100
        gpu = {
            "index": i, "minor": i, "name": model["name"], "uuid": "GPU-00000000-0000-0000-0000-%012d" % i,
            "pci_bus_id": "00000000:%02X:00.0" % (5 + i), "pci_device_id": model["pci_device_id"],
            "pci_subsystem_id": 0x16C110DE, "memory_total": model["mib"] * MIB, "cc_major": model["cc"][0],
            "cc_minor": model["cc"][1], "architecture": model["arch"], "brand": 2,
            "mig_mode": 1 if model is A100 else 0, "max_mig_devices": 7 if model is A100 else 0,
            "lost": i == lost,
        }  # fmt: skip
        if model is A100:
            gpu["mig_devices"] = [
                {"slot": k, "name": "NVIDIA A100-SXM4-40GB MIG " + profile,
                 "uuid": "MIG-%08d-0000-0000-0000-%012d" % (i, k), "gi_id": gi, "ci_id": 0, "memory_total": mib * MIB}
                for k, (profile, gi, mib) in enumerate((("1g.5gb", 7, 4864), ("3g.20gb", 2, 19968)))
            ]  # fmt: skip
        if health and i in health:
            gpu["health"] = health[i]
        gpus.append(gpu)
    return {
        "driver_state": "loaded", "driver_version": version, "cuda_version": 12020, "all_devices": 1,
        "init_error": init_error, "gpus": gpus,
    }  # fmt: skip


def write_stub_config(path, **kwargs):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(stub_config(**kwargs), f)
    return path


class HostTree:
    def __init__(self, root):
        self.root = str(root)
        os.makedirs(self.root, exist_ok=True)

    def path(self, inner):
        return os.path.join(self.root, inner.lstrip("/"))

    def write(self, inner, text, mode=None):
        path = self.path(inner)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb" if isinstance(text, bytes) else "w") as f:
            f.write(text)
        if mode is not None:
            os.chmod(path, mode)
        return path

    def link(self, inner, target):
        path = self.path(inner)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        os.symlink(target, path)

    # sysfs -----------------------------------------------------------------------------------------
    def pci(self, bus_id, *, device="0x20b0", pci_class="0x030200", vendor="0x10de", numa_node=0, driver="nvidia"):
        base = "/sys/bus/pci/devices/" + bus_id
        self.write(base + "/vendor", vendor + "\n")
        self.write(base + "/device", device + "\n")
        self.write(base + "/class", pci_class + "\n")
        self.write(base + "/subsystem_vendor", vendor + "\n")
        self.write(base + "/subsystem_device", "0x134f\n")
        self.write(base + "/numa_node", "%d\n" % numa_node)
        if driver:
            self.link(base + "/driver", "../../../../bus/pci/drivers/" + driver)
        return self

    def module(self, name="nvidia", version="535.261.03", taint="O", initstate="live"):
        base = "/sys/module/" + name
        os.makedirs(self.path(base), exist_ok=True)
        if version is not None:
            self.write(base + "/version", version + "\n")
        if taint is not None:
            self.write(base + "/taint", taint + "\n")
        if initstate is not None:
            self.write(base + "/initstate", initstate + "\n")
        return self

    def secure_boot(self, on=True):
        self.write(
            "/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c",
            b"\x06\x00\x00\x00" + (b"\x01" if on else b"\x00"),
        )
        return self

    def machine(self, name):
        self.write("/sys/class/dmi/id/product_name", name + "\n")
        return self

    # procfs ----------------------------------------------------------------------------------------
    def proc_version(self, version="535.261.03", open_module=False):
        text = fixture_text("proc-version-open.txt" if open_module else "proc-version-proprietary.txt")
        text = text.replace("550.90.07" if open_module else "535.261.03", version)
        self.write("/proc/driver/nvidia/version", text)
        return self

    def proc_gpu(self, bus_id, model, uuid, minor):
        self.write(
            f"/proc/driver/nvidia/gpus/{bus_id}/information",
            "Model: \t\t %s\nIRQ:   \t\t 150\nGPU UUID: \t %s\nVideo BIOS: \t 92.00.36.00.02\nBus Type: \t PCIe\n"
            "DMA Size: \t 47 bits\nDMA Mask: \t 0x7fffffffffff\nBus Location: \t %s\nDevice Minor: \t %d\n"
            "GPU Excluded:\t No\n" % (model, uuid, bus_id, minor),
        )
        return self

    # dev -------------------------------------------------------------------------------------------
    def node(self, inner, major, minor, char_link=True):
        path = self.path(inner)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
        if char_link:
            self.link("/dev/char/%d:%d" % (major, minor), "../" + os.path.relpath(inner, "/dev"))
        return self

    def gpu_nodes(self, count, uvm_major=508, char_links=True):
        for minor in range(count):
            self.node("/dev/nvidia%d" % minor, 195, minor, char_links)
        self.node("/dev/nvidiactl", 195, 255, char_links)
        self.node("/dev/nvidia-uvm", uvm_major, 0, char_links)
        self.node("/dev/nvidia-uvm-tools", uvm_major, 1, char_links)
        return self

    # driver userspace ------------------------------------------------------------------------------
    def nvml_stub(self, stub_path, version="535.261.03"):
        """Install the stub as the driver's libnvidia-ml and write the tree's ld.so.cache with ldconfig."""
        os.makedirs(self.path(LIBDIR), exist_ok=True)
        shutil.copy(stub_path, self.path(f"{LIBDIR}/libnvidia-ml.so.{version}"))
        self.write("/etc/ld.so.conf", "/" + LIBDIR + "\n")
        ldconfig = shutil.which("ldconfig") or "/sbin/ldconfig"
        subprocess.run([ldconfig, "-r", self.root], check=True)
        return self

    def nvidia_smi(self):
        self.write("/usr/bin/nvidia-smi", "#!/bin/sh\nexit 0\n", mode=0o755)
        return self


def gpu_host(tmp_path, count, stub=None, uvm_major=508):
    """A host with ``count`` GPUs, the driver loaded (sysfs, procfs, device nodes) and, with ``stub``,
    NVML answering for them (GPU i at 0000:<5+i>:00.0, minor i, as the stub says)."""
    tree = HostTree(tmp_path)
    tree.module().proc_version().gpu_nodes(count, uvm_major)
    for i in range(count):
        bus_id = "0000:%02x:00.0" % (5 + i)
        tree.pci(bus_id, device="0x2330", pci_class="0x030200", numa_node=i // 8)
        tree.pci("0000:%02x:00.1" % (5 + i), device="0x22ba", pci_class="0x040300", driver="snd_hda_intel")
        tree.proc_gpu(bus_id, "NVIDIA H100 80GB HBM3", "GPU-00000000-0000-0000-0000-%012d" % i, i)
    if stub:
        tree.nvml_stub(stub)
    return tree


# A DGX A100's eight GPUs (bus ids as on a DGX A100: two per PCIe switch, one switch per NUMA pair), each in MIG
# mode with seven 1g.5gb instances: GPU instance ids 7-13 (the 1g.5gb placements `nvidia-smi mig -lgipp` lists on
# an A100-SXM4-40GB), one compute instance (ci 0) each.
DGX_BUS_IDS = ("07", "0f", "47", "4e", "87", "90", "b7", "bd")
DGX_NVSWITCH_BUS_IDS = ("c4", "c5", "c6", "c7", "c8", "c9")
DGX_MIG_GI_IDS = (7, 8, 9, 10, 11, 12, 13)
# Stand-ins for the 535 driver's utility and compute libraries (empty ELF objects with the driver's sonames):
# enough for the real ldconfig to write the cache entries the CDI spec resolves.
DGX_LIBRARIES = (
    "libnvidia-cfg.so.1", "libnvidia-nscq.so.2", "libcuda.so.1", "libcudadebugger.so.1", "libnvidia-opencl.so.1",
    "libnvidia-ptxjitcompiler.so.1", "libnvidia-allocator.so.1", "libnvidia-pkcs11-openssl3.so.535.261.03",
    "libnvidia-nvvm.so.4",
)  # fmt: skip
CAPS_MAJOR = 237


def dgx_stub_config(gpus=8, migs=7, version="535.261.03"):
    """The stub's config for ``dgx_host``: ``gpus`` A100-SXM4-40GB in MIG mode, ``migs`` 1g.5gb devices each."""
    entries = []
    for i in range(gpus):
        entries.append({
            "index": i, "minor": i, "name": A100["name"], "uuid": "GPU-a1000000-0000-0000-0000-%012d" % i,
            "pci_bus_id": "00000000:%s:00.0" % DGX_BUS_IDS[i % 8].upper(), "pci_device_id": A100["pci_device_id"],
            "pci_subsystem_id": 0x134F10DE, "memory_total": A100["mib"] * MIB, "cc_major": 8, "cc_minor": 0,
            "architecture": A100["arch"], "brand": 2, "mig_mode": 1 if migs else 0, "max_mig_devices": 7,
            "lost": False,
            "mig_devices": [
                {"slot": k, "name": "NVIDIA A100-SXM4-40GB MIG 1g.5gb",
                 "uuid": "MIG-a1000000-%04d-0000-0000-%012d" % (i, k), "gi_id": DGX_MIG_GI_IDS[k],
                 "ci_id": 0, "memory_total": 4864 * MIB}
                for k in range(migs)
            ],
        })  # fmt: skip
    return {
        "driver_state": "loaded", "driver_version": version, "cuda_version": 12020, "all_devices": 1,
        "init_error": 0, "gpus": entries,
    }  # fmt: skip


def mig_minors_text(gpus=32):
    """``/proc/driver/nvidia-caps/mig-minors`` as the driver writes it: every possible capability, ``config 1``,
    ``monitor 2``, then per GPU minor 15 GPU instances of 8 compute instances each (``gpu0/gi0/access 3`` ...
    ``gpu31/gi14/ci7/access 4322``: NVIDIA MIG User Guide, "Device Nodes and Capabilities", r535/v580)."""
    lines = ["config 1", "monitor 2"]
    minor = 3
    for gpu in range(gpus):
        for gi in range(15):
            lines.append(f"gpu{gpu}/gi{gi}/access {minor}")
            minor += 1
            for ci in range(8):
                lines.append(f"gpu{gpu}/gi{gi}/ci{ci}/access {minor}")
                minor += 1
    return "\n".join(lines) + "\n"


def driver_stand_ins(tree, dest_dir, version="535.261.03"):
    """Empty shared objects with the driver's sonames, named ``<lib>.so.<version>``, under the tree's LIBDIR
    (before ``nvml_stub``, whose ldconfig indexes them); the driver's binaries as empty executables."""
    gcc = shutil.which("gcc") or shutil.which("cc")
    empty_c = os.path.join(dest_dir, "empty.c")
    with open(empty_c, "w") as f:
        f.write("int gpufleet_stand_in;\n")
    os.makedirs(tree.path(LIBDIR), exist_ok=True)
    for soname in DGX_LIBRARIES:
        stem = soname.split(".so.", maxsplit=1)[0]
        out = tree.path(f"{LIBDIR}/{stem}.so.{version}")
        subprocess.run([gcc, "-shared", "-fPIC", "-nostdlib", f"-Wl,-soname,{soname}", "-o", out, empty_c], check=True)
    for name in ("nvidia-smi", "nvidia-debugdump", "nvidia-persistenced", "nvidia-cuda-mps-control",
                 "nvidia-cuda-mps-server"):  # fmt: skip
        tree.write("/usr/bin/" + name, "#!/bin/sh\nexit 0\n", mode=0o755)
    return tree


def dgx_host(tmp_path, stub, gpus=8, migs=7, work=None):
    """A DGX-class host: ``gpus`` A100-SXM4-40GB (sysfs, procfs, /dev), six NVSwitches on the PCI bus, MIG on with
    ``migs`` 1g.5gb instances per GPU (``mig-minors``, ``/dev/nvidia-caps`` nodes of each instance), the driver's
    utility and compute libraries (stand-ins) and NVML answering through ``stub`` (configure it with
    ``dgx_stub_config``). ``gpus=1, migs=0`` is the small baseline host."""
    tree = HostTree(tmp_path)
    tree.module().proc_version()
    tree.write(
        "/proc/devices",
        "Character devices:\n  1 mem\n195 nvidia-frontend\n%d nvidia-caps\n508 nvidia-uvm\n\nBlock devices:\n"
        "  8 sd\n" % CAPS_MAJOR,
    )
    tree.gpu_nodes(gpus, 508)
    for i in range(gpus):
        bus_id = "0000:%s:00.0" % DGX_BUS_IDS[i % 8]
        tree.pci(bus_id, device="0x20b0", pci_class="0x030200", numa_node=(i // 2) * 2 + 1)
        tree.proc_gpu(bus_id, A100["name"], "GPU-a1000000-0000-0000-0000-%012d" % i, i)
    for bus in DGX_NVSWITCH_BUS_IDS if gpus == 8 else ():
        tree.pci("0000:%s:00.0" % bus, device="0x1af1", pci_class="0x068000", numa_node=7, driver=None)
    minors = {}
    for line in mig_minors_text().splitlines():
        name, minor = line.split()
        minors[name] = int(minor)
    tree.write("/proc/driver/nvidia-caps/mig-minors", mig_minors_text())
    if migs:
        tree.node("/dev/nvidia-caps/nvidia-cap1", CAPS_MAJOR, 1)
        tree.node("/dev/nvidia-caps/nvidia-cap2", CAPS_MAJOR, 2)
    for i in range(gpus):
        for gi in DGX_MIG_GI_IDS[:migs]:
            for key in (f"gpu{i}/gi{gi}/access", f"gpu{i}/gi{gi}/ci0/access"):
                tree.node("/dev/nvidia-caps/nvidia-cap%d" % minors[key], CAPS_MAJOR, minors[key])
    driver_stand_ins(tree, work or os.path.dirname(tree.root))
    tree.nvml_stub(stub)
    return tree
