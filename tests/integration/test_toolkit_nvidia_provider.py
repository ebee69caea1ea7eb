# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The toolkit role's ``nvidia`` provider for real: apt, a signed repository, a pin, a hold, an upgrade, removal.

A signed apt repository laid out as NVIDIA's (``tests/sim/apt_repo.py``: stand-in packages named, versioned and
depending as NVIDIA's four, 1.17.8-1 and 1.18.0-1, signed with a key made for this run; built once for this file and
``test_nvidia_adoption.py`` with their shared fleet, ``_fleet_nvidia.py``) is copied into one simulated GPU node
(bookworm, no engines, Debian's real apt 2.6 and gpgv) and served there over HTTP on 127.0.0.1 as a
mirror of ``https://nvidia.github.io/libnvidia-container/stable``. A second copy of the repository, signed by
another key, is served next to it. No Debian mirror is reachable from the nodes, so the node's Debian sources are
taken off first (apt would fail every index refresh on them).

In order, through ansible-playbook (the role's defaults but ``toolkit_nvidia_mirror_url``, so ``auto`` picks
``nvidia``): ``--check`` at pin 1.17.8-1 changes nothing; the real run installs the four at 1.17.8-1, holds them,
writes NVIDIA's list file and de-armoured keyring; a second run changes nothing; ``--check`` at pin 1.18.0-1
changes nothing; the real run upgrades the four; again nothing; the repository signed by the other key is refused
by apt; ``toolkit_nvidia_state=absent`` (``--check`` first) purges them, removes the list file and keyring, leaves
the collection's own programs as they were and installs the native toolkit; a second removal changes nothing.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

from tests.integration import _fleet_nvidia
from tests.sim import apt_repo

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOK = ROOT / "tests" / "integration" / "playbooks" / "toolkit_nvidia.yml"
NODE = _fleet_nvidia.BOOKWORM  # the shared nvidia_fleet's node without engines (_fleet_nvidia.py)
PORT = 8765
MIRROR = f"http://127.0.0.1:{PORT}/libnvidia-container/stable"
OTHER = f"http://127.0.0.1:{PORT}/other/libnvidia-container/stable"
LIST = "/etc/apt/sources.list.d/nvidia-container-toolkit.list"
KEYRING = "/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg"
HELPERS = ("gpufleet-cdi-hook", "gpufleet-cdi-refresh", "gpufleet-dev-char-links")
OLD, NEW = apt_repo.VERSIONS


def _recap(proc) -> dict[str, int]:
    m = re.search(rf"{NODE}\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", proc.stdout)
    assert m, proc.stdout[-3000:] + proc.stderr[-2000:]
    return {"ok": int(m.group(1)), "changed": int(m.group(2)), "failed": int(m.group(4))}


def _fact(proc) -> dict:
    m = re.search(r'"msg": "(\{\\"gpufleet_toolkit.*\})"', proc.stdout)
    assert m, proc.stdout[-3000:]
    return json.loads(json.loads(f'"{m.group(1)}"'))["gpufleet_toolkit"]


def _tar(tree) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(str(tree), arcname=".")
    return buf.getvalue()


def _state(node) -> dict:
    """What is on the node: NVIDIA's packages (version, selection), the list file, the keyring, our helpers."""
    fmt = "'${Package} ${Version} ${db:Status-Abbrev}\\n'"
    query = node.run(f"dpkg-query -W -f={fmt} {' '.join(apt_repo.PACKAGES)} 2>/dev/null").stdout
    packages = {}
    for line in query.splitlines():
        name, version, status = [*line.split(None, 2), "", ""][:3]
        if status.strip()[:2] in ("ii", "hi"):
            packages[name] = version
    holds = set(node.run("apt-mark showhold").stdout.split())
    helpers = node.run("stat -c '%n %Y %s' " + " ".join(f"/usr/local/bin/{h}" for h in HELPERS) + " 2>/dev/null").stdout
    return {
        "packages": packages,
        "held": sorted(holds & set(apt_repo.PACKAGES)),
        "list": node.run(["cat", LIST]).stdout if node.run(["test", "-e", LIST]).rc == 0 else None,
        "keyring": node.run(["test", "-e", KEYRING]).rc == 0,
        "helpers": helpers,
        "ctk": node.run("nvidia-ctk --version").stdout.strip(),
    }


@pytest.fixture(scope="module")
def runs(nvidia_fleet):
    fleet, repo = nvidia_fleet, nvidia_fleet.repo
    node = fleet.node(NODE)
    node.put("/tmp/mirror.tar", _tar(repo.root))
    node.run(
        "mkdir -p /srv/gpufleet-mirror && tar -C /srv/gpufleet-mirror -xf /tmp/mirror.tar && "
        "mv /etc/apt/sources.list /etc/apt/sources.list.off-for-tests && "
        f"systemd-run --unit=gpufleet-test-mirror python3 -m http.server {PORT} --bind 127.0.0.1 "
        "--directory /srv/gpufleet-mirror",
        check=True,
    )
    for _attempt in range(50):
        if node.run(f"python3 -c \"import urllib.request as u; u.urlopen('{MIRROR}/deb/amd64/InRelease')\"").rc == 0:
            break
        time.sleep(0.2)

    def play(label, *extra, check=False):
        # ansible-playbook as the conftest's ansible_playbook runs it, without bringing up the default fleet
        cmd = [str(ROOT / ".venv" / "bin" / "ansible-playbook"), "-i", str(fleet.inventory), "--limit", NODE]
        cmd += ["--check", "--diff"] if check else []
        cmd += ["-e", f"toolkit_nvidia_mirror_url={MIRROR}", *extra, str(PLAYBOOK)]
        env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".cache" / "collections"), ANSIBLE_FORCE_COLOR="0")
        start = time.monotonic()
        proc = subprocess.run(cmd, check=False, capture_output=True, text=True, cwd=ROOT, env=env)
        out[label] = {"proc": proc, "recap": _recap(proc), "state": _state(node), "s": round(time.monotonic() - start)}

    out: dict = {"repo": repo, "node": node, "fresh": _state(node)}
    play("check_old", "-e", f"toolkit_nvidia_version={OLD}", check=True)
    play("old", "-e", f"toolkit_nvidia_version={OLD}")
    inrelease = f"/srv/gpufleet-mirror/{repo.url_path}/deb/amd64/InRelease"
    out["gpgv"] = node.run(["gpgv", "--keyring", KEYRING, inrelease])
    out["keyring_head"] = node.run(f"od -An -tx1 -N1 {KEYRING}").stdout.split()
    play("old_again", "-e", f"toolkit_nvidia_version={OLD}")
    out["upgrade_sim"] = node.run("apt-get -s upgrade").stdout
    play("check_new", "-e", f"toolkit_nvidia_version={NEW}", check=True)
    play("new", "-e", f"toolkit_nvidia_version={NEW}")
    play("new_again", "-e", f"toolkit_nvidia_version={NEW}")
    play(
        "other_key",
        "-e",
        f"toolkit_nvidia_version={OLD}",
        "-e",
        f"toolkit_nvidia_mirror_url={OTHER}",
        "-e",
        f"toolkit_nvidia_key_url={MIRROR.rsplit('/', 1)[0]}/gpgkey",
    )
    play("check_absent", "-e", "toolkit_nvidia_state=absent", check=True)
    play("absent", "-e", "toolkit_nvidia_state=absent")
    play("absent_again", "-e", "toolkit_nvidia_state=absent")
    print("nvidia provider runs (s):", {k: v["s"] for k, v in out.items() if isinstance(v, dict) and "s" in v})
    return out


