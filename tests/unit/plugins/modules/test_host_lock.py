# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The host_lock module's main(): take, take again, refuse another owner naming the holder, release."""

import json
import os

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpufleet.nvidia.plugins.modules import host_lock

pytestmark = pytest.mark.controller


@pytest.fixture
def result(capsys, tmp_path):
    path = str(tmp_path / "site.lock")

    def _run(**args):
        with patch_module_args({"path": path, **args}), pytest.raises(SystemExit) as exc:
            host_lock.main()
        out = json.loads(capsys.readouterr().out)
        out["rc_exit"] = exc.value.code
        return out

    yield _run, path
    holder = host_lock.hostlock.read_holder(path)
    if holder.get("pid"):
        try:
            os.kill(holder["pid"], 9)
            os.waitpid(holder["pid"], 0)
        except (ProcessLookupError, ChildProcessError):
            pass


def test_take_refuse_release(result):
    run, path = result
    first = run(owner="run-a", lease=60)
    assert first["acquired"] and not first["changed"] and first["holder"]["owner"] == "run-a"
    again = run(owner="run-a", _ansible_check_mode=True)
    assert not again["acquired"] and again["holder"]["pid"] == first["holder"]["pid"]
    busy = run(owner="run-b", timeout=0)
    assert busy["failed"] and busy["path"] == path and busy["holder"]["owner"] == "run-a"
    assert f"holder PID {first['holder']['pid']}" in busy["msg"] and path in busy["msg"]
    assert not run(owner="run-b", state="absent")["released"]
    released = run(owner="run-a", state="absent")
    assert released["released"] and not released["changed"]
    os.waitpid(first["holder"]["pid"], 0)
    assert run(owner="run-b", timeout=0, lease=1)["acquired"]


def test_a_lock_file_that_cannot_be_opened_is_named(result, tmp_path):
    run, _path = result
    (tmp_path / "file").write_text("")
    r = run(owner="run-a", path=str(tmp_path / "file" / "site.lock"))
    assert r["failed"] and "cannot use the host's lock file" in r["msg"] and str(tmp_path / "file") in r["msg"]
