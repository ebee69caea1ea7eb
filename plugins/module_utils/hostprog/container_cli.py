# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""``nvidia-container-cli``: NVIDIA's ``info`` and ``list`` commands on the collection's own discovery code.

What NVIDIA's guides tell users to type to check a GPU host (``nvidia-container-cli info``,
``nvidia-container-cli list``) works with the native toolkit, in NVIDIA's output format, from the facts
``gpu_facts`` uses: NVML through ctypes (``discovery/nvml.py``), the driver files by capability
(``cdi/driver_files.py``, read from the driver root's ``ld.so.cache``) and the device nodes
(``cdi/devices.py``). Formats and options follow NVIDIA libnvidia-container ``src/cli/main.c``,
``info.c`` and ``list.c`` (the 1.17 series: ``list --firmwares``, ``--imex-channel``; read 2026-11-23):

* ``info``: ``printf("%-15s %s\\n", ...)`` lines: ``NVRM version:``, ``CUDA version:``, then per GPU, after an
  empty line, ``Device Index:`` (NVML's order), ``Device Minor:``, ``Model:``, ``Brand:`` (libnvidia-container's
  own table of ``nvmlDeviceGetBrand``: Quadro, Tesla, NVS, GRID, GeForce, TITAN, else ``Unknown``; ``src/driver.c``),
  ``GPU UUID:``, ``Bus Location:`` (``%08x:%02x:%02x.0``), ``Architecture:`` (the CUDA compute capability,
  ``%u.%u``). ``--csv``: NVIDIA's two CSV tables. NVIDIA fails the command when NVML cannot say a value; here
  the value is ``Unknown`` (the word NVIDIA prints for an unknown brand) and the rest is still printed.
* ``list``: one path per line: the control device nodes and the selected GPUs' nodes (``--device``, default
  all), binaries, libraries (``--compat32``: the i386 ones too), IPC sockets, firmware; with no option
  everything, otherwise only what the options name. gpufleet adds capability filters
  (``--utility``, ``--compute``, ``--video``, ``--graphics``, ``--display``, ``--ngx``): only the files of
  those capabilities (alone they mean "every kind of file, of these capabilities").
  MIG capability files and IMEX channels (``--mig-config``, ``--mig-monitor``, ``--imex-channel``) are not
  listed: one line and exit status 1.
