"""gpufleet-cdi-hook on crafted container roots: it works, and it never writes outside the root nor runs the image.

Real files in tmp dirs, the host's real (static) ldconfig, the hook run as installed (launcher + flat
package) with the OCI state on stdin, as runc runs it.
"""

import json
import os
import shutil
import subprocess
import sys

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils import _cdi_hook, _host_programs
from ansible_collections.gpufleet.nvidia.plugins.module_utils._ldcache import read_ld_so_cache

LIB = "/usr/lib/x86_64-linux-gnu"
LDCONFIG = "/sbin/ldconfig"
MARKER_C = r"""
#include <fcntl.h>
#include <unistd.h>
static void mark(void) { int fd = open("%s", O_WRONLY | O_CREAT, 0644); if (fd >= 0) close(fd); }
__attribute__((constructor)) static void init(void) { mark(); }
int main(void) { mark(); return 0; }
"""

pytestmark = pytest.mark.skipif(
    not (shutil.which("gcc") and os.path.exists(LDCONFIG) and os.geteuid() == 0), reason="needs root, gcc and ldconfig"
)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A fake libcuda (soname libcuda.so.1) and a static program that dumps its env and cwd root."""
    out = tmp_path_factory.mktemp("built")
    src = out / "cuda.c"
    src.write_text("int cuInit(unsigned int flags) { return flags ? 0 : 100; }\n")
    lib = out / "libcuda.so.535.1"
    subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(lib), str(src)], check=True)
    dump = out / "dump.c"
    dump.write_text(
        "#include <stdio.h>\nextern char **environ;\n"
        'int main(int c, char **v) { FILE *f = fopen("/hook-ran.txt", "w"); if (!f) return 3;'
        ' for (char **e = environ; *e; e++) fprintf(f, "%s\\n", *e); fclose(f); return 0; }\n'
    )
    static = out / "dump-static"
    static_ok = subprocess.run(["gcc", "-static", "-o", str(static), str(dump)], check=False).returncode == 0
    return {"lib": lib, "static": static if static_ok else None, "dir": out}


@pytest.fixture
def hook(tmp_path, built):
    bindir, libdir = tmp_path / "bin", tmp_path / "lib"
    _host_programs.install(str(bindir), str(libdir), python=sys.executable)
    bundle = tmp_path / "bundle"
    rootfs = bundle / "rootfs"
    for d in ("etc", "usr/lib/x86_64-linux-gnu", "tmp", "sbin"):
        (rootfs / d).mkdir(parents=True)
    (rootfs / "etc" / "ld.so.conf").write_text("include /etc/ld.so.conf.d/*.conf\n")
    config = {
        "ociVersion": "1.0.2-dev",
        "root": {"path": "rootfs"},
        "process": {"env": ["PATH=/bin"], "args": ["sh"]},
    }

    def mount_lib():
        """What the runtime's bind mount does: the driver library at its container path."""
        shutil.copy(str(built["lib"]), str(rootfs / LIB.lstrip("/") / "libcuda.so.535.1"))

    def run(extra_env=(), args=None, env=None):
        config["process"]["env"] = ["PATH=/bin", *extra_env]
        (bundle / "config.json").write_text(json.dumps(config))
        state = json.dumps({"ociVersion": "1.0.2", "id": "c1", "status": "creating", "pid": 1, "bundle": str(bundle)})
        if args is None:
            args = ["apply", "--ldconfig", LDCONFIG, "--folder", LIB, "--link", "libcuda.so.1::%s/libcuda.so" % LIB]
        return subprocess.run(
            [str(bindir / "gpufleet-cdi-hook"), *args],
            input=state,
            capture_output=True,
            text=True,
            env=env or {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
            check=False,
        )

    run.rootfs = rootfs
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


def test_hook_updates_ld_cache_and_creates_links(hook):
    hook.mount_lib()
    proc = hook()
    assert proc.returncode == 0, proc.stderr
    lib = hook.rootfs / LIB.lstrip("/")
    assert os.readlink(str(lib / "libcuda.so.1")) == "libcuda.so.535.1"  # made by ldconfig
    assert os.readlink(str(lib / "libcuda.so")) == "libcuda.so.1"  # made by the hook
    conf = hook.rootfs / "etc" / "ld.so.conf.d" / "00-gpufleet-nvidia.conf"
    assert LIB in conf.read_text().splitlines()
    entries = read_ld_so_cache(str(hook.rootfs / "etc" / "ld.so.cache"))
    assert any(e.soname == "libcuda.so.1" and e.path == LIB + "/libcuda.so.1" for e in entries)
    assert hook().returncode == 0  # a second run (restart) is fine


def test_link_is_skipped_when_its_target_is_absent(hook):
    proc = hook()
    assert proc.returncode == 0, proc.stderr
    assert not os.path.lexists(str(hook.rootfs / LIB.lstrip("/") / "libcuda.so"))


def test_existing_image_file_is_not_replaced(hook):
    hook.mount_lib()
    own = hook.rootfs / LIB.lstrip("/") / "libcuda.so"
    own.write_text("the image's own file")
    assert hook().returncode == 0
    assert own.read_text() == "the image's own file"


def test_library_folder_linked_to_a_host_path(hook):
    """usr/lib/x86_64-linux-gnu -> /tmp/victim (on the host): no link, no ld.so.conf, nothing there."""
    victim = hook.tmp / "victim"
    victim.mkdir()
    (victim / "libcuda.so.1").write_text("host file")
    before = _snapshot(victim)
    lib = hook.rootfs / LIB.lstrip("/")
    shutil.rmtree(str(lib))
    os.symlink(str(victim), str(lib))
    conf_dir = hook.rootfs / "etc" / "ld.so.conf.d"
    host_conf = hook.tmp / "host-ld.so.conf.d"
    host_conf.mkdir()
    os.symlink(str(host_conf), str(conf_dir))
    proc = hook()
    assert proc.returncode == 0, proc.stderr
    assert _snapshot(victim) == before
    assert os.listdir(str(host_conf)) == []
    # what was written went inside the root, where the links lead when read from inside
    inside = hook.rootfs / str(host_conf).lstrip("/") / "00-gpufleet-nvidia.conf"
    assert inside.exists()


def test_planted_link_where_a_driver_file_goes(hook):
    """libcuda.so.1 and libcuda.so planted as links to a host file: the host file is never touched."""
    secret = hook.tmp / "shadow"
    secret.write_text("root:secret\n")
    os.chmod(str(secret), 0o600)
    before = _snapshot(hook.tmp / "shadow")
    lib = hook.rootfs / LIB.lstrip("/")
    hook.mount_lib()
    os.symlink(str(secret), str(lib / "libcuda.so.1"))
    os.symlink(str(secret), str(lib / "libcuda.so"))
    os.symlink(str(secret), str(hook.rootfs / "etc" / "ld.so.cache"))
    proc = hook()
    assert proc.returncode == 0, proc.stderr
    assert secret.read_text() == "root:secret\n"
    assert _snapshot(hook.tmp / "shadow") == before
    assert os.readlink(str(lib / "libcuda.so")) == str(secret)  # not ours to replace, and not followed


def test_image_code_and_loader_variables_never_run(hook, built):
    """An image with its own ldconfig, an evil .so in ld.so.preload and LD_PRELOAD in its env."""
    marker = hook.tmp / "pwned"
    src = built["dir"] / "evil.c"
    src.write_text(MARKER_C % marker)
    evil_so = hook.rootfs / "evil.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(evil_so), str(src)], check=True)
    for exe in (hook.rootfs / "sbin" / "ldconfig", hook.rootfs / "usr" / "bin" / "ldconfig"):
        exe.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["gcc", "-o", str(exe), str(src)], check=True)
    (hook.rootfs / "etc" / "ld.so.preload").write_text("/evil.so\n%s\n" % evil_so)
    hook.mount_lib()
    env = ["LD_PRELOAD=%s" % evil_so, "LD_LIBRARY_PATH=%s" % hook.rootfs, "PYTHONPATH=%s" % hook.rootfs]
    proc = hook(extra_env=env)
    assert proc.returncode == 0, proc.stderr
    assert not marker.exists()
    assert os.path.islink(str(hook.rootfs / LIB.lstrip("/") / "libcuda.so.1"))  # the host's ldconfig did run


