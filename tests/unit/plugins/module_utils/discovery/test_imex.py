# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""ansible_facts.nvidia.imex and the imex_* problems, from files as NVIDIA's packages and the imex role write them."""

import json
import os

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery import imex as _imex
from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery.problems import CHECKS, Host

DEVICES = "Character devices:\n195 nvidia-frontend\n237 nvidia-caps-imex-channels\n\nBlock devices:\n  8 sd\n"


def write(path, text):
    os.makedirs(os.path.dirname(str(path)), exist_ok=True)
    with open(str(path), "w") as f:
        f.write(text)


def member(root, members=("10.0.0.1", "10.0.0.2"), mode="host", channels=(0,)):
    record = {"domain": "nvl0", "mode": mode, "members": list(members), "channels": list(channels)}
    write(root / "etc/gpufleet/imex.json", json.dumps(record))


@pytest.fixture
def root(tmp_path):
    write(tmp_path / "proc/devices", DEVICES)
    write(
        tmp_path / "etc/nvidia-imex/config.cfg",
        "# admin\nSERVER_PORT=50000\nIMEX_NODE_CONFIG_FILE=/etc/nvidia-imex/nodes_config.cfg\n",
    )
    write(tmp_path / "etc/nvidia-imex/nodes_config.cfg", "10.0.0.2\n# rack 1\n10.0.0.1\n\n")
    return tmp_path


def facts(root):
    return _imex.imex_facts(str(root), str(root / "proc"), None, None)


def codes(root):
    found = _imex.imex_problems(Host({"imex": facts(root)}, str(root)))
    return {p["code"]: p for p in found}


def test_parsers():
    assert _imex.parse_nodes_config("a\n  b  # x\n#c\n\n") == ["a", "b"]
    assert _imex.parse_config("# K=1\nA = 1\nB=\nA=2\nnot a key\n") == {"A": "2", "B": ""}
    assert _imex.membership(["a", "c", "c"], ["a", "b"]) == {"missing": ["b"], "extra": ["c"], "duplicate": ["c"]}
    show = "LoadState=masked\nActiveState=inactive\nUnitFileState=masked\n"
    assert _imex.parse_systemctl_show(show) == {"installed": True, "active": False, "enabled": False, "masked": True}
    show = "LoadState=loaded\nActiveState=active\nUnitFileState=enabled\n"
    assert _imex.parse_systemctl_show(show) == {"installed": True, "active": True, "enabled": True, "masked": False}
    assert _imex.parse_systemctl_show("LoadState=not-found\nActiveState=inactive\n")["installed"] is False
    assert _imex.record_channels({"channels": [3, 0, True, -1, "1", 3]}) == [0, 3]


def test_facts_of_a_domain_member(root):
    member(root)
    found = facts(root)
    assert found["present"] is True and found["major"] == 237
    assert found["channels"] == []  # a regular file is no channel (mknod needs root in the real case)
    assert found["nodes_config"] == ["10.0.0.2", "10.0.0.1"]
    assert found["domain"] == "nvl0" and found["wanted_channels"] == [0]
    assert found["service"]["unit"] == "nvidia-imex.service" and found["service"]["active"] is None


def test_facts_without_driver_or_files(tmp_path):
    found = facts(tmp_path)
    assert found["present"] is False and found["major"] is None and found["channels"] == []
    assert found["nodes_config"] is None and found["domain"] is None


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
def test_channels_are_char_devices_of_the_major(root):
    import stat

    channels = root / "dev/nvidia-caps-imex-channels"
    channels.mkdir(parents=True)
    os.mknod(str(channels / "channel0"), stat.S_IFCHR | 0o666, os.makedev(237, 0))
    os.mknod(str(channels / "channel1"), stat.S_IFCHR | 0o666, os.makedev(238, 1))  # another major
    write(channels / "channel2", "")
    assert facts(root)["channels"] == [0]


def test_no_record_no_problem(root):
    write(root / "etc/nvidia-imex/nodes_config.cfg", "10.9.9.9\n")
    assert codes(root) == {}


def test_exact_membership_passes_and_mismatch_names_addresses(root):
    member(root)
    assert "imex_nodes_config_mismatch" not in codes(root)
    member(root, members=("10.0.0.1", "10.0.0.3"))
    message = codes(root)["imex_nodes_config_mismatch"]["message"]
    assert "missing 10.0.0.3" in message and "extra 10.0.0.2" in message


def test_missing_nodes_config_and_channel0(root):
    member(root)
    os.unlink(str(root / "etc/nvidia-imex/nodes_config.cfg"))
    found = codes(root)
    assert "is missing" in found["imex_nodes_config_mismatch"]["message"]
    assert "/dev/nvidia-caps-imex-channels/channel0 missing" in found["imex_channel_missing"]["message"]


def test_channel_not_asked_without_driver_device(root):
    member(root)
    write(root / "proc/devices", "Character devices:\n195 nvidia-frontend\n")
    assert "imex_channel_missing" not in codes(root)


def test_service_state_by_mode(root):
    member(root, mode="dra")
    imex = facts(root)
    imex["service"].update(installed=True, active=False, masked=False)
    assert [p["code"] for p in _imex.imex_problems(Host({"imex": imex}))] == [
        "imex_channel_missing",
        "imex_service_not_masked",
    ]
    imex["service"]["masked"] = True
    assert "imex_service_not_masked" not in [p["code"] for p in _imex.imex_problems(Host({"imex": imex}))]
    imex["mode"] = "host"
    assert "imex_service_down" in [p["code"] for p in _imex.imex_problems(Host({"imex": imex}))]
    imex["service"]["installed"] = False  # no package: the role says what to install, not a problem here
    assert "imex_service_down" not in [p["code"] for p in _imex.imex_problems(Host({"imex": imex}))]


def test_unreadable_record_and_check_in_table(root):
    write(root / "etc/gpufleet/imex.json", "[1]")
    assert "members" in codes(root)["imex_record_unreadable"]["message"]
    assert _imex.imex_problems in CHECKS


def test_stand_in_proc_named_by_the_environment_only_for_the_root(tmp_path, monkeypatch):
    write(tmp_path / "alt/devices", DEVICES)
    monkeypatch.setenv("GPUFLEET_NVIDIA_PROC", str(tmp_path / "alt"))
    assert _imex.imex_facts("/", str(tmp_path / "proc"), None, None)["major"] == 237
    assert _imex.imex_facts(str(tmp_path), str(tmp_path / "proc"), None, None)["major"] is None
