# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""runtime/common: the one CDI-by-version rule of the module, the role and the validate filter."""

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.base.version import parse as parse_version
from ansible_collections.gpufleet.nvidia.plugins.module_utils.runtime.common import cdi_spec_version, reads_cdi
from ansible_collections.gpufleet.nvidia.plugins.module_utils.runtime.containerd import edit as ctd
from ansible_collections.gpufleet.nvidia.plugins.module_utils.runtime.docker import edit as dock


@pytest.mark.parametrize(
    ("engine", "version", "reads"),
    [
        ("docker", "20.10.24+dfsg1", False),
        ("docker", "25.0.0", True),
        ("docker", "26.1.5+dfsg1", True),
        ("containerd", "1.6.20~ds1", False),
        ("containerd", "1.7.24~ds1", True),  # read as "1" by the role's former Jinja parse: CDI stayed off
        ("containerd", "2.1.9", True),
        ("containerd", "1:1.7.24", True),  # a package epoch
        ("crio", "1.22.5", False),
        ("crio", "1.30.4", True),
        ("podman", None, True),
        ("docker", None, False),  # unknown: no CDI
        ("docker", "", False),
        ("runsc", "1.0.0", False),
    ],
)
def test_reads_cdi_one_rule_for_module_role_and_validate(engine, version, reads):
    assert reads_cdi(engine, version) is reads
    if engine in ("docker", "containerd") and version:  # the editors warn exactly where it is False
        warn = (dock.Docker() if engine == "docker" else ctd.Containerd()).cdi_warning(
            parse_version(version.split(":")[-1])
        )
        assert (warn is None) is reads


def _engines(**versions):
    return {name: {"installed": version is not False, "version": version or None} for name, version in versions.items()}


@pytest.mark.parametrize(
    ("engines", "version", "held"),
    [
        # Debian 12: docker 20.10 (reads no CDI), containerd 1.6 (none either), podman 4.3.1 (CDI library v0.5.2)
        (_engines(docker="20.10.24", containerd="1.6.20", podman="4.3.1"), "0.5.0", ["podman 4.3.1"]),
        # Debian 13: docker 26, containerd 1.7.24, podman 5.4
        (_engines(docker="26.1.5", containerd="1.7.24", podman="5.4.2"), "0.6.0", []),
        (_engines(podman="4.6.2"), "0.5.0", ["podman 4.6.2"]),
        (_engines(podman="4.7.0"), "0.6.0", []),
        (_engines(containerd="1.7.11"), "0.5.0", ["containerd 1.7.11"]),
        (_engines(containerd="1.7.12"), "0.6.0", []),
        (_engines(crio="1.27.1", docker="25.0.0"), "0.5.0", ["crio 1.27.1"]),
        (_engines(crio="1.28.0"), "0.6.0", []),
        (_engines(podman=None), "0.5.0", ["podman (version unknown)"]),  # installed, version not found
        (_engines(podman=False, containerd=None), "0.6.0", []),  # not installed; containerd reads no CDI unknown
        ({}, "0.6.0", []),
    ],
)
def test_cdi_spec_version_is_what_every_engine_reads(engines, version, held):
    assert cdi_spec_version(engines) == (version, held)


@pytest.mark.parametrize(
    ("engines", "version", "held"),
    [
        # Debian 13 and sid: docker 26.1.5 and 28.5.2 read 0.7.0 but drop its additionalGids (before docker 29.5)
        (
            _engines(docker="26.1.5+dfsg1-9+deb13u1", containerd="1.7.24~ds1-6", podman="5.4.2+ds1-2"),
            "0.6.0",
            ["docker 26.1.5+dfsg1-9+deb13u1"],
        ),
        (_engines(docker="28.5.2+dfsg4-5", containerd="2.1.9~ds1-5"), "0.6.0", ["docker 28.5.2+dfsg4-5"]),
        (_engines(containerd="1.7.24~ds1-6", podman="5.4.2+ds1-2"), "0.7.0", []),
        (_engines(docker="29.5.0", containerd="2.1.9~ds1-5"), "0.7.0", []),
        # Debian 12: podman 4.3.1 holds it at 0.5.0; docker 20.10 and containerd 1.6 read no CDI and do not count
        (_engines(docker="20.10.24", containerd="1.6.20", podman="4.3.1"), "0.5.0", ["podman 4.3.1"]),
        # the first versions whose vendored container-device-interface is v0.7 (go.mod / vendor.mod at the tags)
        (_engines(docker="26.0.2"), "0.6.0", ["docker 26.0.2"]),
        (_engines(docker="29.4.3"), "0.6.0", ["docker 29.4.3"]),
        (_engines(podman="5.0.3"), "0.6.0", ["podman 5.0.3"]),
        (_engines(podman="5.1.0"), "0.7.0", []),
        (_engines(containerd="1.7.15"), "0.6.0", ["containerd 1.7.15"]),
        (_engines(containerd="1.7.16"), "0.7.0", []),
        (_engines(containerd="2.0.0"), "0.7.0", []),
        (_engines(crio="1.29.13"), "0.6.0", ["crio 1.29.13"]),
        (_engines(crio="1.30.0"), "0.7.0", []),
        (_engines(crio="1.30.0", containerd="1.7.11"), "0.5.0", ["containerd 1.7.11"]),
        (_engines(podman=None), "0.5.0", ["podman (version unknown)"]),
        ({}, "0.7.0", []),
    ],
)
def test_cdi_spec_version_with_additional_gids_wanted(engines, version, held):
    assert cdi_spec_version(engines, "0.7.0") == (version, held)


def test_cdi_spec_version_never_goes_past_what_is_wanted():
    engines = _engines(docker="28.5.2", podman="5.4.2")
    assert cdi_spec_version(engines) == ("0.6.0", [])
    assert cdi_spec_version(engines, "0.5.0") == ("0.5.0", [])
    with pytest.raises(ValueError, match=r"0\.9\.0"):
        cdi_spec_version(engines, "0.9.0")