def test_ldconfig_runs_chrooted_with_a_clean_environment(hook, built):
    if built["static"] is None:
        pytest.skip("no static libc to build the probe")
    dirty = {"PATH": "/usr/bin:/bin", "LD_PRELOAD": "/nonexistent.so", "PYTHONPATH": "/x", "FOO": "bar"}
    proc = hook(args=["apply", "--ldconfig", str(built["static"]), "--folder", LIB], env=dirty)
    assert proc.returncode == 0, proc.stderr
    ran = (hook.rootfs / "hook-ran.txt").read_text().split()  # written at "/" = the container root
    assert sorted(ran) == ["LC_ALL=C", "PATH=/usr/sbin:/usr/bin:/sbin:/bin"]


def test_failing_ldconfig_fails_the_hook(hook):
    proc = hook(args=["apply", "--ldconfig", "/bin/false"])
    assert proc.returncode == 1 and "updating the ld cache" in proc.stderr


def test_bad_arguments_fail(hook):
    assert "expected <target name>" in hook(args=["apply", "--link", "../x::/y"]).stderr
    assert "not an absolute path" in hook(args=["apply", "--folder", "lib"]).stderr
    assert "unknown option" in hook(args=["apply", "--frob", "1"]).stderr


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


def test_static_elf_detection():
    fd = os.open(LDCONFIG, os.O_RDONLY)
    try:
        assert _cdi_hook.is_static_elf(fd)
    finally:
        os.close(fd)
    fd = os.open("/bin/true", os.O_RDONLY)
    try:
        assert not _cdi_hook.is_static_elf(fd)
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
