# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The write side of the engine adapters: plan (through the editors), validate (the engine's own check) and
probe, driven by a job as the container_runtime module's runner is one."""

import os

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.base.fileio import read_text
from ansible_collections.gpufleet.nvidia.plugins.module_utils.runtime import base
from ansible_collections.gpufleet.nvidia.plugins.module_utils.runtime.adapters import adapter

SHIM = "/usr/local/bin/nvidia-shim"


class Job(base.Job):
    def __init__(self, engine, tmp_path, version=None, bins=(), check_out="", **params):
        self.engine = adapter(engine)
        self.request = base.Request(engine, **{"path": SHIM, "set_as_default": False, **params})
        self.config_path = str(tmp_path / os.path.basename(self.engine.config_path))
        drop_in = params.get("drop_in", True)
        self.drop_in = (
            str(
                tmp_path
                / (os.path.basename(os.path.dirname(self.engine.drop_in)))
                / os.path.basename(self.engine.drop_in)
            )
            if self.engine.drop_in and drop_in
            else None
        )
        self.version = version
        self.unit_root = str(tmp_path)  # the docker unit's files (dockerd's flags) are read under the test's tree
        self.result = base.Result(config_file="", engine_version="")
        self.warnings = []
        self.bins = set(bins)
        self.checks = []
        self.check_out = check_out
        self.planned = {}

    def read(self, path):
        text = read_text(path)
        return ("", False) if text is None else (text, True)

    def warn(self, msg):
        self.warnings.append(msg)

    def bin_path(self, name):
        return f"/usr/bin/{name}" if name in self.bins else None

    def new_text(self, path):
        return self.planned[path] if path in self.planned else self.read(path)[0]

    def check(self, cmd, how):
        files = {a: read_text(a) for a in cmd if a.endswith((".json", ".toml", ".conf")) and os.path.isfile(a)}
        self.checks.append((cmd, how, files))
        self.result.validated_by = how
        return self.check_out

    def fail(self, msg, **extra):
        raise AssertionError(msg)

    def plan(self):
        planned = self.engine.plan(self)
        self.planned = {p.path: p.edit.text or "" for p in planned if p.edit.changed}
        return planned


def test_docker_plans_daemon_json_and_validates_with_dockerd_from_23(tmp_path):
    job = Job("docker", tmp_path, version=(28, 0, 4), bins=["dockerd", "docker"], cdi=True)
    (planned,) = job.plan()
    assert planned.path == job.config_path and not planned.existed and planned.edit.changed
    (tmp_path / "scratch").mkdir()
    job.engine.validate(job, str(tmp_path / "scratch"))
    cmd, how, files = job.checks[0]
    assert how == "dockerd --validate" and cmd[:2] == ["/usr/bin/dockerd", "--validate"]
    assert '"nvidia"' in files[cmd[-1]] and '"cdi": true' in files[cmd[-1]]  # the candidate, not the live file
    assert not os.path.exists(job.config_path)
    assert job.engine.probe(job.bin_path) == ["/usr/bin/docker", "info"]


def test_docker_before_23_is_checked_by_parsing_only(tmp_path):
    job = Job("docker", tmp_path, version=(20, 10, 24), bins=["dockerd"])
    job.plan()
    job.engine.validate(job, str(tmp_path))
    assert job.result.validated_by == "parse" and not job.checks
    assert job.engine.probe(lambda name: None) is None


def test_containerd_plans_main_and_drop_in_and_dumps_the_candidate_pair(tmp_path):
    (tmp_path / "config.toml").write_text('version = 2\nimports = ["conf.d/*.toml"]\n')
    job = Job("containerd", tmp_path, version=(1, 7, 24), bins=["containerd", "ctr"], check_out="runtimes.nvidia]")
    planned = job.plan()
    assert [p.path for p in planned] == [job.config_path, job.drop_in]
    assert not planned[0].edit.changed  # the glob already imports the drop-in
    assert job.result.config_version == 2
    (tmp_path / "scratch").mkdir()
    job.engine.validate(job, str(tmp_path / "scratch"))  # the scratch folder is the module's
    cmd, how, files = job.checks[0]
    assert how == "containerd config dump"
    candidate = files[cmd[2]]
    # the candidate main file imports the candidate drop-in (last, so it wins over the live copy)
    assert str(tmp_path / "scratch" / "99-gpufleet-nvidia.toml") in candidate
    assert job.engine.probe(job.bin_path) == ["/usr/bin/ctr", "version"]


def test_containerd_dump_without_our_runtime_fails(tmp_path):
    job = Job("containerd", tmp_path, version=(1, 7, 24), bins=["containerd"], check_out="version = 2\n")
    job.plan()
    (tmp_path / "scratch").mkdir()
    with pytest.raises(AssertionError, match="does not see runtime 'nvidia'"):
        job.engine.validate(job, str(tmp_path / "scratch"))


