"""A small HTTP proxy on loopback that injects faults in front of the real service.

Each request it receives takes the next fault from its script (forwarding
when the script is empty) and is recorded with its arrival time and its
`Idempotency-Key`. Faults:

- `Respond(status, headers, body)`: answers itself, never forwarding;
- `DROP`: closes the connection without an answer, never forwarding;
- `DROP_AFTER_FORWARD`: forwards to the service, then closes the connection
  without passing the answer on (the service did the work; the client
  never hears of it);
- `STALL`: reads the request and answers nothing until the client gives up.

Every answer it passes on carries `Connection: close`.
"""

from __future__ import annotations

import http.client
import json
import socket
import socketserver
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Respond:
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""


DROP = "drop"
DROP_AFTER_FORWARD = "drop-after-forward"
STALL = "stall"

Fault = Respond | str


def problem(status: int, code: str, *, retry_after: str | None = None, **extra: Any) -> Respond:
    """A problem document as the service would write it."""
    body = {"type": f"urn:problem:{code}", "title": code.replace("_", " "), "status": status,
            "detail": "injected by the test proxy", "code": code, "instance": "proxy", **extra}
    headers = {"Content-Type": "application/problem+json"}
    if retry_after is not None:
        headers["Retry-After"] = retry_after
    return Respond(status, headers, json.dumps(body).encode())


@dataclass(frozen=True)
class Seen:
    at: float
    method: str
    path: str
    idempotency_key: str | None
    fault: str


_REASONS = {200: "OK", 201: "Created", 409: "Conflict", 422: "Unprocessable Content", 503: "Service Unavailable"}


class FaultProxy:
    def __init__(self, upstream_port: int, faults: Sequence[Fault] = (), *, repeat: Fault | None = None) -> None:
        self.upstream_port = upstream_port
        self._faults: deque[Fault] = deque(faults)
        self._repeat = repeat  # used for every request once the script is spent
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self.seen: list[Seen] = []
        proxy = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                proxy._handle(self.request)

        class Server(socketserver.ThreadingTCPServer):
            allow_reuse_address = True
            daemon_threads = True

        self._server = Server(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._closing.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def keys(self) -> list[str | None]:
        with self._lock:
            return [seen.idempotency_key for seen in self.seen]

    # One connection: one request, one fault.

    def _handle(self, sock: socket.socket) -> None:
        sock.settimeout(10)
        try:
            request = _read_request(sock)
        except (OSError, ValueError):
            return
        if request is None:
            return
        method, path, headers, body = request
        with self._lock:
            fault: Fault = self._faults.popleft() if self._faults else (self._repeat or "forward")
            name = fault if isinstance(fault, str) else f"respond {fault.status}"
            self.seen.append(Seen(time.monotonic(), method, path, headers.get("idempotency-key"), name))
        try:
            if isinstance(fault, Respond):
                _send(sock, fault.status, fault.headers, fault.body)
            elif fault == DROP:
                pass
            elif fault == STALL:
                self._closing.wait(timeout=15)
            else:
                status, answer_headers, answer = self._forward(method, path, headers, body)
                if fault != DROP_AFTER_FORWARD:
                    _send(sock, status, answer_headers, answer)
        except OSError:
            pass
        finally:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def _forward(self, method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, dict[str, str], bytes]:
        upstream = http.client.HTTPConnection("127.0.0.1", self.upstream_port, timeout=15)
        try:
            passed = {name: value for name, value in headers.items() if name not in ("connection", "host", "content-length")}
            upstream.request(method, path, body=body if body else None, headers=passed)
            response = upstream.getresponse()
            answer = response.read()
            answer_headers = {name: value for name, value in response.getheaders()
                              if name.lower() not in ("connection", "content-length", "transfer-encoding", "keep-alive")}
            return response.status, answer_headers, answer
        finally:
            upstream.close()


def _read_request(sock: socket.socket) -> tuple[str, str, dict[str, str], bytes] | None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        data += chunk
        if len(data) > 1 << 20:
            raise ValueError("headers too large")
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, path, _version = lines[0].split(" ", 2)
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        rest += chunk
    return method, path, headers, rest[:length]


def _send(sock: socket.socket, status: int, headers: dict[str, str], body: bytes) -> None:
    lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    lines += [f"Content-Length: {len(body)}", "Connection: close", "", ""]
    sock.sendall("\r\n".join(lines).encode("latin-1") + body)
