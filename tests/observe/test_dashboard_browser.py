"""GET /dashboard in a real headless Chromium against a running CPU server: after a few requests the
page's numbers are /metrics' and /debug/traces', the stacked bars are the recent first tokens, a click
on one shows that request's timeline, and a screenshot is saved. Skipped where no browser is installed
(Debian: apt-get install chromium)."""
from __future__ import annotations

import json

import pytest
from headless_browser import HeadlessBrowser, find_browser
from live_server import tiny_server  # noqa: F401  (its own server: the page counts the server's whole life)

BROWSER = find_browser()
pytestmark = pytest.mark.skipif(BROWSER is None, reason="no headless browser (chromium) is installed")
IDS = ("dash-0", "dash-1", "dash-2")


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    b = HeadlessBrowser(BROWSER, tmp_path_factory.mktemp("chromium-profile"))
    yield b
    b.close()


def text_of(browser: HeadlessBrowser, element_id: str) -> str:
    return browser.evaluate(f"document.getElementById({json.dumps(element_id)}).textContent")


def test_the_page_shows_what_metrics_and_traces_say_and_a_click_opens_a_timeline(tiny_server, browser,
                                                                                tmp_path) -> None:
    for i, rid in enumerate(IDS):
        r = tiny_server.http("POST", "/v1/completions", headers={"X-Request-Id": rid},
                             json={"model": "dummy:tiny", "prompt": f"hello {i}", "max_tokens": 4, "stream": i == 1})
        assert r.status_code == 200
    traces = {t["request_id"]: t for t in tiny_server.http("GET", "/debug/traces").json()["traces"]}
    ttft_count = tiny_server.metric("ttft_time_to_first_token_seconds_count")
    itl_count = tiny_server.metric("ttft_inter_token_latency_seconds_count")
    kv = {state: tiny_server.metric("ttft_kv_blocks", f'state="{state}"') for state in ("free", "used", "cached")}

    browser.navigate(f"{tiny_server.base_url}/dashboard")
    browser.wait_for(f"document.getElementById('ttft-total').textContent === '{int(ttft_count)}'")
    assert ttft_count == len(IDS)
    assert text_of(browser, "ttft-count") == str(int(ttft_count))  # the window holds the server's whole life
    assert text_of(browser, "itl-count") == str(int(itl_count))
    assert {state: float(text_of(browser, f"kv-{state}")) for state in kv} == kv
    assert [text_of(browser, f"lane-{lane}-{s}") for lane in ("short", "long") for s in ("running", "waiting")] \
        == ["0"] * 4
    assert text_of(browser, "state") == "ready"
    queues = browser.evaluate("[...document.querySelectorAll('#queues td.num')].map(c => [c.id, c.textContent])")
    assert queues and all(depth == "0" for _, depth in queues)

    bars = dict(browser.evaluate(
        "[...document.querySelectorAll('#stacked .bar')].map(g => [g.dataset.requestId, +g.dataset.ttftMs])"))
    assert set(IDS) <= set(bars)
    for rid in IDS:
        assert bars[rid] == pytest.approx(traces[rid]["edges_ms"]["first_token_written"], abs=1e-3)

    browser.click('#stacked .bar[data-request-id="dash-0"]')
    browser.wait_for("document.getElementById('timeline').dataset.requestId === 'dash-0'")
    shown = dict(browser.evaluate(
        "[...document.querySelectorAll('#timeline rect')].map(r => [r.dataset.edge, +r.dataset.atMs])"))
    assert shown == pytest.approx({edge: ms for edge, ms in traces["dash-0"]["edges_ms"].items()}, abs=1e-3)
    assert text_of(browser, "timeline-id") == "dash-0" and text_of(browser, "error") == ""

    shot = browser.screenshot(tmp_path / "dashboard.png")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000


def test_the_page_is_self_contained(tiny_server) -> None:
    r = tiny_server.http("GET", "/dashboard")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    page = r.text
    assert "<script>" in page and "<style>" in page
    assert "http://" not in page.replace("http://www.w3.org/2000/svg", "") and "https://" not in page
    assert "src=" not in page and "<link" not in page
