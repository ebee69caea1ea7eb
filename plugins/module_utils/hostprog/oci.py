# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a container asks for, and how CDI edits land in its OCI ``config.json``.

Used by the runtime shim (``gpufleet-container-runtime``) on every GPU container start, so it is pure
standard library, imports nothing heavy, and never reads more than the bundle's ``config.json`` and the
shim's index (the compact JSON sibling of the CDI spec that ``cdi_spec`` writes, see ``cdi.generate``).

The request rules:

* ``NVIDIA_VISIBLE_DEVICES``: ``all``; ``none`` (driver files, no GPU); ``void``, empty or unset (not a
  GPU container); or a comma list of indexes, ``GPU-<uuid>``, ``MIG-<uuid>``, ``<gpu>:<mig>``.
* ``NVIDIA_DRIVER_CAPABILITIES``: see ``cdi.driver_files.parse_capabilities``.
* ``NVIDIA_REQUIRE_*``: a space separates alternatives (OR), a comma separates constraints (AND);
  every variable must hold, unless ``NVIDIA_DISABLE_REQUIRE`` is true.
* CDI annotations ``cdi.k8s.io/<key>`` and ``nvidia.cdi.k8s.io/<key>``: comma lists of qualified
  names ``nvidia.com/gpu=<device>``.
* docker ``--gpus`` (20.10): docker appends ``NVIDIA_VISIBLE_DEVICES`` (and maybe
  ``NVIDIA_DRIVER_CAPABILITIES``) to ``process.env`` and a prestart hook
  ``{path: <lookup of nvidia-container-runtime-hook>, args: [nvidia-container-runtime-hook, prestart]}``.

