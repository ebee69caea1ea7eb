# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The validate role and the fleet report on simulated GPU nodes with Debian's real NVIDIA userspace.

One extra fleet (prefix ``...-i8va``, ``driver_packages: true``, driver ``loaded``):

* ``va-bookworm``: docker 20.10 (runtime ``nvidia`` -> the shim), containerd 1.6 (``ctr --runc-binary``), 2 GPUs;
* ``va-trixie``: docker 26 (runtime and native CDI), containerd 1.7, podman 5.4 (CDI), 1 GPU.

Each node is made ready as in test_cdi_e2e (host programs from this tree, ``cdi_spec``, docker's runtime
registered), ``gpufleet-sim-mini-image`` provides the image; then ``validate`` + ``playbooks/report.yml`` run
through ansible-playbook. Positive: every engine passes, a second run changes nothing on the nodes, and the
Markdown/JSON/HTML report says so. Negative: docker's ``nvidia`` runtime removed on bookworm -> docker fails
there (containerd still passes), recorded and reported; the play fails only with ``validate_fail_on_error``.
Air-gapped: the image removed from every engine on trixie, ``validate_image_archive`` loads it into each
once (a second run changes nothing).
"""

import json
import os
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLAYBOOK = os.path.join(REPO, "tests", "integration", "playbooks", "validate_report.yml")

pytestmark = pytest.mark.integration

FLEET = {
    "nodes": [
        {
            "name": "va-bookworm",
            "suite": "bookworm",
            "driver_state": "loaded",
            "driver_packages": True,
            "engines": ["docker", "containerd"],
            "gpus": 2,
        },
        {"name": "va-trixie", "suite": "trixie", "driver_state": "loaded", "driver_packages": True, "gpus": 1},
    ]
}
PREPARE = """
- hosts: all
  gather_facts: false
  tasks:
    - name: CDI spec
      gpufleet.nvidia.cdi_spec: {}
    - name: Docker's runtime nvidia (and CDI from docker 25)
      gpufleet.nvidia.container_runtime:
        engine: docker
        path: /usr/local/bin/gpufleet-container-runtime
        cdi: "{{ gpufleet_sim.suite != 'bookworm' }}"
        restart: true
"""
UNREGISTER = """
- hosts: va-bookworm
  gather_facts: false
  tasks:
    - name: Take docker's runtime nvidia away
      gpufleet.nvidia.container_runtime:
        engine: docker
        state: absent
        restart: true
