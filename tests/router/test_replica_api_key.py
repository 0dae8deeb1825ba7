"""`ttft route --replica-api-key` in front of a live `dummy:tiny` replica that requires a key: the
router reads the replica's state and block events with its key; without the key, or with a wrong
one, the replica is out with a reason that names the key, and a client's request gets a 503 that
says so instead of a bare "no replica is ready"."""
from __future__ import annotations

import time

import pytest

from fleet import TINY, start_router

KEY = "sesame-0123"
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def replica(launch):
    return launch(*TINY, "--api-key", KEY)


def test_with_its_key_the_router_reads_state_and_events_and_clients_keep_their_own(replica, tmp_path) -> None:
    router = start_router(tmp_path, [replica.base_url], "--replica-api-key", KEY, "--health-interval-s", "0.1")
    try:
        assert router.replica_states() == {replica.base_url: "ready"}
        body = {"model": "dummy:tiny", "prompt": "The library opens at nine. " * 12, "max_tokens": 2}
        assert replica.http("POST", "/v1/completions", json=body, headers=AUTH).status_code == 200
        deadline = time.monotonic() + 5
        while router.http("GET", "/health").json()["num_kv_events"] == 0:  # read with the router's key
            assert time.monotonic() < deadline, router.log_path.read_text()
            time.sleep(0.1)
        assert router.http("POST", "/v1/completions", json=body, headers=AUTH).status_code == 200
        # The router's key is its own: a client without one is refused by the replica, through the router.
        refused = router.http("POST", "/v1/completions", json=body)
        assert refused.status_code == 401 and refused.json()["error"]["type"]
    finally:
        assert router.stop() == 0


@pytest.mark.parametrize("flags, reason", [
    ((), "wants an API key the router was not given"),
    (("--replica-api-key", "not-the-key"), "refused the router's API key"),
])
def test_without_the_key_the_replica_is_out_and_clients_are_told_why(replica, tmp_path, flags, reason) -> None:
    router = start_router(tmp_path, [replica.base_url], *flags)
    try:
        info = router.http("GET", "/health").json()["replicas"][0]
        assert info["state"] == "down" and reason in info["reason"]
        r = router.http("POST", "/v1/completions", headers=AUTH,
                        json={"model": "dummy:tiny", "prompt": "Hi", "max_tokens": 1})
        assert r.status_code == 503
        message = r.json()["error"]["message"]
        assert reason in message and "--replica-api-key" in message and "not-the-key" not in message
        assert reason in router.log_path.read_text()  # logged once, at the first check
    finally:
        assert router.stop() == 0