When a variable appears more than once in ``process.env`` the last one wins (docker appends the
``--gpus`` values after the image's own).

Who may ask (docs/security.md): CDI annotations are the orchestrator's allocation, and count
unless ``accept_cdi_annotations_unprivileged`` is off: then, as the variable below, only for a privileged
container (CRI-O copies every pod annotation into every container's spec, containerd those its
``pod_annotations`` match, so there a pod could name any GPU; docs/security.md "When CDI annotations are an
allocation"). Where a scheduler hands out GPUs (Kubernetes), ``NVIDIA_VISIBLE_DEVICES`` from the image or the
pod is not an allocation: with ``accept_envvar_unprivileged`` off it counts only for a privileged
container (``CAP_SYS_ADMIN`` in ``process.capabilities.bounding``, NVIDIA's own test), and the device
plugin passes devices as mounts of ``/dev/null`` on ``/var/run/nvidia-container-devices/<device>``
(``accept_volume_mounts``; NVIDIA's ``deviceListStrategy: volume-mounts``). Rules from NVIDIA
nvidia-container-toolkit ``internal/config/image/cuda_image.go`` (``VisibleDevices``,
``requestsFromMounts``) and ``privileged.go``, main branch as of 2026-08-21.

More requests, with NVIDIA's meaning (nvidia-container-toolkit v1.20.0-27-gd34b3046, 2026-08-21:
``cmd/nvidia-container-runtime-hook/container_config.go`` ``getNvidiaConfig``, ``internal/config/image/cuda_image.go``
``ImexChannelRequests``; libnvidia-container ``src/nvc_mount.c`` ``nvc_mig_config_global_caps_mount``,
``nvc_mig_monitor_global_caps_mount``, ``nvc_imex_channel_mount``), each only in a GPU container:

* ``NVIDIA_MIG_CONFIG_DEVICES`` / ``NVIDIA_MIG_MONITOR_DEVICES`` (``all``, or GPUs among the visible ones): the MIG
  ``config`` / ``monitor`` capability, the node ``/dev/nvidia-caps/nvidia-cap<minor>`` whose minor
  ``/proc/driver/nvidia-caps/mig-minors`` gives (``config 1``, ``monitor 2``). Set in a container that is not
  privileged (no ``CAP_SYS_ADMIN`` in its bounding set) the start fails, as NVIDIA's hook fails it ("cannot set
  MIG_CONFIG_DEVICES in non privileged container"); empty means not asked.
* ``NVIDIA_IMEX_CHANNELS`` (a comma list of channel numbers): ``/dev/nvidia-caps-imex-channels/channel<N>`` each;
  ``all`` is ignored, as NVIDIA ignores it from the variable; under the same rule as ``NVIDIA_VISIBLE_DEVICES``
  (privileged or ``accept_envvar_unprivileged``), and from the device plugin's mounts on
  ``/var/run/nvidia-container-devices/imex/<N>`` first when ``accept_volume_mounts``. A channel the host lacks fails
  the start (NVIDIA's library creates it; here the node must exist: ``nvidia-modprobe -i <N>``).

Everything here runs on input the image or a pod controls, so it is linear in the input's size, every
size has a limit (``MAX_*``), and every malformed or mistyped value is a ``RequestError`` with one line.
"""

from __future__ import annotations

import os
import stat

from ..base.fileio import FileLimitError as _FileLimitError
from ..base.fileio import read_fd as _read_fd
from ..base.fileio import read_regular as _read_regular
from ..base.version import compare as _compare
from ..cdi.driver_files import CapabilityError, parse_capabilities

# ``typing`` imports ``re`` (milliseconds in every GPU container start): its names are for type checkers only.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable

KIND = "nvidia.com/gpu"
CDI_ANNOTATION_PREFIXES = ("cdi.k8s.io/", "nvidia.cdi.k8s.io/")
LEGACY_HOOK = "nvidia-container-runtime-hook"
# The annotation the shim leaves in config.json: "these GPUs were injected by gpufleet" (the legacy
# hook entry point reads it from the OCI state and then does nothing).
INJECTED_ANNOTATION = "gpufleet.nvidia/injected"

_TRUE = ("1", "t", "true", "y", "yes", "on")
MAX_CONFIG_BYTES = 16 << 20  # config.json: a few KiB usually; Kubernetes annotations can make it larger
MAX_REQUEST_BYTES = 64 << 10  # one request variable's value (NVIDIA_*), or one CDI annotation value
# The variables a request reads (each at most MAX_REQUEST_BYTES; NVIDIA_REQUIRE_* too, in check_requirements).
REQUEST_VARIABLES = (
    "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_DRIVER_CAPABILITIES",
    "NVIDIA_MIG_CONFIG_DEVICES",
    "NVIDIA_MIG_MONITOR_DEVICES",
    "NVIDIA_IMEX_CHANNELS",
    "NVIDIA_DISABLE_REQUIRE",
)
MAX_REQUEST_DEVICES = 1024  # distinct device names in one request
VOLUME_MOUNT_ROOT = "/var/run/nvidia-container-devices"
PRIVILEGED_CAPABILITY = "CAP_SYS_ADMIN"
MIG_MINORS = "/proc/driver/nvidia-caps/mig-minors"
MIG_CAP_DIR = "/dev/nvidia-caps"
IMEX_CHANNEL_DIR = "/dev/nvidia-caps-imex-channels"
IMEX_MOUNT_PREFIX = VOLUME_MOUNT_ROOT + "/imex/"
MAX_IMEX_CHANNEL = 1 << 20  # the driver's channel numbers are small (2048 by default); anything this big is garbage
_CONSTRAINT = r"^([a-z_][a-z0-9_]*)\s*(>=|<=|==|!=|=|>|<)\s*([A-Za-z0-9_.-]+)$"
# ``re`` is imported only where a requirement is checked: the shim's start path stays free of it.


class RequestError(ValueError):
    """A GPU request that cannot be satisfied; the message is the one line the container start fails with."""

    def __str__(self) -> str:
        # Names in the message come from the container's config.json: a line break in one must not split it.
        from ..base.oneline import one_line  # noqa: PLC0415  # failure path only

        return one_line(super().__str__())


def env_dict(env: list[str] | None) -> dict[str, str]:
    """``process.env`` (a list of ``KEY=value``) -> dict; the last occurrence of a key wins."""
    result = {}
    for item in env or ():
        if not isinstance(item, str):
            continue
        key, sep, value = item.partition("=")
        if sep:
            result[key] = value
    return result


def is_true(value: object) -> bool:
    return str(value).strip().lower() in _TRUE


def _q(value: object) -> str:
    """How a message quotes a value from the image or the pod: ``base.oneline.excerpt`` (a bounded prefix)."""
    from ..base.oneline import excerpt  # noqa: PLC0415  # failure path only

    return excerpt(value)


def _clip(value: object) -> str:
    """How a message shows a key or a name from the image or the pod: ``base.oneline.clip`` (a bounded prefix)."""
    from ..base.oneline import clip  # noqa: PLC0415  # failure path only

    return clip(value, 100)


def _check_size(value: str, what: str) -> None:
    """The one size rule of a request: a variable's or an annotation's value is at most ``MAX_REQUEST_BYTES``."""
    if len(value) > MAX_REQUEST_BYTES:
        raise RequestError(f"{what} is longer than {MAX_REQUEST_BYTES} bytes ({len(value)})")


def check_request_sizes(env: dict[str, str]) -> None:
    """``_check_size`` on every request variable of ``REQUEST_VARIABLES`` that ``env`` sets (``NVIDIA_REQUIRE_*``:
    ``check_requirements``; the CDI annotations: ``cdi_annotation_devices``). One dict lookup each."""
    for name in REQUEST_VARIABLES:
        value = env.get(name)
        if value is not None:
            _check_size(value, name)


def _add_name(names: dict[str, None], name: str, what: str) -> None:
    if name not in names:
        if len(names) >= MAX_REQUEST_DEVICES:
            raise RequestError(f"{what} names more than {MAX_REQUEST_DEVICES} devices")
        names[name] = None


def parse_visible_devices(value: str | None) -> list[str] | None:
    """``NVIDIA_VISIBLE_DEVICES`` -> None (not a GPU container), ``[]`` (``none``: driver only),
    ``["all"]`` or the list of requested device names, in the order given, without duplicates."""
    if value is None:
        return None
    _check_size(value, "NVIDIA_VISIBLE_DEVICES")
    value = value.strip()
    if value in ("", "void"):
        return None
    if value == "none":
        return []
    names = {}  # insertion-ordered: linear de-duplication
    for raw in value.split(","):
        part = raw.strip()
        if not part:
            continue
        if part == "all":
            return ["all"]
        if part in ("none", "void"):
            raise RequestError(f"NVIDIA_VISIBLE_DEVICES: {_q(part)} cannot be combined with device names")
        _add_name(names, part, "NVIDIA_VISIBLE_DEVICES")
    return list(names) or None


def check_requirements(
    env: dict[str, str], cuda_version: str | None, driver_version: str | None, facts: dict[str, str] | None = None
) -> None:
    """Raise ``RequestError`` unless every ``NVIDIA_REQUIRE_*`` in ``env`` (a dict) holds.

    ``cuda``/``driver`` constraints compare versions numerically against ``cuda_version`` and
    ``driver_version``; ``facts`` may add string facts (``brand``, ``arch``) compared for equality.
    A constraint on a fact nobody knows (``brand`` when the index has none) counts as holding: it can
    not be checked without the GPU, and an unknown brand must not make every CUDA image fail.

    An unknown CUDA or driver version (None, or a value that is no version, such as nvidia-smi's ``Not Found``
    in an index written before it was read as unknown) fails every ``cuda``/``driver`` constraint. NVIDIA's
    ``nvidia-container-cli configure --require`` never compares against an unknown CUDA version either: the
    start fails earlier ("detection error") when the version cannot be read (libnvidia-container at commit
    00b4b47e, src/nvc_info.c ``nvc_driver_info_new`` -> ``driver_get_cuda_version``, NVML's
    ``nvmlSystemGetCudaDriverVersion``; commit 09df17a2, src/cli/configure.c ``check_cuda_version``). Its
    CSV mode would compare an empty version as lower than any, so ``cuda<12`` passes (nvidia-container-toolkit
    v1.20.0, internal/modifier/csv.go, internal/requirements/constraints/property.go): the unsafe reading
    this function does not copy.
    """
    if is_true(env.get("NVIDIA_DISABLE_REQUIRE", "")):
        return
    cuda_version = cuda_version if _is_version(cuda_version) else None
    driver_version = driver_version if _is_version(driver_version) else None
    known = {"cuda": cuda_version, "driver": driver_version}
    known.update(facts or {})
    for name in sorted(k for k in env if k.startswith("NVIDIA_REQUIRE_")):
        _check_size(env[name], name)
        expression = env[name].strip()
        if not expression:
            continue
        alternatives = expression.split()
        if not any(_holds(alt, known, name) for alt in alternatives):
            raise RequestError(
                "unsatisfied requirement {}={} (driver {}, CUDA {})".format(
                    _clip(name), _q(expression), driver_version or "unknown", cuda_version or "unknown"
                )
            )


def _is_version(value: str | None) -> bool:
    """``12.2``, ``535.261.03``: at least major and minor, digits only (no ``re`` on the start path)."""
    pieces = str(value or "").strip().split(".")
    return len(pieces) >= 2 and all(piece.isdigit() and piece.isascii() for piece in pieces)


def _holds(alternative: str, known: dict[str, str | None], name: str) -> bool:
    import re  # noqa: PLC0415  # see _CONSTRAINT

    for raw in alternative.split(","):
        constraint = raw.strip()
        if not constraint:
            continue
        match = re.match(_CONSTRAINT, constraint)
        if not match:
            raise RequestError(f"{_clip(name)}: cannot parse constraint {_q(constraint)}")
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


def cdi_annotation_devices(annotations: dict[str, str] | None, kind: str = KIND) -> list[str]:
    """Device names of ``kind`` requested through CDI annotations, in a stable order (by key).

    Names of other kinds are not ours and are skipped; a malformed name of our kind is an error.
    """
    names = {}
    for key in sorted(annotations or {}):
        if not key.startswith(CDI_ANNOTATION_PREFIXES):
            continue
        value = annotations[key]
        _check_size(value, f"CDI annotation {key}")
        for raw in value.split(","):
            qualified = raw.strip()
            if not qualified:
                continue
            prefix, sep, device = qualified.partition("=")
            if prefix != kind:
                continue
            if not sep or not device:
                raise RequestError(f"CDI annotation {_clip(key)}: malformed device name {_q(qualified)}")
            _add_name(names, device, "the CDI annotations")
    return list(names)


def volume_mount_devices(mounts: list[dict] | None) -> list[str]:
    """Device names requested as mounts of ``/dev/null`` on ``/var/run/nvidia-container-devices/<name>``
    (the device plugin's ``volume-mounts`` strategy), in order, without duplicates."""
    names = {}
    prefix = VOLUME_MOUNT_ROOT + "/"
    for mount in mounts or ():
        if os.path.normpath(mount.get("source") or "") != "/dev/null":
            continue
        destination = os.path.normpath(mount.get("destination") or "")
        if not destination.startswith(prefix):
            continue
        name = destination[len(prefix) :]
        if name and "/" not in name:
            _add_name(names, name, "the device mounts")
    return list(names)


def is_privileged(config: dict) -> bool:
    """NVIDIA's test for a privileged container: ``CAP_SYS_ADMIN`` in the bounding set."""
    caps = (config.get("process") or {}).get("capabilities") or {}
    return PRIVILEGED_CAPABILITY in (caps.get("bounding") or ())


def _is_legacy_hook(hook: dict) -> bool:
    return os.path.basename(str(hook.get("path", ""))) == LEGACY_HOOK


def has_legacy_hook(config: dict) -> bool:
    return any(_is_legacy_hook(h) for h in ((config.get("hooks") or {}).get("prestart") or ()))


def remove_legacy_hook(config: dict) -> bool:
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
    ``capabilities`` (tuple), ``env`` (the process env as a dict), ``source`` (for messages), ``mig_caps`` (``config``
    and/or ``monitor``: the MIG capabilities asked for) and ``imex_channels`` (channel numbers, as strings)."""

    __slots__ = ("capabilities", "devices", "env", "imex_channels", "mig_caps", "source")

    def __init__(
        self,
        devices: list[str],
        capabilities: tuple[str, ...],
        env: dict[str, str],
        source: str,
        *,
        mig_caps: tuple[str, ...] = (),
        imex_channels: tuple[str, ...] = (),
    ) -> None:
        self.devices = devices
        self.capabilities = capabilities
        self.env = env
        self.source = source
        self.mig_caps = mig_caps
        self.imex_channels = imex_channels

    def __repr__(self) -> str:
        return f"Request({self.devices!r}, {self.capabilities!r}, source={self.source!r})"


def gpu_request(
    config: dict,
    accept_envvar_unprivileged: bool = True,
    accept_volume_mounts: bool = False,
    accept_cdi_annotations_unprivileged: bool = True,
) -> Request | None:
    """The GPU request of an OCI ``config`` (already through ``check_config``), or None when it is not a
    GPU container.

    CDI annotations win (they are the orchestrator's allocation) when ``accept_cdi_annotations_unprivileged`` or
    the container is privileged (otherwise they are not read at all: a pod may have set them), then, when
    accepted, device mounts; ``NVIDIA_VISIBLE_DEVICES`` counts only when ``accept_envvar_unprivileged`` or the
    container is privileged. An unknown capability raises ``RequestError``.
    """
    env = env_dict((config.get("process") or {}).get("env"))
    check_request_sizes(env)
    devices = []
    if accept_cdi_annotations_unprivileged or is_privileged(config):
        devices = cdi_annotation_devices(config.get("annotations"))
    source = "CDI annotations"
    if not devices and accept_volume_mounts:
        devices, source = volume_mount_devices(config.get("mounts")), "device mounts"
    if not devices:
        if not (accept_envvar_unprivileged or is_privileged(config)):
            return None  # the variable is the image's or the pod's wish, not an allocation: no GPU
        devices = parse_visible_devices(env.get("NVIDIA_VISIBLE_DEVICES"))
        source = "NVIDIA_VISIBLE_DEVICES"
        if devices is None:
            return None
    try:
        capabilities = parse_capabilities(env.get("NVIDIA_DRIVER_CAPABILITIES"))
    except CapabilityError as exc:
        raise RequestError(f"NVIDIA_DRIVER_CAPABILITIES: {exc}") from None
    privileged = is_privileged(config)
    mig_caps = tuple(c for c in ("config", "monitor") if _mig_cap_requested(env, c, devices, privileged))
    imex = imex_channel_requests(
        env, config.get("mounts"), privileged or accept_envvar_unprivileged, accept_volume_mounts
    )
    return Request(devices, capabilities, env, source, mig_caps=mig_caps, imex_channels=imex)


def _mig_cap_requested(env: dict[str, str], cap: str, visible: list[str], privileged: bool) -> bool:
    """Whether ``NVIDIA_MIG_<CAP>_DEVICES`` asks for the MIG ``cap`` capability; ``RequestError`` where NVIDIA's hook
    fails the start (not privileged) or names a GPU that is not visible."""
    name = f"NVIDIA_MIG_{cap.upper()}_DEVICES"
    value = env.get(name, "")
    _check_size(value, name)
    if not value.strip():
        return False
    if not privileged:
        raise RequestError(
            f"{name} is set but the container is not privileged: the MIG {cap} capability is only given to a "
            f"container with {PRIVILEGED_CAPABILITY} (docker --cap-add SYS_ADMIN or --privileged), as NVIDIA rules"
        )
    wanted = parse_visible_devices(value) or []
    if "all" not in wanted and "all" not in visible:
        unknown = [d for d in wanted if d not in visible]
        if unknown:
            raise RequestError(
                f"{name}: {_clip(', '.join(unknown))} not among the visible devices ({_clip(', '.join(visible))})"
            )
    return True


def imex_channel_requests(
    env: dict[str, str], mounts: list[dict] | None, accept_envvar: bool, accept_volume_mounts: bool
) -> tuple[str, ...]:
    """The IMEX channels asked for: the device plugin's mounts on ``.../imex/<N>`` first (when accepted), else
    ``NVIDIA_IMEX_CHANNELS`` when the variable counts (``accept_envvar``); ``all`` is ignored, as NVIDIA does."""
    channels: dict[str, None] = {}
    if accept_volume_mounts:
        for mount in mounts or ():
            if os.path.normpath(mount.get("source") or "") != "/dev/null":
                continue
            destination = os.path.normpath(mount.get("destination") or "")
            if destination.startswith(IMEX_MOUNT_PREFIX):
                _add_name(channels, _channel(destination[len(IMEX_MOUNT_PREFIX) :], "IMEX device mount"), "IMEX")
    if channels or not accept_envvar:
        return tuple(channels)
    value = env.get("NVIDIA_IMEX_CHANNELS", "")
    _check_size(value, "NVIDIA_IMEX_CHANNELS")
    parts = [p.strip() for p in value.split(",") if p.strip()]
    if parts in (["all"], ["none"], ["void"]):
        return ()
    for part in parts:
        _add_name(channels, _channel(part, "NVIDIA_IMEX_CHANNELS"), "NVIDIA_IMEX_CHANNELS")
    return tuple(channels)


def _channel(text: str, what: str) -> str:
    if not (text.isdigit() and text.isascii()) or int(text) > MAX_IMEX_CHANNEL:
        raise RequestError(f"{what}: {_q(text)} is not an IMEX channel number")
    return str(int(text))


def mig_cap_path(cap: str, minors_path: str = MIG_MINORS) -> str:
    """``/dev/nvidia-caps/nvidia-cap<minor>`` of the MIG capability ``cap`` (``config``/``monitor``), its minor from
    the driver's ``mig-minors`` (``config 1``); ``RequestError`` when the driver has no MIG capabilities."""
    try:
        text = read_limited(minors_path, 1 << 20, minors_path).decode("ascii", "replace")
    except (OSError, RequestError):
        text = ""
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == cap and parts[1].isdigit() and parts[1].isascii():
            return f"{MIG_CAP_DIR}/nvidia-cap{int(parts[1])}"
    raise RequestError(
        f"NVIDIA_MIG_{cap.upper()}_DEVICES: the driver lists no MIG {cap} capability in {minors_path} "
        "(no MIG-capable GPU, or the nvidia-caps nodes are not set up)"
    )


def special_edits(request: Request, minors_path: str = MIG_MINORS) -> list[dict]:
    """The CDI edits of ``request``'s MIG capabilities and IMEX channels: device nodes, each resolved on the host
    (``apply_edits`` stats them, so a missing node fails the start with its path)."""
    nodes = [mig_cap_path(cap, minors_path) for cap in request.mig_caps]
    nodes += [f"{IMEX_CHANNEL_DIR}/channel{n}" for n in request.imex_channels]
    return [{"deviceNodes": [{"path": path, "hostPath": path} for path in nodes]}] if nodes else []


# --------------------------------------------------------------------------------------------------
# config.json: read it within limits, and check the type of every part this module touches, so a
# mistyped file is one line, never a traceback.

_CONFIG_SHAPE = (
    # (path, type, element type or None)
    (("process",), dict, None),
    (("process", "env"), list, str),
    (("process", "capabilities"), dict, None),
    (("process", "capabilities", "bounding"), list, str),
    (("process", "user"), dict, None),
    (("process", "user", "additionalGids"), list, int),
    (("root",), dict, None),
    (("root", "path"), str, None),
    (("mounts",), list, dict),
    (("hooks",), dict, None),
    (("linux",), dict, None),
    (("linux", "devices"), list, dict),
    (("linux", "resources"), dict, None),
    (("linux", "resources", "devices"), list, dict),
    (("annotations",), dict, None),
)
_TYPE_NAMES = {dict: "an object", list: "an array", str: "a string", int: "an integer"}


def check_config(config: object, what: str = "config.json") -> dict:
    """Raise ``RequestError`` unless ``config`` has the types the shim and hook rely on."""
    if not isinstance(config, dict):
        raise RequestError(f"{what} is not a JSON object")
    for path, kind, element in _CONFIG_SHAPE:
        value = config
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        if value is None:
            continue
        name = ".".join(path)
        if not isinstance(value, kind):
            raise RequestError(f"{what}: {name} is not {_TYPE_NAMES[kind]}")
        if element is not None and not all(isinstance(item, element) for item in value):
            raise RequestError(f"{what}: {name} holds an element that is not {_TYPE_NAMES[element]}")
    for key, value in (config.get("annotations") or {}).items():
        if not isinstance(value, str):
            raise RequestError(f"{what}: annotation {_clip(key)} is not a string")
    for mount in config.get("mounts") or ():
        for key in ("source", "destination"):
            if not isinstance(mount.get(key, ""), str):
                raise RequestError(f"{what}: a mount's {key} is not a string")
    for phase, hooks in (config.get("hooks") or {}).items():
        if not isinstance(hooks, list) or not all(isinstance(h, dict) for h in hooks):
            raise RequestError(f"{what}: hooks.{_clip(phase)} is not an array of objects")
        for hook in hooks:
            if not isinstance(hook.get("path", ""), str) or not isinstance(hook.get("args", []), list):
                raise RequestError(f"{what}: a hook in hooks.{_clip(phase)} has a path or args of the wrong type")
    return config


def read_limited(
    path: str, limit: int, what: str | None = None, check: Callable[[os.stat_result], object] | None = None
) -> bytes:
    """The bytes of ``path``, refused (``RequestError``) when larger than ``limit`` or not a regular file.

    ``base.fileio.read_regular`` (the one bounded reader) with its refusal as a ``RequestError``: ``check(st)``,
    when given, runs on the open file's ``fstat`` first (the shim's ownership rule), so what is checked is what is
    read. Opened ``O_NONBLOCK``: a FIFO there never blocks.
    """
    try:
        return _read_regular(path, limit, what, check=check)
    except _FileLimitError as exc:
        raise RequestError(str(exc)) from None


def read_fd(fd: int, limit: int, what: str) -> bytes:
    """At most ``limit`` bytes from the open file ``fd`` (``base.fileio.read_fd``); ``RequestError`` naming ``what``
    when it holds more (never more than ``limit + 1`` bytes are read)."""
    try:
        return _read_fd(fd, limit, what)
    except _FileLimitError as exc:
        raise RequestError(str(exc)) from None


def read_config(path: str) -> dict:
    """The bundle's ``config.json``: read within ``MAX_CONFIG_BYTES``, parsed, type-checked."""
    from ..base.jsonio import loads  # noqa: PLC0415

    try:
        config = loads(read_limited(path, MAX_CONFIG_BYTES), None, path)
    except ValueError as exc:
        raise RequestError(str(exc)) from None
    check_config(config, path)
    if not (config.get("root") or {}).get("path"):
        raise RequestError(f"{path} has no root.path")
    return config


# --------------------------------------------------------------------------------------------------
# The index: what the shim reads instead of the YAML spec (written by cdi_spec next to it).


def resolve_devices(index: dict, names: list[str]) -> list[dict]:
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
            raise RequestError(f"unknown GPU {_q(name)} requested (this node has: {known})")
        edits.append(devices[key])
    return edits


def _stat_node(path: str) -> tuple[int, int]:
    st = os.stat(path)
    if not stat.S_ISCHR(st.st_mode):
        raise RequestError(f"{path} is not a character device")
    return os.major(st.st_rdev), os.minor(st.st_rdev)


def _is_id(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 32


def _node_owner(node: dict, user: object) -> dict:
    """The ``fileMode``/``uid``/``gid`` of a device node in the container: the index's group and mode (the host's
    device-file parameters, where they are not root:root 0666) owned by the container's user ``user`` (its uid; the
    index's owner when there is none), else 0666 root:root.

    The container's user, not the host's owner: the shim edits the bundle's ``config.json`` only, and the engine
    starts ``docker exec``/``kubectl exec`` processes from its own copy of the spec, without the group the shim adds;
    as the node's owner such a process of the same user still opens its GPU (the CDI library gives a node that names
    no owner to the container's user in the same way, pkg/cdi/container-edits.go ``Apply``)."""
    mode, uid, gid = node.get("fileMode"), node.get("uid"), node.get("gid")
    if not (_is_id(mode) and mode <= 0o777 and _is_id(uid) and _is_id(gid)):
        return {"fileMode": 0o666, "uid": 0, "gid": 0}
    return {"fileMode": mode, "uid": user if _is_id(user) else uid, "gid": gid}


def apply_edits(
    config: dict,
    edits: list[dict],
    capabilities: tuple[str, ...] | list[str],
    mount_capabilities: dict[str, list[str]] | None = None,
    stat_node: Callable[[str], tuple[int, int]] = _stat_node,
) -> dict:
    """Apply CDI ``containerEdits`` dicts to ``config`` in place.

    Device nodes go to ``linux.devices`` and to the ``linux.resources.devices`` allow list with the
    major/minor the host node has now (``stat_node(hostPath)``); mounts whose required capabilities
    (``mount_capabilities[containerPath]``, a list) are not all in ``capabilities`` are skipped; hooks
    and env are appended. A node is made with the group and mode the index gives it (the host's device-file
    parameters, ``cdi/spec.node_owner``), owned by the container's user (``_node_owner``), else root:root 0666;
    the edits' ``additionalGids`` (the group
    of device files not open to everyone) join ``process.user.additionalGids``, so the container's user may open
    them, as the CDI library does for a CDI-aware engine. Everything is de-duplicated (by path, destination, hook,
    env key, group), so applying the same edits twice, or after a CDI-aware engine did, changes nothing.
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
                    raise RequestError(f"GPU device node {host} is missing on this host ({reason})") from None
            if path not in have_paths:
                have_paths.add(path)
                owner = _node_owner(node, (process.get("user") or {}).get("uid"))
                devices.append({"path": path, "type": "c", "major": major, "minor": minor, **owner})
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
    gids = [g for edit in edits for g in edit.get("additionalGids") or () if _is_id(g) and g != 0]
    if gids:
        user = process.setdefault("user", {"uid": 0, "gid": 0})
        have = user.get("additionalGids") or []
        user["additionalGids"] = have + [g for g in dict.fromkeys(gids) if g not in have]
    return config


def inject(
    config: dict,
    index: dict,
    stat_node: Callable[[str], tuple[int, int]] = _stat_node,
    accept_envvar_unprivileged: bool = True,
    accept_volume_mounts: bool = False,
    *,
    accept_cdi_annotations_unprivileged: bool = True,
    request: Request | None = None,
    mig_minors: str = MIG_MINORS,
) -> bool:
    """The shim's whole job on ``create``: find the request, check it, apply the edits.

    Returns True when ``config`` was changed (it is changed in place), False for a container that does
    not ask for GPUs (only NVIDIA's legacy hook may have been removed: then True as well).
    ``request``: the caller's ``gpu_request(config, ...)``, when it already has it (computed here otherwise);
    ``mig_minors``: the driver's MIG minors file (a test's copy).
    Raises ``RequestError`` with the one-line reason the start must fail with.
    """
    legacy = remove_legacy_hook(config)
    if request is None:
        request = gpu_request(
            config, accept_envvar_unprivileged, accept_volume_mounts, accept_cdi_annotations_unprivileged
        )
    if request is None:
        return legacy
    names = request.devices
    device_edits = resolve_devices(index, names)
    check_requirements(request.env, index.get("cudaVersion"), index.get("driverVersion"))
    provided = set(index.get("capabilities") or request.capabilities)
    missing = [c for c in request.capabilities if c not in provided]
    if missing and request.env.get("NVIDIA_DRIVER_CAPABILITIES", "").strip() != "all":
        raise RequestError(
            "driver capabilities {} requested but the CDI spec was generated without them".format(",".join(missing))
        )
    edits = [index.get("containerEdits") or {}, *device_edits, *special_edits(request, mig_minors)]
    apply_edits(config, edits, request.capabilities, index.get("mountCapabilities"), stat_node)
    config.setdefault("annotations", {})[INJECTED_ANNOTATION] = ",".join(names) or "none"
    return True


# --------------------------------------------------------------------------------------------------
# containerd's ``ctr run --gpus N``: a prestart hook ``containerd oci-hook -- <nvidia-container-cli> --load-kmods
# configure --device=N --compute --compat32 --graphics --utility --video --display --pid={{pid}} {{rootfs}}``
# (containerd ``contrib/nvidia/nvidia.go`` ``WithGPUs``/``config.args``, the same arguments at v1.6.x, v1.7.x and
# v2.1.x; a ``prestart`` hook up to 1.7, a ``createRuntime`` hook in 2.1, as ``ctr c info`` shows on the simulated
# nodes; ``cmd/ctr/commands/run/run_unix.go``: ``--gpus`` -> ``WithDevices(ids...)``, ``WithAllCapabilities``).
# The hook is written by the ctr client (an image cannot add hooks); the shim turns it into a request and drops it, so
# ``nvidia-container-cli configure`` never runs (``hostprog/container_cli.py`` says why). Only the exact shape is
# recognised and only the flags ``config.args`` can produce are accepted; nothing in it names a path the shim uses.

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
