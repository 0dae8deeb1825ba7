"""Structured outputs: grammars that constrain what a request may generate (JSON schema, regex,
choice, Lark grammar), behind a small backend interface (backend.py) with llguidance as the one
backend, a compile cache fed at arrival (compiler.py) and the runner hook that masks the logits of
constrained rows (runner_hook.py)."""
