# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""ansible-rulebook event source: Prometheus Alertmanager's webhook, one event per alert.

The events have the shape of the ``ansible.eda.alertmanager`` source (ansible.eda is not on PyPI, so this collection
carries its own): ``{"alert": <one alert of the payload>, "meta": {"endpoint", "headers", "hosts"}}``, and first,
unless ``skip_original_data``, ``{"payload": <the whole body>, "meta": {"endpoint", "headers"}}``. ``meta.hosts``
is the alerting host, the port taken off; ansible-rulebook limits ``run_playbook`` and ``run_job_template`` to it.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import re
from typing import Any

from aiohttp import web

DOCUMENTATION = r"""
---
short_description: Receive Prometheus Alertmanager's webhook, one event per alert
description:
  - >-
    An ansible-rulebook event source that serves Alertmanager's webhook receiver (C(webhook_configs)) and puts
    each alert of a notification on the queue as C({"alert": ..., "meta": {"endpoint", "headers", "hosts"}}), the
    event shape of the ansible.eda.alertmanager source.
  - C(meta.hosts) holds the alerting host, read from the first of O(data_host_path) the alert has, with a
    trailing port (node exporter's C(host:9100), C([::1]:9100)) taken off.
  - A POST to any path is accepted (the path is C(meta.endpoint)); C(GET /) answers C(up).
options:
  host:
    description: The address to listen on; V(0.0.0.0) for every interface.
    type: str
    default: localhost
  port:
    description: The TCP port to listen on.
    type: int
    default: 5000
  data_alerts_path:
    description:
      - Where the list of alerts is in the body, keys separated by O(data_path_separator).
      - An empty string takes the whole body as one alert.
    type: str
    default: alerts
  data_host_path:
    description:
      - Where the host is inside one alert; a list is tried in order, the first present wins.
      - An empty string (or list) puts no host in C(meta.hosts).
    type: raw
    default: labels.instance
  data_path_separator:
    description: The separator of the keys in O(data_alerts_path) and O(data_host_path).
    type: str
    default: "."
  skip_original_data:
    description: Put only the alerts on the queue, not first the whole body.
    type: bool
    default: false
  token:
    description:
      - >-
        When set, a POST must carry C(Authorization: Bearer <token>) (Alertmanager's C(http_config.authorization))
        or it is refused with 401 and nothing is queued.
    type: str
"""

EXAMPLES = r"""
- gpufleet.nvidia.alertmanager:
    host: 0.0.0.0
    port: 5000
    data_host_path: [labels.host, labels.instance]
    token: "{{ gpufleet_eda_token }}"
"""

logger = logging.getLogger(__name__)
QUEUE = web.AppKey("queue", asyncio.Queue)
SETTINGS = web.AppKey("settings", dict)
# A port after the host: "node1:9100", "[fd00::1]:9100" (brackets go too), not the colons of a bare IPv6 address.
_PORT = re.compile(r"^\[(?P<v6>[^\]]+)\](?::\d+)?$|^(?P<name>[^:]+):\d+$")


def strip_port(instance: str) -> str:
    """``node1:9100`` -> ``node1``, ``[fd00::1]:9100`` -> ``fd00::1``; anything else as it is."""
    match = _PORT.match(instance)
    if not match:
        return instance
    return match.group("v6") or match.group("name")


def lookup(data: Any, path: str, separator: str) -> Any:
    """The value at ``path`` (keys joined by ``separator``; a number indexes a list) or KeyError."""
    for key in path.split(separator):
        if isinstance(data, dict) and key in data:
            data = data[key]
        elif isinstance(data, list) and key.isdigit() and int(key) < len(data):
            data = data[int(key)]
        else:
            raise KeyError(path)
    return data


def alert_hosts(alert: Any, host_paths: list[str], separator: str) -> list[str]:
    """``[host]`` from the first of ``host_paths`` present in ``alert`` with a non-empty string, else ``[]``."""
    for path in host_paths:
        try:
            value = lookup(alert, path, separator)
        except KeyError:
            continue
        if isinstance(value, str) and value.strip():
            return [strip_port(value.strip())]
    return []


def events_for(payload: Any, endpoint: str, headers: dict[str, str], settings: dict[str, Any]) -> list[dict]:
    """The events one webhook body makes, in queue order."""
    events = []
    if not settings["skip_original_data"]:
        events.append({"payload": payload, "meta": {"endpoint": endpoint, "headers": headers}})
    if settings["data_alerts_path"]:
        try:
            alerts = lookup(payload, settings["data_alerts_path"], settings["data_path_separator"])
        except KeyError:
            alerts = []
        if not isinstance(alerts, list):
            alerts = [alerts]
    else:
        alerts = [payload]
    for alert in alerts:
        hosts = alert_hosts(alert, settings["data_host_path"], settings["data_path_separator"])
        events.append({"alert": alert, "meta": {"endpoint": endpoint, "headers": headers, "hosts": hosts}})
    return events


def settings_from(args: dict[str, Any]) -> dict[str, Any]:
    """The source's arguments with their defaults; ``data_host_path`` always a list."""
    host_path = args.get("data_host_path", "labels.instance")
    if host_path is None or host_path == "":
        host_path = []
    elif isinstance(host_path, str):
        host_path = [host_path]
    return {
        "host": str(args.get("host", "localhost")),
        "port": int(args.get("port", 5000)),
        "data_alerts_path": str(args.get("data_alerts_path", "alerts")),
        "data_host_path": [str(p) for p in host_path if str(p)],
        "data_path_separator": str(args.get("data_path_separator", ".")),
        "skip_original_data": bool(args.get("skip_original_data", False)),
        "token": str(args.get("token") or ""),
    }


def authorized(headers: Any, token: str) -> bool:
    """Whether the request carries ``Authorization: Bearer <token>`` (always, when no token is set)."""
    if not token:
        return True
    given = headers.get("Authorization", "")
    return hmac.compare_digest(given.encode(), f"Bearer {token}".encode())


async def _status(_request: web.Request) -> web.Response:
    return web.Response(text="up")


async def _receive(request: web.Request) -> web.Response:
    settings = request.app[SETTINGS]
    if not authorized(request.headers, settings["token"]):
        return web.Response(status=401, text="missing or wrong bearer token")
    try:
        payload = await request.json()
    except ValueError:
        return web.Response(status=400, text="the body is not JSON")
    headers = {k: v for k, v in request.headers.items() if k.lower() != "authorization"}
    for event in events_for(payload, request.match_info["endpoint"], headers, settings):
        await request.app[QUEUE].put(event)
    return web.Response(status=202, text="Received")


def make_app(queue: asyncio.Queue, args: dict[str, Any]) -> web.Application:
    """The aiohttp application that serves the webhook onto ``queue``."""
    app = web.Application()
    app[QUEUE] = queue
    app[SETTINGS] = settings_from(args)
    app.router.add_get("/", _status)
    app.router.add_post("/{endpoint:.*}", _receive)
    return app


async def main(queue: asyncio.Queue, args: dict[str, Any]) -> None:
    """ansible-rulebook's entry point: serve until cancelled."""
    app = make_app(queue, args)
    runner = web.AppRunner(app)
    await runner.setup()
    settings = app[SETTINGS]
    await web.TCPSite(runner, settings["host"], settings["port"]).start()
    logger.info("alertmanager webhook on %s:%s", settings["host"], settings["port"])
    try:
        await asyncio.Future()
    except asyncio.CancelledError:
        logger.info("alertmanager webhook stopped")
    finally:
        await runner.cleanup()