"""


@pytest.fixture(scope="module")
def fleet(sim_fleet_factory, ansible_playbook, tmp_path_factory):
    fleet = sim_fleet_factory(FLEET, name="i8va")

    def prepare(node):
        node.install_host_programs()
        node.run("gpufleet-sim-mini-image", check=True, timeout=300)

    with ThreadPoolExecutor(len(fleet.nodes)) as pool:
        list(pool.map(prepare, [fleet.node(n) for n in fleet.nodes]))
    work = tmp_path_factory.mktemp("i8va")
    (work / "prepare.yml").write_text(PREPARE)
    proc = ansible_playbook(work / "prepare.yml", inventory=fleet.inventory)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    fleet.work = work
    return fleet


def _run(fleet, ansible_playbook, name, *args):
    out = fleet.work / name
    proc = ansible_playbook(PLAYBOOK, "-e", f"report_dir={out}", *args, inventory=fleet.inventory)
    files = {ext: out / ("fleet-report." + ext) for ext in ("md", "json", "html")}
    report = json.loads(files["json"].read_text()) if files["json"].exists() else None
    return proc, report, files


def _recap(stdout, host):
    m = re.search(rf"^{re.escape(host)}\s+: ok=\d+\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", stdout, re.M)
    assert m, stdout[-3000:]
    return tuple(int(x) for x in m.groups())


def test_every_engine_passes_and_the_report_says_so(fleet, ansible_playbook):
    proc, report, files = _run(fleet, ansible_playbook, "pass")
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
    hosts = {h["name"]: h for h in report["hosts"]}
    expected = {"va-bookworm": ["docker", "containerd"], "va-trixie": ["docker", "containerd", "podman"]}
    for name, engines in expected.items():
        host = hosts[name]
        assert host["status"] == "passed", host
        assert [e["name"] for e in host["engines"]] == engines
        for engine in host["engines"]:
            val = engine["validation"]
            assert val["passed"] and val["libcuda"] and not val["skipped"], (name, engine)
            gpus = {"/dev/nvidia%d" % i for i in range(len(host["gpus"]))}
            assert gpus | {"/dev/nvidiactl", "/dev/nvidia-uvm"} <= set(val["device_nodes"]), (name, engine)
            # the guides' check: nvidia-smi -L in the container listed every GPU of the host
            assert f"nvidia-smi -L lists {len(host['gpus'])} GPU(s)" in val["message"], (name, engine)
        assert host["driver"]["loaded_version"] == fleet.node(name).desc["driver_version"]
    trixie_docker = next(e for e in hosts["va-trixie"]["engines"] if e["name"] == "docker")
    assert "docker (runtime)" in trixie_docker["validation"]["message"]
    assert "docker (cdi)" in trixie_docker["validation"]["message"]
    assert report["summary"]["passed"] == 2 and report["summary"]["failed"] == 0 and report["summary"]["ok"]
    # Exposure (plugin_utils/exposure.py, checked by hand against the CVE records of tests/tools/security_sources):
    # bookworm's 535.261.03 is below the R535 fix of bulletin 5703 (535.274.02 in cves/2025/23xxx/CVE-2025-23280,
    # -23282, -23300, -23330, -23332, -23345), 5747 (535.288.01 in cves/2025/33xxx/CVE-2025-33219, -33220) and 5821
    # (535.309.01 in ten records, e.g. cves/2026/24xxx/CVE-2026-24182; CVE-2026-24198 names no R535 row), and above
    # CVE-2024-0126's (535.216.01); trixie's 550.163.01 is above CVE-2024-0126's R550 fix (550.127.05) and R550 is in no
    # later record.
    # R535's end of life was June 2026; R550 is older than every branch NVIDIA lists as supported.
    # Both run this collection's own toolkit (the host programs), judged on those, not on NVIDIA's CVEs.
    exposure = report["exposure"]
    bookworm = "va-bookworm", "535.261.03"
    assert [(b["bulletin"], len(b["cves"]), b["hosts"]) for b in exposure["bulletins"][:2]] == [
        ("5821", 10, [{"host": bookworm[0], "version": bookworm[1], "fixed": "535.309.01"}]),
        ("5747", 2, [{"host": bookworm[0], "version": bookworm[1], "fixed": "535.288.01"}]),
    ]
    assert [(b["bulletin"], b["cves"], b["hosts"]) for b in exposure["bulletins"][2:]] == [
        (
            "5703",
            [
                "CVE-2025-23280",
                "CVE-2025-23282",
                "CVE-2025-23300",
                "CVE-2025-23330",
                "CVE-2025-23332",
                "CVE-2025-23345",
            ],
            [{"host": "va-bookworm", "version": "535.261.03", "fixed": "535.274.02"}],
        )
    ]
    assert [(b["branch"], b["status"], b["hosts"]) for b in exposure["branches"]] == [
        ("535", "end_of_life", ["va-bookworm"]),
        ("550", "end_of_life", ["va-trixie"]),
    ]
    for name in ("va-bookworm", "va-trixie"):
        assert hosts[name]["exposure"]["toolkit"]["provider"] == "native", hosts[name]["exposure"]
        assert hosts[name]["exposure"]["toolkit_findings"] == []
    codes = {name: sorted(p["code"] for p in hosts[name]["problems"]) for name in hosts}
    assert {"driver_security_bulletin", "driver_branch_end_of_life"} <= set(codes["va-bookworm"]), codes
    assert "driver_security_bulletin" not in codes["va-trixie"] and "driver_branch_end_of_life" in codes["va-trixie"]
    assert not any(c.startswith("toolkit_security") for c in codes["va-bookworm"] + codes["va-trixie"]), codes
    md = files["md"].read_text()
    assert "| 5703 https://nvidia.custhelp.com/app/answers/detail/a\\_id/5703 | 2025-10-10 | driver |" in md
    assert "va-bookworm (535.261.03, fixed in 535.274.02)" in md
    assert md.splitlines()[2].startswith("**2 hosts: 2 GPU nodes (3 GPUs), 0 CPU-only, 0 unreachable/no facts; ")
    assert "validation: 2 passed, 0 failed" in md and "| va-trixie | passed | 1 |" in md
    page = files["html"].read_text()
    assert page.startswith("<!DOCTYPE html>") and "va-bookworm" in page
    # self-contained: one script, the page's own inline one (filter and sort), nothing fetched
    assert page.count("<script") == 1 and "<script>" in page and " src=" not in page
    # the host table's exposure filter: a bulletin's word on the row of each host it applies to
    assert '<option value="bulletin-5703">' in page
    assert 'data-exposure="bulletin-5703 bulletin-5747 bulletin-5821 branch-end_of_life' in page
    for node in ("va-bookworm", "va-trixie"):
        assert _recap(proc.stdout, node) == (0, 0, 0)
    # Again: nothing changes on the nodes, and no validation container is left behind.
    again, report2, _files = _run(fleet, ansible_playbook, "again")
    assert again.returncode == 0 and report2["summary"]["passed"] == 2
    for node in ("va-bookworm", "va-trixie"):
        assert _recap(again.stdout, node) == (0, 0, 0)
        left = fleet.node(node).run("docker ps -aq --filter name=gpufleet-validate; ctr -n default c ls -q", check=True)
        assert left.stdout.strip() == "", left.stdout


def test_unregistered_runtime_fails_that_engine_only(fleet, ansible_playbook):
    (fleet.work / "unregister.yml").write_text(UNREGISTER)
    proc = ansible_playbook(fleet.work / "unregister.yml", inventory=fleet.inventory)
    assert proc.returncode == 0, proc.stdout[-3000:]
    # Recorded, reported, and the play goes on.
    proc, report, files = _run(fleet, ansible_playbook, "neg-record", "-e", "validate_fail_on_error=false")
    assert proc.returncode == 0, proc.stdout[-5000:]
    hosts = {h["name"]: h for h in report["hosts"]}
    bookworm = {e["name"]: e["validation"] for e in hosts["va-bookworm"]["engines"]}
    assert hosts["va-bookworm"]["status"] == "failed" and hosts["va-trixie"]["status"] == "passed"
    assert not bookworm["docker"]["passed"] and bookworm["containerd"]["passed"]
    assert "container failed (rc 125)" in bookworm["docker"]["message"]
    assert "runtime" in bookworm["docker"]["message"].split("rc 125")[1], bookworm["docker"]["message"]
    assert not next(e for e in hosts["va-bookworm"]["engines"] if e["name"] == "docker")["registered"]
    assert "validation: 1 passed, 1 failed" in report["summary_line"] and not report["summary"]["ok"]
    md = files["md"].read_text()
    assert "| va-bookworm | FAILED | 2 |" in md and "FAILED" in files["html"].read_text()
    # Default validate_fail_on_error=true: the bookworm host fails, the other goes on, the report is written.
    proc, report, files = _run(fleet, ansible_playbook, "neg-fail")
    assert proc.returncode == 2, proc.stdout[-5000:]
    assert "GPU container validation failed on docker" in proc.stdout
    assert _recap(proc.stdout, "va-bookworm")[2] == 1 and _recap(proc.stdout, "va-trixie")[2] == 0
    hosts = {h["name"]: h for h in report["hosts"]}
    assert hosts["va-bookworm"]["status"] == "failed" and hosts["va-trixie"]["status"] == "passed"


def test_air_gapped_image_archive_loaded_once(fleet, ansible_playbook):
    node = fleet.node("va-trixie")
    node.run("docker save -o /var/tmp/mini.tar gpufleet-sim/mini:latest", check=True)
    archive = fleet.work / "mini.tar"
    subprocess.run(["docker", "cp", node.container + ":/var/tmp/mini.tar", str(archive)], check=True)
    node.run(
        "docker rmi gpufleet-sim/mini:latest && podman rmi gpufleet-sim/mini:latest"
        " && ctr -n default images rm docker.io/gpufleet-sim/mini:latest",
        check=True,
    )
    args = ("-e", f"validate_image_archive={archive}", "-e", "validate_pull=never", "--limit", "va-trixie,localhost")
    proc, report, _files = _run(fleet, ansible_playbook, "archive", *args)
    assert proc.returncode == 0, proc.stdout[-5000:]
    loaded = re.findall(r"^changed: \[va-trixie\] => \(item=(\w+)\)", proc.stdout, re.M)
    assert sorted(loaded) == ["containerd", "docker", "podman"], proc.stdout[-5000:]
    trixie = next(h for h in report["hosts"] if h["name"] == "va-trixie")
    assert trixie["status"] == "passed" and len(trixie["engines"]) == 3
    again, _report, _files = _run(fleet, ansible_playbook, "archive2", *args)
    assert again.returncode == 0 and _recap(again.stdout, "va-trixie") == (0, 0, 0), again.stdout[-3000:]
