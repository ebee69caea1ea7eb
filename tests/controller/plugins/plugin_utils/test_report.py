# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The fleet report's model (plugins/plugin_utils/report.py) on the hand-made hostvars of ../conftest.py."""

import json

import pytest
from markupsafe import Markup

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils import report
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.report_render import render


@pytest.fixture
def model(fleet):
    return report.fleet_report_model(fleet.HOSTVARS, fleet.HOSTS, generated=fleet.GENERATED)


def test_status_and_summary(model):
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
    # 1 from discovery, and 5 hosts with driver 535.261.03, each affected by 3 bulletins: 5703 (fixed in 535.274.02),
    # 5747 (535.288.01) and 5821 (535.309.01)
    assert (s["passed"], s["failed"], s["stage_failed"], s["not_validated"], s["problems"]) == (1, 1, 1, 1, 16)
    assert s["ok"] is False
    assert model["summary_line"].startswith(
        "7 hosts: 4 GPU nodes (5 GPUs), 1 CPU-only, 2 unreachable/no facts; "
        "validation: 1 passed, 1 failed, 1 not validated; 1 failed a stage"
    )


def test_host_details(model, fleet):
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
    assert bad["problems"][0] == fleet.PROBLEM
    assert [p["code"] for p in bad["problems"][1:]] == ["driver_security_bulletin"] * 3  # bulletins 5703, 5747, 5821
    stage = hosts["stage"]
    failed = {"stage": "driver", "task": "Install the driver", "msg": "E: Unable to locate <pkg>", "unreachable": False}
    assert stage["failed"] == failed
    assert stage["gpus"][0]["name"].startswith("PCI device 0x20b0") and stage["driver"]["reboot_required"]
    assert hosts["cpu"]["gpu_count"] == 0 and hosts["down"]["facts"] is False


def test_an_engine_named_by_two_roles_is_listed_once(fleet):
    """nerdctl is in gpufleet_runtime.engines and gpufleet_validate.engines (it was listed twice)."""
    edge = report.fleet_report_model(fleet.EDGE_HOSTVARS, ["edge-1"])
    assert [e["name"] for e in edge["hosts"][0]["engines"]] == ["docker", "crio", "nerdctl"]


@pytest.mark.parametrize("name", ["fleet", "edge"])
def test_model_matches_the_golden_json(fleet, name):
    """The JSON report is the model serialised (plugin_utils/fixtures/report/*.json)."""
    if name == "fleet":
        model = report.fleet_report_model(fleet.HOSTVARS, fleet.HOSTS, generated=fleet.GENERATED)
    else:
        model = report.fleet_report_model(fleet.EDGE_HOSTVARS, fleet.EDGE_HOSTS)
    assert json.loads((fleet.GOLDEN / f"{name}.json").read_text(encoding="utf-8")) == model


def test_all_good_fleet_is_ok(fleet):
    m = report.fleet_report_model({"good": fleet.HOSTVARS["good"], "cpu": fleet.HOSTVARS["cpu"]}, ["good", "cpu"])
    assert m["summary"]["ok"] and m["summary"]["passed"] == 1 and m["summary"]["cpu_only"] == 1


def test_bad_input(fleet):
    with pytest.raises(report.ReportError, match="list of host names"):
        report.fleet_report_model(fleet.HOSTVARS, "all")
    with pytest.raises(report.ReportError, match="list of host names"):
        report.fleet_report_model(fleet.HOSTVARS, None)
    for not_a_model in ({"hosts": []}, [], None, "x"):
        with pytest.raises(report.ReportError, match="fleet_report_model"):
            report.check_model(not_a_model)


def test_lazy_mapping_hostvars(fleet):
    class Lazy:
        def __init__(self, data):
            self._d = data

        def keys(self):
            return self._d.keys()

        def __getitem__(self, key):
            value = self._d[key]
            return Lazy(value) if isinstance(value, dict) else value

    m = report.fleet_report_model(Lazy({"good": fleet.HOSTVARS["good"]}), ["good"])
    assert m["hosts"][0]["status"] == "passed" and "unrelated" not in json.dumps(m)


