"""TTFT by prompt class from a `ttft bench` result JSON: `python -m lab.split_ttft FILE [--threshold N]`.
Prints P50/P95/P99 TTFT (ms) of the requests whose prompt is shorter than the threshold and of the rest."""
from __future__ import annotations

import argparse
import json

import numpy as np


def split(path: str, threshold: int) -> dict:
    samples = [s for s in json.load(open(path))["samples"] if s["success"]]
    out = {}
    for name, group in (("short", [s for s in samples if s["prompt_len"] < threshold]),
                        ("long", [s for s in samples if s["prompt_len"] >= threshold])):
        ttft = [s["ttft_s"] * 1e3 for s in group]
        if ttft:
            out[name] = {"n": len(ttft), **{f"p{q}": round(float(np.percentile(ttft, q)), 1) for q in (50, 95, 99)}}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("file")
    p.add_argument("--threshold", type=int, default=256)
    a = p.parse_args()
    print(json.dumps(split(a.file, a.threshold)))


if __name__ == "__main__":
    main()
