# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""runtime/<engine>/facts.py: what each engine reads and what it makes of it (the read side gpu_facts and the
module share)."""

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.runtime import registry
from ansible_collections.gpufleet.nvidia.plugins.module_utils.runtime.base import runtime_paths, toml_loader
from ansible_collections.gpufleet.nvidia.plugins.module_utils.runtime.containerd import facts as containerd_facts
from ansible_collections.gpufleet.nvidia.plugins.module_utils.runtime.crio import facts as crio_facts
from ansible_collections.gpufleet.nvidia.plugins.module_utils.runtime.docker import facts as docker_facts
from ansible_collections.gpufleet.nvidia.plugins.module_utils.runtime.podman import facts as podman_facts

loads = toml_loader()
pytestmark = pytest.mark.skipif(loads is None, reason="no TOML parser")

V2 = "io.containerd.grpc.v1.cri"


def _ctd(runtimes=(), default=None, cdi=None, version=2, **extra):
    cri = {"containerd": {"runtimes": {r: {"runtime_type": "io.containerd.runc.v2"} for r in runtimes}}}
    if default:
        cri["containerd"]["default_runtime_name"] = default
    if cdi is not None:
        cri["enable_cdi"] = cdi
    cri.update(extra)
    doc = {"plugins": {containerd_facts.CRI_PLUGIN[version or 2]: cri}}
    if version is not None:
        doc["version"] = version
    return doc


@pytest.mark.parametrize(
    ("version", "cdi"), [(None, False), ((28, 1, 9), False), ((28, 2, 0), True), ((29, 0, 0), True)]
)
def test_docker_cdi_default_by_version(version, cdi):
    assert docker_facts.DockerFacts().read([("/etc/docker/daemon.json", None)], version)["cdi_enabled"] is cdi


def test_docker_reads_runtimes_default_and_features():
    data = docker_facts.DockerFacts().parse(
        '{"runtimes": {"nvidia": {}}, "default-runtime": "nvidia", "features": {"cdi": false}}'
    )
    read = docker_facts.DockerFacts().read([("/etc/docker/daemon.json", data)], (28, 5, 0))
    assert read == {
        "runtimes": ["nvidia", "runc"],
        "runtime_paths": {},
        "default_runtime": "nvidia",
        "cdi_enabled": False,
    }
    with pytest.raises(ValueError, match="not a JSON object"):
        docker_facts.DockerFacts().parse("[1]")


def test_containerd_before_2_1_a_later_cri_table_replaces_the_earlier_one():
    """containerd < 2.1 replaces plugins.<id> per imported file: the main file's runtime is gone."""
    main = dict(_ctd(["admin"], default="admin", cdi=True), imports=["/etc/containerd/conf.d/*.toml"])
    drop_in = _ctd(["nvidia"])
    files = [("/etc/containerd/config.toml", main), ("/etc/containerd/conf.d/99.toml", drop_in)]
    old = containerd_facts.ContainerdFacts().read(files, (1, 7, 24))
    assert old == {
        "config_version": 2,
        "runtimes": ["nvidia", "runc"],
        "runtime_paths": {},
        "default_runtime": "runc",
        "cdi_enabled": False,
    }
    new = containerd_facts.ContainerdFacts().read(files, (2, 1, 1))  # merged key by key from 2.1 on
    assert (new["runtimes"], new["default_runtime"], new["cdi_enabled"]) == (["admin", "nvidia", "runc"], "admin", True)
    unknown = containerd_facts.ContainerdFacts().read(files, None)  # an unknown version counts as old
    assert unknown["runtimes"] == ["nvidia", "runc"]


def test_containerd_import_without_version_takes_the_main_files_and_another_version_is_ignored():
    main = {"version": 2, "imports": ["a.toml"]}
    versionless = _ctd(["nvidia"], version=None)
    v3 = _ctd(["other"], version=3)
    read = containerd_facts.ContainerdFacts().read([("m", main), ("a", versionless), ("b", v3)], (1, 7, 0))
    assert read["runtimes"] == ["nvidia", "runc"]


def test_containerd_empty_main_file_version_by_engine_and_cdi_default():
    assert containerd_facts.ContainerdFacts().read([("m", None)], (2, 0, 0))["config_version"] == 3
    assert containerd_facts.ContainerdFacts().read([("m", {})], (1, 7, 0))["config_version"] == 2
    assert containerd_facts.ContainerdFacts().read([("m", None)], (2, 0, 0))["cdi_enabled"] is True
    assert containerd_facts.ContainerdFacts().read([("m", None)], (1, 7, 0))["cdi_enabled"] is False
    assert containerd_facts.ContainerdFacts().read([("m", {"version": 9})], (1, 7, 0))["config_version"] is None


def test_containerd_config_files_follow_imports_in_order(tmp_path):
    (tmp_path / "conf.d").mkdir()
    for name in ("b.toml", "a.toml", "c.txt"):
        (tmp_path / "conf.d" / name).write_text("")
    (tmp_path / "extra.toml").write_text("")
    main = {"imports": ["conf.d/*.toml", str(tmp_path / "extra.toml"), "conf.d/a.toml", 7]}
    import glob

    found = containerd_facts.ContainerdFacts().config_files(
        main, lambda p: sorted(glob.glob(p)), str(tmp_path / "config.toml")
    )
    assert found == [
        str(tmp_path / "conf.d" / "a.toml"),
        str(tmp_path / "conf.d" / "b.toml"),
        str(tmp_path / "extra.toml"),
    ]


