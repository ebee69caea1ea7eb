# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""plugin_utils/exposure.py and its data: NVIDIA's bulletins and branch lifecycle joined with a host's versions.

The expected values below were checked by hand against the CVE records kept in tests/tools/security_sources/cve/
(copies of github.com/CVEProject/cvelistV5, read 2026-11-27) and NVIDIA's driver pages named in lifecycle.json.
"""

from __future__ import annotations

import datetime
import importlib.util
import json
from pathlib import Path

import pytest

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils import exposure

REPO = Path(__file__).resolve().parents[4]
SCRIPT = REPO / "tests" / "tools" / "security_data.py"


def _script():
    spec = importlib.util.spec_from_file_location("security_data", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_shipped_data_is_what_the_script_makes_of_the_kept_records():
    """tests/tools/security_data.py --check: the data file is the script's output from the records kept in the repo."""
    script = _script()
    assert exposure.DATA.read_text(encoding="utf-8") == script.render(script.build(script.SOURCES))


def test_the_script_keeps_only_what_a_record_states(tmp_path):
    """A record naming branches without versions (CVE-2024-0149, CVE-2024-0150, CVE-2024-53869, CVE-2025-23244,
    CVE-2025-23279) is skipped with the reason, never guessed, and so is one whose bulletin address is malformed
    (CVE-2025-23277 references "https://https://nvidia.custhelp.com/..."); vGPU guest driver and Virtual GPU Manager
    ranges (CVE-2025-23280's and CVE-2025-23282's rows), Windows platforms (CVE-2025-23345's "Windows(R580)") and the
    Windows CPE ranges are not the Linux driver's."""
    data = json.loads(exposure.DATA.read_text(encoding="utf-8"))
    skipped = {s["cve"]: s["reason"] for s in data["skipped"]}
    no_range = "the record names no Linux version range"
    assert skipped == {
        "CVE-2024-0149": no_range,
        "CVE-2024-0150": no_range,
        "CVE-2024-53869": no_range,
        "CVE-2025-23244": no_range,
        "CVE-2025-23277": "no NVIDIA bulletin address",
        "CVE-2025-23279": no_range,
    }
    cve = {c["id"]: c for b in data["bulletins"] for c in b["cves"]}
    october = [
        {"branch": "535", "fixed": "535.274.02"},
        {"branch": "570", "fixed": "570.195.03"},
        {"branch": "580", "fixed": "580.95.05"},
    ]
    for cve_id in ("CVE-2025-23280", "CVE-2025-23282", "CVE-2025-23300", "CVE-2025-23330", "CVE-2025-23332"):
        assert cve[cve_id]["affected"] == october, cve_id
    # Windows(R580) "prior to 581.42" is not a Linux range; the Linux(R5xx) rows are
    assert cve["CVE-2025-23345"]["affected"] == october
    assert (cve["CVE-2025-23345"]["cvss"], cve["CVE-2025-23332"]["cvss"]) == (4.4, 5)
    assert cve["CVE-2024-0126"]["affected"] == [
        {"branch": "535", "fixed": "535.216.01"},
        {"branch": "550", "fixed": "550.127.05"},
        {"branch": "565", "fixed": "565.57.01"},
    ]
    assert cve["CVE-2024-0132"]["affected"] == [{"last_affected": "1.16.1"}]
    assert cve["CVE-2024-0132"]["gpu_operator"] == [{"last_affected": "24.6.1"}]
    assert cve["CVE-2025-23266"]["cvss"] == 9 and cve["CVE-2025-23266"]["severity"] == "CRITICAL"
    # --check fails on a stale file and passes on a fresh one
    out = tmp_path / "data.json"
    script = _script()
    assert script.main(["--out", str(out)]) == 0 and script.main(["--out", str(out), "--check"]) == 0
    out.write_text(out.read_text(encoding="utf-8").replace("535.274.02", "535.274.01"), encoding="utf-8")
    assert script.main(["--out", str(out), "--check"]) == 1


