"""Tracing for operators: OpenTelemetry export of finished requests' traces, per-request timings
(response headers, the opt-in `timings` object), and the live dashboard's data and page."""
