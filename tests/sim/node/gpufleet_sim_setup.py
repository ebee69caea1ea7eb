# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Runs on a simulated GPU node at every boot (gpufleet-sim.service), before the container engines.

Reads /etc/gpufleet-sim/gpus.json (written by tests/sim/fleet.py) and:
* puts the NVML stub in place of Debian's real library file,
  /usr/lib/x86_64-linux-gnu/nvidia/current/libnvidia-ml.so.<driver version>, behind a local
  dpkg-divert (the package's own file, when installed, lives on as <name>.real), so every name a
  program loads (libnvidia-ml.so.1 through update-alternatives, the ld cache, CDI mounts) is the stub;
* for the `installed` and `loaded` states without Debian's libnvidia-ml1, creates libnvidia-ml.so.1
  links on the default library path, as NVIDIA's own installer would (Debian's package keeps its
  links in nvidia/current only, and then the stub is reached through them);
* for the `loaded` state, makes the device nodes the kernel module would: /dev/nvidia<minor> (195:N),
  /dev/nvidiactl (195:255), /dev/nvidia-modeset (195:254), /dev/nvidia-uvm and -uvm-tools (the
  dynamic major recorded as uvm_major, minors 0 and 1), and nvidia-caps for MIG-enabled GPUs.
* for the `loaded` state, writes what the kernel module would show under /proc to a stand-in,
  /run/gpufleet-sim/proc (runc refuses mounts under /proc): `devices` and `modules` (the real ones plus
  the NVIDIA lines), `driver/nvidia/{version,params,gpus/<bus>/information}` and, with MIG enabled,
  `driver/nvidia/capabilities/mig/{config,monitor}`. gpufleet-nvidia-devices.service reads it
  (GPUFLEET_NVIDIA_PROC, set by the drop-in tests/sim/fleet.py puts in the node);
* with `device_files` in gpus.json other than the driver's defaults (root:root 0666), simulates a host whose
  /etc/modprobe.d sets `options nvidia NVreg_DeviceFileUID=.. NVreg_DeviceFileGID=.. NVreg_DeviceFileMode=0...`:
  writes that file (/etc/modprobe.d/gpufleet-sim-nvidia.conf, removed again with the defaults), the params the
  module would show (DeviceFileMode in decimal) and makes /dev/nvidia<N>, nvidiactl and nvidia-modeset with that
  owner, group and mode (the uvm pair stays root:root 0666, as nvidia-modprobe makes it);
