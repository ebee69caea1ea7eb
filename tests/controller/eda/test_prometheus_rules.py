# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The shipped alert rules (extensions/prometheus/gpufleet_gpu.rules.yml) under Prometheus' own promtool (Debian's
prometheus package): ``promtool check rules``, and ``promtool test rules`` on series as the node exporter serves
the GPU watch's textfile (its samples, with the scrape's instance and job labels): which alerts fire, when, with
which labels and annotations, and which do not."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

RULES = Path(__file__).resolve().parents[3] / "extensions" / "prometheus" / "gpufleet_gpu.rules.yml"
SCRAPE = {"instance": "node1:9100", "job": "node"}
BUS = "00000000:3B:00.0"
UUID = "GPU-5f0c1c3e-0000-4000-8000-000000000000"

# A textfile as the watch writes it (contract: one gpufleet_gpu_problem series per current problem).
PROBLEMS = [
    ("0", UUID, BUS, "gpu_xid_79", "RESTART_BM"),
    ("1", "GPU-1", "00000000:86:00.0", "gpu_row_remap_failed", "CONTACT_SUPPORT"),
    ("2", "GPU-2", "00000000:AF:00.0", "gpu_clocks_throttled", "NONE"),
    ("3", "GPU-3", "00000000:D8:00.0", "gpu_ecc_uncorrectable", "RESET_GPU"),
]
TEXTFILE = "\n".join(
    [
        "# HELP gpufleet_gpu_problem A current problem of the GPU (1), by discovery's code and remediation class.",
        "# TYPE gpufleet_gpu_problem gauge",
        *(
            f'gpufleet_gpu_problem{{gpu="{g}",uuid="{u}",pci_bus_id="{b}",code="{c}",action="{a}"}} 1'
            for g, u, b, c, a in PROBLEMS
        ),
        "# TYPE gpufleet_gpu_watch_last_run_timestamp_seconds gauge",
        "gpufleet_gpu_watch_last_run_timestamp_seconds 1764291600.000",
        "# TYPE gpufleet_gpu_watch_nvml_up gauge",
        "gpufleet_gpu_watch_nvml_up 1",
    ]
)
REMEDIATE = (
    "gpufleet.nvidia.remediate drains the host, resets the GPU or reboots the host, validates it and returns it to "
    "service, or leaves it drained with the reason."
)
SAMPLE = re.compile(r"^(?P<name>\w+)(?:\{(?P<labels>.*)\})? (?P<value>\S+)$")


def scraped(textfile):
    """``{series selector as promtool writes it: name, labels}`` for every sample, with the scrape's labels."""
    found = []
    for line in textfile.splitlines():
        match = SAMPLE.match(line)
        if not match or line.startswith("#"):
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match["labels"] or ""), **SCRAPE)
        found.append((match["name"], labels))
    return found


def series(name, labels, values):
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{name}{{{inner}}}", "values": values}


def expected(code):
    """The alert the rules raise for the textfile's problem ``code``: labels and annotations."""
    labels = problem_labels(code)
    summary = f"GPU {labels['gpu']} ({labels['pci_bus_id']}) on node1:9100: {code}"
    if labels["action"] == "CONTACT_SUPPORT":
        description = (
            f"NVIDIA's recommended action for {code} is to contact NVIDIA support (an RMA); drain the host "
            "(gpufleet.nvidia.drain) until the GPU is replaced."
        )
    else:
        description = f"NVIDIA's recommended action for {code} is {labels['action']}. {REMEDIATE}"
    return {
        "exp_labels": dict(labels, severity="critical"),
        "exp_annotations": {"summary": summary, "description": description},
    }


def problem_labels(code):
    return next(
        labels for name, labels in scraped(TEXTFILE) if name == "gpufleet_gpu_problem" and labels["code"] == code
    )


@pytest.fixture(scope="module")
def promtool():
    path = shutil.which("promtool")
    if not path:
        pytest.skip("no promtool (Debian's prometheus package; tests/tools/host_setup.sh installs it)")
    return path


def test_check_rules(promtool):
    result = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 4 rules found" in result.stdout


def _run_tests(promtool, tmp_path, tests):
    unit = tmp_path / "rules_test.yml"
    unit.write_text(yaml.safe_dump({"rule_files": [str(RULES)], "evaluation_interval": "1m", "tests": tests}))
    return subprocess.run([promtool, "test", "rules", str(unit)], capture_output=True, text=True, check=False)


