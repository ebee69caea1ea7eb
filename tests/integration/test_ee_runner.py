# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""``site.yml`` as AWX runs a job: through ansible-runner, inside the execution environment ``make ee EE_BUILD=1``
builds here (tests/ee/execution-environment.yml), with a private data dir (inventory/, env/extravars, artifacts/) and
the ``gpufleet site`` job template's survey answers as AWX sends them, every bool and number a string; sliced in two
as AWX job slicing does it; the slices' reports come back through the jobs' artifacts (set_stats) and their JSON
files, and ``report_merge.yml``, the workflow's last node, makes one fleet report of them, in the EE too.

The fleet is ``converged_fleet`` (``_fleet_converged.py``, shared with ``test_cri_pods.py``,
``test_guide_commands.py`` and ``test_stages_alone.py``): the survey's defaults are what converged it (with the
converge's device plugin folder, ``fleet.converged["settings"]``), so each slice's ``site.yml`` rerun changes nothing
(asserted from the jobs' events), and the fleet is left as it was.

The image: the ``ee_image`` fixture runs ``make ee EE_BUILD=1``'s script itself, so a clean machine builds it (about
10 minutes from cold; from the layers after the collection's tarball on when the tree changed); ``make test`` builds it
first thing in lane 2 (tests/tools/test_all.sh), so that here, well after the lanes start, the same tree's build finds
every layer cached.

How the EE reaches the simulated nodes: their inventory uses the community.docker.docker connection (docker exec),
which an AWX job would not (ssh); the job's container gets the docker CLI, the engine's socket and community.docker
(a test-only collection, not in the EE: extensions/ee) bind-mounted, as an AWX container group or
``container_volume_mounts`` would give them. Everything else is the EE's own: ansible-core, the collection and its
dependencies as installed by ansible-builder.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration._fleet_converged import CPU

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
EE_IMAGE = "gpufleet-nvidia-ee:latest"
RUNNER = REPO / ".venv-ee" / "bin" / "ansible-runner"
CONTROLLER_CONFIG = REPO / "extensions" / "awx" / "controller_config.yml"
TEST_COLLECTIONS = "/opt/gpufleet-tests"
# What the simulated fleet needs of the survey beyond its defaults: the validate image is the nodes' local one (no
# registry, tests/sim/inventory.py), and the device plugin stage renders its documents where the converge did.
SIM_ANSWERS = {
    "validate_image": "gpufleet-sim/mini:latest",
    "validate_pull": "never",
    "device_plugin_mode": "render_only",
}
# Answers in the other spellings a survey or a typed extra var gives (as_bool, as_int accept them all).
SPELLINGS = {"driver_drain": "False", "runtime_cdi": "True", "gpufleet_lock": "yes", "validate_timeout": "120"}
SLICES = 2


@pytest.fixture(scope="module")
def ee_image() -> float:
    """``make ee EE_BUILD=1`` (tests/tools/ee.sh: the image from this tree, under a lock, so it waits for a build
    that lane 2 of ``make test`` still runs); its seconds."""
    if not shutil.which("docker"):
        pytest.skip("needs the docker CLI")
    start = time.monotonic()
    env = dict(os.environ, PATH=f"{REPO / '.venv' / 'bin'}:{os.environ['PATH']}", EE_BUILD="1")
    if not RUNNER.exists():
        subprocess.run(["make", ".venv-ee/.installed"], cwd=REPO, check=True, capture_output=True, env=env)
    proc = subprocess.run(
        [str(REPO / "tests" / "tools" / "ee.sh")], cwd=REPO, capture_output=True, text=True, env=env, check=False
    )
    assert proc.returncode == 0, f"make ee EE_BUILD=1 failed\n{proc.stdout[-6000:]}\n{proc.stderr[-4000:]}"
    seconds = time.monotonic() - start
    print(f"[ee] {EE_IMAGE} built in {seconds:.0f}s")
    return seconds


def survey_answers(template: str) -> dict[str, Any]:
    """The extra vars AWX sends for the job template's survey answered with its defaults (SIM_ANSWERS and SPELLINGS
    apart): text and multiple choice as strings, integers too (as typed), a multiselect as a list of strings, a blank
    optional answer left out."""
    config = yaml.safe_load(CONTROLLER_CONFIG.read_text())
    spec = next(t for t in config["controller_templates"] if t["name"] == template)["survey_spec"]["spec"]
    answers: dict[str, Any] = {}
    for question in spec:
        name = question["variable"]
        value = {**SIM_ANSWERS, **SPELLINGS}.get(name, question.get("default"))
        if value in (None, ""):
            continue
        if question["type"] == "multiselect":
            answers[name] = value.split("\n") if isinstance(value, str) else [str(v) for v in value]
        else:
            answers[name] = str(value)
    return answers


def _slice_inventory(inventory: dict[str, Any], hosts: list[str]) -> dict[str, Any]:
    """``inventory`` pared down to ``hosts``, every group kept (AWX feeds each slice such an inventory)."""

    def pare(group: dict[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in group.items() if k not in ("hosts", "children")}
        if group.get("hosts"):
            out["hosts"] = {h: v for h, v in group["hosts"].items() if h in hosts}
        if group.get("children"):
            out["children"] = {name: pare(child or {}) for name, child in group["children"].items()}
        return out

    return {"all": pare(inventory["all"])}


def _inventory_hosts(group: dict[str, Any]) -> list[str]:
    names = list((group.get("hosts") or {}).keys())
    for child in (group.get("children") or {}).values():
        names += _inventory_hosts(child or {})
    return names


def run_job(
    pdd: Path,
    ident: str,
    playbook: str,
    extravars: dict[str, Any],
    *,
    inventory: dict[str, Any] | None,
    mounts: list[str],
) -> dict[str, Any]:
    """One AWX-style job: ansible-runner with the private data dir ``pdd``, the job's container from EE_IMAGE. Returns
    the run's rc, status, the stats event's data (``artifact_data``: set_stats) and the changed tasks."""
    (pdd / "env").mkdir(parents=True, exist_ok=True)
    (pdd / "project").mkdir(exist_ok=True)
    (pdd / "env" / "extravars").write_text(json.dumps(extravars))
    (pdd / "env" / "envvars").write_text(
        json.dumps({"ANSIBLE_COLLECTIONS_PATH": f"/usr/share/ansible/collections:{TEST_COLLECTIONS}"})
    )
    if inventory is not None:
        (pdd / "inventory").mkdir(exist_ok=True)
        (pdd / "inventory" / "hosts.yml").write_text(yaml.safe_dump(inventory))
    cmd = [str(RUNNER), "run", str(pdd), "-p", playbook, "--ident", ident, "--process-isolation"]
    cmd += ["--process-isolation-executable", "docker", "--container-image", EE_IMAGE]
    for mount in mounts:
        cmd += ["--container-volume-mount", mount]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=1500)
    events = []
    for path in sorted((pdd / "artifacts" / ident / "job_events").glob("*.json")):
        events.append(json.loads(path.read_text()))
    stats = next((e["event_data"] for e in events if e.get("event") == "playbook_on_stats"), {})
    changed = [
        f"{e['event_data'].get('host')}: {e['event_data'].get('task')}"
        for e in events
        if e.get("event") == "runner_on_ok" and e["event_data"].get("res", {}).get("changed")
    ]
    return {
        "rc": proc.returncode,
        "status": (pdd / "artifacts" / ident / "status").read_text().strip(),
        "stats": stats,
        "changed": changed,
        "stdout": (pdd / "artifacts" / ident / "stdout").read_text() if (pdd / "artifacts" / ident).exists() else "",
        "output": proc.stdout[-4000:] + proc.stderr[-3000:],
    }


def test_site_sliced_in_the_ee_with_survey_strings_and_the_reports_merged(converged_fleet, ee_image, tmp_path):
    fleet = converged_fleet
    # where the converge rendered the device plugin documents: the rerun renders them there (and finds them unchanged)
    gitops = fleet.converged["settings"]["device_plugin_render_dir"]
    site_packages = next((REPO / ".venv" / "lib").glob("python3.*/site-packages"))
    mounts = [
        "/var/run/docker.sock:/var/run/docker.sock",
        f"{shutil.which('docker')}:/usr/local/bin/docker:ro",
        f"{site_packages}/ansible_collections/community/docker:{TEST_COLLECTIONS}/ansible_collections/community/docker:ro",
        f"{gitops}:{gitops}",
    ]
    inventory = yaml.safe_load(Path(fleet.inventory).read_text())
    inventory["all"]["children"]["kube_nodes"] = {"hosts": {"cri-kube": None}}
    hosts = sorted(set(_inventory_hosts(inventory["all"])))
    assert hosts == sorted(fleet.nodes)
    # what each host's report says after the converge: validation passed on the GPU nodes, the CPU-only node reported
    expected = {h: "cpu_only" if h == CPU else "passed" for h in hosts}
    extravars = survey_answers("gpufleet site")
    assert all(isinstance(v, str) for k, v in extravars.items() if k != "runtime_engines")
    assert {"driver_hold", "runtime_dev_char_links", "validate_timeout", "gpufleet_serial"} <= set(extravars)
    # the job template's own extra vars (not a survey's): where the report and the device plugin documents go
    extravars.update({"report_dir": "/runner/reports", "device_plugin_render_dir": str(gitops)})

    # AWX job slicing: each slice is a job on a pared-down inventory, the hosts split by index (the Nth slice takes
    # every host whose index is N-1 modulo the slice count), the slices run at once (ansible/awx docs/job_slicing.md,
    # docs/docsite/rst/userguide/job_slices.rst).
    slices = [hosts[i::SLICES] for i in range(SLICES)]
    start = time.monotonic()
    with ThreadPoolExecutor(SLICES) as pool:
        jobs = list(
            pool.map(
                lambda i: run_job(
                    tmp_path / f"slice{i + 1}",
                    f"slice{i + 1}",
                    "gpufleet.nvidia.site",
                    extravars,
                    inventory=_slice_inventory(inventory, slices[i]),
                    mounts=mounts,
                ),
                range(SLICES),
            )
        )
    site_seconds = time.monotonic() - start
    reports = []
    for i, job in enumerate(jobs):
        why = f"slice {i + 1}: rc={job['rc']} status={job['status']}\n{job['stdout'][-6000:]}\n{job['output']}"
        assert job["rc"] == 0 and job["status"] == "successful", why
        # a rerun with the survey's defaults on the converged fleet changes nothing
        assert job["changed"] == [], why
        assert set(job["stats"]["ok"]) == set(slices[i]), why
        assert not job["stats"]["failures"] and not job["stats"]["dark"], why
        # the report through the job's artifacts (set_stats), and its files where report_dir put them
        data = job["stats"]["artifact_data"]
        assert data["gpufleet_report_summary"]["ok"] is True, why
        assert data["gpufleet_report_summary"]["hosts"] == len(slices[i]), why
        assert data["gpufleet_report_files"] == [f"/runner/reports/fleet-report.{x}" for x in ("md", "json", "html")]
        report = json.loads((tmp_path / f"slice{i + 1}" / "reports" / "fleet-report.json").read_text())
        assert report["summary_line"] == data["gpufleet_report_summary_line"]
        assert {h["name"]: h["status"] for h in report["hosts"]} == {h: expected[h] for h in slices[i]}
        reports.append(report)

    # The workflow's last node: report_merge.yml in the EE on the slices' JSON reports, their paths as one
    # comma-separated survey string.
    merge_pdd = tmp_path / "merge"
    (merge_pdd / "slices").mkdir(parents=True)
    for i in range(SLICES):
        report_file = tmp_path / f"slice{i + 1}" / "reports" / "fleet-report.json"
        shutil.copy(report_file, merge_pdd / "slices" / f"{i + 1}.json")
    files = ",".join(f"/runner/slices/{i + 1}.json" for i in range(SLICES))
    merge_vars = {"report_merge_files": files, "report_dir": "/runner/reports", "report_fail_on_error": "true"}
    job = run_job(merge_pdd, "merge", "gpufleet.nvidia.report_merge", merge_vars, inventory=None, mounts=[])
    why = f"merge: rc={job['rc']} status={job['status']}\n{job['stdout'][-6000:]}\n{job['output']}"
    assert job["rc"] == 0 and job["status"] == "successful", why
    merged = json.loads((merge_pdd / "reports" / "fleet-report.json").read_text())
    assert sorted(h["name"] for h in merged["hosts"]) == hosts
    assert {h["name"]: h["status"] for h in merged["hosts"]} == expected
    gpus = sum(len(fleet.node(h).gpus) for h in hosts)
    assert merged["summary"]["ok"] is True and merged["summary"]["gpus"] == gpus == 2 * (len(hosts) - 1)
    assert [s["hosts_run"] for s in merged["merge"]["slices"]] == [len(s) for s in slices]
    assert merged["merge"]["duplicates"] == []
    by_name = {h["name"]: h for r in reports for h in r["hosts"]}
    assert all(h == by_name[h["name"]] for h in merged["hosts"])
    data = job["stats"]["artifact_data"]
    assert data["gpufleet_report_summary_line"] == merged["summary_line"]
    assert data["gpufleet_report_merge"]["slices"][0]["generated"] == reports[0]["generated"]
    print(f"[ee] two site.yml slices in the EE in {site_seconds:.0f}s; the EE build took {ee_image:.0f}s")
