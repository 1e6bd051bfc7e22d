"""A fault-injecting HTTP proxy for any OpenAI-compatible server (stdlib only).

    python -m coevolve.services.fault_proxy --upstream http://127.0.0.1:8000 --faults "all=0.2,seed=7" [--listen 127.0.0.1:0]

It forwards every request to the upstream and, on POST requests (the model calls), injects the faults of
`coevolve.llm.faults` at their configured rates — latency spikes, timeouts, 429 and 5xx answers, malformed
JSON bodies, bodies truncated inside the tool calls and connection resets — deterministically per
(seed, request body, attempt). GET requests (`/v1/models`, health checks) pass untouched. Point a
client at it instead of the server (`COEVOLVE_SERVE_URL=<proxy url>` for `vllm/...` models). It listens
on 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import socket
import struct
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from coevolve.llm.faults import AttemptCounter, FaultSpec, attempt_from, record, request_key, truncate_body

HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailers",
              "transfer-encoding", "upgrade", "host", "content-length"}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, fmt: str, *args: Any) -> None:  # quiet: requests carry prompts, never log them
        pass

    def do_GET(self) -> None:
        self._forward(b"", fault=None)

    def do_POST(self) -> None:
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        try:
            content: Any = json.loads(body)
        except ValueError:
            content = body.hex()
        key = request_key({"path": self.path, "body": content})
        attempt = attempt_from(dict(self.headers.items()))
        if attempt is None:
            attempt = self.server.counter.next(key)
        kind = self.server.spec.pick(key, attempt)
        if kind:
            self.server.count(kind)
            record(kind, key, attempt, "proxy")
        self._forward(body, kind, key)

    # ------------------------------------------------------------------ faults
    def _forward(self, body: bytes, fault: str | None, key: str = "") -> None:
        spec = self.server.spec
        if fault in ("reset", "timeout"):
            if fault == "timeout":
                time.sleep(spec.timeout_s)  # the caller's own timeout fires first if it is shorter
            self._reset()
            return
        if fault == "429":
            self._answer(429, {"error": {"message": "rate limited (injected fault)", "type": "rate_limit_error"}},
                         {"Retry-After": "0"})
            return
        if fault == "5xx":
            status = (500, 502, 503)[int(key[:2] or "0", 16) % 3]
            self._answer(status, {"error": {"message": f"upstream error {status} (injected fault)", "type": "server_error"}})
            return
        if fault == "malformed":
            self._raw(200, b'{"id": "chatcmpl-x", "object": "chat.completion", "choices": [<html>bad gateway</html>')
            return
        if fault == "latency":
            time.sleep(spec.latency_s)
        status, headers, data = self._upstream(body)
        if fault == "truncated" and status == 200:
            data = truncate_body(data)
        self._raw(status, data, headers)

    def _upstream(self, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        up = self.server.upstream
        conn_cls = http.client.HTTPSConnection if up.scheme == "https" else http.client.HTTPConnection
        conn = conn_cls(up.hostname, up.port or (443 if up.scheme == "https" else 80), timeout=self.server.upstream_timeout)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        path = up.path.rstrip("/") + self.path
        try:
            conn.request(self.command, path, body=body or None, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            return resp.status, [(k, v) for k, v in resp.getheaders() if k.lower() not in HOP_BY_HOP], data
        except (OSError, http.client.HTTPException) as e:
            msg = {"error": {"message": f"fault proxy: upstream unreachable ({type(e).__name__})", "type": "server_error"}}
            return 502, [("Content-Type", "application/json")], json.dumps(msg).encode()
        finally:
            conn.close()

    def _answer(self, status: int, obj: Any, extra: dict[str, str] | None = None) -> None:
        self._raw(status, json.dumps(obj).encode(), [("Content-Type", "application/json"), *(extra or {}).items()])

    def _raw(self, status: int, data: bytes, headers: list[tuple[str, str]] | None = None) -> None:
        self.send_response(status)
        sent = set()
        for k, v in headers or [("Content-Type", "application/json")]:
            self.send_header(k, v)
            sent.add(k.lower())
        if "content-type" not in sent:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _reset(self) -> None:
        """Close with RST (SO_LINGER 0): the client sees a connection reset, not a clean close."""
        with contextlib.suppress(OSError):
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.close()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, addr: tuple[str, int], spec: FaultSpec, upstream: str, upstream_timeout: float):
        super().__init__(addr, _Handler)
        self.spec = spec
        self.upstream = urllib.parse.urlsplit(upstream.rstrip("/"))
        self.upstream_timeout = upstream_timeout
        self.counter = AttemptCounter()
        self.injected: dict[str, int] = {}
        self._lock = threading.Lock()

    def count(self, kind: str) -> None:
        with self._lock:
            self.injected[kind] = self.injected.get(kind, 0) + 1

    def handle_error(self, request: Any, client_address: Any) -> None:  # a reset client is not an error
        pass


class FaultProxy:
    """The proxy in a background thread: `with FaultProxy(upstream, spec) as p: ... p.url ...`."""

    def __init__(self, upstream: str, spec: FaultSpec | str, host: str = "127.0.0.1", port: int = 0,
                 upstream_timeout: float = 600.0):
        self.spec = FaultSpec.parse(spec) if isinstance(spec, str) else spec
        self._server = _Server((host, port), self.spec, upstream, upstream_timeout)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def injected(self) -> dict[str, int]:
        return dict(self._server.injected)

    def start(self) -> FaultProxy:
        self._thread = threading.Thread(target=self._server.serve_forever, name="fault-proxy", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FaultProxy:  # noqa: PYI034 - the class is not subclassed
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m coevolve.services.fault_proxy", description=__doc__.split("\n\n")[0])
    ap.add_argument("--upstream", required=True, help="base URL of the OpenAI-compatible server")
    ap.add_argument("--faults", required=True, help='e.g. "all=0.2,seed=7" (see coevolve/llm/faults.py)')
    ap.add_argument("--listen", default="127.0.0.1:0", help="host:port (default 127.0.0.1, a free port)")
    args = ap.parse_args(argv)
    host, _, port = args.listen.rpartition(":")
    try:
        proxy = FaultProxy(args.upstream, args.faults, host or "127.0.0.1", int(port or 0))
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"fault proxy {proxy.url} -> {args.upstream} ({proxy.spec.describe()})", flush=True)
    try:
        proxy._server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        print(f"injected: {json.dumps(proxy.injected, sort_keys=True)}", flush=True)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
