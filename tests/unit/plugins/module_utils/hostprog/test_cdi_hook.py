# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""gpufleet-cdi-hook on crafted container roots: it works, it never writes outside the root, never runs or
loads anything, never blocks on the image (a crafted image must not reach the host).

Real files in tmp dirs, the hook run as installed (launcher + flat package) with the OCI state on stdin, as
runc runs it. The attack classes run with a real procfs mounted at ``<root>/proc`` in a private mount
namespace, the state the hook meets under runc: there ``<root>/proc/<pid>/root`` is the host's ``/``, the
door the host's ``ldconfig -r`` walked through before (CVE-2025-23267 class). Every canary is a host
directory whose exact state is compared before and after.
"""

import json
import os
import shutil
import subprocess
import sys

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi.ldcache import (
    LdCacheError,
    add_entries,
    read_ld_so_cache,
)
from ansible_collections.gpufleet.nvidia.plugins.module_utils.hostprog import cdi_hook as _cdi_hook
from ansible_collections.gpufleet.nvidia.plugins.module_utils.hostprog import install as _host_programs
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils.cdi.crafted_ldcache import (
    WORST_CASES,
    worst_case,
)

LIB = "/usr/lib/x86_64-linux-gnu"
LDCONFIG = "/sbin/ldconfig"
REAL = "libcuda.so.535.1"
MARKER_C = r"""
#include <fcntl.h>
#include <unistd.h>
static void mark(void) { int fd = open("%s", O_WRONLY | O_CREAT, 0644); if (fd >= 0) close(fd); }
__attribute__((constructor)) static void init(void) { mark(); }
int main(void) { mark(); return 0; }
"""

pytestmark = pytest.mark.skipif(
    not (shutil.which("gcc") and shutil.which("unshare") and os.geteuid() == 0), reason="needs root, gcc, unshare"
)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A fake libcuda (soname libcuda.so.1)."""
    out = tmp_path_factory.mktemp("built")
    src = out / "cuda.c"
    src.write_text("int cuInit(unsigned int flags) { return flags ? 0 : 100; }\n")
    lib = out / REAL
    subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(lib), str(src)], check=True)
    return {"lib": lib, "dir": out}


def _args(lib_dir=LIB):
    return [
        "apply",
        "--folder",
        lib_dir,
        "--library",
        f"x86_64::libcuda.so.1::{lib_dir}/{REAL}",
        "--link",
        f"libcuda.so.1::{lib_dir}/libcuda.so",
    ]