* ``--version``: ``cli-version:``/``lib-version:`` lines naming gpufleet.nvidia, never NVIDIA's version.
* A bad option or command: one line naming it and ``--help``, exit status 1 (argp's status).

``configure`` (what containerd's ``ctr run --gpus N`` runs as a prestart hook, ``createRuntime`` in 2.x, through
``containerd oci-hook -- nvidia-container-cli --load-kmods configure --device=N --compute ... --pid={{pid}}
{{rootfs}}``; containerd ``contrib/nvidia/nvidia.go`` at v1.6.x, v1.7.x and v2.1.x; ``ctr`` also looks this program
up on ``PATH`` before it creates the container, so it must exist) never configures a container here. The decision
and why:

* Doing what NVIDIA's ``configure`` does from a prestart hook through plain runc means a root process that
  enters the container's mount namespace, mounts driver files on paths inside an image-controlled root file
  system after the container's ``/proc`` exists, runs ``ldconfig`` there, and rewrites the cgroup v2 device
  eBPF program runc attached (replacing runc's own filter from outside runc). That is exactly the class of
  code behind the known container escapes (docs/security.md: CVE-2024-0132, symlinks planted in
  the image, ``/proc/1/root`` reachable from a root process); the collection keeps every such edit in the
  OCI spec, before runc creates anything, where runc itself resolves paths inside the root.
* So the runtime shim does it: started as ``ctr run --runc-binary <bindir>/gpufleet-container-runtime --gpus 0
  ...`` (or with containerd configured to use the shim), the shim recognises the ctr hook in ``config.json``
  (``ctr_hook.ctr_hook_request``), turns its ``--device``/capability/``--require`` flags into the GPU request,
  injects through the CDI index like any other request, and drops the hook, so this command is never run.
* Through plain runc the hook runs this command, which fails the start at once with one line naming the
  command that works on every containerd version the collection supports (1.6, 1.7, 2.x): the same ``ctr run``
  with ``--runc-binary <the shim>``.

Standard library only (target Pythons 3.8+). ``--version``, ``--help`` and ``configure`` import nothing but
``os`` and ``sys``; ``info`` and ``list`` import discovery when they run.
"""

from __future__ import annotations

import os
import sys

from ..base.names import COLLECTION_VERSION
from ..base.oneline import error_line, one_line

NAME = "nvidia-container-cli"
DEFAULT_BINDIR = "/usr/local/bin"
UNKNOWN = "Unknown"
# libnvidia-container src/driver.c (driver_get_device_brand_1_svc): nvmlBrandType_t -> its label.
CLI_BRANDS = {
    "Quadro": "Quadro",
    "Tesla": "Tesla",
    "NVS": "NVS",
    "GRID": "GRID",
    "GeForce": "GeForce",
    "Titan": "TITAN",
}
# The control nodes, in libnvidia-container's order (nvc_info.c lookup_devices).
CONTROL_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset")
CAPABILITY_FLAGS = ("utility", "compute", "video", "graphics", "display", "ngx")
COMMANDS = (
    ("info", "Report information about the driver and devices"),
    ("list", "List driver components"),
    ("configure", "Configure a container with GPU support"),
)
# (long, short, argument name or None, help); main.c's global options.
GLOBAL_OPTIONS = (
    ("debug", "d", "FILE", "Log debug information"),
    ("load-kmods", "k", None, "Load kernel modules"),
    ("no-pivot", "n", None, "Do not use pivot_root"),
    ("user", "u", "[UID[:GID]]", "User and group to use for privilege separation"),
    ("root", "r", "PATH", "Path to the driver root directory"),
    ("ldcache", "l", "FILE", "Path to the system's DSO cache"),
    ("no-create-imex-channels", None, None, "Don't automatically create IMEX channel device nodes"),
)
INFO_OPTIONS = (("csv", None, None, "Output in CSV format"),)
LIST_OPTIONS = (
    ("device", "d", "ID", "Device UUID(s) or index(es) to list"),
    ("libraries", "l", None, "List driver libraries"),
    ("binaries", "b", None, "List driver binaries"),
    ("ipcs", "i", None, "List driver ipcs"),
    ("firmwares", "f", None, "List driver firmwares"),
    ("compat32", None, None, "Enable 32bits compatibility"),
    ("mig-config", None, "ID", "MIG devices to list config capabilities files for (not supported)"),
    ("mig-monitor", None, "ID", "MIG devices to list monitor capabilities files for (not supported)"),
    ("imex-channel", None, "CHANNEL", "IMEX channel ID(s) to inject (not supported)"),
    ("no-persistenced", None, None, "Don't include the NVIDIA persistenced socket"),
    ("no-fabricmanager", None, None, "Don't include the NVIDIA fabricmanager socket"),
    *((c, None, None, f"gpufleet: only the files of the {c} capability") for c in CAPABILITY_FLAGS),
)
HELP_OPTIONS = (
    ("help", "?", None, "Give this help list"),
    ("usage", None, None, "Give a short usage message"),
    ("version", "V", None, "Print program version"),
)


class CliError(Exception):
    """The command fails; the message is the one line on stderr (the program name is added)."""


def _option_lines(options: tuple) -> list[str]:
    lines = []
    for long, short, arg, text in options:
        head = f"  -{short}, " if short else "      "
        head += f"--{long}" + (f"={arg}" if arg and not arg.startswith("[") else (arg or ""))
        lines.append(f"{head:<29} {text}" if len(head) < 29 else f"{head}\n{'':<30}{text}")
    return lines


def help_text(command: str | None = None) -> str:
    """argp's ``--help`` layout of the program or of one command."""
    if command is None:
        lines = [
            f"Usage: {NAME} [OPTION...] COMMAND [ARG...]",
            "Command line utility for manipulating NVIDIA GPU containers.",
        ]
        lines += ["", " Options:", *_option_lines(GLOBAL_OPTIONS), "", " Commands:"]
        lines += [f"  {name:<27} {text}" for name, text in COMMANDS]
    else:
        options = {"info": INFO_OPTIONS, "list": LIST_OPTIONS}.get(command, ())
        lines = [f"Usage: {NAME} {command} [OPTION...]" + (" ROOTFS" if command == "configure" else "")]
        lines += ["", " Options:", *_option_lines(options)]
    lines += ["", *_option_lines(HELP_OPTIONS), ""]
    lines.append(
        "This is gpufleet.nvidia's nvidia-container-cli (info, list), not NVIDIA's libnvidia-container; "
        "containers get their GPUs through gpufleet-container-runtime and the CDI spec."
    )
    return "\n".join(lines) + "\n"


def version_text() -> str:
    """``--version``: NVIDIA's first two line names, saying whose program this is."""
    import platform  # noqa: PLC0415

    return (
        f"cli-version: {COLLECTION_VERSION} (gpufleet.nvidia)\n"
        f"lib-version: {COLLECTION_VERSION} (gpufleet.nvidia, Python {platform.python_version()}; "
        "not NVIDIA's libnvidia-container)\n"
        f"build platform: {platform.machine()}\n"
    )


def _hint(prog: str) -> str:
    return f" (try '{prog} --help')"


def parse_options(prog: str, args: list[str], options: tuple, stop_at_positional: bool) -> tuple[dict, list[str], int]:
    """argp-like parsing: ``(options given, positionals, index where parsing stopped)``.

    ``--name``, ``--name=value``, ``--name value`` (when the option takes one), ``-x``, ``-xVALUE``, ``-x value``;
    ``--`` ends the options. ``stop_at_positional``: stop at the first non-option (the command). Raises
    ``CliError`` for an unknown option or a missing argument, in argp's words.
    """
    by_long = {o[0]: o for o in (*options, *HELP_OPTIONS)}
    by_short = {o[1]: o for o in (*options, *HELP_OPTIONS) if o[1]}
    found = {}
    positional = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            positional.extend(args[i + 1 :])
            return found, positional, len(args)
        if arg.startswith("--"):
            name, sep, value = arg[2:].partition("=")
            option = by_long.get(name)
            if option is None:
                raise CliError(f"{prog}: unrecognized option '--{name}'{_hint(prog)}")
            takes = option[2]
            if takes and takes.startswith("["):  # an optional argument: only with '='
                found.setdefault(name, []).append(value if sep else True)
            elif takes:
                if not sep:
                    if i + 1 >= len(args):
                        raise CliError(f"{prog}: option '--{name}' requires an argument{_hint(prog)}")
                    i += 1
                    value = args[i]
                found.setdefault(name, []).append(value)
            elif sep:
                raise CliError(f"{prog}: option '--{name}' doesn't allow an argument{_hint(prog)}")
            else:
                found.setdefault(name, []).append(True)
        elif arg.startswith("-") and len(arg) > 1:
            option = by_short.get(arg[1])
            if option is None:
                raise CliError(f"{prog}: invalid option -- '{arg[1]}'{_hint(prog)}")
            name, takes = option[0], option[2]
            if takes and takes.startswith("["):
                found.setdefault(name, []).append(arg[2:] or True)
            elif takes:
                value = arg[2:]
                if not value:
                    if i + 1 >= len(args):
                        raise CliError(f"{prog}: option requires an argument -- '{arg[1]}'{_hint(prog)}")
                    i += 1
                    value = args[i]
                found.setdefault(name, []).append(value)
            elif len(arg) > 2:
                args = [*args[: i + 1], "-" + arg[2:], *args[i + 1 :]]  # -kn: one flag at a time
                found.setdefault(name, []).append(True)
            else:
                found.setdefault(name, []).append(True)
        else:
            if stop_at_positional:
                return found, positional, i
            positional.append(arg)
        i += 1
    return found, positional, i


# --------------------------------------------------------------------------------------------------
# What the driver says (NVML), and what the host holds (driver files, device nodes).


def _driver_root(options: dict) -> str:
    root = (options.get("root") or ["/"])[-1]
    if not os.path.isabs(root):
        raise CliError(f"{NAME}: --root {root!r}: expected an absolute path")
    return root


def _cache_entries(driver_root: str, options: dict) -> list:
    from ..base.pathsafe import host_path, resolve_in_root  # noqa: PLC0415
    from ..cdi.driver_files import private_entries, read_driver_cache  # noqa: PLC0415
    from ..cdi.ldcache import read_ld_so_cache  # noqa: PLC0415

    try:
        if options.get("ldcache"):
            path = options["ldcache"][-1]
            entries = read_ld_so_cache(host_path(driver_root, resolve_in_root(driver_root, path)))
            return entries + private_entries(driver_root, entries, lambda p: resolve_in_root(driver_root, p))
        return read_driver_cache(driver_root)
    except (OSError, ValueError) as exc:
        raise CliError(f"{NAME}: initialization error: cannot read the DSO cache of {driver_root}: {exc}") from None


def query_driver(driver_root: str, entries: list) -> dict:
    """NVML's ``{"driver_version", "cuda_version", "gpus": [...]}``; ``CliError`` in NVIDIA's words when NVML
    cannot be loaded or initialised."""
    from ..discovery.discover import nvml_candidates  # noqa: PLC0415
    from ..discovery.nvml import NvmlError, query  # noqa: PLC0415

    library = nvml_candidates(driver_root, entries)
    if not library:
        raise CliError(f"{NAME}: initialization error: load library failed: libnvidia-ml.so.1: not found")
    try:
        return query(library)
    except NvmlError as exc:
        raise CliError(f"{NAME}: initialization error: nvml error: {exc}") from None


def bus_location(pci_bus_id: str | None) -> str:
    """libnvidia-container's ``%08x:%02x:%02x.0`` of a PCI address; ``Unknown`` when there is none."""
    if not pci_bus_id:
        return UNKNOWN
    try:
        domain, bus, rest = pci_bus_id.split(":")
        return f"{int(domain, 16):08x}:{int(bus, 16):02x}:{int(rest.split('.')[0], 16):02x}.0"
    except ValueError:
        return UNKNOWN


def device_fields(position: int, gpu: dict) -> tuple[str, ...]:
    """One GPU's ``info`` values, in NVIDIA's order: index, minor, model, brand, UUID, bus location, arch."""
    minor = gpu.get("minor")
    return (
        str(position),
        str(minor) if minor is not None else UNKNOWN,
        gpu.get("name") or UNKNOWN,
        CLI_BRANDS.get(gpu.get("brand") or "", UNKNOWN),
        gpu.get("uuid") or UNKNOWN,
        bus_location(gpu.get("pci_bus_id")),
        gpu.get("compute_capability") or UNKNOWN,
    )


INFO_LABELS = ("Device Index:", "Device Minor:", "Model:", "Brand:", "GPU UUID:", "Bus Location:", "Architecture:")


def format_info(driver: dict, csv: bool = False) -> str:
    """``info``'s output for NVML's answer ``driver`` (see ``query_driver``), byte for byte NVIDIA's layout."""
    nvrm = driver.get("driver_version") or UNKNOWN
    cuda = driver.get("cuda_version") or UNKNOWN
    gpus = driver.get("gpus") or []
    if csv:
        out = f"NVRM version,CUDA version\n{nvrm},{cuda}\n"
        out += "\nDevice Index,Device Minor,Model,Brand,GPU UUID,Bus Location,Architecture\n"
        return out + "".join(",".join(device_fields(i, g)) + "\n" for i, g in enumerate(gpus))
    out = f"{'NVRM version:':<15} {nvrm}\n{'CUDA version:':<15} {cuda}\n"
    for i, gpu in enumerate(gpus):
        out += "\n" + "".join(f"{label:<15} {value}\n" for label, value in zip(INFO_LABELS, device_fields(i, gpu)))
    return out


def select_gpus(gpus: list[dict], devices: str) -> list[dict]:
    """The GPUs a ``--device`` value names (comma list of indexes, UUIDs, ``all``), in NVML's order; ``CliError``
    (libnvidia-container's ``device error: unknown device id``) for one that is not there."""
    wanted = [d.strip() for d in devices.split(",") if d.strip()]
    if "all" in wanted:
        return list(gpus)
    chosen = set()
    for ident in wanted:
        match = [
            i
            for i, g in enumerate(gpus)
            if (ident.isdigit() and int(ident) == i) or (g.get("uuid") and g["uuid"].lower() == ident.lower())
        ]
        if not match:
            raise CliError(f"{NAME}: device error: unknown device id: {ident}")
        chosen.update(match)
    return [g for i, g in enumerate(gpus) if i in chosen]


def list_paths(
    nodes: list[str],
    gpus: list[dict] | None,
    files: list,
    what: dict,
) -> list[str]:
    """``list``'s lines. ``nodes``: the control device nodes present (paths); ``gpus``: the selected GPUs (None:
    no device listing); ``files``: ``DriverFile``s of every capability; ``what``: ``binaries``, ``libraries``,
    ``compat32``, ``ipcs``, ``firmwares`` (bools), ``capabilities`` (a set, empty: all), ``no_ipc`` (socket
    directory names left out)."""
    caps = what.get("capabilities") or set()

    def wanted(f: object) -> bool:
        return not caps or f.capability in caps

    lines = []
    if gpus is not None:
        lines += [p for p in CONTROL_NODES if p in nodes]
        lines += [f"/dev/nvidia{g['minor']}" for g in gpus if g.get("minor") is not None]
    if what.get("binaries"):
        lines += [f.resolved for f in files if f.kind == "binary" and wanted(f)]
    if what.get("libraries"):
        libs = [f for f in files if f.kind == "library" and wanted(f)]
        lines += [f.resolved for f in libs if f.arch != "i386"]
        if what.get("compat32"):
            lines += [f.resolved for f in libs if f.arch == "i386"]
    if what.get("ipcs"):
        skip = what.get("no_ipc") or ()
        lines += [f.path for f in files if f.kind == "ipc" and wanted(f) and f.name not in skip]
    if what.get("firmwares"):
        lines += [f.resolved for f in files if f.kind == "firmware" and wanted(f)]
    seen = set()
    return [line for line in lines if not (line in seen or seen.add(line))]


def _info(options: dict, args: list[str]) -> str:
    found, positional, _at = parse_options(f"{NAME} info", args, INFO_OPTIONS, False)
    if "help" in found or "usage" in found:
        return help_text("info")
    if positional:
        raise CliError(f"{NAME} info: too many arguments ({positional[0]!r}; try {NAME} info --help)")
    driver_root = _driver_root(options)
    return format_info(query_driver(driver_root, _cache_entries(driver_root, options)), csv="csv" in found)


def _list(options: dict, args: list[str]) -> str:
    found, positional, _at = parse_options(f"{NAME} list", args, LIST_OPTIONS, False)
    if "help" in found or "usage" in found:
        return help_text("list")
    if positional:
        raise CliError(f"{NAME} list: too many arguments ({positional[0]!r}; try {NAME} list --help)")
    for unsupported in ("mig-config", "mig-monitor", "imex-channel"):
        if unsupported in found:
            raise CliError(f"{NAME} list: --{unsupported} is not supported by gpufleet's {NAME}")
    caps = {c for c in CAPABILITY_FLAGS if c in found}
    kinds = ("binaries", "libraries", "ipcs", "firmwares")
    selectors = [k for k in found if k not in CAPABILITY_FLAGS and k not in ("no-persistenced", "no-fabricmanager")]
    everything = not selectors  # NVIDIA: no option at all lists everything (capability filters still apply)
    what = {k: everything or k in found for k in kinds}
    what["compat32"] = everything or "compat32" in found
    what["capabilities"] = caps
    what["no_ipc"] = {
        n
        for n, flag in (("nvidia-persistenced", "no-persistenced"), ("nvidia-fabricmanager", "no-fabricmanager"))
        if flag in found
    }
    devices = ",".join(found["device"]) if "device" in found else ("all" if everything else None)

    from ..base.pathsafe import host_path  # noqa: PLC0415
    from ..cdi.devices import scan_device_nodes  # noqa: PLC0415
    from ..cdi.driver_files import CAPABILITIES, detect_installed_version, find_driver_files  # noqa: PLC0415

    driver_root = _driver_root(options)
    entries = _cache_entries(driver_root, options)
    gpus = None
    version = None
    if devices is not None:
        driver = query_driver(driver_root, entries)
        gpus = select_gpus(driver.get("gpus") or [], devices)
        version = driver.get("driver_version")
    nodes = [n.path for n in scan_device_nodes(host_path(driver_root, "/dev"))]
    if version is None:
        from ..base.pathsafe import resolve_in_root  # noqa: PLC0415

        version = detect_installed_version(entries, lambda p: resolve_in_root(driver_root, p))
        if version is None:
            raise CliError(
                f"{NAME}: initialization error: no NVIDIA driver libraries in the DSO cache of {driver_root}"
            )
    try:
        _version, files = find_driver_files(driver_root, CAPABILITIES, version, entries=entries)
    except (OSError, ValueError) as exc:
        raise CliError(f"{NAME}: detection error: {exc}") from None
    lines = list_paths(nodes, gpus, files, what)
    return "".join(line + "\n" for line in lines)


def shim_path(argv0: str) -> str:
    """The runtime shim next to this program (its launcher's directory), else the default bindir's."""
    from ..base.names import SHIM  # noqa: PLC0415

    here = os.path.dirname(os.path.abspath(argv0)) if argv0 else DEFAULT_BINDIR
    candidate = os.path.join(here, SHIM)
    return candidate if os.access(candidate, os.X_OK) else os.path.join(DEFAULT_BINDIR, SHIM)


def configure_message(argv0: str, args: list[str]) -> str:
    """The one line ``configure`` fails with: why, and the ``ctr run`` that works on this host."""
    devices = []
    for i, arg in enumerate(args):
        if arg.startswith("--device="):
            devices += arg.split("=", 1)[1].split(",")
        elif arg in ("--device", "-d") and i + 1 < len(args):
            devices += args[i + 1].split(",")
    devices = [d for d in devices if d] or ["0"]
    if all(d.isdigit() for d in devices):
        gpus = " ".join(f"--gpus {d}" for d in devices)
    else:
        gpus = "--env NVIDIA_VISIBLE_DEVICES=" + ",".join(devices)
    return (
        f"{NAME} configure (gpufleet): GPUs are not configured from a hook through plain runc on this host; "
        f"run the container through the gpufleet runtime instead: "
        f"ctr run --runc-binary {shim_path(argv0)} {gpus} IMAGE ID [COMMAND]"
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv if argv is None else argv
    args = list(argv[1:])
    try:
        options, _positional, at = parse_options(NAME, args, GLOBAL_OPTIONS, True)
        if "help" in options:
            sys.stdout.write(help_text())
            return 0
        if "usage" in options:
            sys.stdout.write(f"Usage: {NAME} [OPTION...] COMMAND [ARG...]\n")
            return 0
        if "version" in options:
            sys.stdout.write(version_text())
            return 0
        if at >= len(args):
            raise CliError(f"{NAME}: no command given (one of: info, list, configure; try {NAME} --help)")
        command, rest = args[at], args[at + 1 :]
        if command == "configure":
            if "--help" in rest or "-?" in rest:
                sys.stdout.write(help_text("configure"))
                return 0
            raise CliError(configure_message(argv[0] if argv else "", rest))
        if command == "info":
            out = _info(options, rest)
        elif command == "list":
            out = _list(options, rest)
        else:
            raise CliError(f"{NAME}: unknown command '{command}' (one of: info, list, configure; try {NAME} --help)")
    except CliError as exc:
        sys.stderr.write(one_line(exc) + "\n")  # the message names its program already
        return 1
    except Exception as exc:  # one line, never a traceback
        sys.stderr.write(error_line(NAME, f"internal error ({type(exc).__name__}: {exc})"))
        return 1
    sys.stdout.write(out)
    return 0