def test_plain_drops_markup_and_subclasses():
    """A value from a host can never arrive as already-escaped markup."""
    out = report.plain({"a": Markup("<b>x</b>"), "b": (1, 2.5, None, True), 3: [Markup("y")]})
    assert out == {"a": "<b>x</b>", "b": [1, 2.5, None, True], "3": ["y"]}
    assert not hasattr(out["a"], "__html__") and not hasattr(out["3"][0], "__html__")  # what escaping trusts


ENGINE = {"name": "docker", "runtime_message": "registered", "validation": None}


@pytest.mark.parametrize(
    ("validation", "text", "result", "detail"),
    [
        (None, "not run", "skipped", "registered"),
        ({"passed": False, "skipped": True, "seconds": None, "message": "m"}, "skipped", "skipped", "m"),
        ({"passed": True, "skipped": False, "seconds": 0.44, "message": "ok"}, "passed (0.4 s)", "passed", "ok"),
        ({"passed": True, "skipped": False, "seconds": 0, "message": "ok"}, "passed", "passed", "ok"),
        ({"passed": False, "skipped": False, "seconds": None, "message": "rc 1"}, "FAILED", "failed", "rc 1"),
    ],
)
def test_engine_texts(validation, text, result, detail):
    engine = dict(ENGINE, validation=validation)
    assert report.engine_validation(engine) == text
    assert report.engine_result(engine) == result
    assert report.engine_detail(engine) == detail


def test_host_texts():
    driver = {"installed_version": "535", "loaded_version": None, "cuda_version": None, "reboot_required": True}
    assert report.driver_text(driver) == "installed 535, loaded none, reboot required"
    assert report.driver_text(dict(driver, loaded_version="535", cuda_version="12.2", reboot_required=False)) == (
        "installed 535, loaded 535, CUDA 12.2"
    )
    assert report.driver_text(None) == "unknown"
    ok = {"validation": {"passed": True}}
    host = {"engines": [dict(ok, name="docker"), {"name": "crio", "validation": None}, dict(ok, name="podman")]}
    assert report.passed_engines(host) == "docker, podman"
    assert report.passed_engines({"engines": []}) == "-"
    assert report.status_text("no_facts") == "unreachable / no facts" and report.status_text("new") == "new"
    assert (report.yes_no(1), report.yes_no(None)) == ("yes", "no")


def test_hosts_left_out_of_the_run_are_not_in_this_run_and_do_not_fail_it(fleet):
    ran = ["good", "cpu"]
    model = report.fleet_report_model(fleet.HOSTVARS, fleet.HOSTS, generated=fleet.GENERATED, in_run=ran)
    status = {h["name"]: h["status"] for h in model["hosts"]}
    assert status["good"] == "passed" and status["cpu"] == "cpu_only"
    assert {h for h, s in status.items() if s == "not_in_run"} == set(fleet.HOSTS) - set(ran)
    s = model["summary"]
    assert (s["hosts"], s["not_in_run"], s["no_facts"], s["failed"], s["stage_failed"]) == (7, 5, 0, 0, 0)
    assert s["ok"] is True
    assert model["summary_line"].endswith("; 5 not in this run")
    assert report.status_text("not_in_run") == "not in this run"
    assert "not in this run" not in report.fleet_report_model(fleet.HOSTVARS, fleet.HOSTS)["summary_line"]
    with pytest.raises(report.ReportError, match="in_run must be a list"):
        report.fleet_report_model(fleet.HOSTVARS, fleet.HOSTS, in_run="good")


def test_a_run_without_the_toolkit_and_runtime_stages_reports_what_the_host_has():
    toolkit = {
        "provider": "native",
        "runtime_path": "/usr/local/bin/gpufleet-container-runtime",
        "source": "discovered",
    }
    spec = {"path": "/etc/cdi/nvidia.yaml", "driver_version": "550.127.05"}
    nvidia = {"pci_gpu_count": 1, "gpu_node": True, "engines": {}, "toolkit": toolkit, "cdi_spec": spec}
    entry = report.host_entry("gpu", {"ansible_facts": {"nvidia": nvidia}})
    assert entry["toolkit"] == toolkit and entry["cdi_spec"] == spec
    published = {"provider": "nvidia", "runtime_path": "/usr/bin/nvidia-container-runtime"}
    runtime = {"cdi_spec": {"path": "/var/run/cdi/nvidia.yaml"}}
    entry = report.host_entry(
        "gpu", {"ansible_facts": {"nvidia": nvidia}, "gpufleet_toolkit": published, "gpufleet_runtime": runtime}
    )
    assert entry["toolkit"] == published and entry["cdi_spec"] == runtime["cdi_spec"]


