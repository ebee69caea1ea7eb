# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Which of site.yml's plays a host enters after discovery: its route (``converge_check``'s) and the optional stages
(mig, imex, slurm, device_plugin) that act on it, as the names of the groups site.yml puts it in.

Controller only, pure. A stage play whose rule does not hold for a host leaves the host out of its ``hosts``: the host
costs the control node nothing in that play (an include skipped per host costs a forked worker per host and task).
The rules read the host's discovery (``ansible_facts.nvidia``) and inventory variables, which no stage before them
changes: the driver stage rediscovers the host, but neither its GPUs nor the MIG boot unit's layout.
"""

from __future__ import annotations

from typing import Any, Mapping

from ansible_collections.gpufleet.nvidia.plugins.module_utils.validate.converged import ROUTES
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils import imex, kubernetes_node, role_specs, role_vars

# The optional stages, in site.yml's order: a group gpufleet_<stage> holds the hosts each acts on.
OPTIONAL = ("mig", "imex", "slurm", "device_plugin")
# The routes whose hosts an optional stage may act on: every stage play takes the stale hosts; the Slurm play the
# converged ones too (converge_check leaves a host stale when a MIG layout, the device plugin or IMEX acts on it).
_STAGE_ROUTES = {"mig": ("stale",), "imex": ("stale",), "slurm": ("stale", "converged"), "device_plugin": ("stale",)}
# Every group site.yml puts hosts in during a run: not an input of any stage (stage_stamp leaves them out).
RUN_GROUPS = frozenset(["gpufleet_" + route for route in ROUTES] + ["gpufleet_" + stage for stage in OPTIONAL])


# The tasks file of a stage's role that site.yml runs, where it is not the role's main.yml: main.yml less what only a
# role run alone needs - its own discovery (site.yml's converge_check discovered the host), the OS facts (converge_check
# returns them for every host that enters the stage plays), the skip of a host without a GPU (the driver, toolkit and
# runtime plays enter GPU nodes only) - and, for the toolkit and runtime roles, the file of the state asked.
_STAGE_TASKS = {"driver": "driver", "toolkit": None, "runtime": None}


def stage_tasks(stage: str, host_vars: Mapping[str, Any]) -> str:
    """The ``tasks_from`` of the stage's role in site.yml (``tasks/stage.yml``): ``driver`` for the driver role;
    ``toolkit`` / ``runtime`` (the role's ``<stage>_state`` present) or ``absent`` for those two; ``main`` for the
    others. ``ValueError`` for a state other than present or absent."""
    if stage not in _STAGE_TASKS:
        return "main"
    if _STAGE_TASKS[stage]:
        return _STAGE_TASKS[stage]
    var = f"{stage}_state"
    value = host_vars.get(var)
    if value is None or value == "":
        value = role_specs.specs()[stage][var].get("default")
    if value not in ("present", "absent"):
        raise ValueError(f"{var}: {value!r} is not present or absent")
    return stage if value == "present" else "absent"


def _group_names(host: str, groups: Mapping[str, Any]) -> list[str]:
    return [str(name) for name, members in groups.items() if host in [str(member) for member in members or []]]


def acts(stage: str, host: Any, host_vars: Mapping[str, Any], groups: Mapping[str, Any] | None) -> bool:
    """Whether the optional ``stage`` acts on ``host``.

    * mig: a GPU node with a ``mig_layout``, or whose MIG boot unit still applies a layout (an emptied ``mig_layout``:
      the role takes the unit off; the partitions stay).
    * imex: a GPU node in a group that ``imex_domain_groups`` names (in two: the stage runs and says why it fails).
    * slurm: a GPU node where ``converge_check`` found slurmd (or did not look), or a host of
      ``slurm_controller_group`` (default ``slurm_controllers``).
    * device_plugin: the ``device_plugin_node`` rule (a Kubernetes node with a GPU).

    ``ValueError`` for an unknown stage or a bad ``device_plugin_enabled``."""
    host = str(host)
    groups = groups or {}
    facts = host_vars.get("ansible_facts") or {}
    nvidia = facts.get("nvidia") or {}
    gpu = kubernetes_node.has_gpu(nvidia)
    if stage == "mig":
        boot = nvidia.get("mig_boot") or {}
        return gpu and (bool(host_vars.get("mig_layout")) or boot.get("layout") is not None)
    if stage == "imex":
        return gpu and imex.in_domain(_group_names(host, groups), host_vars.get("imex_domain_groups"))
    if stage == "slurm":
        converge = host_vars.get("_gpufleet_converge") or {}
        controllers = host_vars.get("slurm_controller_group") or "slurm_controllers"
        return (gpu and bool(converge.get("slurmd", True))) or host in [str(m) for m in groups.get(controllers) or []]
    if stage == "device_plugin":
        enabled = role_vars.as_bool(host_vars.get("device_plugin_enabled"), "device_plugin_enabled")
        node_group = host_vars.get("device_plugin_node_group") or None
        return kubernetes_node.device_plugin_node(host, groups, node_group, enabled, nvidia)["node"]
    raise ValueError(f"{stage!r} is not an optional stage of site.yml ({', '.join(OPTIONAL)})")


def route(host_vars: Mapping[str, Any]) -> str:
    """``converge_check``'s route for the host; ``stale`` where it has none (its discovery failed or its lock was busy:
    every stage play then skips it, as it failed)."""
    return str((host_vars.get("_gpufleet_converge") or {}).get("route") or "stale")


def site_groups(host: Any, host_vars: Mapping[str, Any], groups: Mapping[str, Any] | None) -> list[str]:
    """The groups site.yml puts ``host`` in after discovery: ``gpufleet_<route>``, then ``gpufleet_<stage>`` for each
    optional stage that acts on it from that route."""
    where = route(host_vars)
    names = ["gpufleet_" + where]
    names += [
        "gpufleet_" + stage
        for stage in OPTIONAL
        if where in _STAGE_ROUTES[stage] and acts(stage, host, host_vars, groups)
    ]
    return names