def test_the_data_is_consistent():
    """Every range is in its branch, every fixed version is above what it replaces, dates are ordered, every
    bulletin names its address and the records it was read from."""
    data = exposure.data()
    assert data["provenance"]["read"] == "2026-11-27" and data["provenance"]["records"]
    dates = [b["date"] for b in data["bulletins"]]
    assert dates == sorted(dates)
    for bulletin in data["bulletins"]:
        assert bulletin["address"].endswith(f"a_id/{bulletin['id']}")
        assert bulletin["product"] in ("driver", "container_toolkit") and bulletin["cves"]
        for cve in bulletin["cves"]:
            assert cve["record"].startswith("https://github.com/CVEProject/cvelistV5/blob/main/cves/")
            assert cve["published"] >= bulletin["date"] and cve["record_updated"] >= cve["published"]
            assert 0 < cve["cvss"] <= 10 and cve["severity"] in ("LOW", "MEDIUM", "HIGH", "CRITICAL")
            for rng in cve["affected"]:
                if bulletin["product"] == "driver":
                    assert rng["fixed"].split(".")[0] == rng["branch"]
                    assert exposure.version_key(rng["fixed"]) > (int(rng["branch"]),)
                else:
                    assert exposure.version_key(rng["last_affected"]) >= (1, 0)
    life = data["lifecycle"]
    for row in life["branches"]:
        assert row["source"] in data["provenance"]["lifecycle"]
        datetime.date.fromisoformat(row["end_of_life"] + "-01")
    assert {r["architecture"]: r["branch"] for r in life["last_branch"]} == {
        "Kepler": "470",
        "Maxwell": "580",
        "Pascal": "580",
        "Volta": "580",
    }


# bulletin 5703 (October 2025): the records that give Linux(R535/R570/R580) ranges
OCTOBER_2025 = [
    "CVE-2025-23280",
    "CVE-2025-23282",
    "CVE-2025-23300",
    "CVE-2025-23330",
    "CVE-2025-23332",
    "CVE-2025-23345",
]
# bulletin 5747 (January 2026): R535 < 535.288.01, R570 < 570.211.01, R580 < 580.126.09, R590 < 590.48.01
JANUARY_2026 = ["CVE-2025-33219", "CVE-2025-33220"]
# bulletin 5821 (May 2026): R535 < 535.309.01, R580 < 580.159.03, R595 < 595.71.05; CVE-2026-24198 names no R535 row
# (cves/2026/24xxx/CVE-2026-24198.json) and CVE-2026-24193 no R595 row
MAY_2026 = [
    "CVE-2025-33221",
    "CVE-2026-24182",
    "CVE-2026-24187",
    "CVE-2026-24190",
    "CVE-2026-24192",
    "CVE-2026-24193",
    "CVE-2026-24194",
    "CVE-2026-24196",
    "CVE-2026-24197",
    "CVE-2026-24198",
    "CVE-2026-24199",
]
MAY_2026_R535 = [c for c in MAY_2026 if c != "CVE-2026-24198"]
MAY_2026_R595 = [c for c in MAY_2026 if c != "CVE-2026-24193"]


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        # the simulated fleet's drivers: 535.261.03 is below the R535 fixes of bulletins 5703 (535.274.02 in each of its
        # six records, e.g. cves/2025/23xxx/CVE-2025-23282.json), 5747 (535.288.01) and 5821 (535.309.01), and above
        # CVE-2024-0126's
        (
            "535.261.03",
            [
                ("5703", OCTOBER_2025, "535.274.02"),
                ("5747", JANUARY_2026, "535.288.01"),
                ("5821", MAY_2026_R535, "535.309.01"),
            ],
        ),
        # R550 is in CVE-2024-0126 (fixed 550.127.05) and in none of the later records (R535, R570, R580, R590, R595)
        ("550.163.01", []),
        ("550.127.04", [("5586", ["CVE-2024-0126"], "550.127.05")]),
        ("550.127.05", []),
        (
            "535.183.01",
            [
                ("5586", ["CVE-2024-0126"], "535.216.01"),
                ("5703", OCTOBER_2025, "535.274.02"),
                ("5747", JANUARY_2026, "535.288.01"),
                ("5821", MAY_2026_R535, "535.309.01"),
            ],
        ),
        ("535.274.02", [("5747", JANUARY_2026, "535.288.01"), ("5821", MAY_2026_R535, "535.309.01")]),
        ("535.309.01", []),
        # R570 is in 5703 and 5747, not in 5821
        ("570.172.08", [("5703", OCTOBER_2025, "570.195.03"), ("5747", JANUARY_2026, "570.211.01")]),
        (
            "580.82.07",
            [
                ("5703", OCTOBER_2025, "580.95.05"),
                ("5747", JANUARY_2026, "580.126.09"),
                ("5821", MAY_2026, "580.159.03"),
            ],
        ),
        ("580.95.05", [("5747", JANUARY_2026, "580.126.09"), ("5821", MAY_2026, "580.159.03")]),
        ("580.159.03", []),
        ("590.44.01", [("5747", JANUARY_2026, "590.48.01")]),
        ("595.58.03", [("5821", MAY_2026_R595, "595.71.05")]),
        ("595.71.05", []),
        ("575.57.08", []),
        ("not-a-version", []),
    ],
)
def test_driver_findings(version, expected):
    got = [(f["bulletin"], f["cves"], f["fixed"]) for f in exposure.driver_findings(version)]
    assert got == expected


