#!/usr/bin/python
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: takeover
short_description: Record what taking a host over from NVIDIA's toolkit moves aside, and give it back
version_added: 1.0.0
description:
  - O(state=present) records the state of NVIDIA's C(nvidia-cdi-refresh) units (enabled, masked, active) before the
    C(gpufleet.nvidia.runtime) role masks them, in the takeover record O(record_path). The CDI specs
    M(gpufleet.nvidia.cdi_spec) moves aside and the C(daemon.json) values M(gpufleet.nvidia.container_runtime)
    replaces go into the same record. The first state recorded stays (a second run finds the units masked already).
  - O(state=absent) gives back what the record names - each spec moved aside goes back to its name, unless a spec
    that is not this collection's is there again (NVIDIA's refresh wrote one; it is never overwritten, the backup stays
    and RV(kept) says so); each unit is unmasked only when it was not masked before, enabled or disabled as it was, and
    started when it was active - then drops those entries from the record, and the record and its folder when
    nothing is left. The C(daemon.json) values are given back by M(gpufleet.nvidia.container_runtime) O(state=absent).
author:
  - gpufleet.nvidia contributors (@gpufleet)
attributes:
  check_mode:
    support: full
    description: Reports what would be recorded or given back and changes nothing.
  diff_mode:
    support: full
    description: Each spec moved back (its backup and path), each unit's systemctl verbs, the record before and after.
  idempotent:
    support: full
    description: A second run records or gives back nothing.
options:
  state:
    description: C(present) records the units' state; C(absent) gives back what the record names.
    type: str
    choices: [present, absent]
    default: present
  units:
    description: The units to record (O(state=present)); those not found on the host are left out.
    type: list
    elements: str
    default: [nvidia-cdi-refresh.service, nvidia-cdi-refresh.path]
  record_path:
    description: The takeover record (in the terms of O(root)).
    type: path
    default: /var/lib/gpufleet-nvidia/takeover.json
  root:
    description: Where the host's file system is mounted; systemctl runs only when it is C(/).
    type: path
    default: /
"""

EXAMPLES = r"""
- name: Record NVIDIA's refresh units before masking them
  gpufleet.nvidia.takeover:
    units: [nvidia-cdi-refresh.service, nvidia-cdi-refresh.path]

- name: Give back NVIDIA's CDI specs and units (after removing our spec)
  gpufleet.nvidia.takeover:
    state: absent
"""

RETURN = r"""
recorded:
  description: The units recorded now (O(state=present)), each C({enabled, masked, active}).
  returned: when state is present
  type: dict
  sample: {nvidia-cdi-refresh.path: {enabled: true, masked: false, active: true}}
restored:
  description: The specs moved back, each C({path, backup}) - would be, in check mode.
  returned: when state is absent
  type: list
  elements: dict
kept:
  description:
    - The specs not moved back because a spec that is not ours is at their name again, each C({path, backup, why}).
  returned: when state is absent
  type: list
  elements: dict
units:
  description: The systemctl verbs run on each unit, C({unit, verbs}) - would be, in check mode.
  returned: when state is absent
  type: list
  elements: dict
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.nvidia.plugins.module_utils.base.fileio import atomic_write, read_text
from ansible_collections.gpufleet.nvidia.plugins.module_utils.base.pathsafe import host_path
from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi.spec import DRIVER_VERSION_ANNOTATION
from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery import takeover
from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery.nvidia_toolkit import units as unit_states


def _units_now(module: AnsibleModule, root: str, wanted: list[str] | None = None) -> dict[str, dict]:
    found = unit_states(root)
    for unit, state in found.items():
        if wanted is not None and unit not in wanted:
            continue
        state["active"] = False
        if root == "/":
            rc, out, _err = module.run_command(["systemctl", "is-active", unit])
            state["active"] = rc == 0 and out.strip() == "active"
    return {u: s for u, s in found.items() if wanted is None or u in wanted}


