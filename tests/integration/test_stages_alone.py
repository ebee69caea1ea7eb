# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Every stage of site.yml runs alone on a fleet an earlier run converged.

The fleet is the session's ``converged_fleet`` (``_fleet_converged.py``, shared with ``test_cri_pods.py`` and
``test_guide_commands.py``, which run first): GPU nodes on bookworm (docker 20.10, containerd 1.6), trixie (docker 26,
containerd 1.7, podman), sid (docker 28, containerd 2.1), a trixie node in ``kube_nodes`` (a second inventory source)
so that the device_plugin stage runs, in render mode, and a CPU-only bookworm node. After its
``tests/sim/playbooks/prepare.yml`` and one full ``site.yml`` (and the pods and containers of the files before this
one, which must leave nothing a later run would change):

* each stage tag alone (``driver``, ``toolkit``, ``runtime``, ``device_plugin``, ``validate``, ``report``), on the
  bookworm and CPU-only nodes (and the Kubernetes node for ``device_plugin``), passes with zero changes on every
  host: what it needs of an earlier stage it reads from the host (gpu_facts' toolkit, engines, CDI spec), not from a
  fact of this play;
* the README's ``--tags runtime,validate -e gpufleet_hosts=<group>`` and ``--check --diff`` as written (inventory
  aside) pass with zero changes;
* ``-e '{"driver_hold": "false"}'`` (a string, as an AWX survey sends it) in check mode passes the driver stage;
* the stamp's fast path: ``--tags runtime`` skips the current stage; an edit of ``daemon.json`` makes it run and
  repair; the next run skips again;
* ``--limit`` to one GPU node leaves the other nodes out of the stages, and the report lists them as "not in this
  run";