def test_the_processes_holding_a_gpu_are_listed_per_host(model, fleet):
    """gpu_facts' gpu_users, in the driver role's wording; a host without the fact lists none."""
    hosts = {h["name"]: h for h in model["hosts"]}
    users = hosts["good"]["gpu_users"]
    assert [(u["pid"], u["engine"], u["container_id"]) for u in users] == [
        (812, None, None),
        (4242, "docker", fleet.DOCKER_ID),
    ]
    assert report.gpu_user_text(users[1]) == (
        "pid 4242 (python3) in docker container 4f3c2b1a0e9d holds /dev/nvidia-uvm, /dev/nvidia0, /dev/nvidiactl"
    )
    assert hosts["bad"]["gpu_users"] == [] and hosts["down"]["gpu_users"] == []
    broken = report.host_entry("x", {"ansible_facts": {"nvidia": {"gpu_users": "not a dict"}}})
    assert broken["gpu_users"] == []


def test_hosts_the_run_lost_are_unreachable_with_their_stage_and_fail_it(fleet):
    """``active`` (ansible_play_hosts at the report): a host of the run Ansible dropped is ``unreachable`` with the
    last stage it entered; a host with a recorded stage failure stays ``stage_failed``; one left out of the run stays
    ``not_in_run``."""
    hostvars = {h: dict(fleet.HOSTVARS.get(h, {})) for h in fleet.HOSTS}
    hostvars["good"]["gpufleet_stage_reached"] = "runtime"
    ran = ["good", "stage", "down", "cpu"]
    model = report.fleet_report_model(hostvars, fleet.HOSTS, in_run=ran, active=["cpu"])
    hosts = {h["name"]: (h["status"], h["lost_at"]) for h in model["hosts"]}
    assert hosts["good"] == ("unreachable", "runtime")
    assert hosts["down"] == ("unreachable", "discover")  # no facts, no stage: never answered
    assert hosts["stage"] == ("stage_failed", None) and hosts["cpu"] == ("cpu_only", None)
    assert hosts["bad"] == ("not_in_run", None)
    s = model["summary"]
    assert (s["unreachable"], s["no_facts"], s["ok"]) == (2, 0, False)
    assert model["summary_line"].endswith("; 2 unreachable: good (at runtime), down (at discover); 3 not in this run")
    assert report.status_text("unreachable") == "UNREACHABLE"
    # Without active (a caller that does not know), nothing is unreachable.
    assert all(h["lost_at"] is None for h in report.fleet_report_model(hostvars, fleet.HOSTS)["hosts"])
    with pytest.raises(report.ReportError, match="active must be a list"):
        report.fleet_report_model(hostvars, fleet.HOSTS, active="good")


def test_a_converged_host_s_published_facts_come_with_its_discovery(fleet):
    """converge_check returns a converged host's published facts as ansible_facts.gpufleet_published (no set_fact
    runs for it): the report reads them where the host has none of its own, and a stage's own fact wins."""
    hostvars = {h: dict(fleet.HOSTVARS.get(h, {})) for h in fleet.HOSTS}
    good = hostvars["good"]
    own = {k: good.pop(k) for k in ("gpufleet_toolkit", "gpufleet_runtime") if k in good}
    published = {**own, "gpufleet_stage_reached": "validate"}
    good["ansible_facts"] = dict(good["ansible_facts"], gpufleet_published=published)
    run = {"in_run": ["good"], "active": [], "generated": fleet.GENERATED}
    converged = report.fleet_report_model(hostvars, fleet.HOSTS, **run)
    own_facts = {**good, **own, "gpufleet_stage_reached": "validate"}
    expected = report.fleet_report_model({**hostvars, "good": own_facts}, fleet.HOSTS, **run)
    assert converged == expected and own
    assert {h["name"]: h["lost_at"] for h in converged["hosts"]}["good"] == "validate"
    hostvars["good"]["gpufleet_stage_reached"] = "runtime"  # a stage that ran names itself
    model = report.fleet_report_model(hostvars, fleet.HOSTS, **run)
    assert {h["name"]: h["lost_at"] for h in model["hosts"]}["good"] == "runtime"