def _problem_series(values_by_code):
    return [series("gpufleet_gpu_problem", problem_labels(code), v) for code, v in values_by_code.items()]


def test_fault_alerts(promtool, tmp_path):
    # Every problem of the textfile stays; the XID 79 one is remediated after 10 minutes: its series leaves the
    # textfile, and Prometheus marks it stale at the next scrape.
    problems = _problem_series(
        {
            "gpu_xid_79": "1x10 stale",
            "gpu_row_remap_failed": "1x20",
            "gpu_clocks_throttled": "1x20",
            "gpu_ecc_uncorrectable": "1x20",
        }
    )
    tests = [
        {
            "interval": "1m",
            "input_series": problems,
            "alert_rule_test": [
                {"eval_time": "0m", "alertname": "GpufleetGpuFault", "exp_alerts": []},  # pending for 1m
                {
                    "eval_time": "2m",
                    "alertname": "GpufleetGpuFault",
                    "exp_alerts": [expected("gpu_xid_79"), expected("gpu_ecc_uncorrectable")],
                },
                # Remediated: the XID 79 series is gone, its alert resolves; the ECC one still fires.
                {
                    "eval_time": "15m",
                    "alertname": "GpufleetGpuFault",
                    "exp_alerts": [expected("gpu_ecc_uncorrectable")],
                },
                {
                    "eval_time": "2m",
                    "alertname": "GpufleetGpuNeedsSupport",
                    "exp_alerts": [expected("gpu_row_remap_failed")],
                },
            ],
        }
    ]
    result = _run_tests(promtool, tmp_path, tests)
    assert result.returncode == 0, result.stdout + result.stderr


def test_watch_health_alerts(promtool, tmp_path):
    run_labels = dict(SCRAPE)
    stale = dict(SCRAPE, instance="node2:9100")
    tests = [
        {
            "interval": "1m",
            # node1's watch runs every minute (its timestamp follows the clock); node2's stopped at 0 s.
            "input_series": [
                series("gpufleet_gpu_watch_last_run_timestamp_seconds", run_labels, "0+60x20"),
                series("gpufleet_gpu_watch_last_run_timestamp_seconds", stale, "0x20"),
                series("gpufleet_gpu_watch_nvml_up", run_labels, "1x20"),
                series("gpufleet_gpu_watch_nvml_up", stale, "0x20"),
            ],
            "alert_rule_test": [
                # Over 300 s from 6 m, pending 5 minutes: firing from 11 m.
                {"eval_time": "9m", "alertname": "GpufleetGpuWatchStale", "exp_alerts": []},
                {
                    "eval_time": "11m",
                    "alertname": "GpufleetGpuWatchStale",
                    "exp_alerts": [
                        {
                            "exp_labels": dict(stale, severity="warning"),
                            "exp_annotations": {
                                "summary": "The GPU watch on node2:9100 last ran 11m 0s ago",
                                "description": "Its GPU metrics are old. Look at systemctl status "
                                "gpufleet-gpu-watch.timer gpufleet-gpu-watch.service and journalctl -u "
                                "gpufleet-gpu-watch.service on the host.",
                            },
                        }
                    ],
                },
                {"eval_time": "4m", "alertname": "GpufleetGpuWatchNvmlDown", "exp_alerts": []},
                {
                    "eval_time": "6m",
                    "alertname": "GpufleetGpuWatchNvmlDown",
                    "exp_alerts": [
                        {
                            "exp_labels": dict(stale, severity="warning"),
                            "exp_annotations": {
                                "summary": "NVML does not answer on node2:9100",
                                "description": "The GPU watch could not read the GPUs through NVML: run nvidia-smi "
                                "on the host, and site.yml's discovery (the fleet report) says why.",
                            },
                        }
                    ],
                },
            ],
        }
    ]
    result = _run_tests(promtool, tmp_path, tests)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_wrong_expectation_fails(promtool, tmp_path):
    """promtool's unit test says so when an alert the rules raise is not the one expected (the tests above can fail)."""
    tests = [
        {
            "interval": "1m",
            "input_series": _problem_series({"gpu_clocks_throttled": "1x5"}),
            "alert_rule_test": [
                {
                    "eval_time": "3m",
                    "alertname": "GpufleetGpuFault",
                    "exp_alerts": [{"exp_labels": dict(problem_labels("gpu_clocks_throttled"), severity="critical")}],
                }
            ],
        }
    ]
    result = _run_tests(promtool, tmp_path, tests)
    assert result.returncode != 0 and "GpufleetGpuFault" in result.stdout + result.stderr
