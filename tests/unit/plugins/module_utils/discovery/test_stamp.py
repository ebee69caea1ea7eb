# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""A stage's stamp: the facts that count, the file states, packages, and the comparison that decides a rerun."""

from __future__ import annotations

import os

from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery import stamp

FACTS = {
    "driver": {"loaded_version": "550.163.01"},
    "gpus": [{"uuid": "GPU-1", "health": {"xid_events": []}}],
    "gpu_users": {"processes": []},
    "xid_events": [],
    "problems": [],
}


def test_the_digest_ignores_what_moves_on_its_own_and_sees_the_rest():
    base = stamp.inputs_digest("runtime", "1.0.0", {"runtime_cdi": True}, FACTS)
    busy = dict(FACTS, gpu_users={"processes": [{"pid": 7}]}, xid_events=[{"xid": 79}], problems=[{"code": "x"}])
    busy["next_boot"] = {"kernel": "6.8.0-45-generic", "state": "no_module"}  # a kernel update moved the default
    busy["mig_boot"] = {"layout": "all-1g", "status": {"ok": True}}  # the MIG boot unit ran at this boot
    busy["gpus"] = [{"uuid": "GPU-1", "health": {"xid_events": [{"xid": 79}]}}]
    assert stamp.inputs_digest("runtime", "1.0.0", {"runtime_cdi": True}, busy) == base
    assert stamp.inputs_digest("runtime", "1.0.0", {"runtime_cdi": False}, FACTS) != base
    assert stamp.inputs_digest("driver", "1.0.0", {"runtime_cdi": True}, FACTS) != base
    assert stamp.inputs_digest("runtime", "1.0.1", {"runtime_cdi": True}, FACTS) != base
    other = dict(FACTS, driver={"loaded_version": "550.163.02"})
    assert stamp.inputs_digest("runtime", "1.0.0", {"runtime_cdi": True}, other) != base


def test_file_states_follow_content_mode_links_and_matches(tmp_path):
    conf = tmp_path / "etc" / "daemon.json"
    conf.parent.mkdir()
    conf.write_text("{}")
    patterns = ["/etc/daemon.json", "/etc/cdi/*", "/etc/missing.conf"]
    first = stamp.files_state(patterns, str(tmp_path))
    assert first["/etc/missing.conf"] == "absent" and first["/etc/cdi"] == "absent"
    assert "sha256" in first["/etc/daemon.json"]
    conf.write_text('{"runtimes": {}}')
    assert stamp.files_state(patterns, str(tmp_path))["/etc/daemon.json"] != first["/etc/daemon.json"]
    before = stamp.files_state(patterns, str(tmp_path))
    os.chmod(conf, 0o600)
    assert stamp.files_state(patterns, str(tmp_path))["/etc/daemon.json"] != before["/etc/daemon.json"]
    (tmp_path / "etc" / "cdi").mkdir()
    (tmp_path / "etc" / "cdi" / "nvidia.yaml").symlink_to("/nowhere")
    now = stamp.files_state(patterns, str(tmp_path))
    assert now["/etc/cdi/nvidia.yaml"].endswith("-> /nowhere") and now["/etc/cdi"] != "absent"


def test_packages_from_dpkg_and_rpm():
    status = (
        "Package: nvidia-driver\nStatus: hold ok installed\nArchitecture: amd64\nVersion: 550.163.01-1\n"
        "Description: x\n multi-line\n\n"
        "Package: bash\nStatus: install ok installed\nArchitecture: amd64\nVersion: 5.2\n\n"
        "Package: libcuda1\nStatus: install ok installed\nArchitecture: amd64\nVersion: 550.163.01-1\n"
    )
    found = stamp.dpkg_packages(status, [r".*nvidia.*", r"(lib)?cuda.*"])
    assert found == {
        "nvidia-driver:amd64": "hold ok installed 550.163.01-1",
        "libcuda1:amd64": "install ok installed 550.163.01-1",
    }
    assert stamp.rpm_packages("nvidia-driver x86_64 3:580.1-1.el9\nbash x86_64 0:5.1-1\n", [r".*nvidia.*"]) == {
        "nvidia-driver:x86_64": "3:580.1-1.el9"
    }


def test_compare_names_the_first_difference():
    record = stamp.build(
        "d1",
        ["/etc/a"],
        {"/etc/a": "x"},
        {"u.service": "loaded enabled active"},
        published={"f": 1},
        packages={"nvidia-driver:amd64": "hold ok installed 1"},
    )
    same = stamp.load(stamp.dump(record))
    assert stamp.compare(
        same,
        "d1",
        ["/etc/a"],
        {"/etc/a": "x"},
        {"u.service": "loaded enabled active"},
        packages_now={"nvidia-driver:amd64": "hold ok installed 1"},
    )[0]
    assert stamp.compare(None, "d1", [], {}, {}) == (False, "no stamp from an earlier run")
    assert "variables" in stamp.compare(same, "d2", ["/etc/a"], {"/etc/a": "x"}, {})[1]
    assert stamp.compare(same, "d1", ["/etc/a"], {"/etc/a": "y"}, {})[1] == "/etc/a changed since the stamped run"
    unit = stamp.compare(same, "d1", ["/etc/a"], {"/etc/a": "x"}, {"u.service": "loaded enabled inactive"})
    assert unit == (False, "the unit u.service changed state since the stamped run")
    unheld = stamp.compare(
        same,
        "d1",
        ["/etc/a"],
        {"/etc/a": "x"},
        {"u.service": "loaded enabled active"},
        packages_now={"nvidia-driver:amd64": "install ok installed 1"},
    )
    assert unheld == (False, "the package nvidia-driver:amd64 changed since the stamped run")
    assert stamp.load("not json") is None and stamp.load('{"format": 99}') is None
    assert stamp.load("[" * 100000) is None  # a file corrupted into deep nesting is no stamp, not a crash
