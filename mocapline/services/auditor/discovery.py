"""Prometheus HTTP service discovery (``--sd-port``): where the replicas' /metrics are.

Scaled replicas (``docker compose up --scale retarget=N``) share the host's network, so they cannot
share a fixed /metrics port: each serves on a port the system picks (``--metrics-port auto``) and
tells it in its heartbeat. The auditor hears every heartbeat and drops a silent worker, so it
answers Prometheus' ``http_sd_configs`` with the live ones (deploy/prometheus/prometheus.yml).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from mocapline.core.counters import CounterSchemaError, decode_stage

PATH = "/targets"


def targets(services: dict[str, dict[str, Any]], host: str) -> list[dict[str, Any]]:
    """One target group per stage whose heartbeat tells a ``metrics_port``, labelled with the
    stage and, for a worker (``retarget.w1``), the worker's name. The target's host is the one the
    heartbeat tells (``metrics_host``: a worker's ``--advertise-host``, on another box), else ``host``.
    A heartbeat the counter contract cannot read (not a stage's, another schema version) is left out."""
    groups = []
    for name, hb in sorted(services.items()):
        try:
            counts = decode_stage(name, hb)
        except CounterSchemaError:
            continue
        port = counts.metrics_port
        if port is not None and 0 < port < 65536:
            stage, _, worker = name.partition(".")
            labels = {"service": stage, **({"worker": worker} if worker else {})}
            groups.append({"targets": [f"{counts.metrics_host or host}:{port}"], "labels": labels})
    return groups


class DiscoveryServer:
    """Serves ``GET /targets`` from ``services()`` (the auditor's latest heartbeats) on a daemon thread."""

    def __init__(self, host: str, port: int, services: Callable[[], dict[str, dict[str, Any]]],
                 target_host: str = "127.0.0.1") -> None:
        def answer(handler: BaseHTTPRequestHandler) -> None:
            if handler.path.split("?")[0] != PATH:
                handler.send_error(404)
                return
            body = json.dumps(targets(services(), target_host)).encode()
            handler.send_response(200)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(body)))
            handler.end_headers()
            handler.wfile.write(body)

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                answer(self)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (http.server's name)
                pass

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, name="sd", daemon=True)

    @property
    def port(self) -> int:
        return int(self.server.server_port)

    def start(self) -> DiscoveryServer:
        self.thread.start()
        return self

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
