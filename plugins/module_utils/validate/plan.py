# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the ``gpufleet.nvidia.validate`` role runs: the checks per container engine and mode (``validate_plan``),
the images each engine lacks and what loads or pulls them (``validate_images``), and what the host asks of every
check (``host_driver_version``, ``required_device_nodes``, ``gpu_uuids``; ``fabric_manager_wait`` and
``fabric_manager_problem`` on NVSwitch hosts). ``CHECK_SCRIPT`` is what runs in each container;
``validate.result`` judges its output. Pure functions (no I/O), behind the filters of
``plugins/filter/validate.py``.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from ..discovery.discover import FABRIC_MANAGER_UNIT
from ..runtime.common import reads_cdi
from ..runtime.registry import INFO, VALIDATE_ORDER

BEGIN = "GPUFLEET-VALIDATE-BEGIN"
END = "GPUFLEET-VALIDATE-END"
LIBCUDA_FILES = (
    "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
    "/usr/lib/aarch64-linux-gnu/libcuda.so.1",
    "/usr/lib64/libcuda.so.1",
    "/usr/lib/libcuda.so.1",
    "/usr/local/nvidia/lib64/libcuda.so.1",
)
NVSMI = "NVSMI"
NVSMI_RC = "NVSMI-RC"
# The driver libraries every check asks for (utility and compute, the capabilities a container gets by default): each
# must have an entry in the container's ld cache resolving to a file of the host driver's version, as
# libnvidia-container injects them (kept only when the resolved file name ends with the driver version).
REQUIRED_LIBS = ("libcuda.so.1", "libnvidia-ml.so.1")
# dlopen(libcuda.so.1) where the image has python3 (ctypes asks for RTLD_NOW): the library and everything it links
# must load. cuInit is not called: without a driver (the simulated nodes) it fails, with one it is CUDA's business.
_DLOPEN_PY = (
    "try:\n"
    "    import ctypes\n"
    "except ImportError:\n"
    '    print("DLOPEN none")\n'
    "else:\n"
    "    try:\n"
    '        ctypes.CDLL("libcuda.so.1")\n'
    '        print("DLOPEN ok")\n'
    "    except OSError as e:\n"
    '        print("DLOPEN failed", str(e).replace(chr(10), " "))\n'
)
# POSIX sh only: the image may have nothing but sh, ls, readlink and ldconfig (no grep). nvidia-smi is not the image's:
# the runtime (utility capability) or the CDI spec puts the host driver's binary in the container, as NVIDIA's guides
# expect (``docker run --rm --runtime=nvidia -e NVIDIA_VISIBLE_DEVICES=all IMAGE nvidia-smi``). Each character device
# is opened read-write (``<>``, as CUDA opens them; ``[ -c ]`` first, since ``<>`` creates a missing file); the
# shell's error message carries strerror, which ``open_status`` reads. Everything is judged by ``validate_result``.
CHECK_SCRIPT = (
    "echo " + BEGIN + "; "
    'for d in /dev/nvidia* /dev/nvidia-caps/*; do [ -e "$d" ] || continue; echo "DEV $d"; [ -c "$d" ] || continue; '
    'if e=$( { true <> "$d"; } 2>&1 ); then echo "OPEN $d ok"; else echo "OPEN $d $e"; fi; done; '
    "for f in " + " ".join(LIBCUDA_FILES) + '; do [ -e "$f" ] && echo "FILE $f"; done; '
    "command -v ldconfig >/dev/null 2>&1 || echo NO-LDCONFIG; "
    "ldconfig -p 2>/dev/null | while read -r n r; do case $n in " + "|".join(REQUIRED_LIBS) + ") "
    'p=${r##*=> }; if [ -e "$p" ]; then echo "LIB $n $p = $(readlink -f "$p" 2>/dev/null)"; '
    'else echo "LIB $n $p missing"; fi;; '
    "esac; done; "
    "if command -v python3 >/dev/null 2>&1; then python3 -c '" + _DLOPEN_PY + "' 2>&1; else echo DLOPEN none; fi; "
    "echo " + NVSMI + "; nvidia-smi -L 2>&1; echo " + NVSMI_RC + " $?; echo " + END
)
ENGINE_ORDER = VALIDATE_ORDER
# The device plugin's volume-mounts request (k8s-device-plugin v0.17.1, internal/plugin/server.go): /dev/null on
# <root>/<device>, and NVIDIA_VISIBLE_DEVICES=<root>.
VOLUME_MOUNTS_ROOT = "/var/run/nvidia-container-devices"


