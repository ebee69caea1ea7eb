# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Which hosts are exposed: NVIDIA's security bulletins and the driver branch lifecycle, joined with a host's facts.

Controller only. The data (``data/nvidia_security.json``, written by ``tests/tools/security_data.py`` from the CVE
List's records and NVIDIA's driver pages, its provenance inside) ships with the collection and never goes to a host.

* ``driver_findings(version)``: the bulletins whose record names this driver version's branch with a fixed version
  above it (a branch a record does not list is unaffected by it, as the record's ``defaultStatus`` says).
* ``toolkit_findings(version)``: the bulletins whose toolkit range (last affected version) includes NVIDIA's
  toolkit version.
* ``branch_status(version, architectures, today)``: the branch's lifecycle (NVIDIA's designation and end of life; a
  branch older than the oldest NVIDIA lists as supported is past end of life) and the last branch for each GPU
  architecture that has one (Kepler 470; Maxwell, Pascal, Volta 580).
* ``host_exposure(entry, nvidia_packages, today)``: all three for one host of the fleet report
  (``report.host_entry``), with the problems in discovery's ``{code, message, fix}`` shape. A host whose toolkit is
  this collection's own (provider ``native``) runs none of NVIDIA's toolkit programs: it is judged on that, never on
  an NVIDIA package left on it.
* ``fleet_exposure(entries)``: hosts per bulletin and per branch status, for the report's exposure section.
* ``install_check(version, policy)``: what the driver role does before installing ``version``
  (``driver_security_policy``: warn, refuse or ignore).

Sources of the rules, read 2026-11-27 (the data file names each record and page):

* A CVE JSON 5 record's ``affected`` entries carry ``defaultStatus: unaffected``: a branch or product a record does
  not list is not affected by it (CVE Record Format 5, github.com/CVEProject/cve-schema, ``defaultStatus``).
* NVIDIA's data center driver table (docs.nvidia.com/datacenter/tesla/drivers/620/supported-drivers-and-cuda-
  toolkit-versions.html) lists "only Long Term Support and Production branches" with their end of life; "New
  Feature Branches are short-lived and do not have an end-of-life date". So a branch older than every branch still
  listed is past end of life, and one newer, not listed, is a new feature branch (``unlisted``).
