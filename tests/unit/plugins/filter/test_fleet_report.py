"""fleet_report_model and its renderings, on hand-made hostvars."""

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.nvidia.plugins.filter.fleet_report import (
    FilterModule,
    fleet_report_model,
    to_report_html,
    to_report_json,
    to_report_markdown,
)

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
        "uuid": "GPU-%d" % i,
        "pci_bus_id": "0000:%02x:00.0" % (0x17 + i),
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
            "message": "%s: %s" % (name, "ok" if passed else "rc 125: no"),
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
HOSTVARS = {
    "good": {
        "ansible_facts": {
            "nvidia": _nvidia([_gpu(0), _gpu(1)], {"docker": {"runtimes": ["nvidia", "runc"]}, "containerd": {}})
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
GOLDEN = Path(__file__).parent / "fixtures" / "fleet_report"


@pytest.fixture
def model():
    return fleet_report_model(HOSTVARS, HOSTS, generated="2026-01-01 00:00:00 UTC")


@pytest.fixture
def edge_model():
    return fleet_report_model(EDGE_HOSTVARS, EDGE_HOSTS)


@pytest.mark.parametrize("ext", ["md", "html", "json"])
def test_renderings_match_the_golden_files(model, edge_model, ext):
    """The shipped renderings, byte for byte (tests/unit/plugins/filter/fixtures/fleet_report/)."""
    render = {"md": to_report_markdown, "html": to_report_html, "json": to_report_json}[ext]
    assert render(model) == (GOLDEN / f"fleet.{ext}").read_text(encoding="utf-8")
    assert render(edge_model) == (GOLDEN / f"edge.{ext}").read_text(encoding="utf-8")


def test_filters_registered():
    assert set(FilterModule().filters()) == {
        "fleet_report_model",
        "to_report_markdown",
        "to_report_html",
        "to_report_json",
    }


def test_model_status_and_summary(model):
    status = {h["name"]: h["status"] for h in model["hosts"]}
    assert status == {
        "good": "passed",
        "bad": "failed",
        "stage": "stage_failed",
        "cpu": "cpu_only",
        "novalidate": "not_validated",
        "down": "no_facts",
        "notinhostvars": "no_facts",
    }
    s = model["summary"]
    assert (s["hosts"], s["gpu_nodes"], s["gpus"], s["cpu_only"], s["no_facts"]) == (7, 4, 5, 1, 2)
    assert (s["passed"], s["failed"], s["stage_failed"], s["not_validated"], s["problems"]) == (1, 1, 1, 1, 1)
    assert s["ok"] is False
    assert model["summary_line"].startswith(
        "7 hosts: 4 GPU nodes (5 GPUs), 1 CPU-only, 2 unreachable/no facts; "
        "validation: 1 passed, 1 failed, 1 not validated; 1 failed a stage"
    )


def test_model_host_details(model):
    hosts = {h["name"]: h for h in model["hosts"]}
    good = hosts["good"]
    assert [g["name"] for g in good["gpus"]] == ["NVIDIA A100-SXM4-40GB"] * 2
    engines = {e["name"]: e for e in good["engines"]}
    assert list(engines) == ["docker", "containerd"]
    assert engines["docker"]["registered"] and engines["docker"]["version"] == "20.10.24"
    assert engines["containerd"]["default"] and engines["containerd"]["validation"]["passed"]
    assert good["cdi_spec"]["path"] == "/etc/cdi/nvidia.yaml" and good["failed"] is None
    bad = hosts["bad"]
    # Without gpufleet_runtime, registration comes from discovery (runtimes list).
    assert [(e["name"], e["registered"], e["validation"]["passed"]) for e in bad["engines"]] == [
        ("docker", False, False),
        ("podman", False, True),
    ]
    assert bad["problems"] == [PROBLEM]
    stage = hosts["stage"]
    assert stage["failed"] == {"stage": "driver", "task": "Install the driver", "msg": "E: Unable to locate <pkg>"}
    assert stage["gpus"][0]["name"].startswith("PCI device 0x20b0") and stage["driver"]["reboot_required"]
    assert hosts["cpu"]["gpu_count"] == 0 and hosts["down"]["facts"] is False


def test_all_good_fleet_is_ok():
    m = fleet_report_model({"good": HOSTVARS["good"], "cpu": HOSTVARS["cpu"]}, ["good", "cpu"])
    assert m["summary"]["ok"] and m["summary"]["passed"] == 1 and m["summary"]["cpu_only"] == 1


def test_bad_input():
    with pytest.raises(AnsibleFilterError, match="list of host names"):
        fleet_report_model(HOSTVARS, "all")
    with pytest.raises(AnsibleFilterError, match="fleet_report_model"):
        to_report_markdown({"hosts": []})


def test_markdown(model):
    md = to_report_markdown(model)
    lines = md.splitlines()
    assert lines[0] == "# GPU fleet report" and lines[2].startswith("**7 hosts: 4 GPU nodes")
    assert "| good | passed | 2 |" in md and "| bad | FAILED | 1 |" in md and "| cpu | CPU-only | 0 |" in md
    assert "| down | unreachable / no facts | 0 |" in md
    assert "**Failed at stage driver**, task Install the driver: E: Unable to locate &lt;pkg&gt;" in md
    assert "CPU-only host" in md and "Fix: run the runtime role" in md
    # The hostile name: no raw HTML, and its pipe cannot open a new table cell.
    assert "<" not in md and "&lt;script&gt;alert('x')&lt;/script&gt;" in md
    row = next(x for x in lines if "GPU-0" in x and "script" in x)
    assert len(re.findall(r"(?<!\\)\|", row)) == 7


class _Collect(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.attrs, self.text = [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs += [pair[0] for pair in attrs]

    def handle_data(self, data):
        self.text.append(data)


def test_html_escapes_and_is_self_contained(model):
    page = to_report_html(model)
    assert page.startswith("<!DOCTYPE html>")
    parser = _Collect()
    parser.feed(page)
    assert "script" not in parser.tags and "img" not in parser.tags
    assert not [a for a in parser.attrs if a.startswith("on") or a == "src"]
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page
    # The name comes back intact as text.
    assert HOSTILE in "".join(parser.text)
    assert not re.search(r"(href|src)=\"(https?:)?//", page)  # nothing external
    assert "Failed at stage driver" in page and "E: Unable to locate &lt;pkg&gt;" in page
    assert 'class="passed">passed' in page and 'class="cpu_only">CPU-only' in page
    assert "unreachable / no facts" in page


def test_json_round_trip(model):
    assert json.loads(to_report_json(model)) == model


def test_lazy_mapping_hostvars():
    class Lazy:
        def __init__(self, data):
            self._d = data

        def keys(self):
            return self._d.keys()

        def __getitem__(self, key):
            value = self._d[key]
            return Lazy(value) if isinstance(value, dict) else value

    m = fleet_report_model(Lazy({"good": HOSTVARS["good"]}), ["good"])
    assert m["hosts"][0]["status"] == "passed" and "unrelated" not in json.dumps(m)
