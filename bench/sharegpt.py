"""ShareGPT conversations as a workload, sampled the way `vllm bench serve --dataset-name sharegpt`
samples them (vllm/benchmarks/datasets.py, ShareGPTDataset), from a local file: nothing is fetched.

The file is a JSON list of `{"id": ..., "conversations": [{"from": "human"|"gpt", "value": text}, ...]}`.
As in vLLM:
- entries with fewer than two turns are dropped, the rest shuffled by Python's `random` with the seed;
- each entry's first turn is the prompt and the second turn's token count the output length
  (`output_len` overrides it, and then a short reply no longer disqualifies an entry);
- an entry is skipped when its prompt or output is under 4 tokens, its prompt over 1024, or both
  together over 2048;
- entries are taken in shuffled order until `num_requests` are found; fewer than that, the found ones
  are drawn again at random (seeded) to make up the number, unless `oversample` is off.
Token counts come from a TokenCounter (bench/token_count.py), BOS included as vLLM counts it.
"""
from __future__ import annotations

import random
from pathlib import Path

import orjson

from bench.token_count import TokenCounter
from bench.workloads import BenchRequest

MIN_LEN = 4
MAX_PROMPT_LEN = 1024
MAX_TOTAL_LEN = 2048


def load_conversations(path: str | Path, seed: int, shuffle: bool = True) -> list[list[dict]]:
    """The conversations with at least two turns, shuffled with the seed."""
    try:
        data = orjson.loads(Path(path).read_bytes())
    except (OSError, orjson.JSONDecodeError) as e:
        raise ValueError(f"--dataset-path {path}: cannot read a JSON file ({e})") from e
    if not isinstance(data, list):
        raise ValueError(f"--dataset-path {path}: expected a JSON list of conversations, got {type(data).__name__}")
    convs = [e["conversations"] for e in data
             if isinstance(e, dict) and isinstance(e.get("conversations"), list) and len(e["conversations"]) >= 2]
    if shuffle:
        random.Random(seed).shuffle(convs)  # the order random.seed(seed); random.shuffle() gives
    return convs


def is_valid_sequence(prompt_len: int, output_len: int, skip_min_output_len_check: bool = False) -> bool:
    return not (prompt_len < MIN_LEN or (not skip_min_output_len_check and output_len < MIN_LEN)
                or prompt_len > MAX_PROMPT_LEN or prompt_len + output_len > MAX_TOTAL_LEN)


async def sample_sharegpt(
    conversations: list[list[dict]],
    num_requests: int,
    count_tokens: TokenCounter,
    output_len: int | None = None,
    oversample: bool = True,
    seed: int = 0,
) -> list[BenchRequest]:
    samples: list[BenchRequest] = []
    for turns in conversations:
        if len(samples) >= num_requests:
            break
        prompt, completion = _text(turns[0]), _text(turns[1])
        prompt_len = await count_tokens(prompt)
        new_output_len = await count_tokens(completion) if output_len is None else output_len
        if not is_valid_sequence(prompt_len, new_output_len, skip_min_output_len_check=output_len is not None):
            continue
        samples.append(BenchRequest(f"sharegpt-{len(samples)}", prompt, prompt_len, new_output_len))
    if oversample and samples and len(samples) < num_requests:
        rng, found = random.Random(seed), list(samples)  # drawn from the ones found, as vLLM draws
        for i in range(len(found), num_requests):
            pick = rng.choice(found)
            samples.append(BenchRequest(f"sharegpt-{i}", pick.prompt, pick.prompt_len, pick.max_tokens))
    return samples


def _text(turn: object) -> str:
    value = turn.get("value") if isinstance(turn, dict) else None
    if not isinstance(value, str):
        raise ValueError(f"a ShareGPT turn must be an object with a string 'value', got {str(turn)[:80]!r}")
    return value
