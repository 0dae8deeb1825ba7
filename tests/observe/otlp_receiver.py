"""A real OTLP/HTTP trace receiver for tests: POST /v1/traces, protobuf bodies decoded with the
OpenTelemetry protobuf definitions (opentelemetry-proto), spans kept for the test to read."""
from __future__ import annotations

import gzip
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class ReceivedSpan:
    trace_id: str  # hex
    span_id: str
    parent_span_id: str  # "" for a root
    name: str
    start_ns: int
    end_ns: int
    attributes: dict
    status_code: int
    resource: dict


def _value(any_value) -> object:
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


class OtlpReceiver:
    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.num_posts = 0
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                ok = self.path == "/v1/traces" and self.headers.get("Content-Type") == "application/x-protobuf"
                if ok:
                    receiver.add(body)
                self.send_response(200 if ok else 404)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def add(self, body: bytes) -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        request = ExportTraceServiceRequest.FromString(body)
        spans = []
        for resource_spans in request.resource_spans:
            resource = {kv.key: _value(kv.value) for kv in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for s in scope_spans.spans:
                    spans.append(ReceivedSpan(
                        s.trace_id.hex(), s.span_id.hex(), s.parent_span_id.hex(), s.name,
                        s.start_time_unix_nano, s.end_time_unix_nano,
                        {kv.key: _value(kv.value) for kv in s.attributes}, s.status.code, resource))
        with self._lock:
            self.spans.extend(spans)
            self.num_posts += 1

    def request_spans(self, request_id: str, timeout_s: float = 10.0) -> list[ReceivedSpan]:
        """The spans of the request whose root carries `request_id` (waiting for its root)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                roots = [s for s in self.spans if s.attributes.get("ttft.request_id") == request_id]
                if roots:
                    root = roots[0]
                    return [root] + [s for s in self.spans if s.parent_span_id == root.span_id]
            time.sleep(0.05)
        raise AssertionError(f"no spans for {request_id} in {timeout_s} s ({len(self.spans)} spans received)")

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
