"""The local connector (services/scaler/local_engines.py) on stand-in engine processes and a stand-in admin API.

Real processes are started and signalled; the engine is a small HTTP server (engine_stand_in.py) whose
in-flight gauge the test sets, and the gateway's admin API a recording server speaking its contract.
Real vLLM and the real broker are in tests/integration/test_scaler.py.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from schemas.errors import BackendUnavailableError
from schemas.scaling import LocalEngineSpec
from services.scaler.gateway_admin import GatewayAdmin
from services.scaler.local_engines import LocalEngineConnector, engine_in_flight, healthy
from services.stack.processes import free_port, port_open
from services.testing.models import changed
from tests.integration.processes import wait_until

STAND_IN = Path(__file__).with_name("engine_stand_in.py")
TOKEN = "admin-token"


class AdminStandIn:
    """The gateway's admin API contract over a dict of upstreams; records each call; checks the bearer token."""

    def __init__(self) -> None:
        self.upstreams: dict[str, dict[str, object]] = {}
        self.calls: list[tuple[str, str]] = []
        self.refuse_add = False
        admin = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, status: int, body: object = None) -> None:
                data = b"" if body is None else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _authorised(self) -> bool:
                if self.headers.get("authorization") == f"Bearer {TOKEN}":
                    return True
                self._answer(401, {"error": "unauthorised"})
                return False

            def do_GET(self) -> None:
                if self._authorised():
                    admin.calls.append(("GET", ""))
                    self._answer(200, list(admin.upstreams.values()))

            def do_POST(self) -> None:
                if not self._authorised():
                    return
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                admin.calls.append(("POST " + self.path, body["url"]))
                if self.path == "/admin/upstreams/drain":
                    admin.upstreams[body["url"]]["state"] = "draining"
                    self._answer(202)
                elif admin.refuse_add:
                    self._answer(503, {"error": "not now"})
                else:
                    admin.upstreams[body["url"]] = {
                        "url": body["url"],
                        "pool": body["pool"],
                        "dp_rank": None,
                        "state": "active",
                        "in_flight": 0,
                    }
                    self._answer(201)

            def do_DELETE(self) -> None:
                if not self._authorised():
                    return
                url = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query)["url"][0]
                admin.calls.append(("DELETE", url))
                if admin.upstreams[url]["in_flight"]:
                    self._answer(409, {"error": "in flight"})
                    return
                del admin.upstreams[url]
                self._answer(204)

            def log_message(self, format: str, *args: object) -> None:
                """Quiet."""

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def admin() -> Iterator[AdminStandIn]:
    server = AdminStandIn()
    yield server
    server.close()


def _slot_ports() -> int:
    """A first port whose slots (it and the next two) are free, below the kernel's ephemeral range.

    A port ``free_port`` gives lies in the ephemeral range, where the next one can be taken by any
    process's outgoing connection (another xdist worker's) before a replica binds it: a replica then
    failed with "Address already in use". Below the range only a listener picks ports.
    """
    for base in range(20_000 + (os.getpid() % 1_000) * 9, 32_000, 3):
        if not any(port_open("127.0.0.1", base + slot) for slot in range(3)):
            return base
    raise AssertionError("no three free ports in a row below 32000")


def spec(tmp_path: Path, **changes: object) -> LocalEngineSpec:
    port = _slot_ports()
    command = [sys.executable, str(STAND_IN), "{port}", str(tmp_path / "busy-{engine_id}")]
    fields: dict[str, object] = {
        "command": command,
        "first_port": port,
        "start_timeout_s": 30.0,
        "drain_timeout_s": 10.0,
        "stop_timeout_s": 5.0,
        "log_dir": str(tmp_path / "logs"),
        **changes,
    }
    return LocalEngineSpec.model_validate(fields)


@pytest.fixture
def connectors() -> Iterator[list[LocalEngineConnector]]:
    """Connectors a test made; every process they started is stopped after it."""
    made: list[LocalEngineConnector] = []
    yield made
    for connector in made:
        connector.close()


