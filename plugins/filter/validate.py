# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters of the ``gpufleet.nvidia.validate`` role: what to run per container engine, and what its output means.

Pure functions (no I/O), so the role's decisions are unit-tested without a host:

* ``validate_plan(nvidia, runtime=None, toolkit=None, **options)`` -> list of checks, one per engine and mode;
* ``validate_images(plan, present_results, ...)`` -> which engines lack the image, and what to load or pull;
* ``validate_result(plan, results, ...)`` -> the ``gpufleet_validate`` fact;
* ``validate_gpu_uuids(nvidia)`` -> the host's GPU UUIDs, which ``nvidia-smi -L`` in each container must list;
* ``validate_driver_version(nvidia)`` -> the host driver's version, which the container's ``libcuda.so.1`` and
  ``libnvidia-ml.so.1`` must resolve to;
* ``parse_output(stdout)``, ``device_problems``, ``library_problems``, ``dlopen_problem`` -> what the check script in
  the container saw (device nodes and whether each opens, the ld cache entries of the driver libraries, dlopen of
  libcuda), and what is wrong with it;
* ``nvidia_smi_gpus(output)`` / ``nvidia_smi_problem(parsed, expected)`` -> what the container's ``nvidia-smi -L``
  listed, and what is wrong with it (the check NVIDIA's install guides give: ``nvidia-smi`` in a container);
* ``validate_fabric_manager_wait(nvidia, timeout)`` / ``validate_fabric_manager_problem(wait, state)`` -> whether
  this host has NVSwitches and so must wait (bounded) for Fabric Manager before GPU containers run, and what to say
  when it did not come up (issue 23);
* ``engine_reads_cdi(engine, version)`` -> whether that engine version reads CDI specs (the runtime role's
  decision to turn CDI on; the rule itself is ``runtime.common.reads_cdi``).
"""

from __future__ import annotations

import re
from typing import Any, Callable, Iterable, Mapping

from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery.discover import FABRIC_MANAGER_UNIT
from ansible_collections.gpufleet.nvidia.plugins.module_utils.runtime.common import reads_cdi

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
# ``nvidia-smi -L``: ``GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-6fbb13f4-...)``; MIG devices are indented lines with
# ``MIG-`` UUIDs and are not GPUs of their own.
_SMI_GPU_LINE = re.compile(r"^GPU \d+: .*\(UUID: (GPU-[0-9A-Za-z-]+)\)\s*$")
_SMI_OUTPUT_LINES = 64
# What to do when a container lacks /dev/nvidia-uvm (gpu_facts' uvm_device_missing / cdi_spec_uvm_missing say which).
UVM_FIX = (
    "CUDA needs /dev/nvidia-uvm: create it on the host ('systemctl restart gpufleet-nvidia-devices') and regenerate "
    "the CDI spec ('systemctl restart gpufleet-cdi-refresh')"
)
ENGINE_ORDER = ("docker", "podman", "containerd", "crio")
# The device plugin's volume-mounts request (k8s-device-plugin v0.17.1, internal/plugin/server.go): /dev/null on
# <root>/<device>, and NVIDIA_VISIBLE_DEVICES=<root>.
VOLUME_MOUNTS_ROOT = "/var/run/nvidia-container-devices"
_SEE_HELP = re.compile(r"^See '.*--help'\.?$")
_GPU_NODE = re.compile(r"^/dev/nvidia(\d+)$")
# strerror as glibc and musl word it, in the shell's "cannot open" message: what an open of a device node found.
_OPEN_ERRORS = (
    ("No such device or address", "nodriver"),  # ENXIO: the cgroup let it through, no driver behind the major
    ("Operation not permitted", "denied"),  # EPERM: the device cgroup (or a seccomp/LSM rule) refused it
    ("Permission denied", "denied"),  # EACCES: mode bits, or a nodev mount
)


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
        if engine in ("docker", "podman"):
            present = [engine, "image", "inspect", image] if engine == "docker" else [engine, "image", "exists", image]
            run = [engine, "run", "--rm", "--network", "none", "--pull", pull]
            common = dict(base, present_argv=present, present_rc0=True, load_argv=[engine, "load", "-i"])
            gpus_skipped = None
            if engine == "docker":
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
                if cdi and reads_cdi("docker", version):
                    modes.append(("cdi", ["--device", "nvidia.com/gpu=all"]))
            else:
                modes = [("cdi", ["--device", "nvidia.com/gpu=all"])]
            for mode, args in modes:
                argv = wrap + run + ["--name", f"{name}-{mode}"] + args + [image, "sh", "-c", CHECK_SCRIPT]
                checks.append(dict(common, mode=mode, name=f"{name}-{mode}", argv=argv))
            if engine == "docker" and gpus_skipped:
                checks.append(_skipped_check(base, "gpus", f"{name}-gpus", gpus_skipped))
        elif engine == "containerd":
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


def _seconds(delta: str | None) -> float:
    """``0:00:01.234567`` (command's ``delta``) -> 1.235."""
    m = re.match(r"^(\d+):(\d+):(\d+(?:\.\d+)?)$", str(delta or ""))
    if not m:
        return 0.0
    return round(int(m.group(1)) * 3600 + int(m.group(2)) * 60 + float(m.group(3)), 3)


def nvidia_smi_gpus(output: str | Iterable[str] | None) -> list[str]:
    """The GPU UUIDs ``nvidia-smi -L`` printed, in its order (MIG devices left out)."""
    lines = output.splitlines() if isinstance(output, str) else list(output or [])
    return [m.group(1) for m in (_SMI_GPU_LINE.match(line.strip()) for line in lines) if m]


def parse_output(stdout: str | None) -> dict[str, Any]:
    """What the check script printed: ``{complete, device_nodes, opens, files, libs, ldconfig, libcuda, libcuda_path,
    dlopen, nvidia_smi_rc, nvidia_smi_gpus, nvidia_smi_output}``.

    ``opens``: device node -> ``ok`` or the shell's error message; ``libs``: soname -> ``[{path, resolved}]``, one per
    ``ldconfig -p`` entry (``resolved`` None when the entry's file does not exist); ``ldconfig``: False when the image
    has none; ``dlopen``: ``ok``, ``none`` (no python3 in the image), ``failed <dlerror>``, or None (no answer);
    ``nvidia_smi_rc`` is None when the script never got to nvidia-smi. ``libcuda``/``libcuda_path``: the ld cache
    entry of ``libcuda.so.1``."""
    lines = (stdout or "").splitlines()
    complete = BEGIN in lines and END in lines
    devices: list[str] = []
    opens: dict[str, str] = {}
    files: list[str] = []
    libs: dict[str, list[dict[str, Any]]] = {}
    dlopen = None
    ldconfig = True
    smi_lines: list[str] = []
    smi_rc = None
    in_smi = False
    for line in lines:
        if in_smi:
            if line.startswith(NVSMI_RC + " "):
                in_smi = False
                rc = line[len(NVSMI_RC) + 1 :].strip()
                smi_rc = int(rc) if rc.isdigit() else None
            elif len(smi_lines) < _SMI_OUTPUT_LINES:
                smi_lines.append(line)
        elif line == NVSMI:
            in_smi = True
        elif line.startswith("DEV /dev/"):
            devices.append(line[4:])
        elif line.startswith("OPEN /dev/"):
            path, _sep, status = line[5:].partition(" ")
            opens[path] = status.strip()
        elif line.startswith("FILE /"):
            files.append(line[5:])
        elif line.startswith("LIB "):
            parts = line.split()
            if len(parts) >= 4 and parts[1] in REQUIRED_LIBS:
                resolved = (parts[4] if len(parts) > 4 else "") if parts[3] == "=" else None
                libs.setdefault(parts[1], []).append({"path": parts[2], "resolved": resolved})
        elif line == "NO-LDCONFIG":
            ldconfig = False
        elif line.startswith("DLOPEN ") and dlopen is None:
            dlopen = line[7:].strip()
    cuda = libs.get("libcuda.so.1") or []
    return {
        "complete": complete,
        "device_nodes": sorted(set(devices)),
        "opens": opens,
        "files": files,
        "libs": libs,
        "ldconfig": ldconfig,
        "libcuda": bool(cuda),
        "libcuda_path": cuda[0]["path"] if cuda else None,
        "dlopen": dlopen,
        "nvidia_smi_rc": smi_rc,
        "nvidia_smi_gpus": nvidia_smi_gpus(smi_lines),
        "nvidia_smi_output": smi_lines,
    }


def open_status(message: str | None) -> str:
    """``ok``, ``nodriver`` (ENXIO: the device cgroup let the open through and no driver serves the major, as on a
    host whose driver is not loaded), ``denied`` (EPERM/EACCES: the container's device cgroup, or a nodev mount, refuses
    the node) or ``error`` (anything else), from an ``OPEN`` line's status."""
    text = (message or "").strip()
    if text == "ok":
        return "ok"
    for words, status in _OPEN_ERRORS:
        if words in text:
            return status
    return "error"


def device_problems(parsed: Mapping[str, Any], required: Iterable[str]) -> list[str]:
    """What is wrong with the container's device nodes: required ones missing, required ones it may not open, and GPU
    nodes (``/dev/nvidia<N>``) it was not given. A required node that opens, or answers ENXIO (no driver), is fine."""
    required = list(required or [])
    seen = list(parsed.get("device_nodes") or [])
    opens = parsed.get("opens") or {}
    problems = []
    missing = [d for d in required if d not in seen]
    if missing:
        problems.append("device node(s) not visible: " + ", ".join(missing))
        if "/dev/nvidia-uvm" in missing:
            problems.append(UVM_FIX)
    denied, broken = [], []
    for node in (d for d in required if d in seen):
        status = open_status(opens.get(node)) if node in opens else "error"
        why = opens.get(node) or "not a character device"
        why = why.rsplit(": ", 1)[-1] if ": " in why else why
        if status == "denied":
            denied.append(f"{node} ({why})")
        elif status == "error":
            broken.append(f"{node} ({why})")
    if denied:
        problems.append(
            "device node(s) present but denied to the container (no device cgroup rule allows them): "
            + ", ".join(denied)
        )
    if broken:
        problems.append("device node(s) that cannot be opened: " + ", ".join(broken))
    wanted = {d for d in required if _GPU_NODE.match(d)}
    if wanted:
        gpu_nodes = [d for d in seen if _GPU_NODE.match(d)]
        extra = sorted((d for d in gpu_nodes if d not in wanted), key=lambda d: int(_GPU_NODE.match(d).group(1)))
        if extra:
            problems.append(
                f"{len(gpu_nodes)} GPU device node(s) in the container, {len(wanted)} requested; not requested: "
                + ", ".join(extra)
            )
    return problems


def library_problems(parsed: Mapping[str, Any], driver_version: str | None) -> list[str]:
    """What is wrong with the driver libraries in the container's ld cache: each of ``REQUIRED_LIBS`` needs an
    ``ldconfig -p`` entry whose file exists and (with ``driver_version``, the host's) resolves to a file named for
    that version (``libcuda.so.<version>``); every entry of that soname must, so no other driver's copy shadows it."""
    libs = parsed.get("libs") or {}
    files = list(parsed.get("files") or [])
    version = str(driver_version or "").strip()
    if not parsed.get("ldconfig", True):
        return [
            "the image has no ldconfig, so its ld cache cannot be read: use an image with ldconfig (validate_image)"
        ]
    problems = []
    for soname in REQUIRED_LIBS:
        entries = libs.get(soname) or []
        if not entries:
            msg = f"{soname} not in the container's ld cache (ldconfig -p)"
            if soname == "libcuda.so.1" and files:
                msg += " although a file is at " + ", ".join(files) + " (injected without an ld cache update)"
            problems.append(msg)
            continue
        for entry in entries:
            resolved = entry.get("resolved")
            if resolved is None:
                problems.append(f"ldconfig -p names {entry['path']} for {soname}, which does not exist")
            elif not resolved:
                problems.append(f"{soname} at {entry['path']} could not be resolved (no readlink in the image)")
            elif version and not resolved.rsplit("/", 1)[-1].endswith(".so." + version):
                problems.append(f"{soname} at {entry['path']} is {resolved}, not the host driver's version {version}")
    return problems


def dlopen_problem(parsed: Mapping[str, Any]) -> str:
    """``dlopen(libcuda.so.1)`` in the container failed (python3's ctypes, RTLD_NOW), or ``""`` (it worked, or the
    image has no python3 to try it with)."""
    dlopen = parsed.get("dlopen")
    if dlopen is None:
        return "the libcuda dlopen probe gave no answer"
    if dlopen.startswith("failed"):
        return "dlopen(libcuda.so.1) failed: " + (dlopen[6:].strip() or "no reason given")
    return ""


def nvidia_smi_problem(parsed: Mapping[str, Any], expected: Iterable[str] | None) -> str:
    """What is wrong with the container's ``nvidia-smi -L`` (``parse_output``'s fields), or ``""``.

    It must run (exit 0) and list exactly the GPUs the container was given, ``expected`` (UUIDs; every check asks
    for all of the host's GPUs); with no ``expected`` UUIDs (a discovery that found none) it must run and list
    at least one GPU."""
    rc = parsed.get("nvidia_smi_rc")
    listed = list(parsed.get("nvidia_smi_gpus") or [])
    last = _last_line("\n".join(parsed.get("nvidia_smi_output") or [])) or "no output"
    if rc is None:
        return "nvidia-smi -L did not run"
    if rc == 127:
        return "nvidia-smi not found in the container (the driver's utility binaries were not injected)"
    if rc != 0:
        return f"nvidia-smi -L failed (rc {rc}): {last}"
    want = [u for u in (expected or []) if u]
    if not want:
        return "" if listed else f"nvidia-smi -L listed no GPU: {last}"
    missing = [u for u in want if u not in listed]
    extra = [u for u in listed if u not in want]
    problems = []
    if missing:
        problems.append("missing " + ", ".join(missing))
    if extra:
        problems.append("not expected " + ", ".join(extra))
    if len(listed) != len(set(listed)):
        problems.append("listed twice " + ", ".join(sorted({u for u in listed if listed.count(u) > 1})))
    if problems:
        return f"nvidia-smi -L lists {len(listed)} GPU(s), expected {len(want)}: " + "; ".join(problems)
    return ""


def gpu_uuids(nvidia: Mapping[str, Any] | None) -> list[str]:
    """The UUIDs of the host's GPUs (``ansible_facts.nvidia.gpus``), in discovery's order."""
    return [str(g["uuid"]) for g in (nvidia or {}).get("gpus") or [] if isinstance(g, Mapping) and g.get("uuid")]


def _last_line(text: str | None) -> str:
    """The last line that says something (docker ends its errors with "See 'docker run --help'.")."""
    lines = [x.strip() for x in (text or "").splitlines() if x.strip() and not _SEE_HELP.match(x.strip())]
    return lines[-1] if lines else ""


def _judge(
    check: Mapping[str, Any],
    res: Mapping[str, Any] | None,
    device_nodes: list[str],
    uuids: list[str] | None = None,
    *,
    nvidia_smi: bool = True,
    driver_version: str | None = None,
) -> dict[str, Any]:
    out = {
        "mode": check["mode"],
        "passed": False,
        "seconds": 0.0,
        "device_nodes": [],
        "libcuda": False,
        "nvidia_smi_gpus": [],
    }
    label = "{} ({})".format(check["engine"], check["mode"])
    if check.get("skipped") or res is None or res.get("skipped"):
        out.update(skipped=True, message=check.get("message") or f"{label}: not run")
        return out
    out["skipped"] = False
    out["seconds"] = _seconds(res.get("delta"))
    if res.get("msg") and "rc" not in res:
        out["message"] = "{}: could not run: {}".format(label, res["msg"])
        return out
    parsed = parse_output(res.get("stdout"))
    out.update(device_nodes=parsed["device_nodes"], libcuda=parsed["libcuda"], libcuda_path=parsed["libcuda_path"])
    out["nvidia_smi_gpus"] = parsed["nvidia_smi_gpus"]
    out["dlopen"] = parsed["dlopen"]
    rc = res.get("rc")
    if rc in (124, 137):
        out["message"] = f"{label}: timed out (rc {rc})"
    elif rc != 0:
        why = _last_line(res.get("stderr")) or _last_line(res.get("stdout")) or "no output"
        out["message"] = f"{label}: container failed (rc {rc}): {why}"
    elif not parsed["complete"]:
        out["message"] = f"{label}: the check script did not finish (image without /bin/sh?)"
    else:
        problems = device_problems(parsed, device_nodes) + library_problems(parsed, driver_version)
        dl = dlopen_problem(parsed)
        if dl:
            problems.append(dl)
        smi = nvidia_smi_problem(parsed, uuids) if nvidia_smi else ""
        if smi:
            problems.append(smi)
        if problems:
            out["message"] = "{}: {}".format(label, "; ".join(problems))
        else:
            out["passed"] = True
            dlopen = "dlopen ok" if parsed["dlopen"] == "ok" else "dlopen not tried: no python3 in the image"
            out["message"] = (
                f"{label}: {len(parsed['device_nodes'])} device node(s), libcuda.so.1 at {parsed['libcuda_path']}"
                f" ({dlopen}), libnvidia-ml.so.1 in the ld cache"
            )
            if driver_version:
                out["message"] += f", both of driver {driver_version}"
            if nvidia_smi:
                out["message"] += f", nvidia-smi -L lists {len(parsed['nvidia_smi_gpus'])} GPU(s)"
    return out


def validate_result(
    plan: Iterable[Mapping[str, Any]] | None,
    results: Iterable[Mapping[str, Any]] | None,
    device_nodes: Iterable[str] | None = None,
    check_mode: bool = False,
    *,
    gpu_uuids: Iterable[str] | None = None,
    nvidia_smi: bool = True,
    driver_version: str | None = None,
) -> dict[str, Any]:
    """The ``gpufleet_validate`` fact; see ``plugins/filter/validate_result.yml``. ``gpu_uuids``: the GPUs each
    container's ``nvidia-smi -L`` must list (``validate_gpu_uuids``); ``nvidia_smi=False`` leaves that check out;
    ``driver_version``: the host driver's version, which the container's ``libcuda.so.1`` and ``libnvidia-ml.so.1``
    must resolve to (``validate_driver_version``; None leaves the version out of the check)."""
    device_nodes = list(device_nodes or [])
    uuids = list(gpu_uuids or [])
    results = list(results or [])
    engines = {}
    for i, check in enumerate(plan or []):
        res = results[i] if i < len(results) else None
        if check_mode and not check.get("skipped"):
            res = None
            check_run = dict(check, message="{} ({}): not run in check mode".format(check["engine"], check["mode"]))
        else:
            check_run = check
        judged = _judge(check_run, res, device_nodes, uuids, nvidia_smi=nvidia_smi, driver_version=driver_version)
        judged["argv"] = list(check.get("argv") or [])
        entry = engines.setdefault(
            check["engine"],
            {
                "passed": True,
                "skipped": True,
                "message": "",
                "image": check["image"],
                "device_nodes": [],
                "libcuda": False,
                "seconds": 0.0,
                "checks": [],
            },
        )
        entry["checks"].append(judged)
    for entry in engines.values():
        ran = [c for c in entry["checks"] if not c["skipped"]]
        entry["skipped"] = not ran
        entry["passed"] = bool(ran) and all(c["passed"] for c in ran)
        entry["message"] = "; ".join(c["message"] for c in entry["checks"])
        entry["device_nodes"] = sorted({d for c in ran for d in c["device_nodes"]})
        entry["libcuda"] = bool(ran) and all(c["libcuda"] for c in ran)
        entry["seconds"] = round(sum(c["seconds"] for c in entry["checks"]), 3)
    ran = [e for e in engines.values() if not e["skipped"]]
    failed = sorted(name for name, e in engines.items() if not e["skipped"] and not e["passed"])
    if check_mode:
        message = "check mode: no container was run"
    elif not engines:
        message = "no container engine found to validate"
    elif not ran:
        message = "every engine was skipped"
    elif failed:
        message = "failed on: " + ", ".join(failed)
    else:
        message = "passed on: " + ", ".join(sorted(n for n, e in engines.items() if not e["skipped"]))
    return {
        "passed": bool(ran) and not failed,
        "skipped": bool(check_mode),
        "failed_engines": failed,
        "required_device_nodes": device_nodes,
        "required_gpus": uuids if nvidia_smi else [],
        "driver_version": driver_version or None,
        "message": message,
        "engines": engines,
    }


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


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "validate_plan": validate_plan,
            "validate_images": validate_images,
            "validate_result": validate_result,
            "validate_device_nodes": required_device_nodes,
            "validate_gpu_uuids": gpu_uuids,
            "validate_driver_version": host_driver_version,
            "engine_reads_cdi": reads_cdi,
            "validate_fabric_manager_wait": fabric_manager_wait,
            "validate_fabric_manager_problem": fabric_manager_problem,
        }
