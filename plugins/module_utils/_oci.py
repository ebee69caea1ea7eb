# Copyright (c) gpufleet developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a container asks for, and how CDI edits land in its OCI ``config.json``.

Used by the runtime shim (``gpufleet-container-runtime``) on every GPU container start, so it is pure
standard library, imports nothing heavy, and never reads more than the bundle's ``config.json`` and the
shim's index (the compact JSON sibling of the CDI spec that ``cdi_spec`` writes, see ``_cdi.py``).

The request rules (design notes, section 2):

* ``NVIDIA_VISIBLE_DEVICES``: ``all``; ``none`` (driver files, no GPU); ``void``, empty or unset (not a
  GPU container); or a comma list of indexes, ``GPU-<uuid>``, ``MIG-<uuid>``, ``<gpu>:<mig>``.
* ``NVIDIA_DRIVER_CAPABILITIES``: see ``_driver_files.parse_capabilities``.
* ``NVIDIA_REQUIRE_*``: a space separates alternatives (OR), a comma separates constraints (AND);
  every variable must hold, unless ``NVIDIA_DISABLE_REQUIRE`` is true.
* CDI annotations ``cdi.k8s.io/<key>`` and ``nvidia.cdi.k8s.io/<key>``: comma lists of qualified
  names ``nvidia.com/gpu=<device>``.
* docker ``--gpus`` (20.10): docker appends ``NVIDIA_VISIBLE_DEVICES`` (and maybe
  ``NVIDIA_DRIVER_CAPABILITIES``) to ``process.env`` and a prestart hook
  ``{path: <lookup of nvidia-container-runtime-hook>, args: [nvidia-container-runtime-hook, prestart]}``.