def test_check_mode_on_a_fresh_node_reports_changes_and_installs_nothing(runs):
    step = runs["check_old"]
    assert step["recap"]["failed"] == 0, step["proc"].stdout[-4000:]
    assert step["recap"]["changed"] > 0
    assert step["state"]["packages"] == {} and step["state"]["list"] is None and not step["state"]["keyring"]
    assert step["state"] == runs["fresh"]


def test_install_at_the_pin_holds_the_four_packages_behind_signed_by(runs):
    step = runs["old"]
    assert step["recap"]["failed"] == 0 and step["recap"]["changed"] > 0, step["proc"].stdout[-4000:]
    state = step["state"]
    assert state["packages"] == dict.fromkeys(apt_repo.PACKAGES, OLD)
    assert state["held"] == sorted(apt_repo.PACKAGES)
    assert state["ctk"].startswith("NVIDIA Container Toolkit CLI version 1.17.8")
    # NVIDIA's install guide's line: its list file, its keyring, signed-by that keyring only
    assert f"deb [signed-by={KEYRING}] {MIRROR}/deb/$(ARCH) /" in state["list"].splitlines()
    fact = _fact(step["proc"])
    assert fact["provider"] == "nvidia" and fact["version"] == OLD  # auto: a mirror is configured
    assert fact["runtime_path"] == "/usr/bin/nvidia-container-runtime"
    # the stand-in's postinst generated NVIDIA's config.toml, whose defaults the fact reports
    assert (fact["accept_envvar_unprivileged"], fact["accept_volume_mounts"]) == (True, False)
    assert fact["accept_cdi_annotations_unprivileged"] is True  # NVIDIA's runtime has no such setting