def containerd_ref(image: str) -> str:
    """A reference as containerd stores it: ``busybox`` -> ``docker.io/library/busybox:latest``."""
    ref = image
    first = ref.split("/", 1)[0]
    if "/" not in ref:
        ref = "docker.io/library/" + ref
    elif not ("." in first or ":" in first or first == "localhost"):
        ref = "docker.io/" + ref
    if "@" not in ref and ":" not in ref.rsplit("/", 1)[-1]:
        ref += ":latest"
    return ref


def runtime_request(toolkit: Mapping[str, Any] | None) -> tuple[list[str], list[str]]:
    """``(docker args, ctr args)`` asking the ``nvidia`` runtime for every GPU the way this host's runtime trusts an
    unprivileged container (``gpufleet_toolkit``): ``NVIDIA_VISIBLE_DEVICES=all`` where that variable is honoured
    (NVIDIA's behaviour, docker hosts); on a Kubernetes node, where it is not, the device plugin's volume mounts (the
    path pods take); where neither is, the variable from a container with CAP_SYS_ADMIN (privileged to the runtime)."""
    toolkit = toolkit or {}
    if toolkit.get("accept_envvar_unprivileged") is not False:
        return ["-e", "NVIDIA_VISIBLE_DEVICES=all"], ["--env", "NVIDIA_VISIBLE_DEVICES=all"]
    if toolkit.get("accept_volume_mounts"):
        env = "NVIDIA_VISIBLE_DEVICES=" + VOLUME_MOUNTS_ROOT
        target = VOLUME_MOUNTS_ROOT + "/all"
        return (
            ["-e", env, "-v", f"/dev/null:{target}:ro"],
            ["--env", env, "--mount", f"type=bind,src=/dev/null,dst={target},options=rbind:ro"],
        )
    return (
        ["--cap-add", "SYS_ADMIN", "-e", "NVIDIA_VISIBLE_DEVICES=all"],
        ["--cap-add", "CAP_SYS_ADMIN", "--env", "NVIDIA_VISIBLE_DEVICES=all"],
    )


def _skipped_check(base: dict[str, Any], mode: str, name: str, message: str) -> dict[str, Any]:
    """A check that is planned but not run (nothing to load, nothing to start), with the reason."""
    return dict(
        base,
        mode=mode,
        name=name,
        argv=None,
        present_argv=None,
        present_rc0=True,
        load_argv=None,
        skipped=True,
        message=message,
    )