@pytest.fixture
def hook(tmp_path, built):
    bindir, libdir = tmp_path / "bin", tmp_path / "lib"
    _host_programs.install(str(bindir), str(libdir), python=sys.executable)
    bundle = tmp_path / "bundle"
    rootfs = bundle / "rootfs"
    for d in ("etc", LIB.lstrip("/"), "tmp", "sbin", "proc"):
        (rootfs / d).mkdir(parents=True, exist_ok=True)
    (rootfs / "etc" / "ld.so.conf").write_text("include /etc/ld.so.conf.d/*.conf\n")
    config = {
        "ociVersion": "1.0.2-dev",
        "root": {"path": "rootfs"},
        "process": {"env": ["PATH=/bin"], "args": ["sh"]},
        "mounts": [{"destination": f"{LIB}/{REAL}", "source": str(built["lib"]), "options": ["ro", "bind"]}],
    }

    def mount_lib():
        """What the runtime's bind mount does: the driver library at its container path."""
        shutil.copy(str(built["lib"]), str(rootfs / LIB.lstrip("/") / REAL))

    def run(extra_env=(), args=None, env=None, proc=True, timeout=30):
        """The installed hook, as runc runs it; with ``proc`` in a private mount namespace whose procfs is
        mounted at ``<root>/proc`` (the attack surface the hook meets under runc)."""
        config["process"]["env"] = ["PATH=/bin", *extra_env]
        (bundle / "config.json").write_text(json.dumps(config))
        state = json.dumps({"ociVersion": "1.0.2", "id": "c1", "status": "creating", "pid": 1, "bundle": str(bundle)})
        argv = [str(bindir / "gpufleet-cdi-hook"), *(_args() if args is None else args)]
        if proc:
            script = 'mount -t proc proc "$1" && shift && exec "$@"'
            argv = ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", str(rootfs / "proc"), *argv]
        return subprocess.run(
            argv,
            input=state,
            capture_output=True,
            text=True,
            env=env or {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
            check=False,
            timeout=timeout,
        )

    run.rootfs = rootfs
    run.config = config
    run.mount_lib = mount_lib
    run.tmp = tmp_path
    return run


def _snapshot(path):
    """Everything about a host tree that a write through it would change."""
    result = {}
    for dirpath, dirnames, filenames in os.walk(str(path)):
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            st = os.lstat(full)
            result[full] = (st.st_mode, st.st_size, st.st_mtime_ns, os.readlink(full) if os.path.islink(full) else None)
    st = os.lstat(str(path))
    result[str(path)] = (st.st_mode, st.st_mtime_ns)
    return result


@pytest.fixture
def canary(tmp_path):
    """A host directory with a victim file; ``via`` is its path through the container's procfs."""
    path = tmp_path / "canary"
    path.mkdir()
    (path / "victim").write_text("host file\n")
    return Canary(path)


class Canary:
    """A host directory ``path``; ``via`` is its path through the container's procfs, ``before`` its state."""

    def __init__(self, path):
        self.path = path
        self.via = f"/proc/{os.getpid()}/root{path}"
        self.before = _snapshot(path)


def _cache(rootfs):
    return {(e.soname, e.arch): e.path for e in read_ld_so_cache(str(rootfs / "etc" / "ld.so.cache"))}


def test_hook_writes_links_cache_and_conf(hook):
    hook.mount_lib()
    proc = hook()
    assert proc.returncode == 0, proc.stderr
    lib = hook.rootfs / LIB.lstrip("/")
    assert os.readlink(str(lib / "libcuda.so.1")) == REAL
    assert os.readlink(str(lib / "libcuda.so")) == "libcuda.so.1"
    conf = hook.rootfs / "etc" / "ld.so.conf.d" / "00-gpufleet-nvidia.conf"
    assert LIB in conf.read_text().splitlines()
    assert _cache(hook.rootfs)[("libcuda.so.1", "x86_64")] == LIB + "/libcuda.so.1"
    listing = subprocess.run(
        [LDCONFIG, "-p", "-C", str(hook.rootfs / "etc/ld.so.cache")], capture_output=True, text=True, check=True
    )
    assert f"libcuda.so.1 (libc6,x86-64) => {LIB}/libcuda.so.1" in listing.stdout, listing  # glibc reads it
    assert hook().returncode == 0  # a second run (restart) is fine
    assert len(read_ld_so_cache(str(hook.rootfs / "etc" / "ld.so.cache"))) == 1


def test_image_cache_entries_are_kept(hook, built):
    """The image's own cache (made by glibc's ldconfig) keeps every entry; the driver's is added."""
    other = hook.rootfs / "opt" / "img"
    other.mkdir(parents=True)
    src = built["dir"] / "img.c"
    src.write_text("int img(void) { return 1; }\n")
    for name in ("libimg.so.1", "libzz.so.3", "libaa.so.2"):
        soname = name
        subprocess.run(
            ["gcc", "-shared", "-fPIC", f"-Wl,-soname,{soname}", "-o", str(other / (name + ".0")), str(src)], check=True
        )
    (hook.rootfs / "etc" / "ld.so.conf").write_text("/opt/img\n")
    subprocess.run([LDCONFIG, "-r", str(hook.rootfs)], check=True)
    before = _cache(hook.rootfs)
    assert len(before) == 3
    hook.mount_lib()
    assert hook().returncode == 0
    after = _cache(hook.rootfs)
    assert after == {**before, ("libcuda.so.1", "x86_64"): LIB + "/libcuda.so.1"}


def test_only_mounted_libraries_are_made_known(hook):
    """A library of the spec that this container does not get (no mount there) has no link and no entry."""
    hook.config["mounts"] = []
    proc = hook()
    assert proc.returncode == 0, proc.stderr
    assert not os.path.lexists(str(hook.rootfs / LIB.lstrip("/") / "libcuda.so.1"))
    assert not os.path.lexists(str(hook.rootfs / LIB.lstrip("/") / "libcuda.so"))
    assert not (hook.rootfs / "etc" / "ld.so.cache").exists()


def test_image_file_with_the_soname_is_kept_and_the_cache_names_the_driver(hook):
    lib = hook.rootfs / LIB.lstrip("/")
    (lib / "libcuda.so.1").write_text("the image's own file")
    (lib / "libcuda.so").write_text("the image's own dev file")
    hook.mount_lib()
    assert hook().returncode == 0
    assert (lib / "libcuda.so.1").read_text() == "the image's own file"
    assert (lib / "libcuda.so").read_text() == "the image's own dev file"
    assert _cache(hook.rootfs)[("libcuda.so.1", "x86_64")] == f"{LIB}/{REAL}"


def test_image_soname_link_is_replaced(hook):
    lib = hook.rootfs / LIB.lstrip("/")
    os.symlink("libcuda.so.470.1", str(lib / "libcuda.so.1"))
    hook.mount_lib()
    assert hook().returncode == 0
    assert os.readlink(str(lib / "libcuda.so.1")) == REAL


@pytest.mark.parametrize("how", ["line", "include"])
def test_ld_so_conf_naming_a_host_folder_is_never_read(hook, canary, how):
    conf = hook.rootfs / "etc" / "ld.so.conf"
    if how == "line":
        conf.write_text(f"{canary.via}\n/usr/lib/x86_64-linux-gnu\n")
    else:
        (hook.rootfs / "etc" / "ld.so.conf.d").mkdir()
        (hook.rootfs / "etc" / "ld.so.conf.d" / "evil.conf").write_text(f"{canary.via}\n")
    hook.mount_lib()
    proc = hook()
    assert proc.returncode == 0, proc.stderr
    assert _snapshot(canary.path) == canary.before


def test_library_folder_through_proc_stays_in_the_root(hook, canary):
    lib = hook.rootfs / LIB.lstrip("/")
    shutil.rmtree(str(lib))
    os.symlink(canary.via, str(lib))
    proc = hook()
    assert proc.returncode == 0, proc.stderr
    assert _snapshot(canary.path) == canary.before
    inside = hook.rootfs / str(canary.path).lstrip("/")  # where the link leads when read from inside the root
    assert os.readlink(str(inside / "libcuda.so.1")) == REAL


def test_etc_through_proc_stays_in_the_root(hook, canary):
    shutil.rmtree(str(hook.rootfs / "etc"))
    os.symlink(canary.via, str(hook.rootfs / "etc"))
    hook.mount_lib()
    proc = hook()
    assert proc.returncode == 0, proc.stderr
    assert _snapshot(canary.path) == canary.before
    inside = hook.rootfs / str(canary.path).lstrip("/")
    assert (inside / "ld.so.cache").exists() and (inside / "ld.so.conf.d" / "00-gpufleet-nvidia.conf").exists()


def test_cache_linked_to_a_host_file_is_replaced_not_followed(hook, canary):
    os.symlink(f"{canary.via}/victim", str(hook.rootfs / "etc" / "ld.so.cache"))
    hook.mount_lib()
    proc = hook()
    assert proc.returncode == 0, proc.stderr
    assert _snapshot(canary.path) == canary.before
    assert not os.path.islink(str(hook.rootfs / "etc" / "ld.so.cache"))
    assert ("libcuda.so.1", "x86_64") in _cache(hook.rootfs)


def test_planted_links_where_driver_files_go(hook, canary):
    lib = hook.rootfs / LIB.lstrip("/")
    hook.mount_lib()
    os.symlink(f"{canary.path}/victim", str(lib / "libcuda.so"))
    os.symlink(f"{canary.via}/victim", str(hook.rootfs / "etc" / "ld.so.conf.d"))
    proc = hook()
    assert proc.returncode == 0, proc.stderr
    assert _snapshot(canary.path) == canary.before
    assert os.readlink(str(lib / "libcuda.so")) == f"{canary.path}/victim"  # not ours to replace, and not followed


@pytest.mark.parametrize("name", ["ld.so.conf", "ld.so.cache"])
def test_fifo_in_the_image_never_blocks(hook, name):
    target = hook.rootfs / "etc" / name
    if target.exists():
        target.unlink()
    os.mkfifo(str(target))
    hook.mount_lib()
    proc = hook(timeout=20)  # a blocking open would hang: subprocess raises TimeoutExpired
    assert proc.returncode == 0, proc.stderr
    assert ("libcuda.so.1", "x86_64") in _cache(hook.rootfs)


def test_oversized_image_cache_is_the_fallback_with_one_line(hook):
    """A cache past the merge's bound is not read past it: the driver's entries alone, and one line why."""
    with open(str(hook.rootfs / "etc" / "ld.so.cache"), "wb") as f:
        f.truncate(9 << 20)  # sparse: no disk used
    hook.mount_lib()
    proc = hook()
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("\n") == 1 and "larger than" in proc.stderr and "alone" in proc.stderr, proc.stderr
    assert _cache(hook.rootfs) == {("libcuda.so.1", "x86_64"): LIB + "/libcuda.so.1"}


@pytest.mark.parametrize("shape", sorted(WORST_CASES))
def test_crafted_image_caches_merge_or_fall_back_through_the_hook(hook, shape):
    """The shapes that cost the old merge minutes to hours (``crafted_ldcache``), as the image's cache, through the
    installed hook: the container's cache names the driver's libcuda; a cache that is not merged says so in one
    line, a merged one says nothing."""
    data = worst_case(shape)
    (hook.rootfs / "etc" / "ld.so.cache").write_bytes(data)
    hook.mount_lib()
    proc = hook()
    assert proc.returncode == 0, proc.stderr
    assert _cache(hook.rootfs)[("libcuda.so.1", "x86_64")] == LIB + "/libcuda.so.1"
    try:
        add_entries(data, [("libcuda.so.1", LIB + "/libcuda.so.1", "x86_64")])
    except LdCacheError as exc:
        assert proc.stderr == f"gpufleet-cdi-hook: the image's /etc/ld.so.cache is not merged ({exc}): the " \
            "container's cache lists the driver's libraries alone\n"  # fmt: skip
    else:
        assert proc.stderr == ""


def test_corrupt_image_cache_is_replaced(hook):
    (hook.rootfs / "etc" / "ld.so.cache").write_bytes(b"glibc-ld.so.cache1.1" + b"\xff" * 100)
    hook.mount_lib()
    proc = hook()
    assert proc.returncode == 0, proc.stderr
    assert _cache(hook.rootfs) == {("libcuda.so.1", "x86_64"): LIB + "/libcuda.so.1"}


def test_image_code_and_loader_variables_never_run(hook, built, canary):
    """An image with its own ldconfig, an evil .so in ld.so.preload and LD_PRELOAD/PYTHON* in its env."""
    marker = canary.path / "pwned"
    src = built["dir"] / "evil.c"
    src.write_text(MARKER_C % marker)
    evil_so = hook.rootfs / "evil.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(evil_so), str(src)], check=True)
    for exe in (hook.rootfs / "sbin" / "ldconfig", hook.rootfs / "usr" / "bin" / "ldconfig"):
        exe.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["gcc", "-o", str(exe), str(src)], check=True)
    (hook.rootfs / "etc" / "ld.so.preload").write_text(f"/evil.so\n{evil_so}\n")
    (hook.rootfs / "sitecustomize.py").write_text(f"open({str(marker)!r}, 'w')\n")
    hook.mount_lib()
    # The container's env (config.json) is the image's; the hook's own env is the spec's (HOOK_ENV).
    env = [f"LD_PRELOAD={evil_so}", f"LD_LIBRARY_PATH={hook.rootfs}", f"PYTHONPATH={hook.rootfs}", "PYTHONSTARTUP=/x"]
    proc = hook(extra_env=env)
    assert proc.returncode == 0, proc.stderr
    assert not marker.exists()