def test_the_keyring_is_the_repository_key_de_armoured(runs):
    head = runs["keyring_head"]
    assert head and int(head[0], 16) & 0x80, head  # an OpenPGP packet header, not "-----BEGIN"
    verified = runs["gpgv"]  # the node's gpgv checks the repository's InRelease with that keyring alone
    assert verified.rc == 0, verified.stderr
    assert runs["repo"].fingerprint[-16:] in verified.stderr.replace(" ", ""), verified.stderr


def test_held_packages_stay_at_the_pin_through_apt_upgrade(runs):
    assert re.search(r"^0 upgraded", runs["upgrade_sim"], re.M), runs["upgrade_sim"]
    assert "nvidia-container-toolkit" in runs["upgrade_sim"].split("kept back:")[-1], runs["upgrade_sim"]


def test_second_run_at_the_same_pin_changes_nothing(runs):
    for label in ("old_again", "new_again"):
        step = runs[label]
        assert step["recap"]["failed"] == 0 and step["recap"]["changed"] == 0, (label, step["proc"].stdout[-4000:])


def test_check_mode_of_a_new_pin_reports_the_upgrade_and_moves_nothing(runs):
    step = runs["check_new"]
    assert step["recap"]["failed"] == 0 and step["recap"]["changed"] > 0, step["proc"].stdout[-4000:]
    assert step["state"] == runs["old_again"]["state"]


def test_a_new_pin_upgrades_the_four_and_keeps_them_held(runs):
    step = runs["new"]
    assert step["recap"]["failed"] == 0 and step["recap"]["changed"] > 0, step["proc"].stdout[-4000:]
    assert step["state"]["packages"] == dict.fromkeys(apt_repo.PACKAGES, NEW)
    assert step["state"]["held"] == sorted(apt_repo.PACKAGES)
    assert step["state"]["ctk"].startswith("NVIDIA Container Toolkit CLI version 1.18.0")
    assert _fact(step["proc"])["version"] == NEW


def test_a_repository_signed_by_another_key_is_refused(runs):
    step = runs["other_key"]
    assert step["recap"]["failed"] == 1, step["proc"].stdout[-4000:]
    assert re.search(r"NO_PUBKEY|not signed|signatures couldn't be verified", step["proc"].stdout), step["proc"].stdout[
        -4000:
    ]
    assert step["state"]["packages"] == dict.fromkeys(apt_repo.PACKAGES, NEW)  # nothing moved to the pin


def test_check_mode_of_the_removal_removes_nothing(runs):
    step = runs["check_absent"]
    assert step["recap"]["failed"] == 0 and step["recap"]["changed"] > 0, step["proc"].stdout[-4000:]
    assert step["state"]["packages"] == dict.fromkeys(apt_repo.PACKAGES, NEW) and step["state"]["keyring"]


def test_removal_purges_the_packages_and_the_repository_and_leaves_our_programs(runs):
    step = runs["absent"]
    assert step["recap"]["failed"] == 0 and step["recap"]["changed"] > 0, step["proc"].stdout[-4000:]
    state = step["state"]
    assert state["packages"] == {} and state["held"] == [] and state["list"] is None and not state["keyring"]
    purged = runs["node"].run("dpkg-query -W -f='${db:Status-Abbrev}' nvidia-container-toolkit")
    assert purged.rc != 0 or purged.stdout.strip() in ("", "pn"), purged  # purged, not "rc" (config left)
    # the helpers the nvidia provider installed stay as they were (same files, same times)
    assert state["helpers"] == runs["new_again"]["state"]["helpers"] != ""
    assert _fact(step["proc"])["provider"] == "native"
    again = runs["absent_again"]
    assert again["recap"]["failed"] == 0 and again["recap"]["changed"] == 0, again["proc"].stdout[-4000:]
