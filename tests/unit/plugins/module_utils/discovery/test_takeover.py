# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The takeover record: what site.yml moved aside from NVIDIA's toolkit, and what uninstall.yml gives back."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.discovery import takeover

RUN = {"path": "/var/run/cdi/nvidia.yaml", "backup": "/var/run/cdi/nvidia.yaml.gpufleet-disabled", "devices": ["0"]}
ETC = {"path": "/etc/cdi/nvidia.yaml", "backup": "/etc/cdi/nvidia.yaml.gpufleet-disabled", "devices": ["all"]}


def test_load_dump_round_trip_and_empty():
    assert takeover.load(None) == takeover.empty() == takeover.load("  \n")
    record = takeover.with_specs(takeover.empty(), [RUN])
    assert takeover.load(takeover.dump(record)) == record
    assert takeover.is_empty(takeover.empty()) and not takeover.is_empty(record)


@pytest.mark.parametrize(
    "text", ["[]", "{not json", '{"specs": [{"path": "/x"}]}', '{"units": []}', '{"specs": {}}', '{"engines": 3}']
)
def test_load_refuses_what_is_not_a_record_naming_the_file(text):
    with pytest.raises(ValueError, match=r"/r\.json"):
        takeover.load(text, "/r.json")


def test_specs_are_recorded_once_per_backup():
    record = takeover.with_specs(takeover.empty(), [RUN, ETC])
    again = takeover.with_specs(record, [RUN])
    assert again == record and again["specs"] == [
        {"path": RUN["path"], "backup": RUN["backup"]},
        {"path": ETC["path"], "backup": ETC["backup"]},
    ]


def test_units_and_engines_keep_their_first_state():
    first = takeover.with_units(takeover.empty(), {"u.path": {"enabled": True, "masked": False, "active": True}})
    second = takeover.with_units(first, {"u.path": {"enabled": True, "masked": True, "active": False}})
    assert second["units"] == {"u.path": {"enabled": True, "masked": False, "active": True}}
    rec = takeover.with_engine(first, "/etc/docker/daemon.json", {"cdi": True})
    assert takeover.with_engine(rec, "/etc/docker/daemon.json", {"cdi": None})["engines"] == {
        "/etc/docker/daemon.json": {"cdi": True}
    }
    back = takeover.given_back(rec, "/etc/docker/daemon.json")
    assert back["engines"] == {"/etc/docker/daemon.json": {"cdi": True, "given_back": True}}
    assert takeover.given_back(back, "/etc/docker/daemon.json") == back and not takeover.open_items(
        {**back, "units": {}}
    )
    assert takeover.with_engine(back, "/etc/docker/daemon.json", {"cdi": False})["engines"] == {
        "/etc/docker/daemon.json": {"cdi": False}
    }


def test_spec_restores_never_overwrite_a_spec_that_came_back():
    record = takeover.with_specs(takeover.empty(), [RUN, ETC, {**RUN, "backup": "/var/run/cdi/x.gpufleet-disabled"}])
    present = {RUN["backup"], ETC["backup"], RUN["path"], ETC["path"]}
    mine = {ETC["path"]}  # our spec still at NVIDIA's name: it may be replaced
    found = takeover.spec_restores(record, present.__contains__, mine.__contains__)
    assert [(s["path"], s["action"]) for s in found] == [
        (RUN["path"], "kept"),  # NVIDIA's refresh wrote it again
        (ETC["path"], "restore"),
        (RUN["path"], "gone"),  # that backup was removed by someone
    ]
    assert "not overwritten" in found[0]["why"] and RUN["backup"] in found[0]["why"]
    left = takeover.after_restore(record, found)
    assert left["specs"] == [{"path": RUN["path"], "backup": RUN["backup"]}] and left["units"] == {}


def test_unit_restores_give_back_exactly_the_prior_state():
    record = takeover.with_units(
        takeover.empty(),
        {
            "a.path": {"enabled": True, "masked": False, "active": True},
            "b.service": {"enabled": False, "masked": False, "active": False},
            "c.service": {"enabled": True, "masked": True, "active": False},  # the admin had masked it
            "gone.service": {"enabled": True, "masked": False, "active": False},
        },
    )
    now = {
        "a.path": {"enabled": True, "masked": True, "active": False},
        "b.service": {"enabled": True, "masked": True, "active": False},
        "c.service": {"enabled": True, "masked": True, "active": False},
    }
    assert takeover.unit_restores(record, now) == [
        {"unit": "a.path", "verbs": ["unmask", "start"]},
        {"unit": "b.service", "verbs": ["unmask", "disable"]},
    ]
    restored = {
        "a.path": {"enabled": True, "masked": False, "active": True},
        "b.service": {"enabled": False, "masked": False, "active": False},
    }
    assert takeover.unit_restores(record, restored) == []
