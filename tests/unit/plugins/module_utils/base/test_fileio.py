# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""base.fileio: the one atomic writer and the one plain reader of host files."""

import ast
import inspect
import os
import stat

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.base import fileio


def test_read_text(tmp_path):
    path = tmp_path / "f"
    assert fileio.read_text(str(path)) is None
    path.write_text("caf\u00e9\n", encoding="utf-8")
    assert fileio.read_text(str(path)) == "caf\u00e9\n"


def test_read_text_errors(tmp_path):
    bad = tmp_path / "bad"
    bad.write_bytes(b"\xff\xfe ok")
    with pytest.raises(UnicodeDecodeError):
        fileio.read_text(str(bad))
    assert fileio.read_text(str(bad), tolerant=True) is None
    assert fileio.read_text(str(bad), errors="replace").endswith(" ok")
    with pytest.raises(IsADirectoryError):
        fileio.read_text(str(tmp_path))
    assert fileio.read_text(str(tmp_path), tolerant=True) is None


def test_atomic_write_new_file(tmp_path):
    path = tmp_path / "new.json"
    fileio.atomic_write(str(path), "{}\n")
    assert path.read_text() == "{}\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    fileio.atomic_write(str(tmp_path / "b"), b"\x00\x01", 0o600)
    assert (tmp_path / "b").read_bytes() == b"\x00\x01" and stat.S_IMODE((tmp_path / "b").stat().st_mode) == 0o600
    assert sorted(os.listdir(tmp_path)) == ["b", "new.json"]  # no temporary file left


def test_atomic_write_keeps_mode_of_existing(tmp_path):
    path = tmp_path / "daemon.json"
    path.write_text("old")
    path.chmod(0o640)
    inode = path.stat().st_ino
    fileio.atomic_write(str(path), "new")
    assert path.read_text() == "new"
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert path.stat().st_ino != inode  # replaced by a rename, not rewritten in place
    fileio.atomic_write(str(path), "newer", 0o755)
    assert stat.S_IMODE(path.stat().st_mode) == 0o755


def test_atomic_write_makedirs(tmp_path):
    path = tmp_path / "a" / "b" / "c.toml"
    with pytest.raises(FileNotFoundError):
        fileio.atomic_write(str(path), "x")
    fileio.atomic_write(str(path), "x", makedirs=True)
    assert path.read_text() == "x"


def test_atomic_write_failure_leaves_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text("old")

    def refuse(tmp):
        assert os.path.dirname(tmp) == str(tmp_path) and fileio.read_text(tmp) == "new"
        raise RuntimeError("refused")

    with pytest.raises(RuntimeError):
        fileio.atomic_write(str(path), "new", prepare=refuse)
    assert path.read_text() == "old"
    assert os.listdir(tmp_path) == ["config.toml"]


def test_atomic_write_does_not_follow_a_planted_temporary(tmp_path, monkeypatch):
    """A name that exists (a planted link) is skipped, never opened through."""
    victim = tmp_path / "victim"
    victim.write_text("keep")
    names = iter([b"\x00\x00\x00\x00", b"\x00\x00\x00\x01"])
    monkeypatch.setattr(fileio.os, "urandom", lambda n: next(names))
    os.symlink(str(victim), str(tmp_path / f".f.gpufleet-{os.getpid()}-00000000"))
    fileio.atomic_write(str(tmp_path / "f"), "data")
    assert victim.read_text() == "keep" and (tmp_path / "f").read_text() == "data"


def test_backup(tmp_path):
    path = tmp_path / "daemon.json"
    path.write_text("admin's")
    path.chmod(0o600)
    os.utime(str(path), (1000000000, 1000000000))
    copy = fileio.backup(str(path))
    assert os.path.dirname(copy) == str(tmp_path) and copy.startswith(f"{path}.{os.getpid()}.") and copy.endswith("~")
    assert fileio.read_text(copy) == "admin's"
    assert stat.S_IMODE(os.stat(copy).st_mode) == 0o600 and os.stat(copy).st_mtime == 1000000000


