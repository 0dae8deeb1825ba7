"""A stand-in OpenTelemetry collector for cost runs: `python -m bench.otlp_sink PORT` answers every
OTLP/HTTP POST with 200 after reading its body, and `GET /stats` with what it got (posts, bytes), so
a run can show the spans really left the server. Nothing is decoded: the collector's own cost must
not land on the server's cores more than a real collector's would."""
from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class SinkHandler(BaseHTTPRequestHandler):
    counts = {"posts": 0, "bytes": 0}
    lock = threading.Lock()

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        size = len(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        with self.lock:
            self.counts["posts"] += 1
            self.counts["bytes"] += size
        self._answer(b"")

    def do_GET(self) -> None:  # noqa: N802
        with self.lock:
            self._answer(json.dumps(self.counts).encode())

    def _answer(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def main() -> None:
    ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), SinkHandler).serve_forever()


if __name__ == "__main__":
    main()
