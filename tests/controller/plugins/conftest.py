# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Shared inputs of the fleet report's tests (plugin_utils/report, plugin_utils/report_render, the filters):
hand-made hostvars of a fleet with one host in each state, and of its corners."""

from pathlib import Path
from types import SimpleNamespace

import pytest

HOSTILE = "<script>alert('x')</script> A100 | **bold** & \"q\" <img src=x onerror=alert(1)>"


def _nvidia(gpus, engines=None, problems=(), loaded=True):
    found = {e: {"installed": False, "runtimes": []} for e in ("docker", "containerd", "crio", "podman")}
    for name, extra in (engines or {}).items():
        found[name] = dict({"installed": True, "runtimes": ["runc"], "version": "1.0"}, **extra)
    return {
        "pci_gpu_count": len(gpus),
        "gpu_count": len(gpus) if loaded else 0,
        "gpus": gpus if loaded else [],
        "pci_devices": [{"is_gpu": True, "device_id": "0x20b0", "pci_bus_id": g["pci_bus_id"]} for g in gpus],
        "driver": {
            "installed_version": "535.261.03",
            "loaded_version": "535.261.03" if loaded else None,
            "loaded": loaded,
            "cuda_version": "12.2" if loaded else None,
            "reboot_required": not loaded,
        },
        "engines": found,
        "problems": list(problems),
    }


def _gpu(i, name="NVIDIA A100-SXM4-40GB"):
    return {
        "index": i,
        "name": name,
        "uuid": f"GPU-{i}",
        "pci_bus_id": f"0000:{0x17 + i:02x}:00.0",
        "memory_mib": 40960,
        "mig_mode": "disabled",
        "minor": i,
    }


def _val(**engines):
    out = {}
    for name, passed in engines.items():
        out[name] = {
            "passed": passed,
            "skipped": False,
            "seconds": 0.4,
            "libcuda": passed,
            "image": "img",
            "device_nodes": ["/dev/nvidiactl"],
            "message": f"{name}: {'ok' if passed else 'rc 125: no'}",
        }
    failed = sorted(k for k, v in engines.items() if not v)
    return {
        "passed": not failed,
        "skipped": False,
        "failed_engines": failed,
        "engines": out,
        "message": "failed on: " + ", ".join(failed) if failed else "passed on: all",
    }


PROBLEM = {"code": "device_char_links_missing", "message": "no /dev/char links", "fix": "run the runtime role"}
DOCKER_ID = "4f3c2b1a0e9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b"
GPU_USERS = {
    "processes": [
        {
            "pid": 812,
            "command": "nvidia-persistenced",
            "devices": ["/dev/nvidia0", "/dev/nvidiactl"],
            "container": None,
        },
        {
            "pid": 4242,
            "command": "python3",
            "devices": ["/dev/nvidia-uvm", "/dev/nvidia0", "/dev/nvidiactl"],
            "container": {"engine": "docker", "id": DOCKER_ID, "pod_uid": None, "namespace": None},
        },
    ],
    "scanned": 300,
    "unreadable": 0,
    "truncated": False,
}
HOSTVARS = {
    "good": {
        "ansible_facts": {
            "nvidia": dict(
                _nvidia([_gpu(0), _gpu(1)], {"docker": {"runtimes": ["nvidia", "runc"]}, "containerd": {}}),
                gpu_users=GPU_USERS,
            )
        },
        "gpufleet_runtime": {
            "engines": {
                "docker": {
                    "registered": True,
                    "default": False,
                    "cdi": False,
                    "version": "20.10.24",
                    "message": "registered",
                },
                "containerd": {"registered": True, "default": True, "cdi": False},
            },
            "cdi_spec": {"path": "/etc/cdi/nvidia.yaml", "driver_version": "535.261.03", "devices": ["0", "1", "all"]},
        },
        "gpufleet_validate": _val(docker=True, containerd=True),
        "unrelated": "x" * 10,
    },
    "bad": {
        "ansible_facts": {"nvidia": _nvidia([_gpu(0, HOSTILE)], {"docker": {}, "podman": {}}, [PROBLEM])},
        "gpufleet_validate": _val(docker=False, podman=True),
    },
    "stage": {
        "ansible_facts": {"nvidia": _nvidia([_gpu(0)], {"docker": {}}, loaded=False)},
        "gpufleet_failed": {"stage": "driver", "task": "Install the driver", "msg": "E: Unable to locate <pkg>"},
    },
    "cpu": {"ansible_facts": {"nvidia": _nvidia([], {"docker": {}})}},
    "novalidate": {"ansible_facts": {"nvidia": _nvidia([_gpu(0)], {})}},
    "down": {"ansible_host": "10.0.0.9"},
}
HOSTS = ["good", "bad", "stage", "cpu", "novalidate", "down", "notinhostvars"]


def _dra(facts, **over):
    """gpu_facts' DRA verdict, made by its own function, for hand-made facts with ``over`` changed."""
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery import dra

    changed = dict(facts, cdi_spec={"path": "/etc/cdi/nvidia.yaml"}, **over)
    spec = "devices: " + " ".join(f"{g['uuid']} /dev/nvidia{g.get('minor', g['index'])}" for g in changed["gpus"])
    return dra.verdict(changed, spec)