* The last branch per architecture: NVIDIA's Unix graphics feature deprecation schedule
  (forums.developer.nvidia.com/t/unix-graphics-feature-deprecation-schedule/60588: "The release 580 series will be
  the last to support GPUs based on the Maxwell, Pascal, and Volta architectures") and its current releases post
  (forums.developer.nvidia.com/t/current-graphics-driver-releases/28500: 470 is the legacy branch for Kepler).
"""

from __future__ import annotations

import calendar
import datetime
import json
import re
from collections.abc import Iterable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent / "data" / "nvidia_security.json"
POLICIES = ("warn", "refuse", "ignore")
_NUMBERS = re.compile(r"^(\d+(?:\.\d+)*)")


class ExposureError(ValueError):
    """The input is not what the join needs (the filter turns it into an AnsibleFilterError)."""


@lru_cache(maxsize=1)
def data() -> dict[str, Any]:
    """The shipped data file, parsed once."""
    return json.loads(DATA.read_text(encoding="utf-8"))


def version_key(version: Any) -> tuple[int, ...] | None:
    """``535.261.03`` -> (535, 261, 3); a package version ``1.17.3-1`` or ``1.17.8~rc.1`` -> its numbers
    (1, 17, 3); None when it does not start with a number."""
    match = _NUMBERS.match(str(version or "").strip())
    return tuple(int(p) for p in match.group(1).split(".")) if match else None


def branch_of(version: Any) -> str | None:
    key = version_key(version)
    return str(key[0]) if key else None


def _today(today: Any) -> datetime.date:
    if isinstance(today, datetime.date):
        return today
    match = re.match(r"^(\d{4})-(\d{2})-(\d{2})", str(today or ""))
    if match:
        return datetime.date(*(int(g) for g in match.groups()))
    return datetime.datetime.now(datetime.timezone.utc).date()


def _cve_brief(cve: Mapping[str, Any]) -> dict[str, Any]:
    return {"id": cve["id"], "cvss": cve["cvss"], "severity": cve["severity"], "record": cve["record"]}


def driver_findings(version: Any, source: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """``[{bulletin, address, date, product, cves, fixed, severity, cvss}]``: the driver bulletins affecting
    ``version``; ``fixed`` the lowest version of its branch that none of the bulletin's CVEs affects."""
    key, branch = version_key(version), branch_of(version)
    if key is None:
        return []
    out = []
    for bulletin in (source or data())["bulletins"]:
        if bulletin["product"] != "driver":
            continue
        cves, fixed = [], None
        for cve in bulletin["cves"]:
            for rng in cve["affected"]:
                if rng["branch"] == branch and key < version_key(rng["fixed"]):
                    cves.append(_cve_brief(cve))
                    fixed = max(fixed or rng["fixed"], rng["fixed"], key=version_key)
        if cves:
            out.append(_finding(bulletin, cves, fixed))
    return out


def toolkit_findings(version: Any, source: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """The container toolkit bulletins whose range includes NVIDIA's toolkit ``version``; ``fixed`` says which
    release is the first unaffected one as the record states it (``later than 1.17.7``)."""
    key = version_key(version)
    if key is None:
        return []
    out = []
    for bulletin in (source or data())["bulletins"]:
        if bulletin["product"] != "container_toolkit":
            continue
        hit = [
            (cve, rng)
            for cve in bulletin["cves"]
            for rng in cve["affected"]
            if key <= version_key(rng["last_affected"])
        ]
        if hit:
            ranges = [rng for cve, rng in hit]
            last = max((rng["last_affected"] for rng in ranges), key=version_key)
            notes = sorted({rng["note"] for rng in ranges if rng.get("note")})
            finding = _finding(bulletin, [_cve_brief(cve) for cve, rng in hit], f"later than {last}")
            finding["notes"] = notes
            out.append(finding)
    return out


def _finding(bulletin: Mapping[str, Any], cves: list[dict[str, Any]], fixed: str | None) -> dict[str, Any]:
    ids = list(dict.fromkeys(c["id"] for c in cves))
    worst = max(cves, key=lambda c: c["cvss"] or 0)
    return {
        "bulletin": bulletin["id"],
        "address": bulletin["address"],
        "date": bulletin["date"],
        "product": bulletin["product"],
        "cves": ids,
        "fixed": fixed,
        "severity": worst["severity"],
        "cvss": worst["cvss"],
    }


def _end_of_month(text: str) -> datetime.date:
    year, month = (int(p) for p in text.split("-")[:2])
    return datetime.date(year, month, calendar.monthrange(year, month)[1])


def branch_status(
    version: Any, architectures: Iterable[Any] = (), today: Any = None, source: Mapping[str, Any] | None = None
) -> dict[str, Any] | None:
    """``{branch, status, designation, end_of_life, supported, last_branch, beyond_last}`` for the branch of
    ``version``; None without a version. ``status``: ``supported``, ``end_of_life`` (its end of life has passed, or
    it is older than every branch NVIDIA still supports) or ``unlisted`` (newer than that, not in the table: a new
    feature branch, which NVIDIA gives no end of life). ``last_branch``: ``{architecture: branch}`` for the host's
    GPU architectures that have a last branch; ``beyond_last``: those whose last branch is below this one."""
    branch = branch_of(version)
    if branch is None:
        return None
    life = (source or data())["lifecycle"]
    day = _today(today)
    table = {b["branch"]: b for b in life["branches"]}
    listed = sorted((int(b) for b in table), key=int)
    supported = [b for b in listed if _end_of_month(table[str(b)]["end_of_life"]) >= day]
    row = table.get(branch)
    if row is not None:
        status = "supported" if _end_of_month(row["end_of_life"]) >= day else "end_of_life"
    else:
        status = "end_of_life" if supported and int(branch) < supported[0] else "unlisted"
    archs = {str(a) for a in architectures if a}
    last = {r["architecture"]: r["branch"] for r in life["last_branch"] if r["architecture"] in archs}
    return {
        "branch": branch,
        "status": status,
        "designation": row["designation"] if row else None,
        "end_of_life": row["end_of_life"] if row else None,
        "supported": [str(b) for b in supported],
        "last_branch": last,
        "beyond_last": sorted(a for a, b in last.items() if int(branch) > int(b)),
    }


def _running_driver(entry: Mapping[str, Any]) -> str | None:
    driver = entry.get("driver") or {}
    return driver.get("loaded_version") or driver.get("installed_version") or None


def _toolkit_judged(entry: Mapping[str, Any], nvidia_packages: Mapping[str, Any]) -> dict[str, Any] | None:
    """What the host's toolkit is judged on: ``{provider, version, judged}``."""
    toolkit = entry.get("toolkit") or {}
    provider = toolkit.get("provider")
    package = nvidia_packages.get("nvidia-container-toolkit")
    if provider == "native":
        left = (
            f"; NVIDIA's nvidia-container-toolkit {package} is installed but not in the runtime path" if package else ""
        )
        return {
            "provider": "native",
            "version": None,
            "judged": "this collection's own runtime shim and CDI hook, not NVIDIA's toolkit: NVIDIA's toolkit "
            "bulletins do not apply" + left,
        }
    version = toolkit.get("version") if version_key(toolkit.get("version")) else None
    version = version or package
    if provider is None and not version:
        return None
    return {
        "provider": provider or "nvidia",
        "version": version,
        "judged": f"NVIDIA's container toolkit {version}" if version else "NVIDIA's toolkit, version unknown",
    }


def problem(code: str, message: str, fix: str) -> dict[str, str]:
    """One problem in discovery's shape; tests/tools/problem_docs.py reads these calls for the troubleshooting guide."""
    return {"code": code, "message": message, "fix": fix}


def _driver_problem(version: str, finding: Mapping[str, Any], clears: str | None = None) -> dict[str, str]:
    """``clears``: the lowest version of the branch that every bulletin affecting ``version`` names as fixed (the
    upgrade to make once, rather than one per bulletin); the fix names it when it is above this bulletin's own."""
    cves, fixed, branch = ", ".join(finding["cves"]), finding["fixed"], branch_of(version)
    target = clears if clears and fixed and version_key(clears) > version_key(fixed) else fixed
    also = f" ({fixed} fixes this bulletin, {target} every bulletin affecting {version})" if target != fixed else ""
    return problem(
        "driver_security_bulletin",
        f"driver {version} is affected by {cves} ({finding['severity']}, NVIDIA bulletin {finding['bulletin']} of "
        f"{finding['date']}: {finding['address']})",
        f"upgrade the driver to {target} or later in branch {branch}{also}: ansible-playbook -i inventory "
        f"gpufleet.nvidia.driver_upgrade -e driver_version={target} --limit <host>",
    )


def _clears(findings: Iterable[Mapping[str, Any]]) -> str | None:
    """The highest of the findings' fixed versions: the one upgrade that fixes them all (one branch's findings)."""
    fixed = [f["fixed"] for f in findings if version_key(f.get("fixed"))]
    return max(fixed, key=version_key) if fixed else None


def _toolkit_problem(version: str, finding: Mapping[str, Any]) -> dict[str, str]:
    cves, fixed = ", ".join(finding["cves"]), finding["fixed"]
    notes = f" ({'; '.join(finding['notes'])})" if finding.get("notes") else ""
    return problem(
        "toolkit_security_bulletin",
        f"NVIDIA container toolkit {version} is affected by {cves} ({finding['severity']}{notes}; NVIDIA bulletin "
        f"{finding['bulletin']} of {finding['date']}: {finding['address']})",
        f"upgrade nvidia-container-toolkit to a release {fixed} (the toolkit role, toolkit_provider=nvidia), or "
        "move the host to this collection's own toolkit (toolkit_provider=native), which runs no NVIDIA program",
    )


def _branch_problems(version: str, status: Mapping[str, Any]) -> list[dict[str, str]]:
    out = []
    last, branch = status["last_branch"], status["branch"]
    ceiling = min((int(b) for b in last.values()), default=None)
    choices = [b for b in status["supported"] if ceiling is None or int(b) <= ceiling]
    if status["status"] == "end_of_life":
        why = (
            f"its end of life was {status['end_of_life']}"
            if status["end_of_life"]
            else f"NVIDIA lists only {', '.join(status['supported'])} as supported"
        )
        gpus = f" for this host's {'/'.join(sorted(last))} GPU" if last else ""
        target = (choices or [None])[0]
        note = f" (the last branch{gpus})" if target and ceiling == int(target) else ""
        if target:
            found = problem(
                "driver_branch_end_of_life",
                f"driver {version}: branch {branch} is past end of life{gpus} ({why})",
                f"move to branch {target}{note}: ansible-playbook -i inventory gpufleet.nvidia.driver_upgrade "
                f"-e driver_branch={target} --limit <host>",
            )
        else:
            found = problem(
                "driver_branch_end_of_life",
                f"driver {version}: branch {branch} is past end of life{gpus} ({why})",
                f"no supported branch drives this host's GPUs (last branch{gpus}: {ceiling}); plan to replace them",
            )
        out.append(found)
    for arch in status["beyond_last"]:
        out.append(
            problem(
                "driver_branch_past_architecture",
                f"driver {version}: branch {branch} no longer supports {arch} GPUs; the last branch for them is "
                f"{last[arch]}",
                f"install branch {last[arch]}: ansible-playbook -i inventory gpufleet.nvidia.driver_upgrade "
                f"-e driver_branch={last[arch]} --limit <host>",
            )
        )
    return out


def host_exposure(entry: Mapping[str, Any], nvidia_packages: Any = None, today: Any = None) -> dict[str, Any]:
    """``{driver, toolkit, branch, problems}`` for one host of the report model. ``driver``/``toolkit``: the
    findings (``driver_findings``/``toolkit_findings``) for what the host runs (the loaded driver, else the
    installed one); ``toolkit`` also says what it was judged on; ``branch``: ``branch_status``."""
    version = _running_driver(entry)
    archs = [g.get("architecture") for g in entry.get("gpus") or []]
    packages = nvidia_packages if isinstance(nvidia_packages, Mapping) else {}
    judged = _toolkit_judged(entry, packages)
    out: dict[str, Any] = {
        "driver_version": version,
        "driver": driver_findings(version) if version else [],
        "branch": branch_status(version, archs, today) if version else None,
        "toolkit": judged,
        "toolkit_findings": [],
        "problems": [],
    }
    clears = _clears(out["driver"])
    for finding in out["driver"]:
        out["problems"].append(_driver_problem(str(version), finding, clears))
    if out["branch"]:
        out["problems"] += _branch_problems(str(version), out["branch"])
    if judged and judged["provider"] != "native" and judged["version"]:
        out["toolkit_findings"] = toolkit_findings(judged["version"])
        out["problems"] += [_toolkit_problem(judged["version"], f) for f in out["toolkit_findings"]]
    return out


def fleet_exposure(entries: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The report's exposure section: ``bulletins`` (each bulletin with at least one host: ``{bulletin, address,
    date, product, cves, severity, hosts: [{host, version, fixed}]}``, newest first), ``branches`` (``{branch,
    status, end_of_life, hosts}`` per driver branch in the fleet) and ``toolkits`` (``{judged, hosts}``)."""
    bulletins: dict[str, dict[str, Any]] = {}
    branches: dict[str, dict[str, Any]] = {}
    toolkits: dict[str, list[str]] = {}
    for entry in entries:
        exp = entry.get("exposure") or {}
        name = entry["name"]
        for kind, version in (("driver", exp.get("driver_version")), ("toolkit_findings", None)):
            for f in exp.get(kind) or []:
                row = bulletins.setdefault(
                    f["bulletin"], {k: f[k] for k in ("bulletin", "address", "date", "product", "severity")}
                )
                row.setdefault("cves", [])
                row["cves"] = list(dict.fromkeys(row["cves"] + f["cves"]))
                shown = version or (exp.get("toolkit") or {}).get("version")
                row.setdefault("hosts", []).append({"host": name, "version": shown, "fixed": f["fixed"]})
        if exp.get("branch"):
            b = exp["branch"]
            row = branches.setdefault(
                b["branch"],
                {"branch": b["branch"], "status": b["status"], "end_of_life": b["end_of_life"], "hosts": []},
            )
            row["hosts"].append(name)
        if exp.get("toolkit"):
            toolkits.setdefault(exp["toolkit"]["judged"], []).append(name)
    return {
        "bulletins": sorted(bulletins.values(), key=lambda b: (b["date"], b["bulletin"]), reverse=True),
        "branches": sorted(branches.values(), key=lambda b: int(b["branch"])),
        "toolkits": [{"judged": k, "hosts": v} for k, v in sorted(toolkits.items())],
        "data": {"read": data()["provenance"]["read"], "bulletins": len(data()["bulletins"])},
    }


def exposure_tags(host: Mapping[str, Any]) -> str:
    """The words the report page's exposure filter matches a host row on: ``bulletin-<id>`` for each bulletin that
    applies, ``branch-<status>`` and ``toolkit-<provider>`` (``toolkit-native``: this collection's own)."""
    exp = host.get("exposure") or {}
    tags = [f"bulletin-{f['bulletin']}" for f in (exp.get("driver") or []) + (exp.get("toolkit_findings") or [])]
    if exp.get("branch"):
        tags.append(f"branch-{exp['branch']['status']}")
    if exp.get("toolkit"):
        tags.append(f"toolkit-{exp['toolkit']['provider']}")
    return " ".join(dict.fromkeys(tags))


def install_check(version: Any, policy: Any = "warn") -> dict[str, Any]:
    """What the driver role does before installing ``version``: ``{affected, refuse, warn, message, findings}``.
    ``policy`` (``driver_security_policy``): ``warn`` (say so and go on), ``refuse`` (stop the host), ``ignore``
    (say nothing). No version (the branch's newest from the repository): nothing to check."""
    policy = str(policy or "warn")
    if policy not in POLICIES:
        raise ExposureError(f"driver_security_policy must be one of {', '.join(POLICIES)}, not {policy!r}")
    findings = driver_findings(version) if version_key(version) else []
    lines = [_driver_problem(str(version), f, _clears(findings)) for f in findings]
    message = "; ".join(f"{p['message']}; fix: {p['fix']}" for p in lines)
    if findings and policy == "refuse":
        message += "; to install it anyway set driver_security_policy=warn"
    return {
        "affected": bool(findings),
        "refuse": bool(findings) and policy == "refuse",
        "warn": bool(findings) and policy == "warn",
        "message": message,
        "findings": findings,
    }