* with `"device_nodes_at_boot": false` in gpus.json, makes no device node: a host on which nothing
  creates them at boot (the collection's gpufleet-nvidia-devices.service must);
* makes /proc/sys writable in the node (so nested bridge networking works on docker 26 and later);
* forgets the MIG instances the stub NVML made (``mig-state`` beside gpus.json), as a reboot loses them, and the MIG
  mode of Hopper and later GPUs (architecture 9 and up), which does not persist across a reboot there either (NVIDIA
  gpu-operator issue #2600); an Ampere GPU keeps its mode.
* takes the driver version from Debian's libnvidia-ml1 when it is installed (the point release moves;
  the package is the truth): gpus.json, the stub's own copy of it and /sys/module/nvidia/version follow,
  so NVML, nvidia-smi and the package never disagree. apt runs this again after every dpkg run
  (/etc/apt/apt.conf.d/99gpufleet-sim), so a driver the driver role installs later is served too;
* registers Debian's libnvidia-ml.so.1 alternative when the package was installed while its library
  file (the diverted name) did not exist yet (nvidia-alternative skips a dangling source), so the real
  nvidia-smi finds the stub as it finds the real library on a GPU host.
It is idempotent; run it again after changing gpus.json.
"""

import json
import os
import shutil
import stat
import subprocess
import sys

CONFIG = "/etc/gpufleet-sim/gpus.json"
STUB = "/usr/lib/gpufleet-sim/libnvidia-ml.so"
JSON_MARKER = b"\n#GPUFLEET-SIM-JSON#\n"  # tests/sim/fleet.py appends the node's JSON to the stub after it
ALTERNATIVE_TRIGGER = "/var/lib/dpkg/info/nvidia-alternative.postinst"
MODULE_VERSION = "/sys/module/nvidia/version"
LIBDIR = "/usr/lib/x86_64-linux-gnu"
CURRENT = LIBDIR + "/nvidia/current"
FAKE_PROC = "/run/gpufleet-sim/proc"


MODPROBE_CONF = "/etc/modprobe.d/gpufleet-sim-nvidia.conf"
DEVICE_FILES_DEFAULT = {"uid": 0, "gid": 0, "mode": 0o666}


def mknod(path, major, minor, mode=0o666, *, uid=0, gid=0):
    if os.path.exists(path):
        st = os.stat(path)
        if stat.S_ISCHR(st.st_mode) and (os.major(st.st_rdev), os.minor(st.st_rdev)) == (major, minor):
            return
        os.unlink(path)
    os.mknod(path, mode | stat.S_IFCHR, os.makedev(major, minor))
    os.chown(path, uid, gid)
    os.chmod(path, mode)


def device_files(cfg):
    """The node's nvidia device-file parameters (uid, gid, mode), and its modprobe.d file to match."""
    files = dict(DEVICE_FILES_DEFAULT, **(cfg.get("device_files") or {}))
    if files == DEVICE_FILES_DEFAULT:
        if os.path.exists(MODPROBE_CONF):
            os.unlink(MODPROBE_CONF)
    else:
        write(
            MODPROBE_CONF,
            "# gpufleet-sim: the hardening this node simulates\n"
            f"options nvidia NVreg_DeviceFileUID={files['uid']} NVreg_DeviceFileGID={files['gid']} "
            f"NVreg_DeviceFileMode=0{files['mode']:o}\n",
        )
    return files


def _mount_options(mountpoint):
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        for line in f:
            fields = line.split()
            if fields[4] == mountpoint:
                return fields[5].split(",")
    return []


def link(target, path):
    if not os.path.lexists(path):
        os.symlink(target, path)


def packaged_version():
    """The upstream version of the installed libnvidia-ml1 (`535.261.03-1` -> `535.261.03`), else None."""
    res = subprocess.run(
        ["dpkg-query", "-W", "-f", "${db:Status-Status} ${Version}", "libnvidia-ml1"],
        check=False,
        capture_output=True,
        text=True,
    )
    status, _sep, version = res.stdout.strip().partition(" ")
    if res.returncode != 0 or status != "installed" or not version:
        return None
    return version.split(":", 1)[-1].rsplit("-", 1)[0]


def follow_package(cfg, version):
    """Make the node simulate the packaged driver `version`: gpus.json, the stub's copy, the module's version."""
    cfg["driver_version"] = version
    cfg["nvml_version"] = f"{cfg['nvml_version'].split('.', 1)[0]}.{version}"
    text = json.dumps(cfg, indent=2) + "\n"
    with open(CONFIG + ".tmp", "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(CONFIG + ".tmp", CONFIG)
    with open(STUB, "rb") as f:
        stub = f.read()
    cut = stub.rfind(JSON_MARKER)
    if cut >= 0:
        stub = stub[:cut]
    with open(STUB + ".tmp", "wb") as f:
        f.write(stub + JSON_MARKER + text.encode())
    os.replace(STUB + ".tmp", STUB)
    if os.path.exists(MODULE_VERSION):
        with open(MODULE_VERSION, "w", encoding="utf-8") as f:
            f.write(version + "\n")


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def fake_proc(cfg):
    """What the loaded kernel module would show under /proc, at FAKE_PROC."""
    with open("/proc/devices", encoding="utf-8") as f:
        devices = f.read()
    nvidia = f"195 nvidia-frontend\n{cfg['uvm_major']} nvidia-uvm\n{cfg['caps_major']} nvidia-caps\n"
    if cfg.get("imex_major"):  # a node in an NVLink domain: the driver's IMEX channel device
        nvidia += f"{cfg['imex_major']} nvidia-caps-imex-channels\n"
    char, sep, block = devices.partition("\nBlock devices:")
    write(f"{FAKE_PROC}/devices", char.rstrip("\n") + "\n" + nvidia + sep + block)
    try:  # absent where the kernel has no loadable modules (as on some build machines)
        with open("/proc/modules", encoding="utf-8") as f:
            modules = f.read()
    except OSError:
        modules = ""
    live = "0 - Live 0x0000000000000000 (POE)"
    write(
        f"{FAKE_PROC}/modules",
        f"nvidia_uvm 1523712 {live}\nnvidia_modeset 1314816 {live}\nnvidia 56807424 {live}\n" + modules,
    )
    drv = f"{FAKE_PROC}/driver/nvidia"
    write(
        f"{drv}/version",
        f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {cfg['driver_version']}  Release Build  (gpufleet-sim)\n"
        "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n",
    )
    files = device_files(cfg)
    write(
        f"{drv}/params",
        f"ModifyDeviceFiles: 1\nDeviceFileUID: {files['uid']}\nDeviceFileGID: {files['gid']}\n"
        f"DeviceFileMode: {files['mode']}\n",
    )
    if os.path.isdir(f"{drv}/gpus"):
        shutil.rmtree(f"{drv}/gpus")
    for gpu in cfg["gpus"]:
        write(
            f"{drv}/gpus/{gpu['pci_bus_id']}/information",
            f"Model: \t\t {gpu['name']}\nIRQ:   \t\t 0\nGPU UUID: \t {gpu['uuid']}\n"
            f"Bus Location: \t {gpu['pci_bus_id']}\nDevice Minor: \t {gpu['minor']}\nGPU Excluded:\t No\n",
        )
    if os.path.isdir(f"{drv}/capabilities"):
        shutil.rmtree(f"{drv}/capabilities")
    if any(g["mig_mode"] == 1 for g in cfg["gpus"]):
        write(f"{drv}/capabilities/mig/config", "DeviceFileMinor: 1\nDeviceFileMode: 256\nDeviceFileModify: 1\n")
        write(f"{drv}/capabilities/mig/monitor", "DeviceFileMinor: 2\nDeviceFileMode: 292\nDeviceFileModify: 1\n")


def forget_mig_instances(cfg):
    """The stub's ``mig-state`` as a boot leaves it: no instances; the mode kept for GPUs before Hopper."""
    path = os.path.join(os.path.dirname(CONFIG), "mig-state")
    if not os.path.exists(path):
        return
    kept_modes = {g["uuid"] for g in cfg["gpus"] if g.get("architecture", 0) < 9}
    with open(path, encoding="utf-8") as f:
        lines = [line for line in f if line.startswith("gpu ") and line.split()[1] in kept_modes]
    write(path, "".join(lines))


def main():
    with open(CONFIG, encoding="utf-8") as f:
        cfg = json.load(f)
    forget_mig_instances(cfg)
    packaged = packaged_version()
    if packaged and packaged != cfg["driver_version"]:
        follow_package(cfg, packaged)
    state, version = cfg["driver_state"], cfg["driver_version"]
    real = f"{CURRENT}/libnvidia-ml.so.{version}"
    os.makedirs(CURRENT, exist_ok=True)
    truename = subprocess.run(["dpkg-divert", "--truename", real], capture_output=True, text=True, check=True)
    if truename.stdout.strip() == real:
        subprocess.run(
            ["dpkg-divert", "--local", "--add", "--rename", "--divert", real + ".real", real],
            check=True,
            stdout=subprocess.DEVNULL,
        )
    shutil.copyfile(STUB, real + ".tmp")
    os.chmod(real + ".tmp", 0o644)
    os.replace(real + ".tmp", real)
    if state in ("installed", "loaded") and not packaged:
        # A driver with no Debian package (as NVIDIA's installer lays it out): libnvidia-ml.so.1 on the
        # default library path. Debian's libnvidia-ml1 (535) keeps it in nvidia/current only.
        link(f"libnvidia-ml.so.{version}", f"{CURRENT}/libnvidia-ml.so.1")
        link("nvidia/current/libnvidia-ml.so.1", f"{LIBDIR}/libnvidia-ml.so.1")
    if packaged and not os.path.exists(f"{LIBDIR}/libnvidia-ml.so.1") and os.path.exists(ALTERNATIVE_TRIGGER):
        # Debian's own trigger, as dpkg would run it once the library file exists (its final
        # dpkg-trigger call may find apt's lock held; the alternative is registered before it).
        subprocess.run(
            ["sh", ALTERNATIVE_TRIGGER, "triggered", "register-nvidia-alternative"],
            check=False,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    subprocess.run(["ldconfig"], check=True)
    # The engine mounts /proc/sys read-only in a container that is not --privileged; docker 26 and
    # later then cannot set up bridge networking for nested containers (IPv6 sysctls on the veth).
    # The node's own mount namespace may make it writable again, as --privileged would have it.
    if "ro" in _mount_options("/proc/sys"):
        subprocess.run(["mount", "-o", "remount,rw,bind", "/proc/sys"], check=False)
    if state == "loaded":
        fake_proc(cfg)
    elif os.path.isdir(FAKE_PROC):
        shutil.rmtree(FAKE_PROC)
    files = device_files(cfg)
    if state == "loaded" and cfg.get("device_nodes_at_boot", True):
        owner = {"mode": files["mode"], "uid": files["uid"], "gid": files["gid"]}
        for gpu in cfg["gpus"]:
            mknod(f"/dev/nvidia{gpu['minor']}", 195, gpu["minor"], **owner)
        mknod("/dev/nvidiactl", 195, 255, **owner)
        mknod("/dev/nvidia-modeset", 195, 254, **owner)
        mknod("/dev/nvidia-uvm", cfg["uvm_major"], 0)
        mknod("/dev/nvidia-uvm-tools", cfg["uvm_major"], 1)
        if any(g["mig_mode"] == 1 for g in cfg["gpus"]):
            os.makedirs("/dev/nvidia-caps", exist_ok=True)
            mknod("/dev/nvidia-caps/nvidia-cap1", cfg["caps_major"], 1, 0o400)
            mknod("/dev/nvidia-caps/nvidia-cap2", cfg["caps_major"], 2, 0o444)
    print(f"gpufleet-sim: node {cfg['node']}: driver {state} ({version}), {len(cfg['gpus'])} GPU(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