class TestLocalEngineConnector:
    def test_replicas_count_once_healthy_and_join_the_gateways_pool(
        self, tmp_path: Path, admin: AdminStandIn, connectors: list[LocalEngineConnector]
    ) -> None:
        gateway = GatewayAdmin(admin.url, token=TOKEN)
        connector = LocalEngineConnector("short", spec(tmp_path), gateway=gateway)
        connectors.append(connector)
        assert connector.replicas() == 0
        assert connector.scale(2) is None
        urls = connector.urls()
        assert connector.replicas() == 2
        assert all(healthy(url, 2.0) for url in urls)
        assert {(u.url, u.pool, u.state) for u in gateway.upstreams()} == {(url, "short", "active") for url in urls}
        assert (tmp_path / "logs" / "short-0.log").exists()

    def test_the_newest_replica_is_drained_until_idle_then_stopped_and_removed(
        self, tmp_path: Path, admin: AdminStandIn, connectors: list[LocalEngineConnector]
    ) -> None:
        gateway = GatewayAdmin(admin.url, token=TOKEN)
        connector = LocalEngineConnector("short", spec(tmp_path), gateway=gateway)
        connectors.append(connector)
        connector.scale(2)
        oldest, newest = connector.urls()
        busy = tmp_path / "busy-short-1"
        busy.write_text("1")
        assert engine_in_flight(newest, 2.0) == 1
        notes: list[str | None] = []
        down = threading.Thread(target=lambda: notes.append(connector.scale(1)))
        down.start()
        down.join(timeout=2.0)
        assert down.is_alive()
        assert healthy(newest, 2.0)
        assert admin.upstreams[newest]["state"] == "draining"
        busy.write_text("0")
        down.join(timeout=10.0)
        assert notes == [None]
        assert connector.urls() == [oldest]
        assert not healthy(newest, 1.0)
        assert list(admin.upstreams) == [oldest]
        assert ("POST /admin/upstreams/drain", newest) in admin.calls
        assert connector.forced_stops == 0

    def test_a_replica_busy_past_the_drain_timeout_is_stopped_and_the_note_says_so(
        self, tmp_path: Path, connectors: list[LocalEngineConnector]
    ) -> None:
        connector = LocalEngineConnector("long", spec(tmp_path, drain_timeout_s=0.5))
        connectors.append(connector)
        connector.scale(1)
        (tmp_path / "busy-long-0").write_text("2")
        note = connector.scale(0)
        assert note == "drain timeout 0.5 s: long-0 stopped at the drain timeout with 2 requests in flight"
        assert (connector.replicas(), connector.forced_stops) == (0, 1)

    def test_a_replica_that_ignores_sigterm_is_killed_after_the_stop_bound(
        self, tmp_path: Path, connectors: list[LocalEngineConnector]
    ) -> None:
        stubborn = spec(tmp_path, stop_timeout_s=0.5)
        stubborn = changed(stubborn, command=[*stubborn.command, "--ignore-term"])
        connector = LocalEngineConnector("short", stubborn)
        connectors.append(connector)
        connector.scale(1)
        (url,) = connector.urls()
        assert connector.scale(0) is None
        assert connector.replicas() == 0
        assert not healthy(url, 1.0)

    def test_a_replica_that_never_answers_health_is_stopped_and_the_scale_fails(
        self, tmp_path: Path, connectors: list[LocalEngineConnector]
    ) -> None:
        silent = spec(tmp_path, start_timeout_s=1.0)
        silent = changed(silent, command=[sys.executable, "-c", "import time; time.sleep(60)"])
        connector = LocalEngineConnector("short", silent)
        connectors.append(connector)
        with pytest.raises(BackendUnavailableError, match=r"1 of 1 new replicas did not start .*no /health in 1 s"):
            connector.scale(1)
        assert connector.replicas() == 0

    def test_a_replica_the_gateway_refuses_is_stopped_and_the_others_stay(
        self, tmp_path: Path, admin: AdminStandIn, connectors: list[LocalEngineConnector]
    ) -> None:
        local = spec(tmp_path)
        connector = LocalEngineConnector("short", local, gateway=GatewayAdmin(admin.url, token=TOKEN))
        connectors.append(connector)
        connector.scale(1)
        admin.refuse_add = True
        with pytest.raises(BackendUnavailableError, match=r"the gateway refused it: .*HTTP 503"):
            connector.scale(2)
        assert connector.urls() == [f"http://127.0.0.1:{local.first_port}"]
        assert not port_open("127.0.0.1", local.first_port + 1)

    def test_a_replica_that_dies_is_reaped_and_leaves_the_gateway(
        self, tmp_path: Path, admin: AdminStandIn, connectors: list[LocalEngineConnector]
    ) -> None:
        connector = LocalEngineConnector("short", spec(tmp_path), gateway=GatewayAdmin(admin.url, token=TOKEN))
        connectors.append(connector)
        connector.scale(2)
        oldest, newest = connector.urls()
        os.kill(connector.pids()[1], signal.SIGKILL)
        wait_until(lambda: connector.replicas() == 1, 10.0, "the dead replica reaped")
        assert list(admin.upstreams) == [oldest]
        assert connector.scale(2) is None
        assert connector.urls() == [oldest, newest]


class TestGatewayAdmin:
    def test_a_wrong_token_is_an_outage_naming_the_call(self, admin: AdminStandIn) -> None:
        with pytest.raises(BackendUnavailableError, match=r"GET /admin/upstreams answered HTTP 401"):
            GatewayAdmin(admin.url, token="wrong").upstreams()

    def test_removal_while_in_flight_is_refused_not_raised(self, admin: AdminStandIn) -> None:
        gateway = GatewayAdmin(admin.url, token=TOKEN)
        gateway.add("http://127.0.0.1:9", "long")
        admin.upstreams["http://127.0.0.1:9"]["in_flight"] = 3
        assert gateway.in_flight("http://127.0.0.1:9") == 3
        assert gateway.remove("http://127.0.0.1:9") is False
        admin.upstreams["http://127.0.0.1:9"]["in_flight"] = 0
        assert gateway.remove("http://127.0.0.1:9") is True
        assert gateway.in_flight("http://127.0.0.1:9") is None

    def test_no_gateway_listening_is_an_outage(self) -> None:
        with pytest.raises(BackendUnavailableError, match="failed"):
            GatewayAdmin(f"http://127.0.0.1:{free_port()}", timeout_s=1.0).drain("http://x")
