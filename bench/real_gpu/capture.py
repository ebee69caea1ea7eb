#!/usr/bin/env python
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The Python half of ``bench/real_gpu/capture.sh``, run on the GPU host with the collection's code at HEAD.

capture.py facts TREE OUT       discovery per source and the CDI spec (written to /etc/cdi and /etc/gpufleet too)
capture.py config BUNDLE UID CMD [ENV ...]
                                the bundle's config.json from its pristine base.json (the shim edits config.json)
capture.py timing BUNDLE SHIM RUNC
                                start times: the shim with a GPU request, runc alone, the shim with no request
capture.py cdi TREE FILE        one spec generation as its own process (timed against nvidia-ctk's)
capture.py mig TREE OUT         each GPU's MIG profiles as NVML answers them, read only (MIG mode is never changed):
                                every GI profile enum's raw answer and placements, and the table mig_layout builds
"""

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import traceback

SOURCES = (("auto", ("auto",)), ("nvml", ("nvml",)), ("nvidia-smi", ("nvidia-smi",)), ("procfs", ("procfs",)))


def _run(cmd):
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    return proc.returncode, proc.stdout, proc.stderr


def _write(path, text):
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def facts(tree, out):
    sys.path.insert(0, os.path.join(tree, "plugins"))
    from module_utils.cdi.generate import generate  # the tree given, not an installed copy
    from module_utils.discovery.discover import discover, discovered_gpus

    for name, sources in SOURCES:
        try:
            start = time.perf_counter()
            found = discover("/", None, sources, _run)
            took = time.perf_counter() - start
        except Exception:  # a capture records every failure and goes on
            traceback.print_exc()
            continue
        _write(os.path.join(out, f"discover-{name}.json"), json.dumps(found, indent=1, sort_keys=True, default=str))
        gpus = [(g.get("name"), g.get("uuid")) for g in found.get("gpus", [])]
        print(
            name, f"{took:.3f}s", "gpus:", gpus, "problems:", found.get("problems"), "warnings:", found.get("warnings")
        )
    try:
        version, spec, spec_text, _index, index_text = generate({}, discovered_gpus)
    except Exception:
        traceback.print_exc()
        return
    took = []
    for _round in range(5):  # the spec's generation alone, for the ratio against nvidia-ctk cdi generate
        start = time.perf_counter()
        generate({}, discovered_gpus)
        took.append(time.perf_counter() - start)
    print("cdi generate median", f"{statistics.median(took):.4f}s", " ".join(f"{t:.4f}" for t in took))
    _write(os.path.join(out, "cdi-default.yaml"), spec_text)
    _write(os.path.join(out, "cdi-index-default.json"), index_text)
    mounts = (spec.get("containerEdits") or {}).get("mounts") or []
    print("cdi", version, "devices:", [d["name"] for d in spec.get("devices", [])], "mounts:", len(mounts))
    try:  # the driver's own tree as the driver root, where it has one (no ld.so.cache there: searched)
        if os.path.isdir("/usr/local/nvidia/lib64"):
            _v, spec2, text2, _i, _t = generate({"driver_root": "/usr/local/nvidia"}, discovered_gpus)
            _write(os.path.join(out, "cdi-usr-local-nvidia.yaml"), text2)
            mounts2 = (spec2.get("containerEdits") or {}).get("mounts") or []
            print("cdi driver_root=/usr/local/nvidia:", len(mounts2), "mounts")
    except Exception:
        traceback.print_exc()
    os.makedirs("/etc/cdi", exist_ok=True)
    os.makedirs("/etc/gpufleet", exist_ok=True)
    _write("/etc/cdi/nvidia.yaml", spec_text)
    _write("/etc/gpufleet/cdi-nvidia.json", index_text)


def config(bundle, uid, cmd, *env):
    """This host's /usr/bin/nvidia-* are shell wrappers into a read-only /usr/local/nvidia (its own glibc): the
    base mounts that tree so the wrappers the CDI spec injects can run; libraries and device nodes come from the
    spec."""
    with open(os.path.join(bundle, "base.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    cfg["process"].update(terminal=False, args=["/bin/sh", "-c", cmd], user={"uid": int(uid), "gid": int(uid)})
    cfg["process"]["env"] = ["PATH=/usr/bin:/bin:/usr/sbin:/sbin", *env]
    cfg["root"]["readonly"] = False
    options = ["rbind", "ro", "nosuid", "nodev"]
    cfg["mounts"].append(
        {"destination": "/usr/local/nvidia", "type": "bind", "source": "/usr/local/nvidia", "options": options}
    )
    _write(os.path.join(bundle, "config.json"), json.dumps(cfg, indent=1))


def timing(bundle, shim, runc, rounds=11):
    gpu = ("NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=compute,utility")
    config(bundle, "0", "true", *gpu)
    shutil.copy(os.path.join(bundle, "config.json"), os.path.join(bundle, "gpu.json"))
    config(bundle, "0", "true")
    shutil.copy(os.path.join(bundle, "config.json"), os.path.join(bundle, "plain.json"))
    rows = (("shim-gpu", "gpu.json", shim), ("runc-plain", "plain.json", runc), ("shim-plain", "plain.json", shim))
    times = {name: [] for name, _cfg, _rt in rows}
    for i in range(rounds):
        for name, cfg, runtime in rows:
            shutil.copy(os.path.join(bundle, cfg), os.path.join(bundle, "config.json"))
            start = time.perf_counter()
            proc = subprocess.run(
                [runtime, "--root", "/run/gf", "run", "--bundle", bundle, f"t{name}{i}"],
                capture_output=True,
                check=False,
            )
            if i:  # the first round warms the caches
                times[name].append(time.perf_counter() - start)
            if proc.returncode:
                print(name, proc.returncode, proc.stderr[-400:])
    for name, values in times.items():
        print(name, f"median {statistics.median(values):.4f}s", " ".join(f"{v:.4f}" for v in values))


def cdi(tree, output):
    """One spec generation as a process, as `nvidia-ctk cdi generate --output` is one: the start-up included."""
    sys.path.insert(0, os.path.join(tree, "plugins"))
    from module_utils.cdi.generate import generate
    from module_utils.discovery.discover import discovered_gpus

    _write(output, generate({}, discovered_gpus)[2])


def mig(tree, out):
    """Read-only NVML queries: the lent machine's MIG mode and partitions must stay as they are."""
    import ctypes

    sys.path.insert(0, os.path.join(tree, "plugins"))
    from module_utils.cdi.driver_files import read_driver_cache
    from module_utils.discovery.discover import discover, nvml_candidates
    from module_utils.discovery.nvml import Memory
    from module_utils.mig import nvml_mig as nm

    found = discover("/", None, ("nvml",), _run)
    library = nvml_candidates("/", read_driver_cache("/"))
    result = {"gpus": []}
    with nm.Session(library) as session:
        for gpu in found.get("gpus", []):
            handle = session.handle(gpu["uuid"])
            memory = Memory()
            session.nv.call("nvmlDeviceGetMemoryInfo", handle, ctypes.byref(memory))
            current, pending = ctypes.c_uint(9), ctypes.c_uint(9)
            rc_mode = session.nv.call("nvmlDeviceGetMigMode", handle, ctypes.byref(current), ctypes.byref(pending))
            raw = []
            for enum in nm.GI_PROFILE_ENUMS:
                info = nm.GpuInstanceProfileInfo()
                rc = session.nv.call(
                    "nvmlDeviceGetGpuInstanceProfileInfo", handle, ctypes.c_uint(enum), ctypes.byref(info)
                )
                row = {"enum": enum, "rc": rc}
                if rc == 0:
                    row.update({name: getattr(info, name) for name, _t in info._fields_})
                    array = (nm.GpuInstancePlacement * nm.MAX_PLACEMENTS)()
                    count = ctypes.c_uint(nm.MAX_PLACEMENTS)
                    prc = session.nv.call(
                        "nvmlDeviceGetGpuInstancePossiblePlacements_v2",
                        handle,
                        ctypes.c_uint(info.id),
                        array,
                        ctypes.byref(count),
                    )
                    row["placements_rc"] = prc
                    if prc == 0:
                        row["placements"] = [[array[k].start, array[k].size] for k in range(count.value)]
                    row["name"] = nm.profile_name(info.sliceCount, info.memorySizeMB, memory.total, enum)
                raw.append(row)
            try:
                table = {k: list(v) for k, v in session.profiles(handle).items()}
            except Exception as exc:  # recorded, not fatal
                table = {"error": repr(exc)}
            result["gpus"].append(
                {
                    "name": gpu.get("name"),
                    "pci_device_id": gpu.get("pci_device_id"),
                    "memory_total": memory.total,
                    "mig_mode_rc": rc_mode,
                    "mig_mode": [current.value, pending.value],
                    "gi_profiles": raw,
                    "table": table,
                }
            )
    _write(os.path.join(out, "mig-profiles.json"), json.dumps(result, indent=1))
    for gpu in result["gpus"]:
        print(gpu["name"], "mig mode", gpu["mig_mode_rc"], gpu["mig_mode"], "table:", list(gpu["table"]))


if __name__ == "__main__":
    {"facts": facts, "config": config, "timing": timing, "mig": mig, "cdi": cdi}[sys.argv[1]](*sys.argv[2:])
