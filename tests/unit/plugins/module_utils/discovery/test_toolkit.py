# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""discovery.toolkit on fake host roots: the installed toolkit (either provider) and the CDI spec, as a stage that
runs alone needs them; the names and paths it looks for are hostprog/install.py's."""

from __future__ import annotations

from pathlib import Path

from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi import spec
from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi.spec import DRIVER_VERSION_ANNOTATION
from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery import toolkit as tk
from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery.discover import discover
from ansible_collections.gpufleet.nvidia.plugins.module_utils.hostprog import install


def write(root: Path, inner: str, text: str = "", mode: int = 0o644) -> None:
    path = root / inner.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


def native(root: Path, bindir: str = "/usr/local/bin", programs: tuple[str, ...] | None = None) -> None:
    """What host_programs writes: the real launchers (their text from install.launcher)."""
    for name in programs or tuple(install.PROGRAMS):
        text = install.launcher(name, "/usr/local/lib", "/usr/bin/python3", "/usr/bin/runc")
        write(root, f"{bindir}/{name}", text, 0o755)


def test_the_names_are_those_of_the_installer() -> None:
    assert tuple(install.PROGRAMS) == tk.NATIVE_PROGRAMS
    assert tk.SHIM in install.PROGRAMS and tk.HOOK in install.PROGRAMS
    assert tk.HELPER_PROGRAMS == install.HELPER_PROGRAMS
    assert tk.RUNTIME_CONFIG == install.RUNTIME_CONFIG
    assert tk.RUNTIME_CONFIG_DEFAULTS == install.RUNTIME_CONFIG_DEFAULTS


def test_nothing_installed(tmp_path: Path) -> None:
    assert tk.toolkit(str(tmp_path)) is None
    assert tk.cdi_spec(str(tmp_path)) is None


def test_the_native_toolkit_and_its_runtime_config(tmp_path: Path) -> None:
    native(tmp_path)
    kube = install.render_runtime_config(False, True, accept_cdi_annotations_unprivileged=False)
    write(tmp_path, install.RUNTIME_CONFIG, kube)
    found = tk.toolkit(str(tmp_path))
    assert found == {
        "provider": "native",
        "runtime_path": "/usr/local/bin/gpufleet-container-runtime",
        "hook_path": "/usr/local/bin/gpufleet-cdi-hook",
        "programs": [f"/usr/local/bin/{name}" for name in install.PROGRAMS],
        "version": None,
        "source": "discovered",
        "accept_envvar_unprivileged": False,
        "accept_volume_mounts": True,
        "accept_cdi_annotations_unprivileged": False,
    }


def test_a_runtime_config_without_the_annotations_key_reads_its_default(tmp_path: Path) -> None:
    # runtime.json written before the key existed: the shim honours the annotations (its default), and says so.
    native(tmp_path)
    write(tmp_path, install.RUNTIME_CONFIG, '{"accept_envvar_unprivileged": false, "accept_volume_mounts": true}')
    found = tk.toolkit(str(tmp_path))
    assert found["accept_cdi_annotations_unprivileged"] is True and found["accept_envvar_unprivileged"] is False


def test_the_runtime_config_defaults_when_missing_or_broken(tmp_path: Path) -> None:
    native(tmp_path, "/opt/gpu/bin")
    assert tk.toolkit(str(tmp_path)) is None  # not in the default bindir
    write(tmp_path, install.RUNTIME_CONFIG, "{not json")
    found = tk.toolkit(str(tmp_path), "/opt/gpu/bin")
    assert found["runtime_path"] == "/opt/gpu/bin/gpufleet-container-runtime"
    assert (found["accept_envvar_unprivileged"], found["accept_volume_mounts"]) == (True, False)
    assert found["accept_cdi_annotations_unprivileged"] is True


def test_a_program_of_the_same_name_that_is_not_ours_is_not_the_toolkit(tmp_path: Path) -> None:
    write(tmp_path, "/usr/local/bin/gpufleet-container-runtime", '#!/bin/sh\nexec runc "$@"\n', 0o755)
    assert tk.toolkit(str(tmp_path)) is None
    native(tmp_path, programs=("gpufleet-cdi-hook",))
    write(tmp_path, "/usr/local/bin/gpufleet-container-runtime", install.launcher(tk.SHIM, "/l"), 0o644)
    assert tk.toolkit(str(tmp_path)) is None  # not executable


def test_nvidias_packages_with_the_collections_helpers(tmp_path: Path) -> None:
    for path in tk.NVIDIA_PROGRAMS:
        write(tmp_path, path, "\x7fELF", 0o755)
    native(tmp_path, programs=install.HELPER_PROGRAMS)
    write(
        tmp_path,
        tk.NVIDIA_CONFIG,
        "accept-nvidia-visible-devices-envvar-when-unprivileged = false\n"
        "accept-nvidia-visible-devices-as-volume-mounts = true\n[nvidia-container-cli]\n",
    )
    found = tk.toolkit(str(tmp_path))
    assert found["provider"] == "nvidia"
    assert found["runtime_path"] == "/usr/bin/nvidia-container-runtime"
    assert found["hook_path"] == "/usr/local/bin/gpufleet-cdi-hook"
    assert found["programs"] == list(tk.NVIDIA_PROGRAMS) + [f"/usr/local/bin/{n}" for n in install.HELPER_PROGRAMS]
    assert (found["accept_envvar_unprivileged"], found["accept_volume_mounts"]) == (False, True)
    assert found["accept_cdi_annotations_unprivileged"] is True  # NVIDIA's runtime has no such setting


def test_nvidias_defaults_without_its_config(tmp_path: Path) -> None:
    write(tmp_path, "/usr/bin/nvidia-container-runtime", "\x7fELF", 0o755)
    found = tk.toolkit(str(tmp_path))
    assert found["hook_path"] is None
    assert (found["accept_envvar_unprivileged"], found["accept_volume_mounts"]) == (True, False)


def test_the_cdi_spec_and_its_stamp(tmp_path: Path) -> None:
    write(tmp_path, "/var/run/cdi/nvidia.json", "{}")
    assert tk.cdi_spec(str(tmp_path)) == {"path": "/var/run/cdi/nvidia.json", "driver_version": None}
    write(
        tmp_path,
        "/etc/cdi/nvidia.yaml",
        f"cdiVersion: 0.5.0\nannotations:\n  {DRIVER_VERSION_ANNOTATION}: 535.261.03\n",
    )
    assert tk.cdi_spec(str(tmp_path)) == {"path": "/etc/cdi/nvidia.yaml", "driver_version": "535.261.03"}
    document = {"cdiVersion": "0.6.0", "annotations": {DRIVER_VERSION_ANNOTATION: "550.127.05"}, "devices": []}
    for render in (spec.render_yaml, spec.render_json):
        write(tmp_path, "/etc/cdi/nvidia.yaml", render(document))
        assert tk.cdi_spec(str(tmp_path))["driver_version"] == "550.127.05"


def test_discover_reports_both(tmp_path: Path) -> None:
    native(tmp_path)
    write(tmp_path, "/etc/cdi/nvidia.yaml", "cdiVersion: 0.5.0\n")
    facts = discover(root=str(tmp_path), sources=["sysfs"])
    assert facts["toolkit"]["provider"] == "native"
    assert facts["cdi_spec"]["path"] == "/etc/cdi/nvidia.yaml"
    assert discover(root=str(tmp_path), sources=["sysfs"], toolkit_bindir="/usr/bin")["toolkit"] is None
