# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""slurm/node.py: the drain and resume command lines, and where a drain stands from ``scontrol show node``."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.slurm import node

# Shaped after `scontrol show node <name> --oneliner` (https://slurm.schedmd.com/scontrol.html, read 2026-11-27).
SHOW = (
    "NodeName=gpu-a Arch=x86_64 CoresPerSocket=1 CPUAlloc={alloc} CPUTot=2 Gres=gpu:a100-sxm4-40gb:1 "
    "NodeAddr=gpu-a NodeHostName=gpu-a State={state} ThreadsPerCore=1 Partitions=gpu {reason}"
)


def _show(state, reason="", alloc=0):
    return node.parse_show_node(SHOW.format(state=state, reason=reason, alloc=alloc))


def test_command_lines():
    assert node.drain_argv("gpu-a", " driver upgrade to 580 ") == [
        "scontrol",
        "update",
        "NodeName=gpu-a",
        "State=DRAIN",
        "Reason=driver upgrade to 580",
    ]
    assert node.resume_argv("gpu-a") == ["scontrol", "update", "NodeName=gpu-a", "State=RESUME"]
    with pytest.raises(ValueError, match="needs a reason"):
        node.drain_argv("gpu-a", "  ")


@pytest.mark.parametrize(
    ("state", "alloc", "expected"),
    [
        ("IDLE", 0, "in_service"),
        ("MIXED", 1, "in_service"),
        ("IDLE+DRAIN", 0, "drained"),
        ("MIXED+DRAIN", 1, "draining"),
        ("ALLOCATED+DRAIN", 2, "draining"),
        ("COMPLETING+DRAIN", 0, "draining"),
        ("DOWN+DRAIN", 0, "drained"),
    ],
)
def test_drain_state(state, alloc, expected):
    assert node.drain_state(_show(state, "Reason=x [root@2026-11-27T20:00:00]", alloc))["state"] == expected


def test_reason_keeps_its_words():
    fields = _show("IDLE+DRAIN", "Reason=gpufleet: validation failed after driver upgrade [root@2026-11-27T20:00:00]")
    assert node.drain_state(fields)["reason"] == (
        "gpufleet: validation failed after driver upgrade [root@2026-11-27T20:00:00]"
    )
    assert fields["Gres"] == "gpu:a100-sxm4-40gb:1"


def test_unknown_node_refused():
    with pytest.raises(ValueError, match="printed no node"):
        node.parse_show_node("Node gpu-z not found")