def test_imports_only_os():
    """The runtime shim writes config.json through it on every GPU container start."""
    tree = ast.parse(inspect.getsource(fileio))
    top = {a.name for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
    assert top == {"annotations", "os"}  # typing only under ``if False``


def _leftover(folder, name, age=0.0, now=1_000_000.0):
    path = folder / name
    path.write_text("half\n")
    os.utime(path, (now - age, now - age))
    return str(path)


def test_stale_temporaries_only_ours_with_the_writer_gone(tmp_path):
    now = 1_000_000.0
    target = str(tmp_path / "daemon.json")
    dead = _leftover(tmp_path, ".daemon.json.gpufleet-4242-0badc0de")
    alive = _leftover(tmp_path, ".daemon.json.gpufleet-77-deadbeef")
    old_alive = _leftover(tmp_path, ".daemon.json.gpufleet-77-00000001", age=fileio.STALE_AGE + 1)
    # an admin's files, and ours for another target: never
    admin = [
        _leftover(tmp_path, name, age=10 * fileio.STALE_AGE)
        for name in (
            "daemon.json",
            ".daemon.json.gpufleet-notes",
            ".daemon.json.gpufleet-4242-0BADC0DE",  # upper case: not a name we give
            ".daemon.json.gpufleet-4242-0badc0de0",
            ".daemon.json.gpufleet-04242-0badc0de",
            ".daemon.json.gpufleet--0badc0de",
            "daemon.json.gpufleet-4242-0badc0de",
            ".daemon.json.gpufleet-4242-0badc0de~",
            ".config.toml.gpufleet-4242-0badc0de",
        )
    ]
    (tmp_path / ".daemon.json.gpufleet-4243-0badc0de").mkdir()  # a folder: not a file of ours
    os.symlink("/etc/passwd", tmp_path / ".daemon.json.gpufleet-4244-0badc0de")  # a link: not ours either
    running = {77}.__contains__
    found = fileio.stale_temporaries(target, now=now, running=running)
    assert found == sorted([dead, old_alive])
    assert alive not in found
    removed = fileio.remove_stale_temporaries(target, now=now, running=running)
    assert removed == found
    assert not os.path.lexists(dead) and not os.path.lexists(old_alive)
    assert os.path.exists(alive)
    assert all(os.path.exists(p) for p in admin)
    assert os.path.islink(tmp_path / ".daemon.json.gpufleet-4244-0badc0de")
    assert fileio.remove_stale_temporaries(target, now=now, running=running) == []


def test_stale_temporaries_real_processes(tmp_path):
    """The default check asks the kernel: this process's own temporary is never stale, a reaped child's is."""
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    target = str(tmp_path / "nvidia.yaml")
    mine = _leftover(tmp_path, f".nvidia.yaml.gpufleet-{os.getpid()}-12345678", now=os.path.getmtime(tmp_path))
    gone = _leftover(tmp_path, f".nvidia.yaml.gpufleet-{child.pid}-12345678", now=os.path.getmtime(tmp_path))
    assert fileio.stale_temporaries(target) == [gone]
    assert mine not in fileio.remove_stale_temporaries(target)
    assert os.path.exists(mine) and not os.path.exists(gone)


def test_stale_temporaries_of_a_missing_folder(tmp_path):
    assert fileio.stale_temporaries(str(tmp_path / "absent" / "config.toml")) == []


def test_a_write_killed_before_the_rename_leaves_a_temporary_the_next_run_removes(tmp_path):
    """A writer SIGKILLed between the write and the rename (the child below dies inside ``prepare``)."""
    import subprocess
    import sys
    import textwrap

    target = tmp_path / "config.toml"
    target.write_text("old = 1\n")
    code = textwrap.dedent(
        f"""
        import os, signal
        from ansible_collections.gpufleet.nvidia.plugins.module_utils.base import fileio
        fileio.atomic_write({str(target)!r}, "new = 1\\n", prepare=lambda tmp: os.kill(os.getpid(), signal.SIGKILL))
        """
    )
    child = subprocess.run(
        [sys.executable, "-c", code], check=False, env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    )
    assert child.returncode == -9
    assert target.read_text() == "old = 1\n"
    left = [p for p in os.listdir(tmp_path) if p != "config.toml"]
    assert len(left) == 1 and left[0].startswith(".config.toml.gpufleet-")
    assert fileio.remove_stale_temporaries(str(target)) == [str(tmp_path / left[0])]
    assert os.listdir(tmp_path) == ["config.toml"]


# ---------------------------------------------------------------- read_regular: the one bounded reader


def test_read_regular_reads_a_regular_file_within_its_limit(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"x" * 100)
    assert fileio.read_regular(str(path), 100) == b"x" * 100
    seen = []
    assert fileio.read_regular(str(path), 100, check=seen.append) == b"x" * 100
    assert stat.S_ISREG(seen[0].st_mode)  # the check ran on the open file's fstat
    with pytest.raises(fileio.FileLimitError, match=r"^the cache is larger than 99 bytes$"):
        fileio.read_regular(str(path), 99, "the cache")
    with pytest.raises(FileNotFoundError):
        fileio.read_regular(str(tmp_path / "missing"), 100)


@pytest.mark.parametrize("follow", [True, False])
def test_read_regular_never_blocks_on_a_fifo(tmp_path, follow):
    fifo = tmp_path / "fifo"
    os.mkfifo(str(fifo))  # no writer: a blocking open or read would never return
    with pytest.raises(fileio.FileLimitError, match="is a FIFO, not a regular file"):
        fileio.read_regular(str(fifo), 1 << 20, follow=follow)


def test_read_regular_refuses_devices_without_reading_them():
    # /dev/zero never ends: a read without a regular-file check runs until memory is gone
    with pytest.raises(fileio.FileLimitError, match="/dev/zero is a character device"):
        fileio.read_regular("/dev/zero", 8 << 20)
    with pytest.raises(fileio.FileLimitError, match="is a directory"):
        fileio.read_regular("/", 1 << 20)


def test_read_regular_without_follow_refuses_a_link(tmp_path):
    target = tmp_path / "target"
    target.write_bytes(b"data")
    os.symlink(str(target), str(tmp_path / "link"))
    assert fileio.read_regular(str(tmp_path / "link"), 100) == b"data"
    with pytest.raises(fileio.FileLimitError, match="is a symbolic link"):
        fileio.read_regular(str(tmp_path / "link"), 100, follow=False)


def test_read_fd_reads_at_most_one_byte_over_the_limit():
    read, write = os.pipe()
    try:
        os.write(write, b"y" * 5000)
        with pytest.raises(fileio.FileLimitError, match=r"^zeros is larger than 4096 bytes$"):
            fileio.read_fd(read, 4096, "zeros")
        os.close(write)
        write = -1
        assert len(os.read(read, 10000)) == 5000 - 4097  # the rest was never read
    finally:
        os.close(read)
        if write >= 0:
            os.close(write)