def validate_plan(
    nvidia: Mapping[str, Any] | None,
    runtime: Mapping[str, Any] | None = None,
    toolkit: Mapping[str, Any] | None = None,
    *,
    image: str | None = None,
    pull: str = "missing",
    engines: Iterable[str] | None = None,
    runtime_path: str = "/usr/local/bin/gpufleet-container-runtime",
    containerd_namespace: str = "default",
    suffix: str = "",
    timeout: int | str = 120,
) -> list[dict[str, Any]]:
    """The checks to run, each ``{engine, mode, image, name, argv, present_argv, present_rc0, load_argv, pull_argv,
    skipped, message}``; see ``DOCUMENTATION_PLAN``."""
    if not image:
        raise ValueError("validate_plan: image is required (validate_image)")
    if pull not in ("missing", "never", "always"):
        raise ValueError(f"validate_plan: pull must be missing, never or always, not {pull!r}")
    found = ((nvidia or {}).get("engines")) or {}
    registered = ((runtime or {}).get("engines")) or {}
    names = [e for e in ENGINE_ORDER if (found.get(e) or {}).get("installed") or e in registered]
    names += sorted(e for e in registered if e not in names)
    if engines:
        names = [e for e in names if e in engines]
    rt_path = (toolkit or {}).get("runtime_path") or runtime_path
    docker_request, ctr_request = runtime_request(toolkit)
    wrap = ["timeout", "--kill-after=10", str(int(timeout))]
    checks = []
    for engine in names:
        fact = found.get(engine) or {}
        reg = registered.get(engine) or {}
        base = {"engine": engine, "image": image, "skipped": False, "message": "", "pull_argv": None}
        name = "gpufleet-validate-{}{}".format(engine, ("-" + suffix) if suffix else "")
        info = INFO.get(engine)
        how = info.validate_check if info else None
        if info and how == "cli":
            present = [engine, *info.validate_image_present, image]
            run = [engine, "run", "--rm", "--network", "none", "--pull", pull]
            common = dict(base, present_argv=present, present_rc0=True, load_argv=[engine, "load", "-i"])
            gpus_skipped = None
            if "runtime" in info.validate_modes:
                cdi = reg.get("cdi") if "cdi" in reg else fact.get("cdi_enabled")
                version = reg.get("version") or fact.get("version")
                modes = [("runtime", ["--runtime", "nvidia", *docker_request])]
                # nvidia as docker's default runtime (the runtime role's runtime_set_as_default): the command of
                # NVIDIA's guides, `docker run --gpus all`, with no --runtime and no variable of ours
                default = reg["default"] if "default" in reg else fact.get("default_runtime") == "nvidia"
                if default and (toolkit or {}).get("accept_envvar_unprivileged") is False:
                    gpus_skipped = (
                        "docker (gpus): not run: on this host the runtime takes no NVIDIA_VISIBLE_DEVICES from an "
                        "unprivileged container (accept_envvar_unprivileged false, a Kubernetes node), and that is "
                        "what docker --gpus passes; ask with CDI (--device nvidia.com/gpu=all) or as the device "
                        "plugin does"
                    )
                elif default:
                    modes.append(("gpus", ["--gpus", "all"]))
                if cdi and reads_cdi(engine, version):
                    modes.append(("cdi", ["--device", "nvidia.com/gpu=all"]))
            else:
                modes = [("cdi", ["--device", "nvidia.com/gpu=all"])]
            for mode, args in modes:
                argv = wrap + run + ["--name", f"{name}-{mode}"] + args + [image, "sh", "-c", CHECK_SCRIPT]
                checks.append(dict(common, mode=mode, name=f"{name}-{mode}", argv=argv))
            if gpus_skipped:
                checks.append(_skipped_check(base, "gpus", f"{name}-gpus", gpus_skipped))
        elif how == "ctr":
            ref = containerd_ref(image)
            ctr = ["ctr", "-n", containerd_namespace]
            # --cpu-shares 0: ctr 2.x asks for 1024 shares by default, which runc cannot set (cpu.weight)
            # where the cgroup v2 tree does not delegate the cpu controller (nested hosts, LXC); the check
            # needs no CPU weight, and ctr 1.6 and 1.7 take the flag too.
            argv = wrap + ctr + ["run", "--rm", "--cpu-shares", "0", "--runc-binary", rt_path]
            argv += ctr_request
            argv += [ref, name, "sh", "-c", CHECK_SCRIPT]
            checks.append(
                dict(
                    base,
                    mode="runtime",
                    image=ref,
                    name=name,
                    argv=argv,
                    present_argv=[*ctr, "images", "ls", "-q", "name==" + ref],
                    present_rc0=False,
                    load_argv=[*ctr, "images", "import"],
                    pull_argv=None if pull == "never" else [*ctr, "images", "pull", ref],
                    # `ctr run` without a terminal can lose a short-lived task's output, all or its tail: the role
                    # runs a check once more that exited 0 without this last line of the script's
                    rerun_incomplete=END,
                )
            )
        else:
            checks.append(
                _skipped_check(
                    base,
                    "none",
                    name,
                    f"{engine}: no container check here (crictl needs a pod sandbox); validate it through Kubernetes",
                )
            )
    return checks


def validate_images(
    plan: Iterable[Mapping[str, Any]],
    present_results: Iterable[Mapping[str, Any]] | None = None,
    *,
    pull: str = "missing",
    archive: str = "",
) -> dict:
    """``{missing, load, pull}``: the engines whose probe (``present_argv``, registered in a loop over the checks that
    have one) says the image is absent, the checks whose ``load_argv`` loads the archive into them (one per engine,
    when ``archive`` is set), and the checks whose ``pull_argv`` pulls it (containerd: every engine under
    ``pull=always``; under ``missing`` the engines lacking it unless an archive is loaded instead)."""
    plan = list(plan or [])
    missing: list = []
    for res in present_results or []:
        check = res.get("item") or {}
        if "rc" not in res or not check:
            continue  # skipped or not run
        absent = res["rc"] != 0 if check.get("present_rc0") else (res.get("stdout") or "") == ""
        if absent and check["engine"] not in missing:
            missing.append(check["engine"])
    load, loaded = [], set()
    if archive:
        for check in plan:
            if check.get("load_argv") and check["engine"] in missing and check["engine"] not in loaded:
                loaded.add(check["engine"])
                load.append(check)
    if pull == "always":
        pulled = [c["engine"] for c in plan]
    elif pull == "missing" and not archive:
        pulled = missing
    else:
        pulled = []
    return {
        "missing": missing,
        "load": load,
        "pull": [c for c in plan if c.get("pull_argv") and c["engine"] in pulled],
    }


