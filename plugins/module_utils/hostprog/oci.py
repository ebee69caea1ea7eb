# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a container asks for in its OCI ``config.json``: the request the runtime shim serves.

Used by the runtime shim (``gpufleet-container-runtime``) on every GPU container start, so it is pure
standard library, imports nothing heavy, and never reads more than the bundle's ``config.json`` and the
shim's index (the compact JSON sibling of the CDI spec that ``cdi_spec`` writes, see ``cdi.generate``).
Its siblings: ``hostprog.oci_config`` reads and type-checks ``config.json`` (and holds ``RequestError``),
``hostprog.oci_edits`` resolves a request in the index and applies the edits, ``hostprog.ctr_hook`` turns
ctr's ``--gpus`` hook into a request.

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

from ..base.version import compare as _compare
from ..cdi.driver_files import CapabilityError, parse_capabilities
from .oci_config import RequestError, _clip, _q

KIND = "nvidia.com/gpu"
CDI_ANNOTATION_PREFIXES = ("cdi.k8s.io/", "nvidia.cdi.k8s.io/")
_TRUE = ("1", "t", "true", "y", "yes", "on")
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
IMEX_MOUNT_PREFIX = VOLUME_MOUNT_ROOT + "/imex/"
MAX_IMEX_CHANNEL = 1 << 20  # the driver's channel numbers are small (2048 by default); anything this big is garbage
_CONSTRAINT = r"^([a-z_][a-z0-9_]*)\s*(>=|<=|==|!=|=|>|<)\s*([A-Za-z0-9_.-]+)$"
# ``re`` is imported only where a requirement is checked: the shim's start path stays free of it.


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
