"""The router: one OpenAI-compatible front for data-parallel ttft replicas (`ttft route`).

It picks a replica per request by a policy (router/policies.py), forwards the request and streams
the replica's bytes back as they come (router/proxy.py), and keeps a live view of each replica's
health and load (router/replica.py, router/health_watch.py). All of its state is soft: a restarted
router rebuilds it from the replicas' health checks and the requests it routes.
"""
