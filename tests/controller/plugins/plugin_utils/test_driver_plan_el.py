# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The driver plan's Secure Boot rules on RHEL, Rocky and Alma (plugin_utils/driver_plan_el.py): with Secure Boot on,
Red Hat's signed kmod-nvidia on RHEL 10.1+ x86_64 with the open modules, NVIDIA's precompiled stream (its key to
enrol) on EL 8/9 with the proprietary modules, DKMS with a MOK otherwise; with it off, DKMS as before. Each case
checks the package set, the repositories and the reason the plan gives."""

import pytest

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.driver_plan import PlanError, plan
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.driver_plan_el import kernel_release

A100 = {"pci_devices": [{"is_gpu": True, "device_id": "0x20b0"}], "gpus": []}
V100 = {"pci_devices": [{"is_gpu": True, "device_id": "0x1db4"}], "gpus": []}
KERNEL = {
    "8.10": "4.18.0-553.5.1.el8_10.x86_64",
    "9.6": "5.14.0-570.17.1.el9_6.x86_64",
    "10.0": "6.12.0-55.9.1.el10_0.x86_64",
    "10.1": "6.12.0-124.8.1.el10_1.x86_64",
}
CUDA = "https://developer.download.nvidia.com/compute/cuda/repos"


def host(release, dist="RedHat", arch="x86_64"):
    return {
        "distribution": dist,
        "distribution_major_version": release.split(".")[0],
        "distribution_version": release,
        "kernel": KERNEL[release],
        "architecture": arch,
    }


def el(release, nvidia=None, secure_boot=True, dist="RedHat", arch="x86_64", **settings):
    nvidia = A100 if nvidia is None else nvidia
    return plan(host(release, dist, arch), {"source": "cuda", "secure_boot": secure_boot, **settings}, nvidia)


def test_rhel_10_1_secure_boot_open_takes_red_hats_signed_kmod():
    p = el("10.1")
    assert (p["module_source"], p["module_signer"]) == ("redhat", "redhat")
    assert p["module_packages"] == ["kmod-nvidia"]
    assert p["packages"] == ["nvidia-driver-cuda", "nvidia-persistenced"]  # the compute userspace, unchanged
    assert p["rhsm_repos"] == ["rhel-10-for-x86_64-extensions-rpms"]
    # nothing is built: no kernel headers, no EPEL/CRB for dkms, no DKMS signing, no key to enrol
    assert (p["headers"], p["el_repos"], p["dkms_signing"], p["mok_import"]) == ([], None, None, None)
    assert p["dnf_module_stream"] is None  # RHEL 10 has no streams
    assert "Secure Boot is on" in p["module_source_reason"]


def test_rhel_10_1_full_set_is_nvidias_one_command():
    """SOURCES['rhel-extensions']: 'dnf install kmod-nvidia nvidia-open'."""
    p = el("10.1", package_set="full")
    assert p["packages"] + p["module_packages"] == ["nvidia-open", "kmod-nvidia"]


def test_rhel_10_1_pinned_version_pins_the_userspace_and_the_lock_covers_the_kmod():
    p = el("10.1", version="580.95.05")
    assert p["packages"] == ["nvidia-driver-cuda-580.95.05", "nvidia-persistenced-580.95.05"]
    assert p["module_packages"] == ["kmod-nvidia"] and p["hold"] == ["*nvidia*580.95.05*"]


def test_rhel_10_1_without_secure_boot_keeps_dkms():
    for secure_boot in (False, None):
        p = el("10.1", secure_boot=secure_boot)
        assert (p["module_source"], p["module_signer"]) == ("dkms", None)
        assert p["module_packages"] == ["kmod-nvidia-open-dkms"] and p["el_repos"] is not None
        assert p["rhsm_repos"] == [] and "Secure Boot is not on" in p["module_source_reason"]
    # asked for by name, Red Hat's package is used without Secure Boot too
    assert el("10.1", secure_boot=False, el_module_source="redhat")["module_packages"] == ["kmod-nvidia"]


@pytest.mark.parametrize(
    ("release", "where", "settings", "why"),
    [
        ("10.0", {}, {}, "from RHEL 10.1, and this host runs RHEL 10.0"),
        ("10.1", {"dist": "Rocky"}, {}, "not from Rocky"),
        ("10.1", {"arch": "aarch64"}, {}, "is for x86_64, and this host is aarch64"),
        ("10.1", {}, {"module_flavor": "proprietary", "branch": "580"}, "proprietary"),
        ("10.1", {"nvidia": V100}, {"branch": "580"}, "proprietary"),
    ],
)
def test_rhel_10_secure_boot_without_red_hats_package_is_dkms_with_the_reason(release, where, settings, why):
    p = el(release, **where, **settings)
    assert (p["module_source"], p["module_signer"], p["rhsm_repos"]) == ("dkms", None, [])
    assert p["module_packages"][0].endswith("-dkms") and p["el_repos"] is not None
    assert why in p["module_source_reason"] and "DKMS signs with a MOK" in p["module_source_reason"]


@pytest.mark.parametrize(("release", "repo"), [("8.10", "rhel8"), ("9.6", "rhel9")])
def test_el_8_9_secure_boot_proprietary_takes_nvidias_precompiled_stream_and_its_key(release, repo):
    p = el(release, V100, branch="580")
    assert (p["module_source"], p["module_signer"]) == ("precompiled", "nvidia")
    assert p["dnf_module_stream"] == "nvidia-driver:580"  # not 580-dkms
    assert p["module_packages"] == ["@nvidia-driver:580/default"]
    assert p["mok_import"] == {
        "url": f"{CUDA}/{repo}/x86_64/NVIDIA2019-public_key.der",
        "name": "NVIDIA2019-public_key.der",
    }
    assert (p["headers"], p["el_repos"], p["dkms_signing"], p["rhsm_repos"]) == ([], None, None, [])


def test_el_8_pinned_version_names_the_precompiled_package_of_the_running_kernel():
    p = el("8.10", V100, version="580.95.05")
    assert p["module_packages"] == ["kmod-nvidia-580.95.05-4.18.0-553.5.1"]
    assert p["dnf_module_stream"] == "nvidia-driver:580" and p["hold"] == ["*nvidia*580.95.05*"]


def test_precompiled_key_comes_from_the_mirror_and_rocky_uses_nvidias_repository():
    p = el("9.6", V100, dist="Rocky", branch="580", mirror_url="https://mirror.example/cuda/")
    assert p["module_source"] == "precompiled"
    assert p["mok_import"]["url"] == "https://mirror.example/cuda/rhel9/x86_64/NVIDIA2019-public_key.der"


@pytest.mark.parametrize(
    ("release", "nvidia", "arch", "why"),
    [
        ("9.6", A100, "x86_64", "open modules are built by DKMS"),
        ("8.10", A100, "x86_64", "open modules are built by DKMS"),
        ("9.6", V100, "aarch64", "for x86_64, and this host is aarch64"),
    ],
)
def test_el_8_9_secure_boot_open_or_arm_is_dkms(release, nvidia, arch, why):
    settings = {"branch": "580"} if nvidia is V100 else {}
    p = el(release, nvidia, arch=arch, **settings)
    assert (p["module_source"], p["module_signer"], p["mok_import"]) == ("dkms", None, None)
    assert p["dnf_module_stream"].endswith(("-open", "-dkms", "open-dkms")) and p["el_repos"] is not None
    assert why in p["module_source_reason"]


def test_el_8_9_without_secure_boot_keeps_the_dkms_stream():
    p = el("9.6", V100, secure_boot=False, branch="580")
    assert p["dnf_module_stream"] == "nvidia-driver:580-dkms" and p["module_packages"] == ["kmod-nvidia-latest-dkms"]
    assert el("9.6", V100, secure_boot=False, branch="580", el_module_source="precompiled")["module_source"] == (
        "precompiled"
    )


@pytest.mark.parametrize(
    ("release", "nvidia", "settings", "message"),
    [
        ("9.6", A100, {"el_module_source": "redhat"}, "driver_el_module_source=redhat: Red Hat ships"),
        ("10.1", V100, {"el_module_source": "precompiled", "branch": "580"}, "precompiled streams for EL 8 and 9"),
        ("9.6", A100, {"el_module_source": "precompiled"}, "proprietary modules"),
        ("9.6", A100, {"el_module_source": "signed"}, "use auto, dkms, redhat, precompiled"),
    ],
)
def test_a_source_asked_for_that_does_not_fit_is_refused_with_the_reason(release, nvidia, settings, message):
    with pytest.raises(PlanError, match=message):
        el(release, nvidia, **settings)


def test_dkms_asked_for_stays_dkms_under_secure_boot():
    p = el("10.1", el_module_source="dkms")
    assert (p["module_source"], p["module_packages"]) == ("dkms", ["kmod-nvidia-open-dkms"])


def test_a_container_installs_no_module_and_needs_no_signer():
    p = el("10.1", kernel_module=False)
    assert (p["module_packages"], p["module_signer"], p["rhsm_repos"]) == ([], None, [])


def test_apt_plans_carry_no_el_signer():
    debian = {"distribution": "Debian", "distribution_major_version": "12", "kernel": "6.1.0-28-amd64"}
    assert plan({**debian, "architecture": "x86_64"}, {"secure_boot": True}, A100)["module_signer"] is None


@pytest.mark.parametrize(
    ("kernel", "release"),
    [
        ("4.18.0-553.5.1.el8_10.x86_64", "4.18.0-553.5.1"),
        ("4.18.0-147.5.1.el8_1.x86_64", "4.18.0-147.5.1"),  # NVIDIA's README example
        ("5.14.0-570.17.1.el9_6.x86_64", "5.14.0-570.17.1"),
        ("5.14.0-427.el9.x86_64", "5.14.0-427"),
    ],
)
def test_kernel_release_as_nvidias_package_names_carry_it(kernel, release):
    assert kernel_release(kernel) == release
