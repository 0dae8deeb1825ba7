"""Print the fastest passing vt_kmma variant at 64 x 2,048 and the fastest passing vt_ variant at
1 x 2,048 (split-K) from a lab/kv8_decode_ab.py JSON: the s17-vt2 run serves them."""
import json
import sys

rows = [r for r in json.load(open(sys.argv[1]))["results"] if r.get("ok") and "us" in r and "@" not in r["variant"]]


def best(prefix: str, batch: int) -> str:
    return min((r for r in rows if r["variant"].startswith(prefix) and r["batch"] == batch and r["ctx"] == 2048),
               key=lambda r: r["us"])["variant"]


print(best("vt_kmma", 64), best("vt_", 1))