def test_a_host_dropped_for_its_failed_validation_is_failed_not_unreachable(fleet):
    """validate_fail_on_error=true fails the host's play, so Ansible leaves it out of ansible_play_hosts too: its
    failed validation says why, and it answered (found by test_validate_report.py once the report read active)."""
    hostvars = {h: dict(fleet.HOSTVARS.get(h, {})) for h in fleet.HOSTS}
    model = report.fleet_report_model(hostvars, fleet.HOSTS, in_run=["good", "bad"], active=["good"])
    hosts = {h["name"]: (h["status"], h["lost_at"]) for h in model["hosts"]}
    assert hosts["bad"] == ("failed", None) and hosts["good"][0] == "passed"
    assert model["summary"]["unreachable"] == 0


def test_a_stage_failure_on_a_host_that_no_longer_answers_is_unreachable_in_that_stage(fleet):
    """site.yml's rescue probes the host; a connection that reports a lost host as a failed task (docker's with a
    stopped container) gives ``gpufleet_failed.unreachable``: the host is unreachable in that stage, not failed."""
    hostvars = {h: dict(fleet.HOSTVARS.get(h, {})) for h in fleet.HOSTS}
    lost = {"stage": "toolkit", "task": "Look for the toolkit", "msg": "Module result deserialization failed"}
    hostvars["good"]["gpufleet_failed"] = dict(lost, unreachable=True)
    hostvars["stage"]["gpufleet_failed"] = dict(hostvars["stage"]["gpufleet_failed"], unreachable=False)
    model = report.fleet_report_model(hostvars, fleet.HOSTS)
    hosts = {h["name"]: h for h in model["hosts"]}
    assert (hosts["good"]["status"], hosts["good"]["lost_at"]) == ("unreachable", "toolkit")
    assert hosts["good"]["failed"]["unreachable"] is True and hosts["stage"]["status"] == "stage_failed"
    assert model["summary"]["unreachable"] == 1 and model["summary"]["stage_failed"] == 1
    markdown = render(model, "markdown")
    assert "lost during stage toolkit** (task Look for the toolkit: Module result deserialization failed)" in markdown
    assert "**Failed at stage toolkit**" not in markdown


def test_problems_are_grouped_by_code_across_hosts():
    def host(*codes):
        problems = [{"code": c, "message": f"{c} here", "fix": f"fix {c}"} for c in codes]
        return {"ansible_facts": {"nvidia": {"pci_gpu_count": 1, "gpus": [], "problems": problems}}}

    hostvars = {
        "a": host("gpu_xid_79"),
        "b": host("gpu_row_remap_pending", "gpu_row_remap_pending", "gpu_xid_79"),  # two GPUs with a pending remap
        "c": host("gpu_row_remap_pending"),
        "d": host(),
        "e": host("gpu_clocks_throttled"),
    }
    model = report.fleet_report_model(hostvars, ["a", "b", "c", "d", "e"])
    assert model["problem_groups"] == [
        {"code": "gpu_row_remap_pending", "hosts": ["b", "c"], "count": 3, "fix": "fix gpu_row_remap_pending"},
        {"code": "gpu_xid_79", "hosts": ["a", "b"], "count": 2, "fix": "fix gpu_xid_79"},
        {"code": "gpu_clocks_throttled", "hosts": ["e"], "count": 1, "fix": "fix gpu_clocks_throttled"},
    ]
    md = render(model, "markdown")
    assert "| gpu\\_row\\_remap\\_pending | b, c | fix gpu\\_row\\_remap\\_pending |" in md
    assert md.index("## Problems by kind") < md.index("## a - ")
