"""`ttft route`'s flags: parsed into RouteOptions, and every mistake one line with exit status 2."""
from __future__ import annotations

import pytest

from pipeline.cli import main
from router.cli import RouteOptions, check_route_options

OK = ["--replica", "http://127.0.0.1:8001", "--replica", "http://127.0.0.1:8002/"]


@pytest.mark.parametrize("argv, message", [
    ([], "at least one replica"),
    (["--replica", "127.0.0.1:8001"], "must be http://HOST:PORT"),
    (["--replica", "https://a:1"], "must be http://HOST:PORT"),
    (["--replica", "http://a"], "must be http://HOST:PORT"),
    (["--replica", "http://a:99999"], "must be http://HOST:PORT"),
    (["--replica", "http://a:1/v1"], "must be http://HOST:PORT"),
    (["--replica", "http://a:1", "--replica", "http://a:1/"], "given twice"),
    (OK + ["--health-interval-s", "0"], "--health-interval-s 0"),
    (OK + ["--health-timeout-s", "-1"], "--health-timeout-s -1"),
    (OK + ["--max-body-bytes", "0"], "--max-body-bytes 0"),
    (OK + ["--log-level", "loud"], "--log-level loud"),
    (OK + ["--host", "no.such.host.invalid", "--port", "0"], "--host no.such.host.invalid"),
    (OK + ["--replica-api-key", ""], "--replica-api-key: the API key must not be empty"),
    (OK + ["--replica-api-key", "two words"], "--replica-api-key: the API key must be printable ASCII"),
])
def test_mistakes_exit_2_with_one_line(capsys, argv, message) -> None:
    assert main(["route", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ttft route: error:") and message in err and err.count("\n") == 1


@pytest.mark.parametrize("argv", [OK + ["--routing-policy", "fastest"], OK + ["--port", "x"]])
def test_argparse_refuses_unknown_policies_and_bad_types(capsys, argv) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["route", *argv])
    assert exc.value.code == 2 and "error" in capsys.readouterr().err


def test_every_policy_is_a_choice_and_urls_are_normalised() -> None:
    from router.policies import POLICIES

    assert set(POLICIES) == {"predicted-ttft", "round-robin", "least-loaded", "prefix-affinity"}
    assert check_route_options(OK[1::2], RouteOptions()) == ["http://127.0.0.1:8001", "http://127.0.0.1:8002"]


def test_a_replica_key_from_the_environment_is_checked_and_never_echoed(capsys, monkeypatch) -> None:
    monkeypatch.setenv("TTFT_API_KEY", "secret with spaces")
    assert main(["route", *OK]) == 2
    err = capsys.readouterr().err
    assert "$TTFT_API_KEY: the API key must be printable ASCII" in err and "secret" not in err


def test_the_replica_key_is_the_flag_else_the_environment(monkeypatch) -> None:
    monkeypatch.setenv("TTFT_API_KEY", "from-env")
    opts = RouteOptions()
    check_route_options(OK[1::2], opts)
    assert opts.replica_api_key == "from-env"
    opts = RouteOptions(replica_api_key="from-flag")
    check_route_options(OK[1::2], opts)
    assert opts.replica_api_key == "from-flag"
    monkeypatch.delenv("TTFT_API_KEY")
    opts = RouteOptions()
    check_route_options(OK[1::2], opts)
    assert opts.replica_api_key is None
