# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters of the ``gpufleet.nvidia.validate`` role: what to run per container engine, and what its output means.

Pure functions (no I/O), so the role's decisions are unit-tested without a host:

* ``validate_plan(nvidia, runtime=None, toolkit=None, **options)`` -> list of checks, one per engine and mode;
* ``validate_images(plan, present_results, ...)`` -> which engines lack the image, and what to load or pull;
* ``validate_result(plan, results, ...)`` -> the ``gpufleet_validate`` fact;
* ``engine_reads_cdi(engine, version)`` -> whether that engine version reads CDI specs (the runtime role's
  decision to turn CDI on; the rule itself is ``_runtime_common.reads_cdi``).
"""

from __future__ import annotations

import re
from typing import Any, Callable, Iterable, Mapping

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
# POSIX sh only: the image may have nothing but sh, ls and ldconfig (no grep).
CHECK_SCRIPT = (
    "echo " + BEGIN + "; "
    'for d in /dev/nvidia* /dev/nvidia-caps/*; do [ -e "$d" ] && echo "DEV $d"; done; '
    "for f in " + " ".join(LIBCUDA_FILES) + '; do [ -e "$f" ] && echo "FILE $f"; done; '
    "echo LDCACHE; ldconfig -p 2>/dev/null; echo " + END
)
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
_LIBCUDA_LINE = re.compile(r"^\s*libcuda\.so\.1\s+\(.*=>\s*(\S+)")


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
            if engine == "docker":
                cdi = reg.get("cdi") if "cdi" in reg else fact.get("cdi_enabled")
                version = reg.get("version") or fact.get("version")
                modes = [("runtime", ["--runtime", "nvidia", *docker_request])]
                if cdi and reads_cdi("docker", version):
                    modes.append(("cdi", ["--device", "nvidia.com/gpu=all"]))
            else:
                modes = [("cdi", ["--device", "nvidia.com/gpu=all"])]
            for mode, args in modes:
                argv = wrap + run + ["--name", f"{name}-{mode}"] + args + [image, "sh", "-c", CHECK_SCRIPT]
                checks.append(dict(common, mode=mode, name=f"{name}-{mode}", argv=argv))
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
                dict(
                    base,
                    mode="none",
                    name=name,
                    argv=None,
                    present_argv=None,
                    present_rc0=True,
                    load_argv=None,
                    skipped=True,
                    message=(
                        f"{engine}: no container check here (crictl needs a pod sandbox); "
                        "validate it through Kubernetes"
                    ),
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


def parse_output(stdout: str | None) -> dict[str, Any]:
    """``{complete, device_nodes, libcuda, libcuda_path}`` from the check script's output."""
    lines = (stdout or "").splitlines()
    complete = BEGIN in lines and END in lines
    devices, files, cache = [], [], None
    in_cache = False
    for line in lines:
        if line == END:
            in_cache = False
        elif line == "LDCACHE":
            in_cache = True
        elif in_cache:
            m = _LIBCUDA_LINE.match(line)
            if m and cache is None:
                cache = m.group(1)
        elif line.startswith("DEV /dev/"):
            devices.append(line[4:])
        elif line.startswith("FILE /"):
            files.append(line[5:])
    path = cache or (files[0] if files else None)
    return {"complete": complete, "device_nodes": sorted(set(devices)), "libcuda": bool(path), "libcuda_path": path}


def _last_line(text: str | None) -> str:
    """The last line that says something (docker ends its errors with "See 'docker run --help'.")."""
    lines = [x.strip() for x in (text or "").splitlines() if x.strip() and not _SEE_HELP.match(x.strip())]
    return lines[-1] if lines else ""


def _judge(check: Mapping[str, Any], res: Mapping[str, Any] | None, device_nodes: list[str]) -> dict[str, Any]:
    out = {"mode": check["mode"], "passed": False, "seconds": 0.0, "device_nodes": [], "libcuda": False}
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
    rc = res.get("rc")
    if rc in (124, 137):
        out["message"] = f"{label}: timed out (rc {rc})"
    elif rc != 0:
        why = _last_line(res.get("stderr")) or _last_line(res.get("stdout")) or "no output"
        out["message"] = f"{label}: container failed (rc {rc}): {why}"
    elif not parsed["complete"]:
        out["message"] = f"{label}: the check script did not finish (image without /bin/sh?)"
    else:
        missing = [d for d in device_nodes if d not in parsed["device_nodes"]]
        problems = []
        if missing:
            problems.append("device node(s) not visible: " + ", ".join(missing))
            if "/dev/nvidia-uvm" in missing:
                problems.append(UVM_FIX)
        if not parsed["libcuda"]:
            problems.append("libcuda.so.1 not visible (neither in ldconfig -p nor as a file)")
        if problems:
            out["message"] = "{}: {}".format(label, "; ".join(problems))
        else:
            out["passed"] = True
            out["message"] = (
                f"{label}: {len(parsed['device_nodes'])} device node(s), libcuda.so.1 at {parsed['libcuda_path']}"
            )
    return out


def validate_result(
    plan: Iterable[Mapping[str, Any]] | None,
    results: Iterable[Mapping[str, Any]] | None,
    device_nodes: Iterable[str] | None = None,
    check_mode: bool = False,
) -> dict[str, Any]:
    """The ``gpufleet_validate`` fact; see ``DOCUMENTATION_RESULT``."""
    device_nodes = list(device_nodes or [])
    results = list(results or [])
    engines = {}
    for i, check in enumerate(plan or []):
        res = results[i] if i < len(results) else None
        if check_mode and not check.get("skipped"):
            res = None
            check_run = dict(check, message="{} ({}): not run in check mode".format(check["engine"], check["mode"]))
        else:
            check_run = check
        judged = _judge(check_run, res, device_nodes)
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
        "message": message,
        "engines": engines,
    }


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


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "validate_plan": validate_plan,
            "validate_images": validate_images,
            "validate_result": validate_result,
            "validate_device_nodes": required_device_nodes,
            "engine_reads_cdi": reads_cdi,
        }
