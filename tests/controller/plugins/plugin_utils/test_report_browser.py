# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The HTML report's script in a real browser: Debian's chromium loads the page of 300 synthetic hosts with a filter
and a sort in the page's fragment (which the script applies at load, through the same code as the filter box),
and the test reads the table back from the DOM chromium dumps after the script ran.

chromium comes from ``make setup`` (tests/tools/host_setup.sh). Without it the test fails under CI=true and says
it skipped otherwise."""

import shutil
import subprocess
from html.parser import HTMLParser

import pytest

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils import report, report_render

N = 300
BROWSER = shutil.which("chromium") or shutil.which("chromium-browser")


class Rows(HTMLParser):
    """The rows of ``<table id="hosts">``'s body: (host, status, shown), and the text of ``#shown``."""

    def __init__(self):
        super().__init__()
        self.rows, self.shown, self._in, self._cell, self._where = [], "", False, None, None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table":
            self._in = a.get("id") == "hosts"
        elif self._in and tag == "tr" and "data-status" in a:
            self.rows.append({"status": a["data-status"], "hidden": "hidden" in a, "cells": []})
        elif self._in and tag == "td" and self.rows:
            self.rows[-1]["cells"].append("")
            self._cell = self.rows[-1]["cells"]
        elif tag == "span" and a.get("id") == "shown":
            self._where = "shown"

    def handle_endtag(self, tag):
        if tag == "table":
            self._in = False
        elif tag == "td":
            self._cell = None
        elif tag == "span":
            self._where = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell[-1] += data
        elif self._where == "shown":
            self.shown += data


def _dump(page, fragment, tmp_path):
    if BROWSER is None:  # CI=true makes this skip a failure (tests/ci_skips.py)
        pytest.skip("no chromium on this machine (make setup as root installs it: tests/tools/host_setup.sh)")
    path = tmp_path / "fleet-report.html"
    path.write_text(page, encoding="utf-8")
    profile = tmp_path / "profile"
    cmd = [BROWSER, "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run", f"--user-data-dir={profile}"]
    cmd += ["--dump-dom", f"{path.as_uri()}#{fragment}"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0 and "<table" in out.stdout, out.stderr[-2000:]
    parsed = Rows()
    parsed.feed(out.stdout)
    return parsed


@pytest.fixture
def page(fleet):
    hostvars, hosts = fleet.synthetic(N)
    return report_render.render(report.fleet_report_model(hostvars, hosts), "html")


def test_chromium_filters_and_sorts_the_host_table_of_300_hosts(page, tmp_path):
    dom = _dump(page, "q=h100&status=failed&sort=0&desc=1", tmp_path)
    assert len(dom.rows) == N  # every row is still in the page; the filter hides rows
    shown = [r["cells"][0] for r in dom.rows if not r["hidden"]]
    # Failed: docker's validation fails on node i with i % 10 == 3 (GPU hosts); H100: model i % 3 == 1.
    want = [f"node-{i:03d}" for i in range(N) if i % 10 == 3 and i % 3 == 1 and i % 25 != 24 and i % 50 != 49]
    assert shown == sorted(want, reverse=True) and len(want) == 10
    assert all(r["status"] == "failed" and "H100" in r["cells"][3] for r in dom.rows if not r["hidden"])
    assert dom.shown == f"{len(want)} of {N} hosts shown"


def test_chromium_sorts_numbers_as_numbers_and_words_all_match(page, tmp_path):
    dom = _dump(page, "q=l4%20passed&sort=2", tmp_path)  # column 2: GPUs, ascending
    shown = [r for r in dom.rows if not r["hidden"]]
    assert shown and all("L4" in r["cells"][3] and r["cells"][1] == "passed" for r in shown)
    assert [int(r["cells"][2]) for r in shown] == sorted(int(r["cells"][2]) for r in shown)
    assert len({r["cells"][2] for r in shown}) == 4  # 1 to 4 GPUs: the sort crossed more than one value


def test_chromium_filters_the_host_table_on_a_bulletin(fleet, tmp_path):
    """The exposure menu (fragment ``exposure=bulletin-5703``): the hosts whose driver CVE-2025-23280 affects, those on
    535.261.03 (fixed in 535.274.02), not those on 550.127.05 (R550 is not in that record)."""
    hostvars, hosts = fleet.synthetic(N, run=2)
    model = report.fleet_report_model(hostvars, hosts, generated="2026-11-27 00:00:00 UTC")
    page = report_render.render(model, "html")
    assert '<option value="bulletin-5703">' in page
    dom = _dump(page, "exposure=bulletin-5703", tmp_path)
    driver = {h: ((hostvars[h].get("ansible_facts") or {}).get("nvidia") or {}).get("driver") or {} for h in hosts}
    want = [h for h in hosts if driver[h].get("loaded_version") == "535.261.03"]
    shown = [r["cells"][0] for r in dom.rows if not r["hidden"]]
    assert shown == want and 0 < len(want) < N - N // 4
    assert dom.shown == f"{len(want)} of {N} hosts shown"
