# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A Kubernetes API server stand-in for the drain role's tests: answers the calls kubernetes.core makes for a node
drain as the API documentation says the server does, and records every call. Tests only.

No API server runs on the build machines; the answers are shaped after the Kubernetes API documentation for the
versions the device_plugin role claims (1.29 and later; ``/version`` says 1.33). Re-read on 2026-11-27: the eviction
page (POST address, body, budgets honoured) and the dry-run section of api-concepts; the others are cited as written
that day:

* discovery (``/version``, ``/api``, ``/api/v1``, ``/apis``, ``/apis/policy/v1``): ``APIVersions``,
  ``APIResourceList`` (``pods/eviction``: kind ``Eviction``, group ``policy``, version ``v1``, verb ``create``),
  ``APIGroupList`` - https://kubernetes.io/docs/reference/using-api/api-concepts/ ;
* Node ``GET``/``PATCH`` (strategic merge patch: ``spec.unschedulable``, ``metadata.annotations``, a ``null`` value
  removes a key) - https://kubernetes.io/docs/reference/kubernetes-api/cluster-resources/node-v1/ ;
* Pod ``list`` (``fieldSelector=spec.nodeName=``, ``labelSelector=k=v``), ``GET``, ``PATCH`` (labels) -
  https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/pod-v1/ ;
* ``dryRun=All`` on a change: answered, not kept - https://kubernetes.io/docs/reference/using-api/api-concepts/#dry-run
  (kubernetes.core's modules in check mode);
* ``POST /api/v1/namespaces/<ns>/pods/<name>/eviction``: ``201`` and the pod goes; ``429`` with a ``Status`` whose
  reason is ``TooManyRequests`` when a PodDisruptionBudget does not allow it yet -
  https://kubernetes.io/docs/concepts/scheduling-eviction/api-eviction/ .

``evictions`` maps ``<ns>/<name>`` to the statuses its evictions get in turn (the last one repeats).
"""

from __future__ import annotations

import copy
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

DISCOVERY: dict[str, Any] = {
    "/version": {"major": "1", "minor": "33", "gitVersion": "v1.33.0", "platform": "linux/amd64"},
    "/api": {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []},
    "/api/v1": {
        "kind": "APIResourceList",
        "groupVersion": "v1",
        "resources": [
            {"name": "nodes", "singularName": "node", "namespaced": False, "kind": "Node", "shortNames": ["no"],
             "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"]},
            {"name": "pods", "singularName": "pod", "namespaced": True, "kind": "Pod", "shortNames": ["po"],
             "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]},
            {"name": "pods/eviction", "singularName": "", "namespaced": True, "group": "policy", "version": "v1",
             "kind": "Eviction", "verbs": ["create"]},
        ],
    },
    "/apis": {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [
            {"name": "policy", "versions": [{"groupVersion": "policy/v1", "version": "v1"}],
             "preferredVersion": {"groupVersion": "policy/v1", "version": "v1"}},
        ],
    },
    "/apis/policy/v1": {
        "kind": "APIResourceList",
        "groupVersion": "policy/v1",
        "resources": [
            {"name": "poddisruptionbudgets", "singularName": "poddisruptionbudget", "namespaced": True,
             "kind": "PodDisruptionBudget", "shortNames": ["pdb"],
             "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"]},
        ],
    },
}  # fmt: skip
POD = re.compile(r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)(/eviction)?$")


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}  # fmt: skip


def _merge(target: dict[str, Any], patch: dict[str, Any]) -> None:
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


class KubeApi:
    """The state (one node, its pods) and the calls; ``url`` once started."""

    def __init__(self, node: dict[str, Any], pods: list[dict[str, Any]], evictions: dict[str, list[int]]) -> None:
        self.node, self.pods, self.evictions = copy.deepcopy(node), copy.deepcopy(pods), copy.deepcopy(evictions)
        self.calls: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> KubeApi:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()

    def kubeconfig(self) -> str:
        return json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "replay",
            "clusters": [{"name": "replay", "cluster": {"server": self.url}}],
            "users": [{"name": "replay", "user": {"token": "replay"}}],
            "contexts": [{"name": "replay", "context": {"cluster": "replay", "user": "replay"}}],
        })  # fmt: skip

    def changes(self) -> list[tuple[str, str, Any]]:
        """The calls that change something (not a dry run): ``(method, path, body)``."""
        return [
            (c["method"], c["path"], c["body"])
            for c in self.calls
            if c["method"] != "GET" and "dryRun" not in c["query"]
        ]

    def _pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        found = [p for p in self.pods if p["metadata"]["namespace"] == namespace and p["metadata"]["name"] == name]
        return found[0] if found else None

    def answer(self, method: str, path: str, query: dict[str, list[str]], body: Any) -> tuple[int, Any]:
        if method == "GET" and path in DISCOVERY:
            return 200, DISCOVERY[path]
        with self.lock:
            self.calls.append({"method": method, "path": path, "query": query, "body": body})
            if "dryRun" in query:
                return self._dry_run(method, path, body)
            if path == f"/api/v1/nodes/{self.node['metadata']['name']}":
                if method == "PATCH":
                    _merge(self.node, body)
                return 200, self.node
            if method == "GET" and path == "/api/v1/pods":
                items = self.pods
                for selector in query.get("fieldSelector", []):
                    key, _eq, value = selector.partition("=")
                    if key == "spec.nodeName":
                        items = [p for p in items if p["spec"].get("nodeName") == value]
                for selector in query.get("labelSelector", []):
                    key, _eq, value = selector.partition("=")
                    items = [p for p in items if (p["metadata"].get("labels") or {}).get(key) == value]
                return 200, {"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": items}
            match = POD.match(path)
            pod = self._pod(match.group(1), match.group(2)) if match else None
            if match and pod is None:
                return 404, _status(404, "NotFound", f'pods "{match.group(2)}" not found')
            if match and match.group(3) and method == "POST":
                key = f"{match.group(1)}/{match.group(2)}"
                turns = self.evictions.get(key) or [201]
                code = turns.pop(0) if len(turns) > 1 else turns[0]
                if code == 429:
                    budget = "Cannot evict pod as it would violate the pod's disruption budget."
                    return 429, _status(429, "TooManyRequests", budget)
                self.pods.remove(pod)
                return 201, {"kind": "Eviction", "apiVersion": "policy/v1", "metadata": pod["metadata"]}
            if match and method == "PATCH":
                _merge(pod, body)
            if match:
                return 200, pod
        return 404, _status(404, "NotFound", f"no {method} {path} in this stand-in")

    def _dry_run(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        """What the change would give, nothing kept."""
        match = POD.match(path)
        target = self.node if path.startswith("/api/v1/nodes/") else (self._pod(*match.groups()[:2]) if match else None)
        if target is None:
            return 404, _status(404, "NotFound", f"no {method} {path} in this stand-in")
        result = copy.deepcopy(target)
        if method == "PATCH" and isinstance(body, dict):
            _merge(result, body)
        return 200, result

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                url = urlparse(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else None
                code, obj = api.answer(self.command, url.path, parse_qs(url.query), body)
                out = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _serve

            def log_message(self, *args: Any) -> None:
                pass

        return Handler
