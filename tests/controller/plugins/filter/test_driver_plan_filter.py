# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The driver_plan filter and the role around it: the task file each distribution selects exists, and
the role's defaults and argument specs agree."""

from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.nvidia.plugins.filter.driver_plan import FilterModule

ROLE = Path(__file__).resolve().parents[4] / "roles" / "driver"
A100 = {"pci_devices": [{"is_gpu": True, "device_id": "0x20b0"}]}
driver_plan = FilterModule().filters()["driver_plan"]


@pytest.mark.parametrize(
    ("dist", "major", "source", "task_file"),
    [
        ("Debian", "12", "distro", "apt.yml"),
        ("Debian", "13", "cuda", "apt.yml"),
        ("Ubuntu", "22", "distro", "apt.yml"),
        ("Ubuntu", "24", "cuda", "apt.yml"),
        ("RedHat", "8", "cuda", "redhat.yml"),
        ("Rocky", "9", "cuda", "redhat.yml"),
        ("AlmaLinux", "9", "cuda", "redhat.yml"),
    ],
)
def test_each_distribution_selects_its_own_task_file(dist, major, source, task_file):
    facts = {
        "distribution": dist,
        "distribution_major_version": major,
        "kernel": "5.15.0-125-generic",
        "architecture": "x86_64",
    }
    p = driver_plan(facts, {"source": source}, A100)
    assert p["task_file"] == task_file
    assert (ROLE / "tasks" / task_file).is_file()


def test_refusal_becomes_a_filter_error_naming_the_role():
    with pytest.raises(AnsibleFilterError, match=r"driver role: .*driver_source=cuda"):
        driver_plan({"distribution": "RedHat", "distribution_major_version": "9"}, {}, A100)


# apt-cache policy as apt 2.6 prints it (Debian 12) for one package with a candidate and one from a component
# the sources lack (apt knows the name from no list: it prints the bare header and no Candidate line).
POLICY = """libcuda1:
  Installed: (none)
  Candidate: 535.261.03-1~deb12u1
  Version table:
     535.261.03-1~deb12u1 500
        500 http://deb.debian.org/debian bookworm/non-free amd64 Packages
nvidia-open-kernel-dkms:
  Installed: (none)
  Candidate: (none)
  Version table:
firmware-nvidia-gsp:
"""


def test_missing_components_are_named_from_apt_cache_policy():
    missing = FilterModule().filters()["driver_missing_components"]
    needed = {"libcuda1": "non-free", "nvidia-open-kernel-dkms": "contrib", "firmware-nvidia-gsp": "non-free-firmware"}
    assert missing(POLICY, needed) == ["contrib", "non-free-firmware"]
    assert missing(POLICY, {"libcuda1": "non-free"}) == []
    assert missing("", {"libcuda1": "non-free"}) == ["non-free"]
