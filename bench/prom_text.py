"""The Prometheus text exposition read back: series names, labels, values, and each family's type.

`parse_metrics` is what the probes and tests look values up in: `{'name{label="v",...}': value}`.
A server serves one model, and every series of ours carries its `model_name` label (as vLLM's do):
the keys leave that label out, so `'ttft_kv_blocks{state="used"}'` names the same series against
any model, and against servers that do not label at all. `parse_series` keeps every label.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

DROPPED_LABELS = ("model_name",)
# One label pair: name="value", the value with Prometheus' escapes (\\, \", \n).
_LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')


@dataclass(frozen=True, slots=True)
class Series:
    name: str
    labels: tuple[tuple[str, str], ...]  # in the order written
    value: float

    def key(self, drop: tuple[str, ...] = DROPPED_LABELS) -> str:
        """`name{a="x",b="y"}` without the `drop` labels; the bare name when none is left."""
        kept = [f'{k}="{_escape(v)}"' for k, v in self.labels if k not in drop]
        return f"{self.name}{{{','.join(kept)}}}" if kept else self.name


def parse_series(text: str) -> list[Series]:
    """Every sample line of the exposition (comments and blank lines skipped; a line that does not
    parse is skipped too: this reads what a server wrote, it does not validate it)."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        series = _parse_line(line)
        if series is not None:
            out.append(series)
    return out


def parse_metrics(text: str, drop: tuple[str, ...] = DROPPED_LABELS) -> dict[str, float]:
    """Prometheus text format to {'name{labels}': value}, the `drop` labels left out of the keys."""
    return {s.key(drop): s.value for s in parse_series(text)}


def family_types(text: str) -> dict[str, str]:
    """Each family's `# TYPE` (counter, gauge, histogram, ...), by family name."""
    types = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[:2] == ["#", "TYPE"]:
            types[parts[2]] = parts[3]
    return types


def _parse_line(line: str) -> Series | None:
    brace = line.find("{")
    if brace < 0:
        name, _, rest = line.partition(" ")
        labels: list[tuple[str, str]] = []
    else:
        name, pos, labels = line[:brace], brace + 1, []
        while (m := _LABEL.match(line, pos)) is not None:
            labels.append((m.group(1), _unescape(m.group(2))))
            pos = m.end()
        if not line.startswith("}", pos):
            return None
        rest = line[pos + 1:]
    fields = rest.split()
    if not name or not fields:
        return None
    try:
        value = float(fields[0])  # (a timestamp may follow)
    except ValueError:
        return None
    return Series(name, tuple(labels), value)


def _unescape(value: str) -> str:
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), value)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