JANUARY_2025_TOOLKIT = ["CVE-2024-0135", "CVE-2024-0136", "CVE-2024-0137"]


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        (
            "1.16.1-1",
            [
                ("5582", ["CVE-2024-0132", "CVE-2024-0133"]),
                ("5585", ["CVE-2024-0134"]),
                ("5599", JANUARY_2025_TOOLKIT),
                ("5616", ["CVE-2025-23359"]),
                ("5659", ["CVE-2025-23266", "CVE-2025-23267"]),
            ],
        ),
        # CVE-2024-0134: "All versions up to and including v1.16.2" (cves/2024/0xxx/CVE-2024-0134.json)
        (
            "1.16.2-1",
            [
                ("5585", ["CVE-2024-0134"]),
                ("5599", JANUARY_2025_TOOLKIT),
                ("5616", ["CVE-2025-23359"]),
                ("5659", ["CVE-2025-23266", "CVE-2025-23267"]),
            ],
        ),
        # CVE-2024-0135..0137: "All versions up to and including v1.17.0"
        (
            "1.17.0",
            [
                ("5599", JANUARY_2025_TOOLKIT),
                ("5616", ["CVE-2025-23359"]),
                ("5659", ["CVE-2025-23266", "CVE-2025-23267"]),
            ],
        ),
        ("1.17.3", [("5616", ["CVE-2025-23359"]), ("5659", ["CVE-2025-23266", "CVE-2025-23267"])]),
        ("1.17.4-1", [("5659", ["CVE-2025-23266", "CVE-2025-23267"])]),
        ("1.17.7", [("5659", ["CVE-2025-23266", "CVE-2025-23267"])]),
        ("1.17.8-1", []),
        ("1.18.0", []),
    ],
)
def test_toolkit_findings(version, expected):
    got = exposure.toolkit_findings(version)
    assert [(f["bulletin"], f["cves"]) for f in got] == expected
    for finding in got:
        last = {"5582": "1.16.1", "5585": "1.16.2", "5599": "1.17.0", "5616": "1.17.3", "5659": "1.17.7"}[
            finding["bulletin"]
        ]
        assert finding["fixed"] == f"later than {last}"


