# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""base.runner: the request built from the parameters, the result's fields, a failure's message and fields."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.base.runner import Failure, Result, run_module


class Ended(Exception):
    """What exit_json and fail_json do: the module ends."""


class FakeModule:
    def __init__(self, params, check_mode=False, diff=False):
        self.params = params
        self.check_mode = check_mode
        self._diff = diff
        self.warnings = []
        self.ended = None

    def run_command(self, argv):
        return 0, "", ""

    def get_bin_path(self, name):
        return None

    def warn(self, message):
        self.warnings.append(message)

    def exit_json(self, **fields):
        self.ended = ("exit", fields)
        raise Ended

    def fail_json(self, **fields):
        self.ended = ("fail", fields)
        raise Ended


@dataclass(frozen=True)
class Request:
    name: str

    @classmethod
    def from_params(cls, params):
        if not params["name"]:
            raise Failure("name: empty")
        return cls(params["name"])


@dataclass
class Answer(Result):
    changed: bool = False
    name: str = ""
    diff: dict | None = None


def work(request, host):
    if request.name == "bad":
        raise Failure("bad name", changed=False, name=request.name)
    host.warn(f"checked {request.name}")
    answer = Answer(changed=not host.check_mode, name=request.name)
    if host.diff:
        answer.diff = {"before": "", "after": request.name}
    return answer


def _run(params, **kwargs):
    module = FakeModule(params, **kwargs)
    with pytest.raises(Ended):
        run_module(module, Request.from_params, work)
    return module


def test_the_result_is_returned_without_its_unset_fields():
    module = _run({"name": "gpu"})
    assert module.ended == ("exit", {"changed": True, "name": "gpu"})
    assert module.warnings == ["checked gpu"]


def test_the_host_carries_check_and_diff_mode():
    module = _run({"name": "gpu"}, check_mode=True, diff=True)
    assert module.ended == ("exit", {"changed": False, "name": "gpu", "diff": {"before": "", "after": "gpu"}})


def test_a_failure_in_the_work_or_the_request_ends_with_its_message_and_fields():
    assert _run({"name": "bad"}).ended == ("fail", {"msg": "bad name", "changed": False, "name": "bad"})
    assert _run({"name": ""}).ended == ("fail", {"msg": "name: empty"})