def test_an_ldconfig_to_run_is_refused(hook):
    proc = hook(args=["apply", "--ldconfig", LDCONFIG, "--folder", LIB])
    assert proc.returncode == 1 and "unknown option '--ldconfig'" in proc.stderr


@pytest.mark.parametrize(
    ("state", "message"),
    [
        ("", "names no absolute bundle"),
        ("[1]", "names no absolute bundle"),
        ('{"bundle": "rel"}', "absolute bundle"),
        ('{"bundle": ', "invalid JSON"),
        ("\ud800", ""),
    ],
)
def test_bad_state_is_one_line(hook, state, message):
    bindir = hook.tmp / "bin"
    proc = subprocess.run([str(bindir / "gpufleet-cdi-hook"), *_args()], input=state.encode("utf-8", "surrogatepass"),
                          capture_output=True, check=False, timeout=30)  # fmt: skip
    err = proc.stderr.decode()
    assert proc.returncode == 1 and err.count("\n") == 1 and "Traceback" not in err and message in err, err


@pytest.mark.parametrize(
    "config",
    [
        '{"root": 5}',
        '{"root": {"path": 3}}',
        '{"root": {"path": "rootfs"}, "mounts": {}}',
        "[]",
        '{"root"',
        '{"root": {"path": "rootfs"}, "mounts": [{"destination": 1}]}',
    ],
)
def test_bad_config_json_is_one_line(hook, config):
    (hook.rootfs.parent / "config.json").write_text(config)
    bindir = hook.tmp / "bin"
    state = json.dumps({"bundle": str(hook.rootfs.parent)})
    proc = subprocess.run([str(bindir / "gpufleet-cdi-hook"), *_args()], input=state, capture_output=True, text=True,
                          check=False, timeout=30)  # fmt: skip
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr


