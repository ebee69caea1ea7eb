#!/usr/bin/env python
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The simulated GPU fleet: bring nodes up from a YAML description, write their inventory, tear down.

    tests/sim/fleet.py up --config tests/sim/fleets/default.yml [--name PREFIX]
    tests/sim/fleet.py down --name PREFIX
    tests/sim/fleet.py images [--config FLEET.yml]   # build (or reuse) the node images only
    tests/sim/fleet.py list                    # the fleets on this engine (find leftovers)

Everything a fleet creates (containers, volumes, its network) carries the label
`gpufleet.sim.fleet=<PREFIX>`, and teardown removes exactly what carries it, so fleets with different
prefixes live side by side on one Docker engine. Generated files (sysfs fixtures, the stub, the
inventory) live in tests/sim/build/fleets/<PREFIX>/.

From Python (what tests/integration/conftest.py does)::

    fleet = Fleet.from_file("tests/sim/fleets/default.yml", prefix="t1234")
    fleet.up()
    fleet.node("gpu-bookworm").run("nvidia-smi -L")   # -> Result(rc, stdout, stderr)
    fleet.inventory                                    # Path of the Ansible inventory
    fleet.down()
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `tests.sim` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    __package__ = "tests.sim"

from tests.sim import images, pcitree
from tests.sim.inventory import container_name, inventory_yaml
from tests.sim.model import load_fleet, node_config, validate_fleet

SIM_DIR = Path(__file__).resolve().parent
BUILD_DIR = SIM_DIR / "build"
LABEL = "gpufleet.sim.fleet"
STUB_SOURCE = SIM_DIR / "nvml" / "nvml_stub.c"
JSON_MARKER = b"\n#GPUFLEET-SIM-JSON#\n"
BOOT_TIMEOUT = 180
CGROUP_V2_HOST = Path("/sys/fs/cgroup/cgroup.controllers").exists()
UNIFIED = Path("/sys/fs/cgroup/unified")  # the cgroup2 hierarchy of a "hybrid" cgroup v1 host
# Suites whose systemd runs on cgroup v2 only (systemd 258 dropped v1; sid has 26x, trixie 257).
CGROUP_V2_ONLY_SUITES = {"sid"}
RUN_FLAGS = [
    "--cap-add",
    "ALL",
    "--cap-drop",
    "SYS_RESOURCE",
    "--security-opt",
    "seccomp=unconfined",
    "--security-opt",
    "apparmor=unconfined",
    "--device-cgroup-rule",
    "a *:* rwm",
    "--cgroupns=host",
    "--tmpfs",
    "/run",
    "--tmpfs",
    "/run/lock",
]
# Units that cannot work in a container; masked on every node, reason beside each.
MASKED_UNITS = {
    # no real /dev to manage; udev is not installed with minbase but may come with a package
    "systemd-udevd.service": "no device manager in a container (device nodes come from gpufleet-sim)",
    "systemd-udev-trigger.service": "as above",
    "systemd-modules-load.service": "cannot load kernel modules in a container",
    "sys-kernel-config.mount": "configfs cannot be mounted in a container",
    "sys-kernel-debug.mount": "debugfs cannot be mounted in a container",
    "sys-kernel-tracing.mount": "tracefs cannot be mounted in a container",
    "sys-fs-fuse-connections.mount": "fusectl cannot be mounted in a container",
    "systemd-remount-fs.service": "the container's root is set up by the engine, not fstab",
    "getty.target": "no consoles in a container",
    "console-getty.service": "no consoles in a container",
}


@dataclass
class Result:
    rc: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.rc == 0


def log(msg: str) -> None:
    print(f"[sim] {msg}", file=sys.stderr, flush=True)


def docker(*args: str, check: bool = True, **kw: Any) -> subprocess.CompletedProcess:
    res = subprocess.run(["docker", *args], check=False, capture_output=True, text=True, **kw)
    if check and res.returncode != 0:
        raise RuntimeError(f"docker {' '.join(args[:3])} ... failed (rc {res.returncode}): {res.stderr.strip()}")
    return res