# "good" as a host on NVIDIA's 580 driver with containerd 2.1 (ready); "bad" on 535 with containerd 1.6 (not ready)
HOSTVARS["good"]["ansible_facts"]["nvidia"]["dra"] = _dra(
    HOSTVARS["good"]["ansible_facts"]["nvidia"],
    driver={"loaded": True, "loaded_version": "580.95.05"},
    engines={"containerd": {"installed": True, "version": "2.1.9", "cdi_enabled": True}},
)
HOSTVARS["bad"]["ansible_facts"]["nvidia"]["dra"] = _dra(
    HOSTVARS["bad"]["ansible_facts"]["nvidia"],
    engines={"containerd": {"installed": True, "version": "1.6.20~ds1", "cdi_enabled": None}},
)

# The corners the renderers branch on: a skipped engine, a validation without timing, an engine with no
# version, an engine only the runtime role knows, check mode (validation skipped), a multi-line message
# with Markdown markup, a GPU whose fields are unknown, no timestamp.
EDGE_HOSTVARS = {
    "edge-1": {
        "ansible_facts": {
            "nvidia": dict(
                _nvidia(
                    [dict(_gpu(0), name="T4 | *x*\nsecond line", memory_mib=None, mig_mode=None, uuid=None)],
                    {"crio": {"version": None}, "docker": {"runtimes": ["nvidia"], "default_runtime": "nvidia"}},
                    [{"code": "c_1", "message": "m `x` [y](z)", "fix": "f #1"}, {"code": "c2"}],
                ),
                driver={"installed_version": None, "loaded": False},
                gpu_users={
                    "processes": [
                        {
                            "pid": 7,
                            "command": "<b>x</b> | *y*",
                            "devices": ["/dev/nvidia0"],
                            "container": {
                                "engine": "containerd",
                                "id": "cafe" * 16,
                                "pod_uid": "8d4c3f12-0a6b-4c55-9d2e-7f3a1b2c4d5e",
                                "namespace": "k8s.io",
                            },
                        }
                    ]
                },
            )
        },
        "gpufleet_runtime": {"engines": {"nerdctl": {"registered": True, "version": "1.7"}}},
        "gpufleet_validate": {
            "passed": True,
            "skipped": False,
            "message": "line one\nline | two",
            "engines": {
                "crio": {"passed": False, "skipped": True, "message": "crio: skipped (needs a pod)"},
                "docker": {"passed": True, "skipped": False, "seconds": 0, "message": "docker: ok"},
                "nerdctl": {"passed": False, "skipped": False, "seconds": 12.345, "message": "nerdctl: <fail>"},
            },
        },
        "gpufleet_toolkit": {"version": "1.17.8"},
        "gpufleet_device_plugin": {"node": True},
    },
    "edge-2": {
        "ansible_facts": {"nvidia": _nvidia([_gpu(0)], {"podman": {}})},
        "gpufleet_validate": {"passed": False, "skipped": True, "message": "check mode", "engines": {}},
    },
    "edge-3": {"ansible_facts": {"nvidia": None}, "gpufleet_failed": {"stage": "discover"}},
    "edge-4": {"ansible_facts": {"nvidia": _nvidia([], {})}, "gpufleet_failed": {"stage": "x", "msg": "a\nb"}},
}
EDGE_HOSTS = ["edge-1", "edge-2", "edge-3", "edge-4"]
MODELS = ("NVIDIA A100-SXM4-40GB", "NVIDIA H100 80GB HBM3", "NVIDIA L4")


def synthetic_fleet(count, run=1):
    """Hostvars and host names of ``count`` hosts ``node-000``... for the fleet view (charts, changes, the page's
    table): host i has ``1 + i % 4`` GPUs of model ``MODELS[i % 3]``, is CPU-only when ``i % 25 == 24`` and
    down (no facts) when ``i % 50 == 49``; its docker validation fails when ``i % 10 == 3`` (run 1) or
    ``i % 10 == 7`` (run 2); in run 2 every host with ``i % 4 == 0`` runs driver 550.127.05 (535.261.03 before)."""
    hostvars, hosts = {}, []
    for i in range(count):
        name = f"node-{i:03d}"
        hosts.append(name)
        if i % 50 == 49:
            hostvars[name] = {}
            continue
        gpus = [] if i % 25 == 24 else [_gpu(g, MODELS[i % 3]) for g in range(1 + i % 4)]
        nvidia = _nvidia(gpus, {"docker": {}}, [PROBLEM] if i % 10 == 3 and run == 1 else [])
        if run == 2 and i % 4 == 0:
            nvidia["driver"] = dict(nvidia["driver"], installed_version="550.127.05", loaded_version="550.127.05")
        hostvars[name] = {"ansible_facts": {"nvidia": nvidia}}
        if gpus:
            hostvars[name]["gpufleet_validate"] = _val(docker=i % 10 != (3 if run == 1 else 7))
    return hostvars, hosts


GOLDEN = Path(__file__).parent / "plugin_utils" / "fixtures" / "report"
GENERATED = "2026-01-01 00:00:00 UTC"


@pytest.fixture
def fleet():
    """The inputs as attributes: HOSTVARS/HOSTS (a fleet, rendered with GENERATED), EDGE_HOSTVARS/EDGE_HOSTS,
    HOSTILE (a GPU name), PROBLEM, GOLDEN (the renderings of both: fleet.* and edge.*), and synthetic(count, run)
    (a large fleet: synthetic_fleet)."""
    return SimpleNamespace(**{k: v for k, v in globals().items() if k.isupper()}, synthetic=synthetic_fleet)
