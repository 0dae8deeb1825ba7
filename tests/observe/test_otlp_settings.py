"""Where spans go: the flag, else OTEL_EXPORTER_OTLP_TRACES_ENDPOINT; a bad URL, a missing [otel]
extra or an OTEL_TRACES_SAMPLER(_ARG) that cannot be read is refused with a message naming its source
(and `ttft serve` exits 2 on it)."""
from __future__ import annotations

import re

import pytest

import observe.otlp_settings as settings
from observe.otlp_settings import OtlpSettingsError, SamplerChoice, resolve_traces_endpoint, sampler_choice, traces_url
from pipeline.cli import main


@pytest.mark.parametrize("raw,url", [
    ("http://collector:4318", "http://collector:4318/v1/traces"),
    ("https://collector:4318/", "https://collector:4318/v1/traces"),
    ("http://collector/custom/path", "http://collector/custom/path"),
    ("  http://[::1]:4318  ", "http://[::1]:4318/v1/traces"),
])
def test_a_url_without_a_path_gets_the_traces_path(raw: str, url: str) -> None:
    assert traces_url(raw) == url


@pytest.mark.parametrize("raw", ["", "collector:4318", "ftp://collector", "http://", "http://host:port/",
                                 "grpc://collector:4317", "http://host:99999999"])
def test_what_is_not_an_http_url_is_refused(raw: str) -> None:
    assert traces_url(raw) is None
    with pytest.raises(OtlpSettingsError, match="--otlp-traces-endpoint.*must be an http"):
        resolve_traces_endpoint(raw, {})


def test_the_flag_wins_over_the_environment_and_the_sdk_switch_turns_it_off() -> None:
    env = {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://from-env:4318/v1/traces"}
    assert resolve_traces_endpoint(None, {}) is None
    assert resolve_traces_endpoint(None, env) == "http://from-env:4318/v1/traces"
    assert resolve_traces_endpoint("http://flag:4318", env) == "http://flag:4318/v1/traces"
    assert resolve_traces_endpoint("http://flag:4318", {**env, "OTEL_SDK_DISABLED": "true"}) is None
    with pytest.raises(OtlpSettingsError, match="OTEL_EXPORTER_OTLP_TRACES_ENDPOINT 'nope'"):
        resolve_traces_endpoint(None, {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "nope"})


def test_without_the_extra_the_message_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(settings, "otel_installed", lambda: False)
    with pytest.raises(OtlpSettingsError, match=r"pip install 'ttft\[otel\]'"):
        resolve_traces_endpoint("http://collector:4318", {})


def test_ttft_serve_exits_2_before_starting(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)
    argv = ["serve", "--model", "dummy:tiny", "--device", "cpu", "--port", "0"]
    assert main([*argv, "--otlp-traces-endpoint", "ftp://collector"]) == 2
    assert "--otlp-traces-endpoint 'ftp://collector': must be an http" in capsys.readouterr().err
    monkeypatch.setattr(settings, "otel_installed", lambda: False)
    assert main([*argv, "--otlp-traces-endpoint", "http://collector:4318"]) == 2
    assert "ttft[otel]" in capsys.readouterr().err


ON = "http://collector:4318"


@pytest.mark.parametrize("env,choice", [
    ({}, SamplerChoice("parentbased_always_on")),
    ({"OTEL_TRACES_SAMPLER": ""}, SamplerChoice("parentbased_always_on")),
    ({"OTEL_TRACES_SAMPLER": " Always_Off "}, SamplerChoice("always_off")),
    ({"OTEL_TRACES_SAMPLER": "always_on", "OTEL_TRACES_SAMPLER_ARG": "junk"}, SamplerChoice("always_on")),
    ({"OTEL_TRACES_SAMPLER": "traceidratio"}, SamplerChoice("traceidratio", 1.0)),
    ({"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.1"},
     SamplerChoice("parentbased_traceidratio", 0.1)),
    ({"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0"}, SamplerChoice("traceidratio", 0.0)),
])
def test_the_sampler_variables_are_read_as_the_sdk_reads_them(env: dict, choice: SamplerChoice) -> None:
    assert sampler_choice(env) == choice
    assert resolve_traces_endpoint(ON, env) == f"{ON}/v1/traces"


@pytest.mark.parametrize("env,message", [
    ({"OTEL_TRACES_SAMPLER": "jaeger_remote"}, "OTEL_TRACES_SAMPLER='jaeger_remote': not a sampler"),
    ({"OTEL_TRACES_SAMPLER": "ratio"}, "use one of always_on, always_off, traceidratio"),
    ({"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "ten percent"},
     "OTEL_TRACES_SAMPLER_ARG='ten percent': traceidratio needs a probability from 0.0 to 1.0"),
    ({"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "1.5"}, "'1.5'"),
    ({"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "-0.1"}, "'-0.1'"),
    ({"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "nan"}, "'nan'"),
])
def test_a_sampler_that_cannot_be_read_is_refused_when_tracing_is_on(env: dict, message: str) -> None:
    with pytest.raises(OtlpSettingsError, match=re.escape(message)):
        resolve_traces_endpoint(ON, env)
    assert resolve_traces_endpoint(None, env) is None  # off: the variables may be another process's


def test_ttft_serve_exits_2_naming_an_unknown_sampler(monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture) -> None:
    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "sometimes")
    argv = ["serve", "--model", "dummy:tiny", "--device", "cpu", "--port", "0", "--otlp-traces-endpoint", ON]
    assert main(argv) == 2
    assert "OTEL_TRACES_SAMPLER='sometimes': not a sampler ttft knows" in capsys.readouterr().err
