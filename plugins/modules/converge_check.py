#!/usr/bin/python
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: converge_check
short_description: Discover a host, take its lock for the run and tell which stamped stages are stale, in one call
version_added: 1.0.0
description:
  - The first call of a C(site.yml) run on a host, and for a host that nothing changed since the last run the only one
    before validation. It does in one module process what M(gpufleet.nvidia.gpu_facts), M(gpufleet.nvidia.host_lock)
    and one M(gpufleet.nvidia.stage_stamp) check per stamped stage do.
  - Discovers the host (the facts C(ansible_facts.nvidia), as M(gpufleet.nvidia.gpu_facts) returns them), then takes
    the lock at O(lock_path) for O(owner) (waiting at most O(timeout) seconds; a lock another run keeps is returned as
    RV(lock_busy), not as a failure, so the facts still reach the report), then checks each stage of O(plan.stages)
    in order against its stamp, as M(gpufleet.nvidia.stage_stamp) with O(gpufleet.nvidia.stage_stamp#module:state=check)
    does (a stale stamp is removed outside check mode). The stages after the first stale one are not checked here
    (RV(stale) lists them) - a stale stage runs first, and what it changes is in their check, made in their own play.
  - The host is RV(converged) when it has no GPU (no stage acts on it), or when every stage of O(plan.stages) is
    current, O(plan.fast_path) is true, O(plan.hold) is false and no MIG boot unit holds a layout. The lock stays held
    after the call (the stages that act on every host and validation follow), unless the host is done and
    O(plan.release_done) is true; give it back with
    M(gpufleet.nvidia.host_lock) (O(gpufleet.nvidia.host_lock#module:state=absent)), as C(site.yml) does before the
    report.
  - The facts of the stages' stamped runs (RV(published)) are returned, and for a converged host also as the fact
    C(gpufleet_published) (RV(ansible_facts)), with C(gpufleet_stage_reached=validate) on a GPU node, so no task
    publishes them again; the plays read C(ansible_facts.gpufleet_published.<name>) where a stage did not set the
    fact itself.
  - For a converged host on which no later play acts (no Slurm stage - no C(slurmd), not a Slurm controller), the
    module validates GPU containers in the same call when O(plan.validate.run) is true, as the
    C(gpufleet.nvidia.validate) role would (the same checks, one container run per engine and mode, the same
    C(gpufleet_validate) fact, returned in C(ansible_facts.gpufleet_published)); the host is done (RV(route)), and
    with O(plan.release_done) its lock is given back. Where the role must act first (Fabric Manager to wait for on
    an NVSwitch host, an image missing from an engine, O(plan.validate.pull=always)), the host is left to it
    (RV(validate_here) says why).
  - For a host that is not converged (RV(route) C(stale), so it enters the stage plays), RV(ansible_facts) also
    holds what Ansible's own fact collectors for the platform, the distribution, Python, the package manager and the
    service manager report (C(distribution), C(distribution_major_version), C(os_family), C(architecture), C(kernel),
    C(nodename), C(python), C(pkg_mgr), C(service_mgr) and the others of those collectors), under the names
    M(ansible.builtin.setup) gives them. The roles' plans read them, and no role gathers them again.
  - The stamps and the lock are the collection's bookkeeping, not host configuration - the module never reports a
    change (validation runs containers with C(--rm) and loads or pulls nothing).
author:
  - gpufleet.nvidia contributors (@gpufleet)
attributes:
  check_mode:
    support: full
    description: Reads as outside check mode; a stale stamp is not removed. The lock is taken as outside check mode
      (a dry run must not overlap a real one either).
  diff_mode:
    support: none
    description: Changes no configuration.
  idempotent:
    support: full
    description: Never reports a change.
options:
  owner:
    description: The run that takes the lock (C(site.yml)'s run id).
    type: str
    required: true
  lock:
    description: Take the host lock (C(gpufleet_lock)); false checks without it.
    type: bool
    default: true
  lock_path:
    description: The lock file (see M(gpufleet.nvidia.host_lock)).
    type: path
    default: /run/gpufleet-nvidia/site.lock
  timeout:
    description: Seconds to wait for a lock another run holds.
    type: int
    default: 600
  lease:
    description: Seconds the lock's holder keeps it at most when the run never gives it back.
    type: int
    default: 10800
  toolkit_bindir:
    description: Where the toolkit role put its programs (discovery reads them there).
    type: path
    default: /usr/local/bin
  plan:
    description:
      - What to check, as P(gpufleet.nvidia.stage_stamp_plan#filter) gives it for the host.
    type: dict
    required: true
    suboptions:
      fast_path:
        description: Check the stamps (C(gpufleet_fast_path)); false checks none, and only a host without a GPU is
          converged.
        type: bool
        default: true
      hold:
        description: A stage without a stamp acts on the host this run (a MIG layout, a Kubernetes node's device
          plugin).
        type: bool
        default: false
      stages:
        description: The stamped stages, in the order of the run.
        type: list
        elements: dict
        default: []
        suboptions:
          stage:
            description: The stage; its stamp is V(<dir>/<stage>.json).
            type: str
            required: true
          inputs:
            description: What the stage is asked (see M(gpufleet.nvidia.stage_stamp)).
            type: raw
            default: {}
          paths:
            description: The files the stage owns (see M(gpufleet.nvidia.stage_stamp)).
            type: list
            elements: str
            default: []
          units:
            description: The systemd units the stage owns.
            type: list
            elements: str
            default: []
          packages:
            description: Regular expressions of the packages the stage owns.
            type: list
            elements: str
            default: []
          engine_configs:
            description: Add each configuration file discovery found for a container engine to the stage's paths.
            type: bool
            default: false
          published_inputs:
            description: Names in the stage's inputs whose values are the facts an earlier stage's stamp published.
            type: list
            elements: str
            default: []
      slurm_controller:
        description: The host is one of the Slurm controllers (C(slurm_controller_group)); the Slurm stage acts on it.
        type: bool
        default: false
      release_done:
        description: Give the lock back at the end of the call when the host is done (RV(route) C(done) or
          C(validate_failed)), for a play that leaves such a host out from here on, as C(site.yml) does.
        type: bool
        default: false
      validate:
        description:
          - The validation of a converged host, with the C(gpufleet.nvidia.validate) role's variables (as
            P(gpufleet.nvidia.stage_stamp_plan#filter) gives them, at the role's defaults where the host sets none).
        type: dict
        default: {}
        suboptions:
          run:
            description: The validate stage is in this run (its tag); false validates nothing here.
            type: bool
            default: false
          image:
            description: C(validate_image).
            type: str
            default: docker.io/library/ubuntu:24.04
          image_archive:
            description: C(validate_image_archive) (only whether it is set matters here).
            type: str
            default: ""
          pull:
            description: C(validate_pull).
            type: str
            choices: [missing, never, always]
            default: missing
          engines:
            description: C(validate_engines).
            type: list
            elements: str
            default: []
          device_nodes:
            description: C(validate_device_nodes).
            type: list
            elements: str
            default: []
          nvidia_smi:
            description: C(validate_nvidia_smi).
            type: bool
            default: true
          fail_on_error:
            description: C(validate_fail_on_error).
            type: bool
            default: true
          timeout:
            description: C(validate_timeout).
            type: int
            default: 120
          runtime_path:
            description: C(validate_runtime_path).
            type: path
            default: /usr/local/bin/gpufleet-container-runtime
          containerd_namespace:
            description: C(validate_containerd_namespace).
            type: str
            default: default
  dir:
    description: Where the stamps are.
    type: path
    default: /var/lib/gpufleet-nvidia/stamps
"""

EXAMPLES = r"""
- name: Take the lock, discover the host and check every stamped stage
  gpufleet.nvidia.converge_check:
    owner: "{{ gpufleet_run_id }}"
    plan: "{{ hostvars[inventory_hostname] | gpufleet.nvidia.stage_stamp_plan }}"
  register: converge
"""

RETURN = r"""
ansible_facts:
  description: C(nvidia), the host's discovery facts (see M(gpufleet.nvidia.gpu_facts)); C(gpufleet_published), the
    facts of the stamped runs and C(gpufleet_stage_reached) (C(validate), GPU nodes only) of a converged host, empty
    for a host that is not converged; for a host RV(route) C(stale), also the platform, distribution, Python, package
    manager and service manager facts, as M(ansible.builtin.setup) names them.
  returned: always
  type: dict
converged:
  description: Nothing of the stamped stages, and no other stage, acts on the host in this run.
  returned: always
  type: bool
stale:
  description: The stages of O(plan.stages) that run (in full, or checked again in their play).
  returned: always
  type: list
  elements: str
reasons:
  description: Each checked stage's verdict in words.
  returned: always
  type: dict
unstamped:
  description: The stages of RV(stale) that have no stamp after the call (none was written, or a stale one was
    removed) - stale in their play too, where the stamp is not checked again.
  returned: always
  type: list
  elements: str
published:
  description: The facts the current stages' stamped runs published.
  returned: always
  type: dict
lock_held:
  description: The run holds the host's lock after the call.
  returned: always
  type: bool
holder:
  description: The lock holder's description (owner, pid, started, lease_until).
  returned: always
  type: dict
slurmd:
  description: C(slurmd) is installed (found where M(gpufleet.nvidia.slurm_gres) looks for it); the Slurm stage acts
    on a GPU node only where it is.
  returned: always
  type: bool
route:
  description:
    - The host's way through C(site.yml), decided here.
    - C(stale) - not converged (every stage play); C(converged) - converged, the Slurm stage acts on it (the Slurm play,
      validation, the lock's release); C(quiet) - converged, its validation is left to the role (RV(validate_here));
      C(done) - converged and validated here (or nothing to validate), the lock given back with
      O(plan.release_done); C(validate_failed) - as
      C(done), but validation failed (RV(validate_failed)).
  returned: unless another run holds the lock
  type: str
  choices: [stale, converged, quiet, done, validate_failed]
validate_here:
  description: Why a converged host's validation is left to the role.
  returned: when RV(route) is C(quiet)
  type: str
validate_failed:
  description: The engines that failed validation here and their messages, with O(plan.validate.fail_on_error).
  returned: when RV(route) is C(validate_failed)
  type: str
lock_released:
  description: The lock was given back at the end of the call (RV(route) C(done) or C(validate_failed), with
    O(plan.release_done)).
  returned: when the lock was given back
  type: bool
lock_busy:
  description: Another run holds the host's lock past O(timeout); what to do, in words (also RV(msg)).
  returned: when another run holds the lock
  type: str
msg:
  description: RV(lock_busy), for the task that turns it into a failure.
  returned: when another run holds the lock
  type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.facts.system.distribution import DistributionFactCollector
from ansible.module_utils.facts.system.pkg_mgr import PkgMgrFactCollector
from ansible.module_utils.facts.system.platform import PlatformFactCollector
from ansible.module_utils.facts.system.python import PythonFactCollector
from ansible.module_utils.facts.system.service_mgr import ServiceMgrFactCollector

from ansible_collections.gpufleet.nvidia.plugins.module_utils.base.runner import Host, run_module
from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery.converge import ConvergeResult
from ansible_collections.gpufleet.nvidia.plugins.module_utils.validate import converged

# Ansible's collectors for the facts the roles read of a host that enters the stage plays (the driver role's plan:
# distribution, release, architecture, kernel; the toolkit role: os_family; the runtime role: python; package and
# service actions: pkg_mgr, service_mgr), in the order they build on each other (the service and package manager
# collectors read the platform's and distribution's facts). A role that finds them does not run setup.
OS_COLLECTORS = (
    PlatformFactCollector,
    DistributionFactCollector,
    PythonFactCollector,
    PkgMgrFactCollector,
    ServiceMgrFactCollector,
)


def os_facts(module: AnsibleModule) -> dict:
    """The facts of ``OS_COLLECTORS``, under ``setup``'s names (without the ``ansible_`` prefix)."""
    facts: dict = {}
    for collector in OS_COLLECTORS:
        found = collector().collect(module=module, collected_facts={"ansible_" + k: v for k, v in facts.items()})
        facts.update(found or {})
    return facts


def main() -> None:
    module = AnsibleModule(argument_spec=converged.argspec(), supports_check_mode=True)

    def work(request: converged.Request, host: Host) -> ConvergeResult:
        result = converged.run(request, host)
        if result.route == "stale":
            result.ansible_facts.update(os_facts(module))
        return result

    run_module(module, converged.Request.from_params, work)


if __name__ == "__main__":
    main()
