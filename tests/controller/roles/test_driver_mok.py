# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The driver role's MOK flow (roles/driver/tasks/mok.yml) on localhost: real OpenSSL makes the key pair, converts
the given PEM certificate and hashes the one-time password; a stand-in ``mokutil`` keeps the enrolment state in
files (``--test-key`` answers with mokutil's three sentences, ``--import --hash-file`` records the request, the test
"reboots" by moving it to the enrolled list, as MokManager does once someone confirms it at the console).

What only a real Secure Boot host shows: MokManager itself, and the firmware loading the module signed with the key.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from ansible_collections.gpufleet.nvidia.tests.controller.playbook import run_playbook

TASKS = Path(__file__).resolve().parents[3] / "roles" / "driver" / "tasks"
ROLE = TASKS.parent
PASSWORD = "one-time-Pa55"  # noqa: S105 - the stand-in one-time password the test hashes
MOKUTIL = """#!/bin/sh
# stand-in mokutil: enrolment state in $STATE (enrolled/, new/)
STATE={state}
key_id() {{ sha256sum "$1" | cut -c1-16; }}
case "$1" in
  --test-key)
    id=$(key_id "$2")
    if [ -e "$STATE/enrolled/$id" ]; then echo "$2 is already enrolled"; exit 1; fi
    if [ -e "$STATE/new/$id" ]; then echo "$2 is already in the enrollment request"; exit 1; fi
    echo "$2 is not enrolled"; exit 0 ;;
  --import)
    [ "$3" = --hash-file ] || {{ echo "no hash file" >&2; exit 2; }}
    mkdir -p "$STATE/new" && cp "$4" "$STATE/new/$(key_id "$2").hash" && touch "$STATE/new/$(key_id "$2")"
    echo "$*" >> "$STATE/calls" ;;
  *) echo "unexpected $*" >&2; exit 2 ;;
esac
"""
PLAY = """
- name: MOK flow
  hosts: all
  gather_facts: false
  vars_files: [{defaults}, {vars}]
  tasks:
    - name: The driver role's MOK tasks
      ansible.builtin.include_tasks: {tasks}/mok.yml
    - name: Say what DKMS signs with
      ansible.builtin.debug:
        msg: "signing {{{{ driver_signing_key }}}} {{{{ driver_signing_cert }}}}"
"""


def run(tmp_path: Path, **variables: object) -> tuple[int, str]:
    state, bin_dir = tmp_path / "state", tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "mokutil").write_text(MOKUTIL.format(state=state))
    (bin_dir / "mokutil").chmod(0o755)
    inventory = {
        "all": {"hosts": {"sb-host": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}
    }
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
    play = PLAY.format(defaults=ROLE / "defaults" / "main.yml", vars=ROLE / "vars" / "main.yml", tasks=TASKS)
    (tmp_path / "play.yml").write_text(play)
    (tmp_path / "extra.yml").write_text(yaml.safe_dump({"driver_mok_dir": str(tmp_path / "mok"), **variables}))
    res = run_playbook(
        "-i", tmp_path / "inventory.yml", "-e", f"@{tmp_path / 'extra.yml'}", tmp_path / "play.yml",
        PATH=f"{bin_dir}:/usr/bin:/bin",
    )  # fmt: skip
    return res.returncode, res.stdout + res.stderr


def enrol(tmp_path: Path) -> None:
    """What MokManager does at the next boot once the key is confirmed: the request becomes an enrolled key."""
    state = tmp_path / "state"
    (state / "enrolled").mkdir(exist_ok=True)
    for request in (state / "new").iterdir():
        request.rename(state / "enrolled" / request.name)


def test_generated_key_is_staged_with_the_password_hash_then_enrolled(tmp_path: Path) -> None:
    rc, out = run(tmp_path, driver_mok_generate=True, driver_mok_password=PASSWORD)
    assert rc == 0, out
    mok = tmp_path / "mok"
    assert (mok.stat().st_mode & 0o777, (mok / "MOK.priv").stat().st_mode & 0o777) == (0o700, 0o600)
    assert f"signing {mok}/MOK.priv {mok}/MOK.der" in out
    assert "enrolment pending at next boot (console needed)" in out and PASSWORD not in out
    subject = subprocess.run(
        ["openssl", "x509", "-inform", "DER", "-in", str(mok / "MOK.der"), "-noout", "-subject"],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    assert "gpufleet.nvidia module signing sb-host" in subject
    hashes = list((tmp_path / "state" / "new").glob("*.hash"))
    assert len(hashes) == 1 and not (mok / "import.hash").exists()  # the hash file is removed after the import
    stored = hashes[0].read_text().strip()
    salt = stored.split("$")[2]
    again = subprocess.run(
        ["openssl", "passwd", "-6", "-salt", salt, PASSWORD], check=True, capture_output=True, text=True
    )
    assert stored.startswith("$6$") and again.stdout.strip() == stored  # SHA-512 crypt of the one-time password

    rc, out = run(tmp_path, driver_mok_generate=True, driver_mok_password=PASSWORD)  # pending: not imported again
    assert rc == 0 and "changed=0" in out, out
    assert "enrolment pending at next boot" in out and len((tmp_path / "state" / "calls").read_text().splitlines()) == 1

    enrol(tmp_path)
    rc, out = run(tmp_path, driver_mok_generate=True)  # enrolled: no password needed, nothing pending
    assert rc == 0 and "changed=0" in out and "enrolment pending" not in out, out


def test_a_key_not_enrolled_needs_the_password(tmp_path: Path) -> None:
    rc, out = run(tmp_path, driver_mok_generate=True)
    assert rc != 0 and "set driver_mok_password" in out, out
    assert not (tmp_path / "state" / "calls").exists()


def test_the_admins_key_pair_from_vault_variables(tmp_path: Path) -> None:
    keys = tmp_path / "given"
    keys.mkdir()
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", str(keys / "k.pem"), "-out", str(keys / "c.pem"), "-days", "2", "-subj", "/CN=site MOK"],
        check=True, capture_output=True,
    )  # fmt: skip
    private, cert = (keys / "k.pem").read_text(), (keys / "c.pem").read_text()
    rc, out = run(tmp_path, driver_mok_private_key=private, driver_mok_certificate=cert, driver_mok_password=PASSWORD)
    assert rc == 0, out
    assert "PRIVATE KEY" not in out and PASSWORD not in out
    mok = tmp_path / "mok"
    assert (mok / "MOK.priv").read_text() == private and (mok / "MOK.priv").stat().st_mode & 0o777 == 0o600
    der = subprocess.run(
        ["openssl", "x509", "-in", str(keys / "c.pem"), "-outform", "DER"], check=True, capture_output=True
    ).stdout
    assert (mok / "MOK.der").read_bytes() == der
    assert "enrolment pending at next boot (console needed)" in out