@pytest.mark.parametrize(
    ("version", "archs", "today", "status", "beyond"),
    [
        ("535.261.03", [], "2026-06-30", "supported", []),  # R535's end of life: June 2026
        ("535.261.03", [], "2026-07-01", "end_of_life", []),
        ("550.163.01", [], "2026-11-27", "end_of_life", []),  # older than every listed branch
        ("570.195.03", [], "2026-11-27", "end_of_life", []),
        ("580.95.05", ["Volta"], "2026-11-27", "supported", []),
        ("590.48.01", ["Pascal", "Hopper"], "2026-11-27", "unlisted", ["Pascal"]),  # a new feature branch
        ("470.239.06", ["Volta"], "2026-11-27", "end_of_life", []),
    ],
)
def test_branch_status(version, archs, today, status, beyond):
    got = exposure.branch_status(version, archs, today)
    assert (got["status"], got["beyond_last"]) == (status, beyond)


def _entry(driver="535.261.03", toolkit=None, archs=("Ampere",)):
    return {
        "name": "gpu-1",
        "driver": {"installed_version": driver, "loaded_version": driver},
        "gpus": [{"architecture": a} for a in archs],
        "toolkit": toolkit,
    }


def test_a_host_is_judged_on_what_it_runs():
    """The loaded driver; NVIDIA's toolkit by its version; this collection's own toolkit is not NVIDIA's, even with
    NVIDIA's package left installed."""
    nvidia = exposure.host_exposure(_entry(toolkit={"provider": "nvidia", "version": "1.17.3-1"}), {}, "2026-11-27")
    codes = [p["code"] for p in nvidia["problems"]]
    # one problem per bulletin: 5703, 5747 and 5821 each name R535 below 535.261.03's successor
    assert codes == ["driver_security_bulletin"] * 3 + ["driver_branch_end_of_life"] + ["toolkit_security_bulletin"] * 2
    # each fix names its bulletin's own fixed version, and the one upgrade that clears all three (535.309.01)
    fixes = [p["fix"] for p in nvidia["problems"][:3]]
    assert all("driver_version=535.309.01" in f for f in fixes), fixes
    assert "535.274.02 fixes this bulletin" in fixes[0] and "bulletin 5703" in nvidia["problems"][0]["message"]
    assert "535.288.01 fixes this bulletin" in fixes[1] and "bulletin 5747" in nvidia["problems"][1]["message"]
    assert "fixes this bulletin" not in fixes[2] and "bulletin 5821" in nvidia["problems"][2]["message"]
    assert "driver_branch=580" in nvidia["problems"][3]["fix"]
    assert "CVE-2025-23359" in nvidia["problems"][4]["message"] and "later than 1.17.3" in nvidia["problems"][4]["fix"]
    assert "CVE-2025-23266, CVE-2025-23267" in nvidia["problems"][5]["message"]
    assert "later than 1.17.7" in nvidia["problems"][5]["fix"]

    native = exposure.host_exposure(
        _entry(toolkit={"provider": "native", "version": None}), {"nvidia-container-toolkit": "1.17.3-1"}, "2026-11-27"
    )
    assert [p["code"] for p in native["problems"]] == ["driver_security_bulletin"] * 3 + ["driver_branch_end_of_life"]
    assert native["toolkit"]["provider"] == "native" and native["toolkit_findings"] == []
    assert "NVIDIA's toolkit bulletins do not apply" in native["toolkit"]["judged"]
    assert "1.17.3-1 is installed but not in the runtime path" in native["toolkit"]["judged"]

    # gpu_facts' own discovery gives no version for the nvidia provider: the package's
    found = exposure.host_exposure(
        _entry(toolkit={"provider": "nvidia", "version": None}), {"nvidia-container-toolkit": "1.16.1-1"}
    )
    assert [f["bulletin"] for f in found["toolkit_findings"]] == ["5582", "5585", "5599", "5616", "5659"]


