"""Block events end to end: `ttft route` in front of two live `dummy:tiny` replicas. Conversations
whose first turns were sent straight to one replica or the other (never through the router) have
their returning turns routed to the replica that holds them: only the replicas' block events can
have told the router (without them it sends every turn to the replica it predicts faster, or
alternates)."""
from __future__ import annotations

import time

import pytest

from fleet import TINY, start_router

SYSTEM = "You answer in the voice of a patient librarian who knows every book by heart. " * 25


def served_by(replicas, request_id: str) -> list[int]:
    return [i for i, r in enumerate(replicas)
            if r.http("GET", f"/debug/traces?request_id={request_id}").json()["traces"]]


@pytest.fixture(scope="module")
def fleet(launch, tmp_path_factory):
    replicas = launch.many([(TINY, None)] * 2)
    router = start_router(tmp_path_factory.mktemp("router"), [r.base_url for r in replicas],
                          "--health-interval-s", "0.1")
    yield replicas, router
    assert router.stop() == 0


def test_returning_turns_go_where_the_replica_says_their_prefix_is(fleet) -> None:
    replicas, router = fleet
    conversations = []
    for k in range(6):
        messages = [{"role": "system", "content": f"Conversation {k}. {SYSTEM}"}, {"role": "user", "content": "Hi."}]
        r = replicas[k % 2].http("POST", "/v1/chat/completions",
                             json={"model": "dummy:tiny", "messages": messages, "max_tokens": 2})
        assert r.status_code == 200
        conversations.append(messages + [r.json()["choices"][0]["message"], {"role": "user", "content": "More?"}])
    time.sleep(1.0)  # several health checks: each reads the replicas' events
    for k, messages in enumerate(conversations):
        rid = f"kv-events-turn-{k}"
        r = router.http("POST", "/v1/chat/completions", headers={"X-Request-Id": rid},
                        json={"model": "dummy:tiny", "messages": messages, "max_tokens": 2})
        assert r.status_code == 200, r.text
        assert served_by(replicas, rid) == [k % 2]
