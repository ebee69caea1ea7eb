# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The check before a reboot on the shared default fleet's ``gpu-trixie`` (fixture ``sim_fleet``, no new fleet).

The test gives the node what a host has after a kernel update DKMS did not build for: an Ubuntu-shaped
``/boot/grub`` whose default entry is the new kernel, ``/lib/modules/<old>`` with a stand-in ``nvidia.ko`` of the
installed driver's version (an ELF file with a ``.modinfo`` section, ``tests/sim/kmod.py``) in ``modules.dep``, and
``/lib/modules/<new>`` with no nvidia module. The driver role's reboot step must refuse, naming the kernel, and not
reboot; ``gpu_facts`` must report ``next_boot_no_nvidia_module``. Once the module exists for the new kernel (or
``grubenv``'s ``saved_entry`` points back at the old one) the guard passes. What the files and ``/boot`` were before
is put back afterwards, so the other users of the fleet see the node as it was.

Secure Boot: a container has no EFI variables of its own, so ``gpu_facts`` reads a crafted tree on the node as the
host (``root``; the driver's libraries from the node itself, ``driver_root=/``): the ``SecureBoot`` EFI variable
set, the next kernel's ``nvidia.ko`` signed with OpenSSL as the kernel's ``sign-file`` signs, and ``/proc/keys``
without and then with that key (how an enrolled MOK shows in the kernel's machine keyring). Unenrolled: the guard
refuses; enrolled: it goes ahead.

What only a real host shows: that the bootloader then really starts that kernel, that the firmware, shim and kernel
accept or refuse the module, and ``mokutil``/MokManager (tests/controller/roles/test_driver_mok.py stands in for them).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.sim import kmod

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOK = Path(__file__).parent / "playbooks" / "reboot_guard.yml"
NODE = "gpu-trixie"
OLD, NEW = "6.12.0-10-amd64", "6.12.0-12-amd64"
UUID = "0f3c-77"


def playbook(fleet: Any, *args: str) -> subprocess.CompletedProcess:
    cmd = [str(ROOT / ".venv" / "bin" / "ansible-playbook"), "-i", str(fleet.inventory), "--limit", NODE, *args]
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".cache" / "collections"), ANSIBLE_FORCE_COLOR="0")
    return subprocess.run([*cmd, str(PLAYBOOK)], check=False, capture_output=True, text=True, cwd=ROOT, env=env)


@pytest.fixture(scope="module")
def node(sim_fleet: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    node = sim_fleet.node(NODE)
    had = node.run("test -e /boot/grub || test -e /lib/modules").rc == 0
    assert not had, f"{NODE} already has /boot/grub or /lib/modules: the test would overwrite them"
    out = tmp_path_factory.mktemp("next-boot") / "facts.json"
    facts = json.loads(_facts(sim_fleet, out))
    assert facts["kernel"] is None and facts["state"] == "unknown"  # the bare node: no /boot, nothing to check
    tree = tmp_path_factory.mktemp("boot")
    kmod.ubuntu_grub(tree, [NEW, OLD])
    for path in sorted(p for p in tree.rglob("*") if p.is_file()):
        node.put("/" + str(path.relative_to(tree)), path.read_bytes())
    node.out = out
    yield node
    node.run("rm -rf /boot/grub /boot/vmlinuz-* /lib/modules", check=True)


def _facts(fleet: Any, out: Path, *args: str) -> str:
    res = playbook(fleet, "-e", f"next_boot_out={out}", *args)
    assert res.returncode == 0, res.stdout[-3000:]
    return out.read_text()


def installed_version(node: Any) -> str:
    """The driver version gpu_facts says is installed (the node's libnvidia-ml.so.<version> in the ld cache)."""
    version = json.loads(node.out.read_text())["installed"]
    assert version, f"{NODE}: gpu_facts sees no installed driver, so no reboot would be checked"
    return version


def put_module(node: Any, kernel: str, version: str) -> None:
    node.put(f"/lib/modules/{kernel}/updates/dkms/nvidia.ko", kmod.elf_module(version, f"{kernel} SMP mod_unload"))
    node.put(f"/lib/modules/{kernel}/modules.dep", "updates/dkms/nvidia.ko:\n")


def test_reboot_into_a_kernel_without_a_module_is_refused(sim_fleet: Any, node: Any) -> None:
    version = installed_version(node)
    put_module(node, OLD, version)
    node.put(f"/lib/modules/{NEW}/modules.dep", "kernel/drivers/net/dummy.ko:\n")

    res = playbook(sim_fleet, "-e", "guard_via_role=true")
    assert res.returncode != 0, res.stdout[-3000:]
    assert "not rebooting for loading NVIDIA driver" in res.stdout, res.stdout[-3000:]
    assert (
        f"kernel {NEW}, which the host boots next (/boot/grub/grub.cfg set default), has no nvidia module" in res.stdout
    ), res.stdout[-3000:]
    assert f"dkms autoinstall -k {NEW}" in res.stdout
    assert "Reboot to load the new kernel module" not in res.stdout  # refused before the reboot task

    res = playbook(sim_fleet, "-e", f"next_boot_out={node.out}")  # the guard alone refuses too
    assert res.returncode != 0 and "not rebooting for the test" in res.stdout, res.stdout[-3000:]
    facts = json.loads(node.out.read_text())
    assert (facts["kernel"], facts["state"], facts["module"]) == (NEW, "no_module", None)


def test_the_guard_passes_once_the_kernels_pair(sim_fleet: Any, node: Any) -> None:
    version = installed_version(node)
    put_module(node, OLD, version)
    node.put(f"/lib/modules/{NEW}/modules.dep", "kernel/drivers/net/dummy.ko:\n")
    env = "# GRUB Environment Block\n" + f"saved_entry=gnulinux-advanced-{UUID}>gnulinux-{OLD}-advanced-{UUID}\n"
    cfg = node.run("cat /boot/grub/grub.cfg", check=True).stdout
    node.put("/boot/grub/grub.cfg", cfg.replace('set default="0"', 'set default="${saved_entry}"'))
    node.put("/boot/grub/grubenv", env + "#" * (1024 - len(env)))
    facts = json.loads(_facts(sim_fleet, node.out))
    assert (facts["kernel"], facts["source"], facts["state"]) == (OLD, "/boot/grub/grubenv saved_entry", "ok")

    node.put("/boot/grub/grubenv", "# GRUB Environment Block\n" + "#" * 1000)  # back to the new kernel
    put_module(node, NEW, "1.0.0")
    res = playbook(sim_fleet, "-e", f"next_boot_out={node.out}")
    assert res.returncode != 0, res.stdout[-3000:]
    assert (
        f"has no nvidia module of the installed driver {version}: "
        f"/lib/modules/{NEW}/updates/dkms/nvidia.ko is version 1.0.0" in res.stdout
    )
    put_module(node, NEW, version)
    facts = json.loads(_facts(sim_fleet, node.out))
    assert (facts["kernel"], facts["module"], facts["version"], facts["state"]) == (
        NEW, f"/lib/modules/{NEW}/updates/dkms/nvidia.ko", version, "ok",
    )  # fmt: skip


SB_ROOT = "/tmp/gpufleet-sb-root"
SECURE_BOOT = "/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"  # 4 attribute bytes, then 1


def test_secure_boot_refuses_an_unenrolled_key_and_proceeds_once_enrolled(
    sim_fleet: Any, node: Any, tmp_path: Path
) -> None:
    version = installed_version(node)
    key, cert = kmod.test_key(tmp_path / "mok", "gpufleet sim MOK", 0x5EC0B007)
    tree = tmp_path / "root"
    kmod.ubuntu_grub(tree, [NEW])
    kmod.write(tree, SECURE_BOOT, b"\x06\x00\x00\x00\x01")
    kmod.write(tree, f"/lib/modules/{NEW}/modules.dep", "updates/dkms/nvidia.ko:\n")
    kmod.write(tree, f"/lib/modules/{NEW}/updates/dkms/nvidia.ko", kmod.sign(kmod.elf_module(version, NEW), key, cert))
    kmod.write(tree, "/proc/keys", "0a I------ 1 perm 1f030000 0 0 keyring .machine: empty\n")
    for path in sorted(p for p in tree.rglob("*") if p.is_file()):
        node.put(SB_ROOT + "/" + str(path.relative_to(tree)), path.read_bytes())
    try:
        res = playbook(sim_fleet, "-e", f"next_boot_out={node.out}", "-e", f"facts_root={SB_ROOT}")
        assert res.returncode != 0, res.stdout[-3000:]
        assert "Secure Boot is on and kernel" in res.stdout and "will refuse its nvidia module" in res.stdout
        assert "signed by 'gpufleet sim MOK' (key 5E:C0:B0:07)" in res.stdout and "mokutil --import" in res.stdout
        facts = json.loads(node.out.read_text())
        assert (facts["secure_boot"], facts["state"], facts["signer"]) == (True, "untrusted", "gpufleet sim MOK")

        # MokManager enrolled the key at the console: the kernel now holds it in its machine keyring.
        keys = "0b I------ 1 perm 1f010000 0 0 asymmetri gpufleet sim MOK: 0c1d2e3f: X509.ecdsa 0c1d2e3f []\n"
        node.put(f"{SB_ROOT}/proc/keys", keys)
        facts = json.loads(_facts(sim_fleet, node.out, "-e", f"facts_root={SB_ROOT}"))
        assert (facts["state"], facts["trusted_by"]) == ("ok", "kernel")
    finally:
        node.run(f"rm -rf {SB_ROOT}", check=True)