def test_a_volta_host_past_its_last_branch():
    """Branch 470 on Volta: past end of life, and the fix is 580, the last branch for Volta; 590 on Volta: past it."""
    old = exposure.host_exposure(_entry("470.239.06", archs=["Volta"]), {}, "2026-11-27")
    assert [p["code"] for p in old["problems"]] == ["driver_branch_end_of_life"]
    assert "for this host's Volta GPU" in old["problems"][0]["message"]
    assert "branch 580 (the last branch for this host's Volta GPU)" in old["problems"][0]["fix"]
    new = exposure.host_exposure(_entry("590.48.01", archs=["Volta"]), {}, "2026-11-27")
    assert [p["code"] for p in new["problems"]] == ["driver_branch_past_architecture"]
    assert "the last branch for them is 580" in new["problems"][0]["message"]


def test_fleet_exposure_and_the_page_filter_words():
    entries = []
    for name, driver, toolkit in (
        ("a", "535.261.03", {"provider": "native"}),
        ("b", "550.163.01", {"provider": "nvidia", "version": "1.17.8-1"}),
        ("c", "535.183.01", {"provider": "nvidia", "version": "1.17.3-1"}),
    ):
        entry = dict(_entry(driver, toolkit), name=name)
        entry["exposure"] = exposure.host_exposure(entry, {}, "2026-11-27")
        entries.append(entry)
    fleet = exposure.fleet_exposure(entries)
    rows = {b["bulletin"]: [(h["host"], h["version"], h["fixed"]) for h in b["hosts"]] for b in fleet["bulletins"]}
    assert rows == {
        "5821": [("a", "535.261.03", "535.309.01"), ("c", "535.183.01", "535.309.01")],
        "5747": [("a", "535.261.03", "535.288.01"), ("c", "535.183.01", "535.288.01")],
        "5703": [("a", "535.261.03", "535.274.02"), ("c", "535.183.01", "535.274.02")],
        "5659": [("c", "1.17.3-1", "later than 1.17.7")],
        "5616": [("c", "1.17.3-1", "later than 1.17.3")],
        "5586": [("c", "535.183.01", "535.216.01")],
    }
    assert [b["bulletin"] for b in fleet["bulletins"]] == [
        "5821",
        "5747",
        "5703",
        "5659",
        "5616",
        "5586",
    ]  # newest first
    assert [(b["branch"], b["status"], b["hosts"]) for b in fleet["branches"]] == [
        ("535", "end_of_life", ["a", "c"]),
        ("550", "end_of_life", ["b"]),
    ]
    assert exposure.exposure_tags(entries[0]) == (
        "bulletin-5703 bulletin-5747 bulletin-5821 branch-end_of_life toolkit-native"
    )
    assert exposure.exposure_tags({"name": "x"}) == ""


@pytest.mark.parametrize(
    ("version", "policy", "refuse", "warn"),
    [
        ("535.261.03", "warn", False, True),
        ("535.261.03", "refuse", True, False),
        ("535.261.03", "ignore", False, False),
        ("535.274.02", "refuse", True, False),  # bulletin 5747: R535 fixed in 535.288.01
        ("535.309.01", "refuse", False, False),
        ("", "refuse", False, False),  # the repository's newest of the branch: nothing to check
    ],
)
def test_install_check(version, policy, refuse, warn):
    got = exposure.install_check(version, policy)
    assert (got["refuse"], got["warn"]) == (refuse, warn)
    if refuse:
        cve, fixed = {"535.261.03": ("CVE-2025-23280", "535.274.02"), "535.274.02": ("CVE-2025-33219", "535.288.01")}[
            version
        ]
        assert cve in got["message"] and fixed in got["message"]
        assert "driver_security_policy=warn" in got["message"]


def test_install_check_rejects_an_unknown_policy():
    with pytest.raises(exposure.ExposureError, match="warn, refuse, ignore"):
        exposure.install_check("535.261.03", "maybe")