def test_effective_cri_returns_the_winning_files_own_table():
    """The editor copies the winner with its comments: replacement hands back the very object."""
    first, second = _ctd(["a"]), _ctd(["b"])
    assert containerd_facts.effective_cri([first, second], 2) is second["plugins"][V2]
    assert containerd_facts.effective_cri([first, {}, None], 2) is first["plugins"][V2]
    assert containerd_facts.effective_cri([{"version": 2}], 2) is None


@pytest.mark.parametrize(("version", "default"), [(None, "runc"), ((1, 30, 4), "runc"), ((1, 31, 0), "crun")])
def test_crio_default_runtime_by_version_and_merge(version, default):
    crio = crio_facts.CrioFacts()
    assert crio.read([("/etc/crio/crio.conf", None)], version)["default_runtime"] == default
    files = [
        ("/etc/crio/crio.conf", loads('[crio.runtime]\ndefault_runtime = "runc"\n')),
        ("/etc/crio/crio.conf.d/99.conf", loads('[crio.runtime.runtimes.nvidia]\nruntime_path = "/x"\n')),
    ]
    assert crio.read(files, version) == {
        "runtimes": ["nvidia", "runc"],
        "runtime_paths": {"nvidia": "/x"},
        "default_runtime": "runc",
        "cdi_enabled": True,
    }


def test_crio_reads_conf_files_of_its_drop_in_folder():
    seen = []
    crio_facts.CrioFacts().config_files(None, lambda p: seen.append(p) or [], "/opt/crio/crio.conf")
    assert seen == ["/opt/crio/crio.conf.d/*.conf"]


def test_podman_reads_defaults_then_etc():
    podman = podman_facts.Podman()
    assert podman.files_before_main() == [podman_facts.PODMAN_DEFAULTS]
    files = [
        (podman_facts.PODMAN_DEFAULTS, loads('[engine]\nruntime = "runc"\n')),
        (podman_facts.PODMAN_PATH, loads('[engine.runtimes]\nnvidia = ["/x"]\n')),
    ]
    assert podman.read(files, None) == {
        "runtimes": ["crun", "nvidia", "runc"],
        "default_runtime": "runc",
        "cdi_enabled": True,
    }


def test_registry_adapters_extend_the_facts():
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.runtime import adapters

    for name in registry.CONFIGURABLE:
        adapter = adapters.adapter(name)
        assert isinstance(adapter, type(registry.FACTS[name])) and adapter.name == name
    assert adapters.adapter("docker").target("/etc/docker/daemon.json", None) == "/etc/docker/daemon.json"
    assert adapters.adapter("containerd").target("/c", "/d") == "/d"


def _unit_tree(root, files):
    for inner, text in files.items():
        path = root / inner.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return str(root)


DEBIAN_UNIT = (
    "[Unit]\nDescription=Docker\n[Service]\nType=notify\nEnvironmentFile=-/etc/default/docker\n"
    "ExecStart=/usr/sbin/dockerd -H fd:// $DOCKER_OPTS\n"
)


def test_dockerd_flags_from_the_unit_its_drop_ins_and_their_environment(tmp_path):
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.runtime.docker.facts import dockerd_flags

    assert dockerd_flags(str(tmp_path)) == []  # no unit at all
    root = _unit_tree(tmp_path, {"/lib/systemd/system/docker.service": DEBIAN_UNIT})
    assert dockerd_flags(root) == []
    # an ExecStart override in a drop-in (the last ExecStart after the reset wins), a continuation line
    _unit_tree(
        tmp_path,
        {
            "/etc/systemd/system/docker.service.d/10-nvidia.conf": (
                "[Service]\nExecStart=\nExecStart=/usr/bin/dockerd --host=fd:// \\\n"
                "  --add-runtime=nvidia=/usr/bin/nvidia-container-runtime --default-runtime nvidia\n"
            )
        },
    )
    drop_in = "/etc/systemd/system/docker.service.d/10-nvidia.conf"
    assert dockerd_flags(root) == [
        {"flag": "--add-runtime nvidia=/usr/bin/nvidia-container-runtime", "option": "runtimes", "file": drop_in},
        {"flag": "--default-runtime nvidia", "option": "default-runtime", "file": drop_in},
    ]
    # DOCKER_OPTS from Environment= in a drop-in; the EnvironmentFile (when it sets it) wins, as in systemd
    (tmp_path / drop_in.lstrip("/")).write_text('[Service]\nEnvironment="DOCKER_OPTS=--default-runtime=runc"\n')
    other = "/run/systemd/system/docker.service.d/20-opts.conf"
    _unit_tree(tmp_path, {other: "[Service]\nEnvironment=FOO=1\n"})
    assert dockerd_flags(root) == [{"flag": "--default-runtime runc", "option": "default-runtime", "file": drop_in}]
    _unit_tree(tmp_path, {"/etc/default/docker": 'DOCKER_OPTS="--add-runtime x=/bin/x"\n'})
    assert dockerd_flags(root) == [
        {"flag": "--add-runtime x=/bin/x", "option": "runtimes", "file": "/etc/default/docker"}
    ]


def test_runtime_paths_are_the_programs_each_engine_runs():
    docker = docker_facts.DockerFacts().parse(
        '{"runtimes": {"nvidia": {"path": "/usr/bin/nvidia-container-runtime"}, "x": {}}}'
    )
    assert docker_facts.DockerFacts().read([("/etc/docker/daemon.json", docker)], (26, 1, 5))["runtime_paths"] == {
        "nvidia": "/usr/bin/nvidia-container-runtime"
    }
    assert runtime_paths({"a": {"options": {"BinaryName": "/b"}}, "c": 3}, ("options", "BinaryName")) == {"a": "/b"}
    assert runtime_paths(None, ("path",)) == {}
