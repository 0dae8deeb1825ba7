"""Where OpenTelemetry spans go: `--otlp-traces-endpoint`, else the standard environment variables.

Tracing is on when the flag names a collector or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT does (the flag
wins), and off when OTEL_SDK_DISABLED is true. The other OTEL_* variables are the SDK's own and
read by it: OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES (the resource), OTEL_EXPORTER_OTLP_TRACES_HEADERS
/ _TIMEOUT / _COMPRESSION / _CERTIFICATE (the exporter), OTEL_BSP_* (batching). OTEL_TRACES_SAMPLER and
OTEL_TRACES_SAMPLER_ARG choose which requests are exported, with the SDK's names and meaning
(observe/trace_sampling.py); they are checked only when tracing is on, since the environment may
carry them for other processes.
A URL with no path gets the OTLP/HTTP traces path (`http://collector:4318` means
`http://collector:4318/v1/traces`), as the generic OTEL_EXPORTER_OTLP_ENDPOINT is read; a URL with a
path is used as it is, as the signal-specific variable is.
"""
from __future__ import annotations

import importlib.util
import math
import os
from dataclasses import dataclass
from typing import Mapping
from urllib.parse import urlsplit

TRACES_PATH = "/v1/traces"
ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
SAMPLER_ENV = "OTEL_TRACES_SAMPLER"
SAMPLER_ARG_ENV = "OTEL_TRACES_SAMPLER_ARG"
DEFAULT_SAMPLER = "parentbased_always_on"
# The SDK's built-in samplers; the two ratio ones read OTEL_TRACES_SAMPLER_ARG.
KNOWN_SAMPLERS = ("always_on", "always_off", "traceidratio", "parentbased_always_on",
                  "parentbased_always_off", "parentbased_traceidratio")
RATIO_SAMPLERS = ("traceidratio", "parentbased_traceidratio")
# The modules the export needs, from the optional extra `ttft[otel]`.
REQUIRED_MODULES = ("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http")
MISSING_EXTRA = ("OpenTelemetry export needs the optional packages: pip install 'ttft[otel]' "
                 "(opentelemetry-sdk, opentelemetry-exporter-otlp-proto-http)")


class OtlpSettingsError(ValueError):
    """The endpoint cannot work: the message names where it came from and what is wrong."""


def resolve_traces_endpoint(flag_value: str | None, environ: Mapping[str, str] | None = None) -> str | None:
    """The URL spans are posted to, or None when tracing is off; OtlpSettingsError for a value that
    is not an http(s) URL or when the optional packages are missing."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    if flag_value is not None:
        source, raw = "--otlp-traces-endpoint", flag_value
    elif env.get(ENDPOINT_ENV):
        source, raw = ENDPOINT_ENV, env[ENDPOINT_ENV]
    else:
        return None
    url = traces_url(raw)
    if url is None:
        raise OtlpSettingsError(f"{source} {raw!r}: must be an http:// or https:// URL with a host "
                                "(an OTLP/HTTP collector, e.g. http://localhost:4318)")
    if not otel_installed():
        raise OtlpSettingsError(f"{source}: {MISSING_EXTRA}")
    sampler_choice(env)  # a sampler that cannot be read is refused with the endpoint, before the build
    return url


@dataclass(frozen=True, slots=True)
class SamplerChoice:
    name: str  # one of KNOWN_SAMPLERS
    rate: float = 1.0  # the ratio samplers' probability


def sampler_choice(environ: Mapping[str, str] | None = None) -> SamplerChoice:
    """OTEL_TRACES_SAMPLER (case-insensitive; unset or empty: parentbased_always_on) and, for the
    ratio samplers, OTEL_TRACES_SAMPLER_ARG (unset or empty: 1.0), as the SDK reads them. Where the
    SDK logs a warning and samples everything (a name it does not know, a rate that is not a number),
    ttft refuses to start: an operator who set a sampler and gets another one finds out from the bill."""
    env = os.environ if environ is None else environ
    raw = env.get(SAMPLER_ENV, "")
    name = raw.strip().lower() or DEFAULT_SAMPLER
    if name not in KNOWN_SAMPLERS:
        raise OtlpSettingsError(f"{SAMPLER_ENV}={raw!r}: not a sampler ttft knows; "
                                f"use one of {', '.join(KNOWN_SAMPLERS)}")
    if name not in RATIO_SAMPLERS:
        return SamplerChoice(name)
    raw_arg = env.get(SAMPLER_ARG_ENV, "").strip()
    if not raw_arg:
        return SamplerChoice(name)
    try:
        rate = float(raw_arg)
    except ValueError:
        rate = math.nan
    if not 0.0 <= rate <= 1.0:  # NaN fails this too
        raise OtlpSettingsError(f"{SAMPLER_ARG_ENV}={raw_arg!r}: {name} needs a probability "
                                "from 0.0 to 1.0 (e.g. 0.1 exports one request in ten)")
    return SamplerChoice(name, rate)


def traces_url(raw: str) -> str | None:
    """`raw` as the URL to post to, or None when it is not an http(s) URL with a host."""
    try:
        parts = urlsplit(raw.strip())
        _ = parts.port  # a port that is not a number raises here
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    if parts.path in ("", "/"):
        return parts._replace(path=TRACES_PATH).geturl()
    return parts.geturl()


def otel_installed() -> bool:
    try:
        return all(importlib.util.find_spec(name) is not None for name in REQUIRED_MODULES)
    except ModuleNotFoundError:  # a parent package is missing
        return False