def test_containerd_drop_in_copies_the_cri_table_of_the_last_import_before_2_1(tmp_path):
    (tmp_path / "conf.d").mkdir()
    (tmp_path / "config.toml").write_text(
        'version = 2\nimports = ["/nonexistent/*.toml", "conf.d/10-admin.toml"]\n'
        '[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "main"\n'
    )
    (tmp_path / "conf.d" / "10-admin.toml").write_text(
        '[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "admin"\n'
    )
    job = Job("containerd", tmp_path, version=(1, 7, 24))
    drop = job.plan()[1].edit.text
    assert 'sandbox_image = "admin"' in drop and '"main"' not in drop  # a versionless import counts as v2
    job = Job("containerd", tmp_path, version=(2, 1, 1))
    assert "sandbox_image" not in job.plan()[1].edit.text  # from 2.1 on: only our keys


def test_crio_plans_a_drop_in_with_the_monitor_of_the_default_runtime(tmp_path):
    (tmp_path / "crio.conf").write_text('[crio.runtime]\ndefault_runtime = "crun"\n')
    (tmp_path / "crio.conf.d").mkdir()
    (tmp_path / "crio.conf.d" / "10-crun.conf").write_text(
        '[crio.runtime.runtimes.crun]\nmonitor_path = "/usr/libexec/crio/conmon"\n'
    )
    (tmp_path / "crio.conf.d" / "10-crun.conf.rpmsave").write_text(
        '[crio.runtime.runtimes.crun]\nmonitor_path = "/old"\n'
    )
    job = Job("crio", tmp_path, version=(1, 30, 4), bins=["crio", "crictl"], cdi=True)
    (planned,) = job.plan()
    assert planned.path == job.drop_in and 'monitor_path = "/usr/libexec/crio/conmon"' in planned.edit.text
    assert job.warnings and "CRI-O enables CDI by itself" in job.warnings[0]
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    job.engine.validate(job, str(scratch))
    cmd, how, _files = job.checks[0]
    assert how == "crio config" and cmd[cmd.index("--config-dir") + 1] == str(scratch / "crio.conf.d")
    assert sorted(os.listdir(scratch / "crio.conf.d")) == ["10-crun.conf", "99-gpufleet-nvidia.conf"]
    assert job.engine.probe(job.bin_path)[-1] == "version"


def test_absent_plans_the_removal_of_our_drop_in(tmp_path):
    job = Job("crio", tmp_path, version=(1, 30, 4))
    os.makedirs(os.path.dirname(job.drop_in))
    with open(job.drop_in, "w") as f:
        f.write(job.plan()[0].edit.text)
    job.request = job.request._replace(state="absent")
    (planned,) = job.plan()
    assert planned.existed and planned.edit.text is None and planned.edit.changed


def test_podman_is_not_configured(tmp_path):
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.runtime.podman.facts import Podman

    with pytest.raises(NotImplementedError, match="podman"):
        Podman().plan(None)


def test_docker_refuses_to_write_what_a_unit_flag_conflicts_with(tmp_path):
    """dockerd --add-runtime in a drop-in (here through DOCKER_OPTS from an EnvironmentFile): daemon.json's runtimes
    would make dockerd refuse to start, so plan fails first, naming the file, the flag and the fix."""
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.runtime.common import RuntimeConfigError

    unit = tmp_path / "lib/systemd/system/docker.service"
    unit.parent.mkdir(parents=True)
    unit.write_text(
        "[Service]\nEnvironmentFile=-/etc/default/docker\nExecStart=/usr/sbin/dockerd -H fd:// $DOCKER_OPTS\n"
    )
    (tmp_path / "etc/default").mkdir(parents=True)
    (tmp_path / "etc/default/docker").write_text(
        'DOCKER_OPTS="--add-runtime nvidia=/usr/bin/nvidia-container-runtime"\n'
    )
    job = Job("docker", tmp_path, version=(20, 10, 24))
    with pytest.raises(RuntimeConfigError) as err:
        job.plan()
    msg = str(err.value)
    assert err.value.path == "/etc/default/docker" and "'--add-runtime nvidia=/usr/bin/nvidia-container-runtime'" in msg
    assert "remove --add-runtime from /etc/default/docker" in msg and "systemctl daemon-reload" in msg
    assert not os.path.exists(job.config_path)
    # absent removes runtimes: no conflict left, allowed; and a unit without such flags plans as before
    assert Job("docker", tmp_path, state="absent").plan()[0].edit.changed is False
    (tmp_path / "etc/default/docker").write_text("# DOCKER_OPTS=\n")
    assert job.plan()[0].edit.changed