def _save(module: AnsibleModule, path: str, label: str, record: dict) -> None:
    try:
        if takeover.is_empty(record):
            if os.path.lexists(path):
                os.unlink(path)
            folder = os.path.dirname(path)
            if os.path.isdir(folder) and not os.listdir(folder):
                os.rmdir(folder)
        else:
            atomic_write(path, takeover.dump(record), 0o644, makedirs=True)
    except OSError as exc:
        module.fail_json(msg=f"cannot write the takeover record {label}: {exc.strerror or exc}; check its folder")


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
            "units": {
                "type": "list",
                "elements": "str",
                "default": ["nvidia-cdi-refresh.service", "nvidia-cdi-refresh.path"],
            },
            "record_path": {"type": "path", "default": takeover.RECORD_PATH},
            "root": {"type": "path", "default": "/"},
        },
        supports_check_mode=True,
    )
    p = module.params
    root = os.path.abspath(p["root"])
    record_file = host_path(root, p["record_path"])
    text = read_text(record_file, tolerant=True)
    try:
        record = takeover.load(text, p["record_path"])
    except ValueError as exc:
        module.fail_json(msg=f"{exc}; fix it, or move it aside if nothing is to be given back")
    before_text = text or ""

    if p["state"] == "present":
        new = takeover.with_units(record, _units_now(module, root, p["units"]))
        recorded = {u: s for u, s in new["units"].items() if u not in record["units"]}
        result = {"changed": new != record, "recorded": recorded}
        if module._diff:
            result["diff"] = {
                "before": before_text,
                "after": takeover.dump(new) if result["changed"] else before_text,
                "before_header": p["record_path"],
                "after_header": p["record_path"],
            }
        if result["changed"] and not module.check_mode:
            _save(module, record_file, p["record_path"], new)
        module.exit_json(**result)

    def exists(path: str) -> bool:
        return os.path.lexists(host_path(root, path))

    def ours(path: str) -> bool:
        return DRIVER_VERSION_ANNOTATION in (read_text(host_path(root, path), tolerant=True, errors="replace") or "")

    specs = takeover.spec_restores(record, exists, ours)
    verbs = takeover.unit_restores(record, _units_now(module, root)) if record["units"] else []
    new = takeover.after_restore(record, specs)
    restored = [{"path": s["path"], "backup": s["backup"]} for s in specs if s["action"] == "restore"]
    kept = [{"path": s["path"], "backup": s["backup"], "why": s["why"]} for s in specs if s["action"] == "kept"]
    result = {"changed": bool(restored or verbs or new != record), "restored": restored, "kept": kept, "units": verbs}
    for spec in kept:
        module.warn(spec["why"])
    if verbs and root != "/":
        module.fail_json(msg=f"cannot run systemctl for a host mounted at {root}: {verbs}", **result)
    if module._diff:
        diffs = [
            {
                "before": f"{s['backup']} (a CDI spec moved aside by gpufleet.nvidia)\n",
                "after": f"{s['path']} (given back)\n",
                "before_header": s["backup"],
                "after_header": s["path"],
            }
            for s in restored
        ]
        diffs += [
            {"before": "", "after": f"systemctl {' '.join(v['verbs'])} {v['unit']}\n", "after_header": v["unit"]}
            for v in verbs
        ]
        diffs.append(
            {
                "before": before_text,
                "after": "" if takeover.is_empty(new) else takeover.dump(new),
                "before_header": p["record_path"],
                "after_header": p["record_path"],
            }
        )
        result["diff"] = diffs
    if module.check_mode:
        module.exit_json(**result)
    for spec in restored:
        source, target = host_path(root, spec["backup"]), host_path(root, spec["path"])
        try:
            os.replace(source, target)
        except OSError as exc:
            module.fail_json(
                msg=f"cannot move {spec['backup']} back to {spec['path']}: {exc.strerror or exc}; move it yourself",
                **result,
            )
    for entry in verbs:
        for verb in entry["verbs"]:
            rc, out, err = module.run_command(["systemctl", verb, entry["unit"]])
            if rc != 0:
                module.fail_json(
                    msg=f"systemctl {verb} {entry['unit']} failed (rc {rc}): {(err or out).strip()}; the specs were "
                    f"moved back already; give the unit its state back by hand: {entry['verbs']}",
                    **result,
                )
    if new != record:
        _save(module, record_file, p["record_path"], new)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