When a variable appears more than once in ``process.env`` the last one wins (docker appends the
``--gpus`` values after the image's own).
"""

import os
import stat

from ._driver_files import CapabilityError, parse_capabilities

KIND = "nvidia.com/gpu"
CDI_ANNOTATION_PREFIXES = ("cdi.k8s.io/", "nvidia.cdi.k8s.io/")
LEGACY_HOOK = "nvidia-container-runtime-hook"
# The annotation the shim leaves in config.json: "these GPUs were injected by gpufleet" (the legacy
# hook entry point reads it from the OCI state and then does nothing).
INJECTED_ANNOTATION = "gpufleet.nvidia/injected"

_TRUE = ("1", "t", "true", "y", "yes", "on")
_CONSTRAINT = r"^([a-z_][a-z0-9_]*)\s*(>=|<=|==|!=|=|>|<)\s*([A-Za-z0-9_.-]+)$"
# ``re`` is imported only where a requirement is checked: the shim's start path stays free of it.


class RequestError(ValueError):
    """A GPU request that cannot be satisfied; the message is the one line the container start fails with."""


def env_dict(env):
    """``process.env`` (a list of ``KEY=value``) -> dict; the last occurrence of a key wins."""
    result = {}
    for item in env or ():
        if not isinstance(item, str):
            continue
        key, sep, value = item.partition("=")
        if sep:
            result[key] = value
    return result


def is_true(value):
    return str(value).strip().lower() in _TRUE


def parse_visible_devices(value):
    """``NVIDIA_VISIBLE_DEVICES`` -> None (not a GPU container), ``[]`` (``none``: driver only),
    ``["all"]`` or the list of requested device names, in the order given, without duplicates."""
    if value is None:
        return None
    value = value.strip()
    if value in ("", "void"):
        return None
    if value == "none":
        return []
    names = []
    for raw in value.split(","):
        part = raw.strip()
        if not part:
            continue
        if part == "all":
            return ["all"]
        if part in ("none", "void"):
            raise RequestError("NVIDIA_VISIBLE_DEVICES: %r cannot be combined with device names" % part)
        if part not in names:
            names.append(part)
    return names or None


def _version_tuple(text):
    import re  # noqa: PLC0415  # see _CONSTRAINT

    parts = []
    for piece in re.split(r"[.-]", text):
        if not piece.isdigit():
            break
        parts.append(int(piece))
    return tuple(parts)


def _compare(have, op, want):
    a, b = _version_tuple(have), _version_tuple(want)
    width = max(len(a), len(b))
    a, b = a + (0,) * (width - len(a)), b + (0,) * (width - len(b))
    return {
        ">=": a >= b,
        "<=": a <= b,
        ">": a > b,
        "<": a < b,
        "=": a == b,
        "==": a == b,
        "!=": a != b,
    }[op]


def check_requirements(env, cuda_version, driver_version, facts=None):
    """Raise ``RequestError`` unless every ``NVIDIA_REQUIRE_*`` in ``env`` (a dict) holds.

    ``cuda``/``driver`` constraints compare versions numerically against ``cuda_version`` and
    ``driver_version``; ``facts`` may add string facts (``brand``, ``arch``) compared for equality.
    A constraint on a fact nobody knows (``brand`` when the index has none) counts as holding: it can
    not be checked without the GPU, and an unknown brand must not make every CUDA image fail.
    """
    if is_true(env.get("NVIDIA_DISABLE_REQUIRE", "")):
        return
    known = {"cuda": cuda_version, "driver": driver_version}
    known.update(facts or {})
    for name in sorted(k for k in env if k.startswith("NVIDIA_REQUIRE_")):
        expression = env[name].strip()
        if not expression:
            continue
        alternatives = expression.split()
        if not any(_holds(alt, known, name) for alt in alternatives):
            raise RequestError(
                "unsatisfied requirement %s=%r (driver %s, CUDA %s)"
                % (name, expression, driver_version or "unknown", cuda_version or "unknown")
            )


def _holds(alternative, known, name):
    import re  # noqa: PLC0415  # see _CONSTRAINT

    for raw in alternative.split(","):
        constraint = raw.strip()
        if not constraint:
            continue
        match = re.match(_CONSTRAINT, constraint)
        if not match:
            raise RequestError("%s: cannot parse constraint %r" % (name, constraint))
        key, op, want = match.groups()
        have = known.get(key)
        if have is None:
            if key in ("cuda", "driver"):
                return False
            continue
        if key in ("cuda", "driver"):
            if not _compare(have, op, want):
                return False
        elif (op in ("=", "==") and have != want) or (op == "!=" and have == want):
            return False
    return True


def cdi_annotation_devices(annotations, kind=KIND):
    """Device names of ``kind`` requested through CDI annotations, in a stable order (by key).

    Names of other kinds are not ours and are skipped; a malformed name of our kind is an error.
    """
    names = []
    for key in sorted(annotations or {}):
        if not key.startswith(CDI_ANNOTATION_PREFIXES):
            continue
        for raw in str(annotations[key]).split(","):
            qualified = raw.strip()
            if not qualified:
                continue
            prefix, sep, device = qualified.partition("=")
            if prefix != kind:
                continue
            if not sep or not device:
                raise RequestError("CDI annotation %s: malformed device name %r" % (key, qualified))
            if device not in names:
                names.append(device)
    return names


def _is_legacy_hook(hook):
    return os.path.basename(str(hook.get("path", ""))) == LEGACY_HOOK


def has_legacy_hook(config):
    return any(_is_legacy_hook(h) for h in ((config.get("hooks") or {}).get("prestart") or ()))


def remove_legacy_hook(config):
    """Drop NVIDIA's ``nvidia-container-runtime-hook`` from the prestart hooks; True when one was there."""
    hooks = config.get("hooks") or {}
    prestart = hooks.get("prestart") or []
    kept = [h for h in prestart if not _is_legacy_hook(h)]
    if len(kept) == len(prestart):
        return False
    if kept:
        hooks["prestart"] = kept
    else:
        hooks.pop("prestart", None)
    return True


class Request:
    """What a container asks for: ``devices`` (names in the CDI spec; ``[]`` for driver files only),
    ``capabilities`` (tuple), ``env`` (the process env as a dict), ``source`` (for messages)."""

    __slots__ = ("capabilities", "devices", "env", "source")

    def __init__(self, devices, capabilities, env, source):
        self.devices = devices
        self.capabilities = capabilities
        self.env = env
        self.source = source

    def __repr__(self):
        return "Request(%r, %r, source=%r)" % (self.devices, self.capabilities, self.source)


def gpu_request(config):
    """The GPU request of an OCI ``config``, or None when it is not a GPU container.

    CDI annotations win over ``NVIDIA_VISIBLE_DEVICES`` (they are the orchestrator's allocation);
    an unknown capability raises ``RequestError``.
    """
    env = env_dict((config.get("process") or {}).get("env"))
    annotated = cdi_annotation_devices(config.get("annotations"))
    if annotated:
        devices, source = annotated, "CDI annotations"
    else:
        devices = parse_visible_devices(env.get("NVIDIA_VISIBLE_DEVICES"))
        source = "NVIDIA_VISIBLE_DEVICES"
        if devices is None:
            return None
    try:
        capabilities = parse_capabilities(env.get("NVIDIA_DRIVER_CAPABILITIES"))
    except CapabilityError as exc:
        raise RequestError("NVIDIA_DRIVER_CAPABILITIES: %s" % exc) from None
    return Request(devices, capabilities, env, source)


# --------------------------------------------------------------------------------------------------
# The index: what the shim reads instead of the YAML spec (written by cdi_spec next to it).


def resolve_devices(index, names):
    """The ``containerEdits`` of each requested device name, in order; ``RequestError`` for an unknown
    one. Plain indexes, ``GPU-``/``MIG-`` UUIDs and ``<gpu>:<mig>`` are looked up as the spec names
    them; a UUID also matches when the spec only names devices by index (through ``aliases``)."""
    devices = index.get("devices") or {}
    aliases = index.get("aliases") or {}
    edits = []
    for name in names:
        key = name if name in devices else aliases.get(name)
        if key is None or key not in devices:
            known = ", ".join(sorted(devices)) or "none"
            raise RequestError("unknown GPU %r requested (this node has: %s)" % (name, known))
        edits.append(devices[key])
    return edits


def _stat_node(path):
    st = os.stat(path)
    if not stat.S_ISCHR(st.st_mode):
        raise RequestError("%s is not a character device" % path)
    return os.major(st.st_rdev), os.minor(st.st_rdev)


def apply_edits(config, edits, capabilities, mount_capabilities=None, stat_node=_stat_node):
    """Apply CDI ``containerEdits`` dicts to ``config`` in place.

    Device nodes go to ``linux.devices`` and to the ``linux.resources.devices`` allow list with the
    major/minor the host node has now (``stat_node(hostPath)``); mounts whose required capabilities
    (``mount_capabilities[containerPath]``, a list) are not all in ``capabilities`` are skipped; hooks
    and env are appended. Everything is de-duplicated (by path, destination, hook, env key), so applying
    the same edits twice, or after a CDI-aware engine did, changes nothing.
    """
    mount_capabilities = mount_capabilities or {}
    wanted = set(capabilities)
    linux = config.setdefault("linux", {})
    devices = linux.get("devices") or []
    allow = (linux.get("resources") or {}).get("devices") or []
    mounts = config.get("mounts") or []
    hooks = config.get("hooks") or {}
    process = config.setdefault("process", {})
    env = process.get("env") or []
    have_paths = {d.get("path") for d in devices}
    have_dest = {m.get("destination") for m in mounts}
    have_env = {e.partition("=")[0] for e in env}
    have_allow = {(a.get("type"), a.get("major"), a.get("minor")) for a in allow if a.get("allow")}

    for edit in edits:
        for node in edit.get("deviceNodes") or ():
            path = node["path"]
            host = node.get("hostPath") or path
            if "major" in node and "minor" in node:
                major, minor = node["major"], node["minor"]
            else:
                try:
                    major, minor = stat_node(host)
                except OSError as exc:
                    reason = exc.strerror or exc
                    raise RequestError("GPU device node %s is missing on this host (%s)" % (host, reason)) from None
            if path not in have_paths:
                have_paths.add(path)
                devices.append(
                    {"path": path, "type": "c", "major": major, "minor": minor, "fileMode": 0o666, "uid": 0, "gid": 0}
                )
            if ("c", major, minor) not in have_allow:
                have_allow.add(("c", major, minor))
                allow.append({"allow": True, "type": "c", "major": major, "minor": minor, "access": "rwm"})
        for mount in edit.get("mounts") or ():
            dest = mount["containerPath"]
            if dest in have_dest:
                continue
            if not wanted.issuperset(mount_capabilities.get(dest, ())):
                continue
            have_dest.add(dest)
            entry = {"destination": dest, "source": mount["hostPath"], "options": list(mount.get("options") or [])}
            entry["type"] = mount.get("type") or "bind"
            mounts.append(entry)
        for hook in edit.get("hooks") or ():
            name = hook.get("hookName")
            entry = {k: hook[k] for k in ("path", "args", "env", "timeout") if k in hook}
            bucket = hooks.setdefault(name, [])
            if entry not in bucket:
                bucket.append(entry)
        for item in edit.get("env") or ():
            key = item.partition("=")[0]
            if key not in have_env:
                have_env.add(key)
                env.append(item)

    linux["devices"] = devices
    if allow:
        linux.setdefault("resources", {})["devices"] = allow
    config["mounts"] = mounts
    if hooks:
        config["hooks"] = hooks
    process["env"] = env
    return config


def inject(config, index, stat_node=_stat_node):
    """The shim's whole job on ``create``: find the request, check it, apply the edits.

    Returns True when ``config`` was changed (it is changed in place), False for a container that does
    not ask for GPUs (only NVIDIA's legacy hook may have been removed: then True as well).
    Raises ``RequestError`` with the one-line reason the start must fail with.
    """
    legacy = remove_legacy_hook(config)
    request = gpu_request(config)
    if request is None:
        return legacy
    names = request.devices
    device_edits = resolve_devices(index, names)
    check_requirements(request.env, index.get("cudaVersion"), index.get("driverVersion"))
    provided = set(index.get("capabilities") or request.capabilities)
    missing = [c for c in request.capabilities if c not in provided]
    if missing and request.env.get("NVIDIA_DRIVER_CAPABILITIES", "").strip() != "all":
        raise RequestError(
            "driver capabilities %s requested but the CDI spec was generated without them" % ",".join(missing)
        )
    edits = [index.get("containerEdits") or {}, *device_edits]
    apply_edits(config, edits, request.capabilities, index.get("mountCapabilities"), stat_node)
    config.setdefault("annotations", {})[INJECTED_ANNOTATION] = ",".join(names) or "none"
    return True
