"""A real HTTP endpoint on loopback for webhook tests: it records every POST (headers and raw body) and answers
with the statuses it is told, in order (then 200); `hang` makes it take requests and never answer."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def payload(self) -> dict[str, Any]:
        loaded: dict[str, Any] = json.loads(self.body)
        return loaded

    def signed_by(self, secret: str) -> bool:
        expected = "sha256=" + hmac.new(secret.encode(), self.body, hashlib.sha256).hexdigest()
        return hmac.compare_digest(expected, self.headers.get("X-Jobtrail-Signature-256", ""))


@dataclass
class Receiver:
    url: str
    statuses: list[int] = field(default_factory=list)  # answered in order, then 200
    hang: bool = False  # take each request and never answer (until `release`)
    received: list[Received] = field(default_factory=list)
    answered: list[int] = field(default_factory=list)
    taken: threading.Event = field(default_factory=threading.Event)  # a request came in
    released: threading.Event = field(default_factory=threading.Event)

    def release(self) -> None:
        self.released.set()


@contextmanager
def webhook_receiver(statuses: list[int] | None = None, *, hang: bool = False) -> Iterator[Receiver]:
    lock = threading.Lock()
    state = Receiver(url="", statuses=list(statuses or []), hang=hang)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            with lock:
                state.received.append(Received(self.path, dict(self.headers.items()), body))
                status = state.statuses.pop(0) if state.statuses else 200
            state.taken.set()
            if state.hang:
                state.released.wait(60)
                return  # the connection closes with no answer
            self.send_response(status)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")
            with lock:
                state.answered.append(status)

        def log_message(self, format: str, *args: Any) -> None:  # the test's output stays quiet
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    state.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        state.release()
        server.shutdown()
        server.server_close()