def test_bad_arguments_fail(hook):
    assert "expected <target name>" in hook(args=["apply", "--link", "../x::/y"]).stderr
    assert "not an absolute path" in hook(args=["apply", "--folder", "lib"]).stderr
    assert "unknown option" in hook(args=["apply", "--frob", "1"]).stderr
    assert "expected <arch>::<soname>" in hook(args=["apply", "--library", "mips::libx.so.1::/x"]).stderr
    assert "expected <arch>::<soname>" in hook(args=["apply", "--library", "x86_64::a/b::/x"]).stderr


def test_open_dir_refuses_a_link_that_appears_after_resolution(tmp_path, monkeypatch):
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    os.symlink("/etc", str(root / "moved"))
    monkeypatch.setattr(_cdi_hook, "resolve_in_root", lambda r, p: "/moved")  # the race, made certain
    fd = os.open(str(root), os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(_cdi_hook.HookError, match="changed while the hook ran"):
            _cdi_hook.open_dir(fd, str(root), "/etc", create=True)
    finally:
        os.close(fd)


def test_sanitize_environment(monkeypatch):
    monkeypatch.setenv("LD_PRELOAD", "/x.so")
    monkeypatch.setenv("PYTHONPATH", "/x")
    saved = dict(os.environ)
    try:
        _cdi_hook.sanitize_environment()
        assert dict(os.environ) == _cdi_hook.SAFE_ENV
    finally:
        os.environ.clear()
        os.environ.update(saved)
