# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The Alertmanager event source (extensions/eda/plugins/event_source/alertmanager.py): the events a webhook body
makes, in the event shape of ansible.eda.alertmanager, served by its aiohttp application (aiohttp's test server on
loopback); the real ansible-rulebook runs it in test_rulebook.py."""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path

import pytest
import yaml
from aiohttp.test_utils import TestClient, TestServer

PLUGIN = Path(__file__).resolve().parents[3] / "extensions" / "eda" / "plugins" / "event_source" / "alertmanager.py"
_spec = importlib.util.spec_from_file_location("gpufleet_alertmanager_source", PLUGIN)
source = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(source)


def _alert(**labels):
    return {"status": "firing", "labels": dict({"alertname": "GpufleetGpuFault"}, **labels), "annotations": {}}


@pytest.mark.parametrize(
    ("instance", "host"),
    [
        ("node1:9100", "node1"),
        ("node1", "node1"),
        ("10.0.0.5:9100", "10.0.0.5"),
        ("[fd00::1]:9100", "fd00::1"),
        ("[fd00::1]", "fd00::1"),
        ("fd00::1", "fd00::1"),  # a bare IPv6 address: its colons are no port
        ("node1.example.com:9100", "node1.example.com"),
        ("node1:http", "node1:http"),  # not a port number: left as it is
    ],
)
def test_strip_port(instance, host):
    assert source.strip_port(instance) == host


def test_events_one_per_alert_after_the_whole_body():
    body = {"status": "firing", "alerts": [_alert(instance="node1:9100"), _alert(instance="node2:9100", host="n2")]}
    settings = source.settings_from({"data_host_path": ["labels.host", "labels.instance"]})
    events = source.events_for(body, "alerts", {"X": "1"}, settings)
    assert events[0] == {"payload": body, "meta": {"endpoint": "alerts", "headers": {"X": "1"}}}
    assert [e["meta"]["hosts"] for e in events[1:]] == [["node1"], ["n2"]]  # the host label first
    assert [e["alert"] for e in events[1:]] == body["alerts"]
    assert events[1]["meta"] == {"endpoint": "alerts", "headers": {"X": "1"}, "hosts": ["node1"]}


def test_events_defaults_skip_and_missing_paths():
    body = {"alerts": [_alert(), _alert(instance="")]}
    defaults = source.settings_from({})
    assert defaults["data_host_path"] == ["labels.instance"] and defaults["port"] == 5000
    events = source.events_for(body, "e", {}, dict(defaults, skip_original_data=True))
    assert [e["meta"]["hosts"] for e in events] == [[], []]  # no instance; an empty one
    assert source.events_for({"other": 1}, "e", {}, dict(defaults, skip_original_data=True)) == []
    whole = source.events_for(
        {"labels": {"instance": "n:1"}}, "e", {}, dict(defaults, skip_original_data=True, data_alerts_path="")
    )
    assert whole == [
        {"alert": {"labels": {"instance": "n:1"}}, "meta": {"endpoint": "e", "headers": {}, "hosts": ["n"]}}
    ]
    single = source.events_for(
        {"a": {"b": _alert(instance="x:1")}},
        "e",
        {},
        dict(defaults, data_alerts_path="a/b", data_path_separator="/", data_host_path=["labels/instance"]),
    )
    assert single[1]["meta"]["hosts"] == ["x"]  # one alert, not a list; another separator
    assert source.settings_from({"data_host_path": ""})["data_host_path"] == []


def test_lookup_indexes_lists():
    assert source.lookup({"a": [{"b": 1}, {"b": 2}]}, "a.1.b", ".") == 2
    with pytest.raises(KeyError):
        source.lookup({"a": [1]}, "a.5", ".")


def _serve(args, requests):
    """Run the source's application on aiohttp's test server; ``requests(client)`` -> result; also the queue."""

    async def run():
        queue = asyncio.Queue()
        async with TestClient(TestServer(source.make_app(queue, args))) as client:
            result = await requests(client)
        events = []
        while not queue.empty():
            events.append(queue.get_nowait())
        return result, events

    return asyncio.run(run())


def test_app_queues_alerts_and_answers_status():
    body = {"alerts": [_alert(instance="node1:9100")]}

    async def requests(client):
        status = await client.get("/")
        posted = await client.post("/gpu/alerts", json=body)
        bad = await client.post("/x", data=b"not json", headers={"Content-Type": "application/json"})
        return status.status, await status.text(), posted.status, bad.status

    result, events = _serve({}, requests)
    assert result == (200, "up", 202, 400)
    assert [e.get("meta", {}).get("endpoint") for e in events] == ["gpu/alerts", "gpu/alerts"]
    assert events[1]["meta"]["hosts"] == ["node1"]


def test_app_token_refuses_without_and_hides_the_header():
    async def requests(client):
        none = await client.post("/a", json={"alerts": [_alert(instance="n:1")]})
        wrong = await client.post("/a", json={"alerts": []}, headers={"Authorization": "Bearer no"})
        right = await client.post(
            "/a", json={"alerts": [_alert(instance="n:1")]}, headers={"Authorization": "Bearer tok"}
        )
        return none.status, wrong.status, right.status

    result, events = _serve({"token": "tok", "skip_original_data": True}, requests)
    assert result == (401, 401, 202)
    assert len(events) == 1 and events[0]["meta"]["hosts"] == ["n"]
    assert "Authorization" not in events[0]["meta"]["headers"]


def test_documentation_parses_and_names_the_options():
    doc = yaml.safe_load(source.DOCUMENTATION)
    assert set(doc["options"]) == set(source.settings_from({}))
    assert yaml.safe_load(source.EXAMPLES)[0]["gpufleet.nvidia.alertmanager"]["port"] == 5000