def gpu_uuids(nvidia: Mapping[str, Any] | None) -> list[str]:
    """The UUIDs of the host's GPUs (``ansible_facts.nvidia.gpus``), in discovery's order."""
    return [str(g["uuid"]) for g in (nvidia or {}).get("gpus") or [] if isinstance(g, Mapping) and g.get("uuid")]


def host_driver_version(nvidia: Mapping[str, Any] | None) -> str | None:
    """The host driver's version the container's libraries must have: the loaded kernel module's
    (``ansible_facts.nvidia.driver.loaded_version``; a library of another version fails against it), else the
    installed userspace's; None when discovery knows neither."""
    driver = (nvidia or {}).get("driver") or {}
    return driver.get("loaded_version") or driver.get("installed_version") or None


def required_device_nodes(nvidia: Mapping[str, Any] | None, configured: Iterable[str] | None = None) -> list:
    """``configured`` (``validate_device_nodes``) when it names any; else ``/dev/nvidiactl``, ``/dev/nvidia<minor>``
    of every GPU, and ``/dev/nvidia-uvm`` when the driver provides it (``driver.uvm_loaded``: the uvm module is
    loaded) or the host has it. CUDA needs it: a container without it runs ``nvidia-smi`` and fails every CUDA call,
    so a host whose uvm node is missing fails validation rather than passing on the nodes it happens to have."""
    if configured:
        return list(configured)
    nvidia = nvidia or {}
    nodes = ["/dev/nvidiactl"]
    for gpu in nvidia.get("gpus") or []:
        if gpu.get("minor") is not None:
            nodes.append(f"/dev/nvidia{int(gpu['minor'])}")
    uvm_loaded = bool((nvidia.get("driver") or {}).get("uvm_loaded"))
    if uvm_loaded or any((d or {}).get("path") == "/dev/nvidia-uvm" for d in nvidia.get("device_nodes") or []):
        nodes.append("/dev/nvidia-uvm")
    return nodes


# Seconds between two ``systemctl is-active`` reads while waiting for Fabric Manager.
FABRIC_MANAGER_POLL = 5


def fabric_manager_wait(nvidia: Mapping[str, Any] | None, timeout: int | str = 300) -> dict[str, Any]:
    """What the role waits for before GPU containers run on an NVSwitch host (HGX/DGX): CUDA fails on every GPU
    (cudaErrorSystemNotReady) until NVIDIA Fabric Manager has configured the switches (Fabric Manager User Guide,
    docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide/). ``needed`` from gpu_facts' ``fabric_manager``
    (NVSwitches on the PCI bus); ``argv``, ``retries`` and ``delay`` for an ``until`` loop bounded by ``timeout``
    seconds (at least one read)."""
    fabric = (nvidia or {}).get("fabric_manager") or {}
    count = int(fabric.get("nvswitch_count") or 0)
    seconds = max(0, int(timeout))
    return {
        "needed": count > 0,
        "nvswitch_count": count,
        "unit": FABRIC_MANAGER_UNIT,
        "argv": ["systemctl", "is-active", FABRIC_MANAGER_UNIT],
        "delay": FABRIC_MANAGER_POLL,
        "retries": max(1, -(-seconds // FABRIC_MANAGER_POLL)),
        "timeout": seconds,
    }


def fabric_manager_problem(wait: Mapping[str, Any], state: str | None) -> str:
    """Empty when no wait was needed or the unit is active; else the failure, naming the unit and the fix."""
    if not wait.get("needed"):
        return ""
    state = (state or "").strip().splitlines()[0] if (state or "").strip() else "unknown"
    if state == "active":
        return ""
    unit = wait["unit"]
    return (
        f"{wait['nvswitch_count']} NVSwitch(es) on the PCI bus, but {unit} is {state} after waiting"
        f" {wait['timeout']} s: CUDA fails on every GPU here until Fabric Manager runs. Install"
        f" nvidia-fabricmanager of the driver's exact version (the driver role does on NVSwitch hosts) and run"
        f" 'systemctl enable --now {unit}'; 'journalctl -u {unit}' says why it is not running (a version that is"
        f" not the driver's is refused). A slow start: raise validate_fabric_manager_timeout"
    )