def build_stub(dest: Path) -> Path:
    """Compile the NVML stub with the host's gcc (bookworm's glibc is the oldest the nodes have)."""
    digest = hashlib.sha256(STUB_SOURCE.read_bytes()).hexdigest()[:12]
    out = BUILD_DIR / "nvml" / f"libnvidia-ml-stub-{digest}.so"
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(f".{os.getpid()}.tmp")
        cmd = ["gcc", "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", "-fvisibility=hidden"]
        cmd += ["-Wl,-soname,libnvidia-ml.so.1", "-o", str(tmp), str(STUB_SOURCE), "-ldl"]
        subprocess.run(cmd, check=True)
        os.replace(tmp, out)
    shutil.copyfile(out, dest)
    return dest


HOST_PROGRAM_SOURCE = "/tmp/gf"


def host_program_files(module_utils: str | Path | None = None) -> dict[str, str]:
    """``{path on a node: text}`` to install the host programs from a working tree on a node: the installer
    (tests/tools/install_host_programs.py) and every module under ``plugins/module_utils`` with its subfolders.
    ``module_utils`` names another folder (an older commit's, for the benchmarks)."""
    repo = SIM_DIR.parent.parent
    source = Path(module_utils) if module_utils else repo / "plugins" / "module_utils"
    files = {
        f"{HOST_PROGRAM_SOURCE}/tests/tools/install_host_programs.py": (
            repo / "tests" / "tools" / "install_host_programs.py"
        ).read_text()
    }
    for path in sorted(source.rglob("*.py")):
        files[f"{HOST_PROGRAM_SOURCE}/plugins/module_utils/{path.relative_to(source).as_posix()}"] = path.read_text()
    return files


