# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The bench's split of a playbook run's controller CPU by task (bench/bench.py's scale section enables it).

The CPU spent between the start of a task and the start of the next one (what ``ansible-playbook`` and its reaped
children used: the forks, the connection's clients) goes to that task. Under the linear strategy a task runs on every
host before the next starts, so a row is that task's cost over all the hosts of the play, its include processing
apart (``include`` rows). Writes ``{"rows": [[name, action, path, cpu_s], ...], "total": cpu_s}`` as JSON to
``GPUFLEET_CPU_PER_TASK`` at the end of the run.

A child's CPU is counted only once it is reaped, and ansible-core reaps a finished worker when it next looks for a
free one, in the next task. So before each reading the callback joins the finished workers (their results are in:
they are only exiting), giving each at most ``JOIN_S``; without that, most of a task's CPU landed on the next one.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import resource
import time

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: cpu_per_task
type: aggregate
short_description: The controller CPU of a playbook run split by task, written as JSON
description:
  - Writes the CPU spent between task starts to the file named by the environment variable C(GPUFLEET_CPU_PER_TASK).
requirements:
  - enabled in the callbacks (C(ANSIBLE_CALLBACKS_ENABLED=cpu_per_task)), from bench/callback_plugins
"""


JOIN_S = 1.0


def _reap():
    """Join this process's finished and exiting workers (bounded by ``JOIN_S`` in all), so their CPU is counted."""
    deadline = time.monotonic() + JOIN_S
    for child in multiprocessing.active_children():  # also reaps the ones already finished
        child.join(max(0.0, deadline - time.monotonic()))


def _cpu():
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "cpu_per_task"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self._rows, self._current = [], ["(start)", "start", ""]
        self._start = self._mark = _cpu()

    def _next(self, name, action, path):
        _reap()
        now = _cpu()
        self._rows.append([*self._current, round(now - self._mark, 4)])
        self._current, self._mark = [name, action, path], now

    def v2_playbook_on_play_start(self, play):
        self._next(play.get_name(), "play", "")

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._next(task.get_name(), task.action, task.get_path() or "")

    def v2_playbook_on_handler_task_start(self, task):
        self._next(task.get_name(), task.action, task.get_path() or "")

    def v2_playbook_on_include(self, included_file):
        self._next(os.path.basename(included_file._filename), "include", included_file._filename)

    def v2_playbook_on_stats(self, stats):
        self._next("(end)", "end", "")
        path = os.environ.get("GPUFLEET_CPU_PER_TASK")
        if path:
            with open(path, "w", encoding="utf-8") as f:
                json.dump({"rows": self._rows, "total": round(_cpu() - self._start, 4)}, f)
