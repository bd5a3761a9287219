"""`jobtrail serve --http` drops what it should (issue 28 item 8), as a real process on loopback: connections that
send nothing, or half a request head, are closed REQUEST_TIMEOUT_S after they connect; those beyond MAX_CONNECTIONS
are closed as they connect; a real MCP client is served beside them and after them."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

from jobtrail.surface.http_server import MAX_CONNECTIONS, REQUEST_TIMEOUT_S
from support.servers import serving
from support.waiting import wait_for

HALF_A_HEAD = b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"  # and never the rest
SLACK_S = 5.0  # the loop's timer and this test's polling


def _open(port: int, n: int) -> list[socket.socket]:
    """n connections: every other one sends half a request head, the rest nothing at all."""
    opened = []
    for i in range(n):
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        if i % 2:
            sock.sendall(HALF_A_HEAD)
        sock.setblocking(False)
        opened.append(sock)
    return opened


def _closed(sock: socket.socket) -> bool:
    """Has the server closed it? (a read sees the end, or a reset; would-block: still open)"""
    try:
        return sock.recv(1, socket.MSG_PEEK) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("JOBTRAIL_AUTH_TOKEN", "JOBTRAIL_LEDGER_URL")}
    return env | {"JOBTRAIL_HOME": str(tmp_path / "home")}


def test_half_open_connections_are_dropped_and_a_client_is_served_beside_them(tmp_path: Path) -> None:
    with serving([("host-a", _env(tmp_path))], tmp_path) as [server]:
        port = int(server.url.rsplit(":", 1)[1].split("/")[0])
        server.call("ps")  # the service is built: what follows measures the connections alone
        began = time.monotonic()
        held = _open(port, MAX_CONNECTIONS // 2)
        assert server.call("ps")["jobs"] == []  # served while they are held
        assert not any(_closed(sock) for sock in held)
        wait_for(
            lambda: all(_closed(sock) for sock in held), REQUEST_TIMEOUT_S + SLACK_S, "the half-open to be dropped"
        )
        assert time.monotonic() - began >= REQUEST_TIMEOUT_S - 0.5  # dropped by the timeout, not before
        for sock in held:
            sock.close()


def test_connections_beyond_the_cap_are_closed_as_they_connect_and_the_rest_by_the_timeout(tmp_path: Path) -> None:
    with serving([("host-a", _env(tmp_path))], tmp_path) as [server]:
        port = int(server.url.rsplit(":", 1)[1].split("/")[0])
        server.call("ps")
        began = time.monotonic()
        flood = _open(port, MAX_CONNECTIONS + 100)
        beyond = wait_for(
            lambda: (n := sum(_closed(sock) for sock in flood)) >= 100 and n, SLACK_S, "those beyond the cap to close"
        )
        assert beyond == 100, beyond  # exactly those: the first MAX_CONNECTIONS are held, until the timeout
        wait_for(lambda: all(_closed(sock) for sock in flood), REQUEST_TIMEOUT_S + SLACK_S, "every one to be dropped")
        assert time.monotonic() - began <= REQUEST_TIMEOUT_S + SLACK_S
        for sock in flood:
            sock.close()
        assert server.call("ps")["jobs"] == []  # served again once they are gone