class Node:
    """One simulated node: `run()` execs in it, `config` is what it simulates."""

    def __init__(self, fleet: Fleet, desc: dict[str, Any]) -> None:
        self.fleet = fleet
        self.desc = desc
        self.name: str = desc["name"]
        self.container = container_name(fleet.prefix, self.name)
        self.config = node_config(desc)

    @property
    def gpus(self) -> list[dict[str, Any]]:
        return self.desc["gpus"]

    def run(self, cmd: str | list[str], check: bool = False, timeout: float | None = 600, **kw: Any) -> Result:
        """Run a shell command (a string, through `sh -c`) or an argv list inside the node."""
        argv = ["sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        res = subprocess.run(
            ["docker", "exec", "-i", self.container, *argv],
            check=False,
            capture_output=True,
            text=True,
            timeout=timeout,
            **kw,
        )
        result = Result(res.returncode, res.stdout, res.stderr)
        if check and res.returncode != 0:
            raise AssertionError(f"{self.name}: {cmd!r} failed (rc {res.returncode}):\n{res.stdout}\n{res.stderr}")
        return result

    def put(self, path: str, content: str | bytes, mode: int = 0o644) -> None:
        data = content.encode() if isinstance(content, str) else content
        quoted = shlex.quote(path)
        res = subprocess.run(
            [
                "docker",
                "exec",
                "-i",
                self.container,
                "sh",
                "-c",
                f'mkdir -p "$(dirname {quoted})" && cat > {quoted} && chmod {mode:o} {quoted}',
            ],
            input=data,
            check=False,
            capture_output=True,
        )
        if res.returncode != 0:
            raise RuntimeError(f"{self.name}: writing {path} failed: {res.stderr.decode(errors='replace')}")

    def install_host_programs(self) -> None:
        """The native toolkit's host programs from this working tree, installed as the toolkit role does."""
        for path, text in host_program_files().items():
            self.put(path, text)
        self.run(f"python3 {HOST_PROGRAM_SOURCE}/tests/tools/install_host_programs.py", check=True)

    # -- bring-up ------------------------------------------------------------------------------------
    def _files(self, workdir: Path, stub: Path) -> Path:
        """The node's generated files: sysfs fixtures, and a root tree copied into the container."""
        host_pci = pcitree.read_host_pci()
        host_modules = pcitree.read_host_modules()
        pcitree.write_tree(pcitree.pci_tree(self.gpus, self.desc["driver_state"], host_pci), workdir / "pci")
        pcitree.write_tree(
            pcitree.module_tree(host_modules, self.desc["driver_state"], self.desc["driver_version"]),
            workdir / "module",
        )
        root = workdir / "root"
        if root.exists():
            shutil.rmtree(root)
        cfg_text = json.dumps(self.config, indent=2) + "\n"
        (root / "etc/gpufleet-sim").mkdir(parents=True)
        (root / "etc/gpufleet-sim/gpus.json").write_text(cfg_text)
        (root / "usr/lib/gpufleet-sim").mkdir(parents=True)
        # The stub carries a copy of the node's JSON after a marker, for containers it is injected into.
        (root / "usr/lib/gpufleet-sim/libnvidia-ml.so").write_bytes(stub.read_bytes() + JSON_MARKER + cfg_text.encode())
        (root / "usr/local/sbin").mkdir(parents=True)
        for script in ("gpufleet-sim-mini-image", "gpufleet-sim-init"):
            shutil.copy2(SIM_DIR / "node" / script, root / "usr/local/sbin" / script)
        # No shebang in the repository (ansible-test allows `python` only; the nodes have python3 only).
        setup = (SIM_DIR / "node" / "gpufleet_sim_setup.py").read_text()
        (root / "usr/local/sbin/gpufleet-sim-setup").write_text("#!/usr/bin/python3\n" + setup)
        (root / "usr/local/sbin/gpufleet-sim-setup").chmod(0o755)
        # After every dpkg run (the driver role installing Debian's packages): follow the packaged driver.
        (root / "etc/apt/apt.conf.d").mkdir(parents=True)
        (root / "etc/apt/apt.conf.d/99gpufleet-sim-setup").write_text(
            'DPkg::Post-Invoke { "if [ -x /usr/local/sbin/gpufleet-sim-setup ]; then '
            '/usr/local/sbin/gpufleet-sim-setup >/dev/null 2>&1 || true; fi"; };\n'
        )
        units = root / "etc/systemd/system"
        (units / "multi-user.target.wants").mkdir(parents=True)
        shutil.copy2(SIM_DIR / "node" / "gpufleet-sim.service", units / "gpufleet-sim.service")
        os.symlink("../gpufleet-sim.service", units / "multi-user.target.wants/gpufleet-sim.service")
        # The collection's gpufleet-nvidia-devices.service (when a role installs it) reads the node's stand-in for
        # /proc/driver/nvidia and /proc/devices (gpufleet-sim-setup writes it; runc refuses mounts under /proc).
        dropin = units / "gpufleet-nvidia-devices.service.d"
        dropin.mkdir()
        (dropin / "gpufleet-sim.conf").write_text(
            "[Service]\nEnvironment=GPUFLEET_NVIDIA_PROC=/run/gpufleet-sim/proc\n"
        )
        for unit in MASKED_UNITS:
            os.symlink("/dev/null", units / unit)
        return root

    def create(self, image: str, stub: Path) -> None:
        workdir = self.fleet.workdir / self.name
        workdir.mkdir(parents=True, exist_ok=True)
        root = self._files(workdir, stub)
        labels = ["--label", f"{LABEL}={self.fleet.prefix}", "--label", f"gpufleet.sim.node={self.name}"]
        mounts = []
        for path, suffix in (("/var/lib/docker", "docker"), ("/var/lib/containerd", "containerd")):
            volume = f"{self.container}-{suffix}"
            docker("volume", "create", *labels, volume)
            mounts += ["-v", f"{volume}:{path}"]
        if "podman" in self.desc["engines"]:
            volume = f"{self.container}-containers"
            docker("volume", "create", *labels, volume)
            mounts += ["-v", f"{volume}:/var/lib/containers"]
        mounts += ["-v", f"{workdir / 'pci'}:/sys/bus/pci/devices:rw", "-v", f"{workdir / 'module'}:/sys/module:rw"]
        entrypoint = "/sbin/init"
        if self.desc["suite"] in CGROUP_V2_ONLY_SUITES and not CGROUP_V2_HOST:
            # systemd here needs cgroup v2: give the node its own directory of the host's cgroup2
            # hierarchy (see node/gpufleet-sim-init). Its engines get no cgroup controllers there.
            if not (UNIFIED / "cgroup.procs").exists():
                raise RuntimeError(
                    f"{self.name}: {self.desc['suite']}'s systemd needs cgroup v2; this host has cgroup v1 "
                    f"without a cgroup2 hierarchy at {UNIFIED}"
                )
            cgroup = UNIFIED / "gpufleet-sim" / self.fleet.prefix / self.name
            cgroup.mkdir(parents=True, exist_ok=True)
            mounts += ["-v", f"{cgroup}:/sys/fs/cgroup:rw"]
            entrypoint = "/usr/local/sbin/gpufleet-sim-init"
        else:
            mounts += ["-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw"]
        docker(
            "create",
            "--name",
            self.container,
            "--hostname",
            self.name,
            "--network",
            self.fleet.network,
            "--stop-signal",
            "SIGRTMIN+3",
            *labels,
            *RUN_FLAGS,
            *mounts,
            "--entrypoint",
            entrypoint,
            image,
        )
        docker("cp", f"{root}/.", f"{self.container}:/")
        docker("start", self.container)

    def wait_booted(self, timeout: float = BOOT_TIMEOUT) -> str:
        """Wait for systemd to finish booting; -> `running` or `degraded` (with the failed units logged)."""
        deadline = time.monotonic() + timeout
        state = ""
        while time.monotonic() < deadline:
            try:
                res = self.run("systemctl is-system-running --wait", timeout=max(5.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                break
            state = res.stdout.strip()
            if state in ("running", "degraded"):
                break
            time.sleep(1)
        if state not in ("running", "degraded"):
            raise RuntimeError(f"{self.name}: did not boot in {timeout:.0f}s (state {state!r})")
        if state == "degraded":
            failed = self.run("systemctl --failed --no-legend --plain").stdout.strip()
            log(f"{self.name}: degraded; failed units:\n{failed}")
        setup = self.run("systemctl is-active gpufleet-sim.service").stdout.strip()
        if setup != "active":
            status = self.run("systemctl status --no-pager gpufleet-sim.service").stdout
            raise RuntimeError(f"{self.name}: gpufleet-sim.service is {setup}:\n{status}")
        return state


class Fleet:
    def __init__(self, nodes: list[dict[str, Any]], prefix: str) -> None:
        if not prefix or not all(c.isalnum() or c == "-" for c in prefix) or not prefix[0].isalpha():
            raise ValueError(f"fleet prefix {prefix!r}: letters, digits and '-', starting with a letter")
        self.prefix = prefix
        self.workdir = BUILD_DIR / "fleets" / prefix
        self.network = f"{prefix}-net"
        self.nodes = {n["name"]: Node(self, n) for n in nodes}
        self.inventory = self.workdir / "inventory.yml"
        self.timings: dict[str, float] = {}

    @classmethod
    def from_file(cls, path: str | Path, prefix: str) -> Fleet:
        return cls(load_fleet(path), prefix)

    @classmethod
    def from_dict(cls, data: dict[str, Any], prefix: str) -> Fleet:
        return cls(validate_fleet(data), prefix)

    def node(self, name: str) -> Node:
        return self.nodes[name]

    def up(self) -> Fleet:
        start = time.monotonic()
        variants = {
            n.name: (n.desc["suite"], tuple(n.desc["engines"]), n.desc["driver_packages"]) for n in self.nodes.values()
        }
        tags = images.ensure_images(list(variants.values()))
        for node in self.nodes.values():
            # A driver_packages node simulates the driver its image has (Debian moves the point release).
            tag = tags[variants[node.name]]
            version = images.packaged_driver_version(tag) if node.desc["driver_packages"] else None
            if version and version != node.desc["driver_version"]:
                node.desc["driver_version"] = version
                node.config = node_config(node.desc)
        self.timings["images"] = time.monotonic() - start
        self.workdir.mkdir(parents=True, exist_ok=True)
        stub = build_stub(self.workdir / "libnvidia-ml-stub.so")
        try:
            docker("network", "create", "--label", f"{LABEL}={self.prefix}", self.network)
            with ThreadPoolExecutor(max_workers=len(self.nodes)) as pool:
                list(pool.map(lambda n: n.create(tags[variants[n.name]], stub), self.nodes.values()))
                states = list(pool.map(lambda n: n.wait_booted(), self.nodes.values()))
        except BaseException:
            if os.environ.get("GPUFLEET_SIM_KEEP") == "1":
                log(f"bring-up of {self.prefix} failed; kept for debugging (GPUFLEET_SIM_KEEP=1)")
            else:
                log(f"bring-up of {self.prefix} failed; tearing down")
                self.down()
            raise
        self.inventory.write_text(inventory_yaml(self.prefix, [n.desc for n in self.nodes.values()]))
        self.timings["up"] = time.monotonic() - start
        log(
            f"fleet {self.prefix} up in {self.timings['up']:.0f}s (images {self.timings['images']:.0f}s): "
            + ", ".join(f"{n}={s}" for n, s in zip(self.nodes, states))
        )
        return self

    def down(self) -> None:
        down(self.prefix)


def down(prefix: str) -> None:
    """Remove every container, volume and network labelled with this fleet's prefix, and its files."""
    start = time.monotonic()
    flt = f"label={LABEL}={prefix}"
    containers = docker("ps", "-aq", "--filter", flt).stdout.split()
    if containers:
        docker("rm", "-f", "-v", *containers, check=False)
    volumes = docker("volume", "ls", "-q", "--filter", flt).stdout.split()
    if volumes:
        docker("volume", "rm", "-f", *volumes, check=False)
    networks = docker("network", "ls", "-q", "--filter", flt).stdout.split()
    if networks:
        docker("network", "rm", *networks, check=False)
    shutil.rmtree(BUILD_DIR / "fleets" / prefix, ignore_errors=True)
    cgroups = UNIFIED / "gpufleet-sim" / prefix
    if cgroups.is_dir():  # cgroup directories go bottom-up, with rmdir (their files are not files)
        for path in sorted((p for p in cgroups.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
            path.rmdir()
        cgroups.rmdir()
    log(
        f"fleet {prefix} down in {time.monotonic() - start:.0f}s "
        f"({len(containers)} containers, {len(volumes)} volumes, {len(networks)} networks)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fleet.py", description=__doc__.split("\n\n", maxsplit=1)[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_up = sub.add_parser("up", help="bring up a fleet and write its inventory")
    p_up.add_argument("--config", default=str(SIM_DIR / "fleets" / "default.yml"))
    p_up.add_argument("--name", default="gpufleet-sim", help="prefix of every container, volume and network")
    p_down = sub.add_parser("down", help="remove everything labelled with the prefix")
    p_down.add_argument("--name", default="gpufleet-sim")
    sub.add_parser("list", help="the fleets on this Docker engine (prefix and containers), e.g. to find leftovers")
    p_img = sub.add_parser("images", help="build (or reuse) the node images of a fleet description")
    p_img.add_argument("--config", default=str(SIM_DIR / "fleets" / "default.yml"))
    args = parser.parse_args(argv)
    if args.cmd == "down":
        down(args.name)
        return 0
    if args.cmd == "list":
        rows = docker("ps", "-a", "--filter", f"label={LABEL}", "--format", f'{{{{.Label "{LABEL}"}}}} {{{{.Names}}}}')
        fleets: dict[str, list[str]] = {}
        for line in rows.stdout.splitlines():
            prefix, name = line.split(" ", 1)
            fleets.setdefault(prefix, []).append(name)
        for prefix, names in sorted(fleets.items()):
            print(f"{prefix}: {' '.join(sorted(names))}")
        return 0
    nodes = load_fleet(args.config)
    if args.cmd == "images":
        for tag in images.ensure_images(
            [(n["suite"], tuple(n["engines"]), n["driver_packages"]) for n in nodes]
        ).values():
            print(tag)
        return 0
    fleet = Fleet(nodes, args.name).up()
    print(fleet.inventory)
    return 0


if __name__ == "__main__":
    tempfile.tempdir = None
    raise SystemExit(main())
