# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The driver role's plan: given host facts and settings, which task file, packages, repository and
dnf stream. These are the only tests of the Ubuntu and RHEL paths (no such host runs here)."""

import pytest

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.driver_plan import (
    PlanError,
    architecture_of,
    module_flavor,
    plan,
)

A100 = {"pci_devices": [{"is_gpu": True, "device_id": "0x20b0"}], "gpus": []}
V100 = {"pci_devices": [{"is_gpu": True, "device_id": "0x1db4"}], "gpus": []}
B200 = {"pci_devices": [{"is_gpu": True, "device_id": "0x2901"}], "gpus": []}
MIXED = {"pci_devices": [{"is_gpu": True, "device_id": "0x1db4"}, {"is_gpu": True, "device_id": "0x2901"}]}


def facts(dist, major, kernel="6.1.0-28-amd64", arch="x86_64"):
    return {"distribution": dist, "distribution_major_version": major, "kernel": kernel, "architecture": arch}


@pytest.mark.parametrize(
    ("gpu", "pci", "arch"),
    [
        ({"architecture": "Ampere"}, None, "ampere"),
        ({"architecture": "Ada Lovelace"}, None, "ada"),
        ({"pci_device_id": "0x1eb810de"}, None, "turing"),  # T4, from NVML's id
        (None, {"device_id": "0x2330"}, "hopper"),
        (None, {"device_id": "0x1db1"}, "volta"),
        (None, {"device_id": "0x15f8"}, "pascal"),
        (None, {"device_id": "0x13f2"}, "maxwell"),
        (None, {"device_id": "0x2b85"}, "blackwell"),
        (None, {"device_id": "bogus"}, None),
    ],
)
def test_architecture_from_facts_or_pci_id(gpu, pci, arch):
    assert architecture_of(gpu=gpu, pci_device=pci) == arch


@pytest.mark.parametrize(
    ("requested", "nvidia", "flavor"),
    [
        ("auto", A100, "open"),
        ("auto", V100, "proprietary"),
        ("auto", B200, "open"),
        ("auto", {"gpus": [{"architecture": "Turing"}]}, "open"),
        ("proprietary", A100, "proprietary"),
        ("open", A100, "open"),
        ("auto", {}, "open"),
    ],
)
def test_module_flavor(requested, nvidia, flavor):
    assert module_flavor(requested, nvidia) == flavor


@pytest.mark.parametrize(
    ("requested", "nvidia", "words"),
    [
        ("open", V100, "volta GPUs here need the proprietary module"),
        ("proprietary", B200, "open kernel module only"),
        ("auto", MIXED, "split them across hosts"),
        ("closed", A100, "use auto, open or proprietary"),
    ],
)
def test_module_flavor_refusals_name_the_variable(requested, nvidia, words):
    with pytest.raises(PlanError, match=words):
        module_flavor(requested, nvidia)


def test_debian12_distro_compute_set_is_the_default():
    p = plan(facts("Debian", "12"), {}, A100)
    assert p["task_file"] == "apt.yml"
    assert (p["branch"], p["flavor"], p["source"]) == ("535", "open", "distro")
    assert p["packages"] == [
        "libcuda1",
        "libnvidia-ml1",
        "nvidia-smi",
        "libnvidia-ptxjitcompiler1",
        "libnvidia-cfg1",
        "nvidia-persistenced",
    ]
    assert p["module_packages"] == ["nvidia-open-kernel-dkms"]
    assert p["headers"] == ["linux-headers-6.1.0-28-amd64"]
    assert p["repository"] is None and p["dnf_module_stream"] is None
    assert "nvidia-open-kernel-dkms" in p["hold"] and "libcuda1" in p["hold"]
    assert set(p["remove"]) >= {"nvidia-kernel-dkms", "nvidia-open-kernel-dkms", "libcuda1", "nvidia-driver"}


def test_debian_in_a_container_installs_no_module_and_holds_only_userspace():
    p = plan(facts("Debian", "12"), {"kernel_module": False}, V100)
    assert p["module_packages"] == []
    assert "nvidia-kernel-dkms" not in p["hold"] and "libcuda1" in p["hold"]


@pytest.mark.parametrize("major", ["forky/sid", "n/a", "testing", "sid"])
def test_debian_testing_and_unstable_take_the_archive_branch(major):
    p = plan(facts("Debian", major), {"kernel_module": False}, A100)
    assert (p["major"], p["branch"], p["source"]) == ("testing", "the archive's", "distro")
    assert "libcuda1" in p["packages"] and "=" not in " ".join(p["packages"])  # nothing pinned by default
    pinned = plan(facts("Debian", major), {"version": "550.163.01"}, A100)
    assert "libcuda1=550.163.01-*" in pinned["packages"]


@pytest.mark.parametrize(
    ("settings", "words"),
    [({"branch": "550"}, "leave driver_branch empty"), ({"source": "cuda"}, "no suite for Debian testing")],
)
def test_debian_testing_refuses_a_branch_or_the_cuda_repository(settings, words):
    with pytest.raises(PlanError, match=words):
        plan(facts("Debian", "forky/sid"), settings, A100)


def test_debian13_full_set_proprietary_exact_version():
    p = plan(
        facts("Debian", "13"), {"package_set": "full", "module_flavor": "proprietary", "version": "550.163.01"}, A100
    )
    assert p["branch"] == "550"
    assert p["packages"] == ["nvidia-driver=550.163.01-*"]
    assert p["module_packages"] == ["nvidia-kernel-dkms=550.163.01-*"]


def test_debian_exact_version_leaves_persistenced_unpinned():
    p = plan(facts("Debian", "12"), {"version": "535.261.03"}, A100)
    assert "libcuda1=535.261.03-*" in p["packages"]
    assert "nvidia-persistenced" in p["packages"]


@pytest.mark.parametrize(("major", "branch"), [("12", "550"), ("13", "535")])
def test_debian_distro_refuses_a_branch_it_does_not_ship(major, branch):
    with pytest.raises(PlanError, match="driver_source=cuda"):
        plan(facts("Debian", major), {"branch": branch}, A100)


def test_debian_cuda_repository_and_mirror():
    p = plan(facts("Debian", "12"), {"source": "cuda", "branch": "570", "mirror_url": "http://mirror.lan/cuda/"}, V100)
    assert p["repository"] == {
        "name": "cuda-debian12",
        "kind": "apt",
        "url": "http://mirror.lan/cuda/debian12/x86_64/",
        "key_url": "http://mirror.lan/cuda/debian12/x86_64/3bf863cc.pub",
    }
    assert p["packages"] == ["nvidia-headless-570", "nvidia-utils-570"]
    assert p["module_packages"] == ["nvidia-dkms-570"]


@pytest.mark.parametrize(
    ("major", "flavor_req", "gpus", "packages", "module"),
    [
        (
            "22",
            "auto",
            A100,
            ["nvidia-headless-no-dkms-550-server-open", "nvidia-utils-550-server"],
            ["linux-modules-nvidia-550-server-open-5.15.0-125-generic"],
        ),
        (
            "24",
            "auto",
            V100,
            ["nvidia-headless-no-dkms-550-server", "nvidia-utils-550-server"],
            ["linux-modules-nvidia-550-server-5.15.0-125-generic"],
        ),
    ],
)
def test_ubuntu_distro_compute_uses_signed_precompiled_modules(major, flavor_req, gpus, packages, module):
    p = plan(facts("Ubuntu", major, kernel="5.15.0-125-generic"), {"module_flavor": flavor_req}, gpus)
    assert p["task_file"] == "apt.yml"
    assert p["packages"] == packages
    assert p["module_packages"] == module
    assert p["headers"] == []  # nothing is built
    assert p["repository"] is None


def test_ubuntu_distro_dkms_and_full_set():
    p = plan(
        facts("Ubuntu", "24", kernel="6.8.0-45-generic"),
        {"branch": "535", "ubuntu_precompiled": False, "version": "535.230.02"},
        A100,
    )
    assert p["packages"] == [
        "nvidia-headless-no-dkms-535-server-open=535.230.02-*",
        "nvidia-utils-535-server=535.230.02-*",
    ]
    assert p["module_packages"] == ["nvidia-dkms-535-server-open=535.230.02-*"]
    assert p["headers"] == ["linux-headers-6.8.0-45-generic"]
    full = plan(facts("Ubuntu", "22"), {"branch": "570", "package_set": "full"}, V100)
    assert full["packages"] == ["nvidia-driver-570-server"]
    assert full["module_packages"] == ["nvidia-dkms-570-server"]


def test_ubuntu_cuda_repository():
    p = plan(facts("Ubuntu", "24", arch="aarch64"), {"source": "cuda", "package_set": "full"}, B200)
    assert p["repository"]["url"] == "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/sbsa/"
    assert p["repository"]["kind"] == "apt"
    assert p["packages"] == ["nvidia-open-550"]
    assert p["module_packages"] == ["nvidia-dkms-550-open"]


def test_ubuntu_refuses_latest():
    with pytest.raises(PlanError, match="a number such as 550"):
        plan(facts("Ubuntu", "22"), {"branch": "latest"}, A100)


@pytest.mark.parametrize("dist", ["RedHat", "Rocky", "AlmaLinux"])
@pytest.mark.parametrize(
    ("major", "gpus", "branch", "expected"),
    [
        ("9", A100, "", ("nvidia-driver:latest-open", "kmod-nvidia-open-dkms")),
        ("8", V100, "535", ("nvidia-driver:535-dkms", "kmod-nvidia-latest-dkms")),
    ],
)
def test_rhel_like_cuda_streams(dist, major, gpus, branch, expected):
    stream, module = expected
    p = plan(facts(dist, major, kernel="5.14.0-427.el9.x86_64"), {"source": "cuda", "branch": branch}, gpus)
    assert p["task_file"] == "redhat.yml"
    assert p["dnf_module_stream"] == stream
    assert p["repository"]["url"] == f"https://developer.download.nvidia.com/compute/cuda/repos/rhel{major}/x86_64/"
    assert p["repository"]["key_url"].endswith("/D42D0685.pub")
    assert p["repository"]["kind"] == "rpm"
    assert p["module_packages"] == [module]
    assert p["headers"] == ["kernel-devel-5.14.0-427.el9.x86_64", "kernel-headers-5.14.0-427.el9.x86_64"]
    assert "nvidia-driver-cuda" in p["packages"]
    assert p["hold"] == []  # the stream pins the branch; versionlock only for an exact version


def test_rhel_full_profile_and_exact_version_lock():
    p = plan(facts("Rocky", "9"), {"source": "cuda", "package_set": "full", "version": "550.127.08"}, A100)
    assert p["packages"] == ["@nvidia-driver:550-open/default"]
    assert p["module_packages"] == ["kmod-nvidia-open-dkms-550.127.08"]
    assert "kmod-nvidia*" in p["hold"]


def test_rhel_has_no_distro_packages():
    with pytest.raises(PlanError, match="driver_source=cuda"):
        plan(facts("RedHat", "9"), {}, A100)


@pytest.mark.parametrize(
    ("dist", "major"), [("Debian", "11"), ("Ubuntu", "20"), ("RedHat", "10"), ("Fedora", "40"), ("", "")]
)
def test_unsupported_distributions_are_named(dist, major):
    with pytest.raises(PlanError, match="no path for"):
        plan(facts(dist, major), {"source": "cuda"}, A100)


@pytest.mark.parametrize(
    ("settings", "words"),
    [
        ({"version": "535"}, "not a driver version"),
        ({"version": "535.261.03", "branch": "550"}, "not on driver_branch=550"),
        ({"branch": "5x5"}, "not a branch"),
        ({"source": "ppa"}, "use distro or cuda"),
        ({"package_set": "tiny"}, "use compute or full"),
    ],
)
def test_bad_settings_are_refused(settings, words):
    with pytest.raises(PlanError, match=words):
        plan(facts("Debian", "12"), settings, A100)


def test_cuda_repository_refuses_unknown_architecture():
    with pytest.raises(PlanError, match="ppc64le"):
        plan(facts("Ubuntu", "22", arch="ppc64le"), {"source": "cuda"}, A100)