* a converged GPU node without Slurm (sid) is validated in the same call that discovers it (converge_check: docker's
  and containerd's containers run, the role is not entered, the lock is given back); a validation that fails there
  fails the run with the engines' messages and is recorded as the validate stage's failure;
* check mode writes nothing, and site.yml changes nothing on the CPU-only node: the engines' and CDI's configuration
  trees and ``dpkg -l`` compared before and after (``_host_state.py``).

The driver stage here finds Debian's userspace preinstalled (``driver_packages``); the molecule scenario and
``test_driver_role.py`` install it through the role.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from tests.integration import _fleet_converged
from tests.integration._host_state import assert_unchanged, snapshot

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SITE = REPO / "playbooks" / "site.yml"
GPU, CPU = "cri-bookworm", _fleet_converged.CPU
# The runs after the full one are limited to these: docker 20.10 without CDI (the shim's path) and the CPU-only node;
# the device_plugin stage adds the Kubernetes node (trixie), the one it acts on. The validate stage starts containers
# on every GPU host it runs on (CI time); the trixie and sid engines are the guides' and CRI tests' before this file.
HOSTS = (GPU, CPU)
# A GPU node without slurmd (docker 28 and containerd 2.1): converge_check validates it when it is converged.
QUIET = "cri-sid"
STAGE_HOSTS = {"device_plugin": (GPU, _fleet_converged.KUBE, CPU)}
STAGES = ("driver", "toolkit", "runtime", "device_plugin", "validate", "report")
RECAP = re.compile(r"^(\S+)\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


def _recap(proc: subprocess.CompletedProcess) -> dict[str, dict[str, int]]:
    return {
        m.group(1): {"ok": int(m.group(2)), "changed": int(m.group(3)), "failed": int(m.group(5))}
        for m in RECAP.finditer(proc.stdout)
    }


def _why(proc: subprocess.CompletedProcess) -> str:
    return f"rc={proc.returncode}\n{proc.stdout[-6000:]}\n{proc.stderr[-2000:]}"


def _changed_tasks(proc: subprocess.CompletedProcess) -> list[str]:
    """The tasks the recap counts as changed, with their hosts (and the diff lines that follow), for a failure message
    that says what changed rather than only how many."""
    found, task, keep = [], "", 0
    for line in proc.stdout.splitlines():
        if line.startswith("TASK ["):
            task, keep = line, 0
        elif line.startswith("changed: ["):
            found.append(f"{task} {line}")
            keep = 20
        elif keep:
            found.append("    " + line)
            keep -= 1
    return found


@pytest.fixture(scope="module")
def fleet_runs(converged_fleet, tmp_path_factory):
    fleet = converged_fleet
    tmp = tmp_path_factory.mktemp("stages-alone")
    kube = fleet.converged["kube_inventory"]
    # the converge's settings (its device plugin documents are where a later run must find them unchanged), with a
    # report folder of this file's own
    settings = dict(fleet.converged["settings"], report_dir=str(tmp / "report"))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO / ".cache" / "collections"), ANSIBLE_FORCE_COLOR="0")

    def run(playbook: Path, *args: str, limit: str = ",".join(HOSTS)) -> subprocess.CompletedProcess:
        cmd = [str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", str(fleet.inventory), "-i", str(kube)]
        cmd += ["--limit", limit, "-e", json.dumps(settings), *args, str(playbook)]
        start = time.monotonic()
        proc = subprocess.run(cmd, check=False, capture_output=True, text=True, cwd=REPO, env=env)
        print(f"[stages-alone] {' '.join(args) or 'site.yml'}: rc={proc.returncode} {time.monotonic() - start:.0f}s")
        return proc

    gpu, cpu = fleet.node(GPU), fleet.node(CPU)
    runs = {key: fleet.converged[key] for key in ("site", "cpu_before_site", "cpu_after_site")}
    runs["hosts"], runs["inventory"] = set(HOSTS), set(fleet.nodes)
    if runs["site"].returncode == 0:
        # the stage's own tasks, not the stamp of the converge (gpufleet_fast_path=false): what they read of an
        # earlier stage comes from the host
        for stage in STAGES:
            limit = ",".join(STAGE_HOSTS.get(stage, HOSTS))
            runs[stage] = run(SITE, "--tags", stage, "-e", "gpufleet_fast_path=false", limit=limit)
        # The fast path of a rerun: the runtime stage's stamp is current now; an admin's edit of daemon.json that
        # drops the nvidia runtime makes it not current, the stage runs and puts the runtime back, the next run skips.
        run(SITE, "--tags", "runtime", limit=GPU)  # stamps anew what the files before this one left
        runs["stamped"] = run(SITE, "--tags", "runtime", limit=GPU)
        daemon = json.loads(gpu.run("cat /etc/docker/daemon.json").stdout)
        daemon.get("runtimes", {}).pop("nvidia", None)
        if daemon.get("default-runtime") == "nvidia":
            daemon.pop("default-runtime")
        gpu.run(f"printf '%s' '{json.dumps(daemon)}' > /etc/docker/daemon.json")
        runs["drifted"] = run(SITE, "--tags", "runtime", limit=GPU)
        runs["repaired"] = json.loads(gpu.run("cat /etc/docker/daemon.json").stdout)
        runs["after_drift"] = run(SITE, "--tags", "runtime", limit=GPU)
        # The README's examples, as written (inventory aside: its rack7 is this inventory's gpu_nodes; the settings
        # above only place the files).
        runs["readme"] = run(SITE, "--tags", "runtime,validate", "-e", "gpufleet_hosts=gpu_nodes")
        runs["before_check"] = {GPU: snapshot(gpu), CPU: snapshot(cpu)}
        runs["readme_check"] = run(SITE, "--check", "--diff")
        runs["string"] = run(SITE, "--tags", "driver", "--check", "-e", '{"driver_hold": "false"}')
        runs["after_check"] = {GPU: snapshot(gpu), CPU: snapshot(cpu)}
        runs["limit"] = run(SITE, limit=GPU)
        runs["cpu_at_end"] = snapshot(cpu)
        runs["limit_report"] = json.loads((tmp / "report" / "fleet-report.json").read_text())
        # A GPU node without Slurm (cri-bookworm runs it: the Slurm stage acts on it every run): a full run, which
        # repairs what the files before this one left and stamps it, then the run after it, which finds it converged.
        runs["quiet_first"] = run(SITE, limit=QUIET)
        runs["converged"] = run(SITE, limit=QUIET)
        runs["converged_report"] = json.loads((tmp / "report" / "fleet-report.json").read_text())
        # A validation that fails on a converged host (a device node the containers cannot have): converge_check
        # validates it and the run records the failure as the role would.
        runs["validate_fails"] = run(SITE, "-e", "validate_device_nodes=/dev/nvidia9", limit=QUIET)
        runs["validate_fails_report"] = json.loads((tmp / "report" / "fleet-report.json").read_text())
        runs["after_failure"] = run(SITE, "--tags", "runtime", limit=QUIET)  # the lock was given back
    return runs


def test_the_full_run_converges(fleet_runs):
    assert fleet_runs["site"].returncode == 0, _why(fleet_runs["site"])


def test_site_leaves_the_cpu_only_node_as_it_was(fleet_runs):
    """The engines' and CDI's configuration trees and the packages of the CPU-only node: unchanged by the full run,
    and by every run after it (each stage alone, the README's examples, check mode, --limit)."""
    assert_unchanged(fleet_runs["cpu_before_site"], fleet_runs["cpu_after_site"], f"site.yml on {CPU}")
    if "cpu_at_end" not in fleet_runs:
        pytest.fail("the full run failed: " + _why(fleet_runs["site"]))
    assert_unchanged(fleet_runs["cpu_after_site"], fleet_runs["cpu_at_end"], f"the later runs on {CPU}")


@pytest.mark.parametrize("host", [GPU, CPU])
def test_check_mode_writes_nothing(fleet_runs, host):
    """The README's ``--check --diff`` and the survey-string ``--check``: no file of the engines or CDI, and no
    package, differs afterwards (the recap's changed=0 alone cannot see a write check mode should not make)."""
    if "after_check" not in fleet_runs:
        pytest.fail("the full run failed: " + _why(fleet_runs["site"]))
    assert_unchanged(fleet_runs["before_check"][host], fleet_runs["after_check"][host], f"site.yml --check on {host}")


@pytest.mark.parametrize("stage", STAGES)
def test_each_stage_alone_passes_with_zero_changes(fleet_runs, stage):
    if stage not in fleet_runs:
        pytest.fail("the full run failed: " + _why(fleet_runs["site"]))
    proc = fleet_runs[stage]
    assert proc.returncode == 0, _why(proc)
    recap = _recap(proc)
    assert set(recap) == set(STAGE_HOSTS.get(stage, HOSTS)), _why(proc)
    assert all(r["changed"] == 0 and r["failed"] == 0 for r in recap.values()), (recap, _changed_tasks(proc))
    if stage != "report":
        # the stage's role ran on the GPU node (not skipped for want of an earlier stage's fact)
        assert f"Apply the role of the stage {stage}" in proc.stdout, _why(proc)
        assert "Record the failure of the stage" not in proc.stdout, _why(proc)


def _role_ran(proc: subprocess.CompletedProcess, stage: str) -> bool:
    """Whether the stage's role ran on the host of a one-host run: a task of the role is in the output (a host whose
    stamps are all current enters no stage play; one whose stage is current skips the role's include)."""
    return f"TASK [gpufleet.nvidia.{stage} : " in proc.stdout


def test_a_rerun_skips_a_current_stage_and_runs_a_drifted_one(fleet_runs):
    """The stamp's fast path: after the full run, ``--tags runtime`` finds the stage current and skips its role with
    zero changes; after daemon.json lost the nvidia runtime the stage runs, reports the change and registers the
    runtime again; the run after that skips it again."""
    if "after_drift" not in fleet_runs:
        pytest.fail("the full run failed: " + _why(fleet_runs["site"]))
    stamped, drifted, after = fleet_runs["stamped"], fleet_runs["drifted"], fleet_runs["after_drift"]
    for proc in (stamped, drifted, after):
        assert proc.returncode == 0, _why(proc)
    assert not _role_ran(stamped, "runtime") and _recap(stamped)[GPU]["changed"] == 0, _why(stamped)
    assert _role_ran(drifted, "runtime") and _recap(drifted)[GPU]["changed"] >= 1, _why(drifted)
    assert "nvidia" in fleet_runs["repaired"].get("runtimes", {}), fleet_runs["repaired"]
    assert not _role_ran(after, "runtime") and _recap(after)[GPU]["changed"] == 0, _why(after)


@pytest.mark.parametrize("run", ["readme", "readme_check"])
def test_the_readmes_examples(fleet_runs, run):
    proc = fleet_runs.get(run) or fleet_runs["site"]
    assert proc.returncode == 0, _why(proc)
    recap = _recap(proc)
    assert all(r["changed"] == 0 and r["failed"] == 0 for r in recap.values()), (recap, _changed_tasks(proc))
    assert "no runtime to register" not in proc.stdout
    if run == "readme":
        assert GPU in recap and CPU not in recap, recap


def test_a_survey_string_for_a_bool_in_check_mode(fleet_runs):
    proc = fleet_runs.get("string") or fleet_runs["site"]
    assert proc.returncode == 0, _why(proc)
    assert "was derived from value of type 'str'" not in proc.stdout + proc.stderr


def test_a_converged_node_is_validated_in_the_call_that_discovers_it(fleet_runs):
    """A full run on the converged GPU node (the one after a full run): its route is done; no stage play and not the
    validate role act on it, yet the report has its validation: docker's containers ran through the nvidia runtime as
    the role runs them. The lock release play does not contact it (converge_check gave the lock back)."""
    if "converged" not in fleet_runs:
        pytest.fail("the full run failed: " + _why(fleet_runs["site"]))
    assert fleet_runs["quiet_first"].returncode == 0, _why(fleet_runs["quiet_first"])
    proc = fleet_runs["converged"]
    assert proc.returncode == 0, _why(proc)
    routes = [line for line in proc.stdout.splitlines() if line.startswith("ok: [") and "(item=" in line]
    assert f"(item={QUIET}: done)" in proc.stdout, (routes, _why(proc))
    assert "TASK [gpufleet.nvidia.validate : " not in proc.stdout and "Release this host's lock" not in proc.stdout
    assert _recap(proc)[QUIET]["changed"] == 0, _why(proc)
    (host,) = [h for h in fleet_runs["converged_report"]["hosts"] if h["name"] == QUIET]
    assert host["validation"]["passed"] and host["failed"] is None, host["validation"]
    engines = {e["name"]: e["validation"] for e in host["engines"]}
    for name in ("docker", "containerd"):  # docker's CLI and ctr, as the role runs them
        assert engines[name]["passed"] and not engines[name]["skipped"], engines
        assert engines[name]["seconds"] > 0 and engines[name]["libcuda"], engines
        assert "/dev/nvidiactl" in engines[name]["device_nodes"], engines


def test_a_failed_validation_of_a_converged_node_fails_the_run(fleet_runs):
    """validate_device_nodes names a node the host lacks: each engine fails in converge_check's validation; the run
    ends non-zero, the failure is the validate stage's (task, message with the engine and the node), as the role's
    would be; the host's lock was given back (the next run takes it at once)."""
    if "validate_fails" not in fleet_runs:
        pytest.fail("the full run failed: " + _why(fleet_runs["site"]))
    proc, report = fleet_runs["validate_fails"], fleet_runs["validate_fails_report"]
    assert proc.returncode != 0 and f"(item={QUIET}: validate_failed)" in proc.stdout, _why(proc)
    (host,) = [h for h in report["hosts"] if h["name"] == QUIET]
    failed = host["failed"] or {}
    assert failed.get("stage") == "validate", host
    assert failed["msg"].startswith("GPU container validation failed on containerd, docker: "), failed
    assert "/dev/nvidia9" in failed["msg"] and "validate_fail_on_error=false" in failed["msg"], failed
    assert not host["validation"]["passed"] and report["summary"]["ok"] is False
    assert fleet_runs["after_failure"].returncode == 0, _why(fleet_runs["after_failure"])


def test_a_limited_run_leaves_the_others_out_and_reports_them(fleet_runs):
    proc = fleet_runs.get("limit") or fleet_runs["site"]
    assert proc.returncode == 0, _why(proc)
    recap = _recap(proc)
    assert set(recap) == {GPU}, recap
    status = {h["name"]: h["status"] for h in fleet_runs["limit_report"]["hosts"]}
    assert status == {name: "passed" if name == GPU else "not_in_run" for name in fleet_runs["inventory"]}, status
    assert fleet_runs["limit_report"]["summary"]["ok"] is True
