#!/usr/bin/env python
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The collection's security data (``plugins/plugin_utils/data/nvidia_security.json``) from a local copy of public
records. Run by hand; nothing here touches the network.

    tests/tools/security_data.py                 rewrite the data file from tests/tools/security_sources/
    tests/tools/security_data.py --check         exit 1 when the data file is not what the sources give
    tests/tools/security_data.py --sources DIR --out FILE

``DIR/cve/*.json``: CVE JSON 5 records of NVIDIA's driver and container toolkit, as the CVE List keeps them
(github.com/CVEProject/cvelistV5, ``cves/<year>/<NNxxx>/CVE-....json``); to refresh, copy new records there (the
whole record or the parts read below: ``cveMetadata``, ``containers.cna.affected``, ``.metrics``, ``.references``
and ``containers.adp[].affected``). ``DIR/lifecycle.json``: the driver branch lifecycle as NVIDIA's data center
driver pages print it (copied by hand, each entry naming its page).

Only what a record states is kept: a driver range is a branch and the first fixed version ("All driver versions
prior to 580.95.05" on a ``Linux(R580)`` platform, or an ADP ``lessThan`` on a ``:linux:`` CPE); a toolkit range is
the last affected version ("All versions up to and including 1.17.7"). A record that names no version range for
Linux (branches only, Windows only) is listed under ``skipped`` with the reason, never guessed. Records are grouped
into bulletins by the NVIDIA answer page they reference (``nvidia.custhelp.com/app/answers/detail/a_id/<id>``).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
SOURCES = REPO / "tests" / "tools" / "security_sources"
OUT = REPO / "plugins" / "plugin_utils" / "data" / "nvidia_security.json"
CVE_LIST = "https://github.com/CVEProject/cvelistV5"
BULLETIN = re.compile(r"^https://nvidia\.custhelp\.com/app/answers/detail/a_id/(\d+)$")
VERSION = r"(\d+(?:\.\d+)+)"
THROUGH = re.compile(r"up to and including v?" + VERSION)
PRIOR = re.compile(r"^All driver versions prior to " + VERSION + "$")
PLATFORM_BRANCH = re.compile(r"^Linux\(R(\d+)\)$")
CDI_NOTE = re.compile(r"\(([^()]*CDI[^()]*)\)")
SEVERITY_ORDER = ("NONE", "LOW", "MEDIUM", "HIGH", "CRITICAL")


def _record_path(cve: str) -> str:
    """Where the CVE List keeps a record: ``cves/2025/23xxx/CVE-2025-23266.json``."""
    year, number = cve.split("-")[1:]
    return f"cves/{year}/{number[:-3]}xxx/{cve}.json"


def _toolkit_ranges(cna_affected: list[dict[str, Any]]) -> tuple[list[dict], list[dict]]:
    toolkit, operator = [], []
    for product in cna_affected:
        name = product.get("product", "")
        for version in product.get("versions", []):
            text = version.get("version", "")
            match = THROUGH.search(text)
            if version.get("status") != "affected" or not match:
                continue
            is_operator = "GPU Operator" in text or name == "GPU Operator"
            if not is_operator and "Container Toolkit" not in name:
                continue
            entry = {"last_affected": match.group(1)}
            note = CDI_NOTE.search(text)
            if note:
                entry["note"] = note.group(1)
            (operator if is_operator else toolkit).append(entry)
    return toolkit, operator


def _driver_ranges(record: dict[str, Any]) -> list[dict[str, str]]:
    """``[{branch, fixed}]`` for the Linux driver, from the CNA's per-branch platforms or the ADP's CPE ranges."""
    found: dict[str, str] = {}
    containers = record["containers"]
    for product in containers["cna"].get("affected", []):
        if product.get("product") == "Guest driver":  # vGPU guests: another product line
            continue
        for platform in product.get("platforms", []):
            branch = PLATFORM_BRANCH.match(platform)
            for version in product.get("versions", []) if branch else []:
                prior = PRIOR.match(version.get("version", ""))
                if prior and version.get("status") == "affected":
                    found[branch.group(1)] = prior.group(1)
    for adp in containers.get("adp", []):
        for product in adp.get("affected", []):
            if product.get("product") != "gpu_display_driver" or not any(":linux:" in c for c in product["cpes"]):
                continue
            for version in product.get("versions", []):
                if version.get("status") == "affected" and version.get("lessThan"):
                    found.setdefault(str(version["version"]), version["lessThan"])
    for branch, fixed in found.items():
        if fixed.split(".")[0] != branch:
            raise ValueError(f"{record['cveMetadata']['cveId']}: fixed version {fixed} is not in branch {branch}")
    return [{"branch": b, "fixed": found[b]} for b in sorted(found, key=int)]


def _cve(record: dict[str, Any]) -> dict[str, Any]:
    meta, cna = record["cveMetadata"], record["containers"]["cna"]
    cvss = next((m["cvssV3_1"] for m in cna.get("metrics", []) if "cvssV3_1" in m), {})
    return {
        "id": meta["cveId"],
        "published": meta["datePublished"][:10],
        "cvss": cvss.get("baseScore"),
        "severity": cvss.get("baseSeverity"),
        "vector": cvss.get("vectorString"),
        "record": f"{CVE_LIST}/blob/main/{_record_path(meta['cveId'])}",
        "record_updated": meta.get("dateUpdated", "")[:10],
    }


def build(sources: Path) -> dict[str, Any]:
    bulletins: dict[str, dict[str, Any]] = {}
    skipped = []
    for path in sorted((sources / "cve").glob("CVE-*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        cve = _cve(record)
        urls = [r["url"] for r in record["containers"]["cna"].get("references", [])]
        ids = [m.group(1) for m in (BULLETIN.match(u) for u in urls) if m]
        toolkit, operator = _toolkit_ranges(record["containers"]["cna"].get("affected", []))
        driver = _driver_ranges(record)
        if not ids or not (toolkit or driver):
            reason = "no NVIDIA bulletin address" if not ids else "the record names no Linux version range"
            skipped.append({"cve": cve["id"], "record": cve["record"], "reason": reason})
            continue
        product = "container_toolkit" if toolkit else "driver"
        bulletin = bulletins.setdefault(
            ids[0],
            {
                "id": ids[0],
                "address": f"https://nvidia.custhelp.com/app/answers/detail/a_id/{ids[0]}",
                "product": product,
                "date": cve["published"],
                "cves": [],
            },
        )
        if bulletin["product"] != product:
            raise ValueError(f"{cve['id']}: bulletin {ids[0]} mixes products")
        bulletin["date"] = min(bulletin["date"], cve["published"])
        cve["affected"] = driver if product == "driver" else toolkit
        if operator:
            cve["gpu_operator"] = operator
        bulletin["cves"].append(cve)
    for bulletin in bulletins.values():
        scores = [c for c in bulletin["cves"] if c["cvss"] is not None]
        top = max(scores, key=lambda c: c["cvss"]) if scores else {"cvss": None, "severity": None}
        bulletin["cvss"], bulletin["severity"] = top["cvss"], top["severity"]
    lifecycle = json.loads((sources / "lifecycle.json").read_text(encoding="utf-8"))
    return {
        "schema": 1,
        "about": (
            "NVIDIA's security bulletins for the Linux GPU driver and the container toolkit, and the driver branch "
            "lifecycle, as the public records below state them. Written by tests/tools/security_data.py from "
            "tests/tools/security_sources/; do not edit by hand."
        ),
        "provenance": {
            "cve_list": CVE_LIST,
            "records": sorted(c["record"] for b in bulletins.values() for c in b["cves"]),
            "lifecycle": lifecycle["sources"],
            "read": lifecycle["read"],
        },
        "bulletins": sorted(bulletins.values(), key=lambda b: (b["date"], b["id"])),
        "skipped": skipped,
        "lifecycle": {k: lifecycle[k] for k in ("branches", "supported_listed_by", "last_branch")},
    }


def render(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sources", type=Path, default=SOURCES)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    text = render(build(args.sources))
    if args.check:
        current = args.out.read_text(encoding="utf-8") if args.out.exists() else ""
        if current != text:
            print(f"{args.out} is stale: run tests/tools/security_data.py", file=sys.stderr)
            return 1
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
