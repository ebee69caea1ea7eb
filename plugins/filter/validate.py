# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters of the ``gpufleet.nvidia.validate`` role: what to run per container engine, and what its output means.

Pure functions (no I/O), so the role's decisions are unit-tested without a host:

* ``validate_plan(nvidia, runtime=None, toolkit=None, **options)`` -> list of checks, one per engine and mode;
* ``validate_images(plan, present_results, ...)`` -> which engines lack the image, and what to load or pull;
* ``validate_result(plan, results, ...)`` -> the ``gpufleet_validate`` fact;
* ``validate_failure_message(gpufleet_validate)`` -> why the host fails validation ("" when no engine failed);
* ``validate_gpu_uuids(nvidia)`` -> the host's GPU UUIDs, which ``nvidia-smi -L`` in each container must list;
* ``validate_driver_version(nvidia)`` -> the host driver's version, which the container's ``libcuda.so.1`` and
  ``libnvidia-ml.so.1`` must resolve to;
* ``parse_output(stdout)``, ``device_problems``, ``library_problems``, ``dlopen_problem`` -> what the check script in
  the container saw (device nodes and whether each opens, the ld cache entries of the driver libraries, dlopen of
  libcuda), and what is wrong with it;
* ``nvidia_smi_gpus(output)`` / ``nvidia_smi_problem(parsed, expected)`` -> what the container's ``nvidia-smi -L``
  listed, and what is wrong with it (the check NVIDIA's install guides give: ``nvidia-smi`` in a container);
* ``validate_fabric_manager_wait(nvidia, timeout)`` / ``validate_fabric_manager_problem(wait, state)`` -> whether
  this host has NVSwitches and so must wait (bounded) for Fabric Manager before GPU containers run, and what to say
  when it did not come up;
* ``engine_reads_cdi(engine, version)`` -> whether that engine version reads CDI specs (the runtime role's
  decision to turn CDI on; the rule itself is ``runtime.common.reads_cdi``).
"""

from __future__ import annotations

from typing import Any, Callable

from ansible_collections.gpufleet.nvidia.plugins.module_utils.runtime.common import reads_cdi
from ansible_collections.gpufleet.nvidia.plugins.module_utils.validate.plan import (
    fabric_manager_problem,
    fabric_manager_wait,
    gpu_uuids,
    host_driver_version,
    required_device_nodes,
    validate_images,
    validate_plan,
)
from ansible_collections.gpufleet.nvidia.plugins.module_utils.validate.result import failure_message, validate_result


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "validate_plan": validate_plan,
            "validate_images": validate_images,
            "validate_result": validate_result,
            "validate_failure_message": failure_message,
            "validate_device_nodes": required_device_nodes,
            "validate_gpu_uuids": gpu_uuids,
            "validate_driver_version": host_driver_version,
            "engine_reads_cdi": reads_cdi,
            "validate_fabric_manager_wait": fabric_manager_wait,
            "validate_fabric_manager_problem": fabric_manager_problem,
        }
