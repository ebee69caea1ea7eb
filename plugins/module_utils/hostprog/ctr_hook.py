# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""containerd's ``ctr run --gpus N``: a prestart hook ``containerd oci-hook -- <nvidia-container-cli> --load-kmods
configure --device=N --compute --compat32 --graphics --utility --video --display --pid={{pid}} {{rootfs}}``
(containerd ``contrib/nvidia/nvidia.go`` ``WithGPUs``/``config.args``, the same arguments at v1.6.x, v1.7.x and
v2.1.x; a ``prestart`` hook up to 1.7, a ``createRuntime`` hook in 2.1, as ``ctr c info`` shows on the simulated
nodes; ``cmd/ctr/commands/run/run_unix.go``: ``--gpus`` -> ``WithDevices(ids...)``, ``WithAllCapabilities``).
The hook is written by the ctr client (an image cannot add hooks); the shim turns it into a request and drops it, so
``nvidia-container-cli configure`` never runs (``hostprog/container_cli.py`` says why). Only the exact shape is
recognised and only the flags ``config.args`` can produce are accepted; nothing in it names a path the shim uses.
"""

from __future__ import annotations

import os

from ..cdi.driver_files import CapabilityError, parse_capabilities
from .oci import Request, _check_size, parse_visible_devices
from .oci_config import RequestError, _q

CTR_CLI = "nvidia-container-cli"
CTR_SOURCE = "ctr --gpus (nvidia-container-cli hook)"
MAX_CTR_ARGS = 64
# nvidia-container-cli's global flags as WithGPUs writes them (the ``--ldcache`` a caller may set is refused:
# the shim injects from its own index, never from another cache).
_CTR_GLOBAL_FLAGS = ("--load-kmods",)
_CTR_CAPABILITIES = ("compute", "compat32", "graphics", "utility", "video", "display")


def _ctr_cli_args(hook: dict) -> list[str] | None:
    """The arguments after ``<nvidia-container-cli>`` of a ctr GPU hook, or None when ``hook`` is not one."""
    args = hook.get("args") or []
    if len(args) < 4 or args[1:3] != ["oci-hook", "--"] or not isinstance(args[3], str):
        return None
    if os.path.basename(args[3]) != CTR_CLI:
        return None
    return args[4:]


CTR_HOOK_PHASES = ("prestart", "createRuntime")


def _ctr_hooks(config: dict) -> list[dict]:
    hooks = config.get("hooks") or {}
    return [h for phase in CTR_HOOK_PHASES for h in (hooks.get(phase) or ()) if _ctr_cli_args(h) is not None]


def has_ctr_hook(config: dict) -> bool:
    return bool(_ctr_hooks(config))


def ctr_hook_request(config: dict) -> Request | None:
    """The GPU request of ctr's ``--gpus`` hook in ``config`` (checked by ``check_config``), or None when there is
    none. Devices: ``--device`` (comma lists; none given: driver files only, as ``configure`` without a device);
    capabilities: the ``--<capability>`` flags (none: ``utility,compute``); ``--require=<constraint>``: checked
    like ``NVIDIA_REQUIRE_*`` (and only these: ``configure`` never reads the image's variables). Anything else
    ``config.args`` cannot produce is a ``RequestError``, so a hand-made hook cannot smuggle options in."""
    hooks = _ctr_hooks(config)
    if not hooks:
        return None
    if len(hooks) > 1:
        raise RequestError(f"config.json has {len(hooks)} {CTR_CLI} hooks; ctr run --gpus writes one")
    args = _ctr_cli_args(hooks[0])
    if len(args) > MAX_CTR_ARGS:
        raise RequestError(f"the {CTR_CLI} hook has more than {MAX_CTR_ARGS} arguments")
    for arg in args:
        if not isinstance(arg, str):
            raise RequestError(f"the {CTR_CLI} hook has an argument that is not a string")
        _check_size(arg, f"an argument of the {CTR_CLI} hook")
    try:
        at = args.index("configure")
    except ValueError:
        raise RequestError(f"the {CTR_CLI} hook does not run configure") from None
    for arg in args[:at]:
        if arg not in _CTR_GLOBAL_FLAGS:
            raise RequestError(f"the {CTR_CLI} hook has a flag ctr run --gpus does not write: {_q(arg)}")
    devices = []
    capabilities = []
    requirements = {}
    positional = []
    for arg in args[at + 1 :]:
        name, sep, value = arg.partition("=")
        if name == "--device" and sep:
            devices.append(value)
        elif name == "--require" and sep:
            requirements[f"NVIDIA_REQUIRE_CTR_{len(requirements)}"] = value
        elif not sep and name.startswith("--") and name[2:] in _CTR_CAPABILITIES:
            capabilities.append(name[2:])
        elif arg == "--no-cgroups" or (name == "--pid" and sep):
            continue  # what the shim does does not depend on them
        elif not arg.startswith("-"):
            positional.append(arg)
        else:
            raise RequestError(f"the {CTR_CLI} hook has a flag ctr run --gpus does not write: {_q(arg)}")
    if len(positional) != 1:
        raise RequestError(f"the {CTR_CLI} hook names {len(positional)} root file systems; ctr writes one")
    names = parse_visible_devices(",".join(devices)) if devices else []
    try:
        caps = parse_capabilities(",".join(capabilities) or None)
    except CapabilityError as exc:  # not reached: the names are checked above
        raise RequestError(f"the {CTR_CLI} hook: {exc}") from None
    return Request(names or [], caps, requirements, CTR_SOURCE)


def remove_ctr_hooks(config: dict) -> bool:
    """Drop ctr's ``nvidia-container-cli`` hooks (``prestart`` or ``createRuntime``); True when there was one."""
    hooks = config.get("hooks") or {}
    removed = False
    for phase in CTR_HOOK_PHASES:
        listed = hooks.get(phase) or []
        kept = [h for h in listed if _ctr_cli_args(h) is None]
        if len(kept) == len(listed):
            continue
        removed = True
        if kept:
            hooks[phase] = kept
        else:
            hooks.pop(phase, None)
    if removed and not hooks:
        config.pop("hooks", None)
    return removed


def fit_ctr_capabilities(request: Request, index: dict) -> Request:
    """ctr asks for every capability (``WithAllCapabilities``); ``configure`` injects what the host has. Keep the
    requested capabilities the CDI spec was generated with (all of them when the index does not say)."""
    provided = index.get("capabilities")
    if provided:
        request.capabilities = tuple(c for c in request.capabilities if c in provided)
    return request
