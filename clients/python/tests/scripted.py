"""A scripted HTTP server on a free loopback port, for the client's own
logic (reconnects, retries) without a sidecar: each request gets the next
answer of a script."""

import http.server
import json
import threading
from typing import Dict, List, NamedTuple, Tuple


class Answer(NamedTuple):
    """One answer. The connection closes after the body (no length: the
    body ends with it, as a broken stream's does), at once, or only when
    the test releases the server if ``keep_open``, as a live stream's."""

    status: int
    content_type: str
    body: bytes
    keep_open: bool = False


class ScriptedServer:
    """Answers the n-th request with answers[n] (the last one once the
    script runs out); ``requests`` records (method, path, headers) of each."""

    def __init__(self, answers: List[Answer]) -> None:
        self.answers = answers
        self.requests: List[Tuple[str, str, Dict[str, str]]] = []
        self.release = threading.Event()
        self._mu = threading.Lock()
        script = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                script._answer(self)

            def do_POST(self) -> None:
                script._answer(self)

            def log_message(self, *args: object) -> None:
                pass

        class Server(http.server.ThreadingHTTPServer):
            daemon_threads = False  # server_close joins every handler: nothing outlives the test

        self._server = Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.01,))  # a prompt shutdown
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def close(self) -> None:
        self.release.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def _answer(self, handler: http.server.BaseHTTPRequestHandler) -> None:
        with self._mu:
            n = len(self.requests)
            self.requests.append((handler.command, handler.path, dict(handler.headers.items())))
        answer = self.answers[min(n, len(self.answers) - 1)]
        handler.send_response(answer.status)
        handler.send_header("Content-Type", answer.content_type)
        handler.send_header("Connection", "close")
        handler.end_headers()
        handler.wfile.write(answer.body)
        handler.wfile.flush()
        if answer.keep_open:
            self.release.wait(10)
        handler.close_connection = True


def events(*lines: str) -> bytes:
    """An event stream's bytes from its lines ("" ends an event)."""
    return "".join(line + "\n" for line in lines).encode()


def problem(code: str, status: int, **extra: object) -> Answer:
    """A problem details answer."""
    return Answer(status, "application/problem+json", json.dumps({"code": code, "status": status, **extra}).encode())


class KeepAliveServer:
    """Answers every request 200 with a JSON status over HTTP/1.1 kept-alive
    connections, counting the connections it accepted; close_idle() ends
    every connection between two requests, as a sidecar's idle timeout does."""

    BODY = json.dumps({"name": "x", "held": False}).encode()

    def __init__(self) -> None:
        self.connections = 0
        self.requests = 0
        self._mu = threading.Lock()
        self._open: List[object] = []
        script = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                with script._mu:
                    script.connections += 1
                    script._open.append(self.connection)

            def do_GET(self) -> None:
                with script._mu:
                    script.requests += 1
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(script.BODY)))
                self.end_headers()
                self.wfile.write(script.BODY)

            def log_message(self, *args: object) -> None:
                pass

        class Server(http.server.ThreadingHTTPServer):
            daemon_threads = False

        self._server = Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.01,))
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def close_idle(self) -> None:
        with self._mu:
            conns, self._open = self._open, []
        for conn in conns:
            try:
                conn.shutdown(2)  # type: ignore[attr-defined]
            except OSError:
                pass

    def close(self) -> None:
        self.close_idle()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
