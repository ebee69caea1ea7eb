# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The driver role's plan: given host facts and settings, which task file, packages, repository and
dnf stream. These are the only tests of the Ubuntu and RHEL paths (no such host runs here)."""

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.base.apt_prepare import missing_components, parse_policy
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.driver_plan import (
    BRANCHES_REVIEWED,
    PlanError,
    architecture_of,
    module_flavor,
    plan,
    successor,
    supported_branches,
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


def test_debian_cuda_repository_uses_debian_names_and_the_pinning_package():
    # Debian's names in NVIDIA's repository are Debian-style on every branch.
    p = plan(facts("Debian", "12"), {"source": "cuda", "branch": "580", "mirror_url": "http://mirror.lan/cuda/"}, V100)
    assert p["repository"] == {
        "name": "cuda-debian12",
        "kind": "apt",
        "url": "http://mirror.lan/cuda/debian12/x86_64/",
        "key_url": "http://mirror.lan/cuda/debian12/x86_64/3bf863cc.pub",
    }
    assert p["pinning"] == ["nvidia-driver-pinning-580"]
    assert p["packages"] == ["nvidia-driver-cuda"]
    assert p["module_packages"] == ["nvidia-kernel-dkms"]
    assert p["hold"][0] == "nvidia-driver-pinning-580"
    full = plan(facts("Debian", "13"), {"source": "cuda", "package_set": "full"}, A100)
    assert (full["branch"], full["packages"], full["module_packages"]) == (
        "580",
        ["nvidia-open"],
        ["nvidia-kernel-open-dkms"],
    )


def test_supported_branch_table_is_dated_and_drives_the_refusals():
    assert BRANCHES_REVIEWED == "2026-11-23"
    assert supported_branches() == ["580", "595"]  # 535 ended 2026-06, 610 ended 2026-08
    assert supported_branches("2026-05-01") == ["535", "580", "595", "610"]
    assert successor("550") == "580" and successor("610") == "595"


@pytest.mark.parametrize(("branch", "to"), [("550", "580"), ("570", "580"), ("535", "580"), ("610", "595")])
def test_ubuntu_ended_branch_is_refused_naming_its_successor(branch, to):
    # Canonical turns an ended branch into transitional packages to another: never plan one and install another.
    with pytest.raises(PlanError, match=rf"branch {branch} .*set driver_branch={to}"):
        plan(facts("Ubuntu", "22", kernel="5.15.0-125-generic"), {"branch": branch}, A100)


def test_ubuntu_default_is_the_supported_long_term_branch():
    p = plan(facts("Ubuntu", "22", kernel="5.15.0-125-generic"), {}, A100)
    assert p["branch"] == "580"
    assert p["packages"] == ["nvidia-headless-no-dkms-580-server-open", "nvidia-utils-580-server"]


@pytest.mark.parametrize(
    ("major", "kernel", "gpus", "packages", "module"),
    [
        (
            "22",
            "5.15.0-125-generic",
            A100,
            ["nvidia-headless-no-dkms-580-server-open", "nvidia-utils-580-server"],
            [
                "linux-modules-nvidia-580-server-open-5.15.0-125-generic",
                "linux-modules-nvidia-580-server-open-generic",
            ],
        ),
        (
            "22",
            "6.8.0-45-generic",
            A100,
            ["nvidia-headless-no-dkms-580-server-open", "nvidia-utils-580-server"],
            [
                "linux-modules-nvidia-580-server-open-6.8.0-45-generic",
                "linux-modules-nvidia-580-server-open-generic-hwe-22.04",
            ],
        ),
        (
            "24",
            "6.8.0-1015-gcp",
            V100,
            ["nvidia-headless-no-dkms-580-server", "nvidia-utils-580-server"],
            ["linux-modules-nvidia-580-server-6.8.0-1015-gcp", "linux-modules-nvidia-580-server-gcp"],
        ),
    ],
)
def test_ubuntu_precompiled_modules_follow_the_kernel_flavour(major, kernel, gpus, packages, module):
    p = plan(facts("Ubuntu", major, kernel=kernel), {}, gpus)
    assert p["task_file"] == "apt.yml"
    assert p["packages"] == packages
    assert p["module_packages"] == module
    assert p["headers"] == []  # nothing is built
    assert p["repository"] is None
    assert p["dkms_signing"] is None
    # Held: the userspace; never the modules, whose flavour metapackage must move with each kernel update.
    assert p["hold"] == packages


def test_ubuntu_precompiled_refuses_an_unreadable_kernel():
    with pytest.raises(PlanError, match="driver_ubuntu_precompiled=false"):
        plan(facts("Ubuntu", "24", kernel="custom"), {}, A100)


def test_ubuntu_distro_dkms_and_full_set():
    p = plan(
        facts("Ubuntu", "24", kernel="6.8.0-45-generic"),
        {"branch": "580", "ubuntu_precompiled": False, "version": "580.95.05"},
        A100,
    )
    assert p["packages"] == [
        "nvidia-headless-no-dkms-580-server-open=580.95.05-*",
        "nvidia-utils-580-server=580.95.05-*",
    ]
    assert p["module_packages"] == ["nvidia-dkms-580-server-open=580.95.05-*"]
    assert p["headers"] == ["linux-headers-6.8.0-45-generic"]
    assert p["dkms_signing"] == "conf.d"
    full = plan(facts("Ubuntu", "22", kernel="5.15.0-125-generic"), {"branch": "580", "package_set": "full"}, V100)
    assert full["packages"] == ["nvidia-driver-580-server"]
    assert full["module_packages"] == ["nvidia-dkms-580-server"]
    # Ubuntu 22.04's dkms 2.8.7 ignores framework.conf.d.
    assert full["dkms_signing"] == "shim-mok"


def test_ubuntu_cuda_repository_before_590_is_per_branch():
    p = plan(facts("Ubuntu", "24", arch="aarch64"), {"source": "cuda", "package_set": "full"}, B200)
    assert p["repository"]["url"] == "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/sbsa/"
    assert p["repository"]["kind"] == "apt"
    assert p["pinning"] == ["nvidia-driver-pinning-580"]
    assert p["packages"] == ["nvidia-open-580"]
    assert p["module_packages"] == ["nvidia-dkms-580-open"]


def test_ubuntu_cuda_repository_from_590_is_unversioned_and_pinned():
    p = plan(facts("Ubuntu", "24"), {"source": "cuda", "branch": "595", "version": "595.71.05"}, A100)
    assert p["pinning"] == ["nvidia-driver-pinning-595"]
    assert p["packages"] == ["libnvidia-compute=595.71.05-*", "nvidia-utils=595.71.05-*"]
    assert p["module_packages"] == ["nvidia-dkms-open=595.71.05-*"]
    full = plan(facts("Ubuntu", "22"), {"source": "cuda", "branch": "latest", "package_set": "full"}, A100)
    assert (full["pinning"], full["packages"]) == ([], ["nvidia-open"])


def test_ubuntu_distro_refuses_latest():
    with pytest.raises(PlanError, match="a number such as 580"):
        plan(facts("Ubuntu", "22"), {"branch": "latest"}, A100)


@pytest.mark.parametrize(
    ("settings", "gpus"),
    [({"source": "cuda", "branch": "595"}, V100), ({"source": "cuda"}, {"gpus": [{"architecture": "Pascal"}]})],
)
def test_proprietary_module_ends_with_580(settings, gpus):
    with pytest.raises(PlanError, match=r"ends with branch 580.*driver_branch=580"):
        plan(facts("Rocky", "9"), settings, gpus)


@pytest.mark.parametrize("dist", ["RedHat", "Rocky", "AlmaLinux"])
@pytest.mark.parametrize(
    ("major", "gpus", "branch", "expected"),
    [
        ("9", A100, "", ("nvidia-driver:open-dkms", "kmod-nvidia-open-dkms")),
        ("9", A100, "580", ("nvidia-driver:580-open", "kmod-nvidia-open-dkms")),
        ("8", V100, "580", ("nvidia-driver:580-dkms", "kmod-nvidia-latest-dkms")),
    ],
)
def test_rhel_like_cuda_streams_are_nvidias(dist, major, gpus, branch, expected):
    stream, module = expected
    p = plan(facts(dist, major, kernel="5.14.0-427.el9.x86_64"), {"source": "cuda", "branch": branch}, gpus)
    assert p["task_file"] == "redhat.yml"
    assert p["dnf_module_stream"] == stream
    assert p["repository"]["url"] == f"https://developer.download.nvidia.com/compute/cuda/repos/rhel{major}/x86_64/"
    assert p["repository"]["key_url"].endswith("/D42D0685.pub")
    assert p["repository"]["kind"] == "rpm"
    assert p["packages"] == ["nvidia-driver-cuda", "nvidia-persistenced"]  # no nvidia-driver-NVML any more
    assert p["module_packages"] == [module]
    assert p["hold"] == []  # the stream holds the branch; versionlock only for an exact version


@pytest.mark.parametrize(
    ("dist", "major", "kernel", "headers", "repos"),
    [
        ("Rocky", "9", "5.14.0-427.el9.x86_64", ["kernel-devel-matched", "kernel-headers"], ("crb", "epel-release")),
        (
            "Rocky",
            "8",
            "4.18.0-553.el8.x86_64",
            ["kernel-devel-4.18.0-553.el8.x86_64", "kernel-headers"],
            ("powertools", "epel-release"),
        ),
        (
            "RedHat",
            "9",
            "5.14.0-427.el9.x86_64",
            ["kernel-devel-matched", "kernel-headers"],
            (
                "codeready-builder-for-rhel-9-x86_64-rpms",
                "https://dl.fedoraproject.org/pub/epel/epel-release-latest-9.noarch.rpm",
            ),
        ),
    ],
)
def test_rhel_dkms_needs_epel_crb_and_nvidias_headers(dist, major, kernel, headers, repos):
    crb, epel = repos
    p = plan(facts(dist, major, kernel=kernel), {"source": "cuda"}, A100)
    assert p["headers"] == headers
    assert p["el_repos"]["crb"] == crb
    assert p["el_repos"]["epel"] == epel
    assert (
        plan(facts(dist, major, kernel=kernel), {"source": "cuda", "el_extra_repos": False}, A100)["el_repos"] is None
    )
    # In a container nothing is built: no headers, no EPEL.
    bare = plan(facts(dist, major, kernel=kernel), {"source": "cuda", "kernel_module": False}, A100)
    assert (bare["headers"], bare["el_repos"], bare["module_packages"]) == ([], None, [])


def test_rhel_full_set_and_exact_version_lock_nvidias_pattern():
    p = plan(facts("Rocky", "9"), {"source": "cuda", "package_set": "full", "version": "580.95.05"}, A100)
    assert p["dnf_module_stream"] == "nvidia-driver:580-open"
    assert p["packages"] == ["nvidia-open-580.95.05"]
    assert p["module_packages"] == ["kmod-nvidia-open-dkms-580.95.05"]
    assert p["hold"] == ["*nvidia*580.95.05*"]
    proprietary = plan(facts("Rocky", "8"), {"source": "cuda", "package_set": "full", "branch": "580"}, V100)
    assert proprietary["packages"] == ["cuda-drivers"]
    assert "nvidia-kmod-common" in p["remove"] and "libnvidia-ml" in p["remove"]
    assert not any(r.startswith("libnvidia-container") or r == "libnvidia-*" for r in p["remove"])


def test_rhel10_has_no_streams_and_locks_the_branch():
    p = plan(facts("RedHat", "10", kernel="6.12.0-55.el10.x86_64"), {"source": "cuda", "branch": "580"}, A100)
    assert p["dnf_module_stream"] is None
    assert p["hold"] == ["*nvidia*580*"]
    assert p["headers"] == ["kernel-devel-matched", "kernel-headers"]
    assert p["el_repos"]["crb"] == "codeready-builder-for-rhel-10-x86_64-rpms"
    latest = plan(facts("Rocky", "10"), {"source": "cuda"}, A100)
    assert (latest["dnf_module_stream"], latest["hold"]) == (None, [])


def test_debian_distro_names_the_component_of_each_package():
    p = plan(facts("Debian", "12"), {}, A100)
    assert p["apt_components"]["nvidia-open-kernel-dkms"] == "contrib"
    assert p["apt_components"]["firmware-nvidia-gsp"] == "non-free-firmware"
    assert p["apt_components"]["libcuda1"] == "non-free"
    known = "".join(
        f"{name}:\n  Installed: (none)\n  Candidate: 535.261.03-1\n"
        for name, component in p["apt_components"].items()
        if component == "non-free"
    )
    policy = parse_policy(known + "nvidia-open-kernel-dkms:\n  Installed: (none)\n  Candidate: (none)\n")
    assert missing_components(policy, p["apt_components"]) == ["contrib", "non-free-firmware"]
    container = plan(facts("Debian", "12"), {"kernel_module": False}, A100)
    assert set(container["apt_components"].values()) == {"non-free"}


NVSWITCH = {
    "pci_devices": [
        {"is_gpu": True, "device_id": "0x2330", "class": "0x030200"},
        {"is_gpu": False, "device_id": "0x22a3", "class": "0x068000"},
    ]
}


def test_nvswitch_hosts_get_fabric_manager_of_the_branch():
    ubuntu = plan(facts("Ubuntu", "22", kernel="5.15.0-125-generic"), {}, NVSWITCH)
    assert ubuntu["nvswitch"] is True
    assert ubuntu["flavor"] == "open"  # Hopper: open modules, like Blackwell
    assert ubuntu["fabricmanager"] == ["nvidia-fabricmanager-580", "libnvidia-nscq-580"]
    el = plan(facts("Rocky", "9"), {"source": "cuda", "version": "580.95.05"}, NVSWITCH)
    assert el["fabricmanager"] == ["nvidia-fabricmanager-580.95.05", "libnvidia-nscq-580.95.05"]
    assert plan(facts("Ubuntu", "24"), {"source": "cuda", "branch": "595"}, NVSWITCH)["fabricmanager"] == [
        "nvidia-fabricmanager",
        "libnvidia-nscq",
    ]
    assert plan(facts("Rocky", "9"), {"source": "cuda"}, A100)["fabricmanager"] == []
    # held with the driver (apt): an unheld Fabric Manager moves to a newer version than the driver's
    assert ubuntu["hold"][-2:] == ["nvidia-fabricmanager-580", "libnvidia-nscq-580"]
    cuda = plan(facts("Ubuntu", "24"), {"source": "cuda", "branch": "595"}, NVSWITCH)
    assert {"nvidia-fabricmanager", "libnvidia-nscq"} <= set(cuda["hold"])
    assert "nvidia-utils*" in cuda["remove"]  # explicitly installed: autoremove would keep it
    debian = plan(facts("Debian", "12"), {"source": "cuda"}, NVSWITCH)
    assert {"nvidia-fabricmanager", "libnvidia-nscq"} <= set(debian["hold"])
    with pytest.raises(PlanError, match=r"Fabric Manager.*driver_source=cuda"):
        plan(facts("Debian", "12"), {}, NVSWITCH)


def test_rhel_has_no_distro_packages():
    with pytest.raises(PlanError, match="driver_source=cuda"):
        plan(facts("RedHat", "9"), {}, A100)


@pytest.mark.parametrize(
    ("dist", "major"), [("Debian", "11"), ("Ubuntu", "20"), ("RedHat", "7"), ("Fedora", "40"), ("", "")]
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
