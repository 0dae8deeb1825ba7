"""The scheduler simulator: `python -m bench.sim` drives the real `Scheduler` in simulated time.

    workloads.py   requests with arrival times (mixed, uniform, shared-prefix, reference), from a seed
    arrivals.py    open loop (fixed arrival times) or closed loop (N clients: the reference workload)
    cost_model.py  the GPU step cost: Llama-3.1-8B on one H200, calibrated on measured step times
    engine.py      the loop: arrivals -> reclaim -> schedule -> step cost -> update, in sim time
    report.py      TTFT percentiles per class, throughput, preemptions, hit rates
    __main__.py    the command line
"""
