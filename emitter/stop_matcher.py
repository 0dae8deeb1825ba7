"""Stop strings with hold-back: the stop text never reaches the client.

Text arrives in pieces (one per step). A piece may end with the beginning of a stop string
("...Obs" for stop "Observation:"), so that suffix is held back until the next piece says whether
the stop completes. The held suffix is never longer than the longest stop string minus one, so a
push costs O(len(piece) + max stop length) per stop string.

Which stop wins: the first one to *complete* in the text (smallest end position), which is what a
character-by-character stream would see, so the result never depends on how the text was cut into
pieces. Among stops that complete at the same place (each a suffix of the longest), the longest is
cut, so no part of any of them is emitted.
"""
from __future__ import annotations


class StopMatcher:
    """One per request. `push` until it reports a hit; `flush` at a natural end."""

    __slots__ = ("_stops", "_include", "_prefixes", "_max_held", "_held", "matched")

    def __init__(self, stop_strings: tuple[str, ...], include_stop_str_in_output: bool = False) -> None:
        if any(not s for s in stop_strings):
            raise ValueError("stop strings must be non-empty")
        self._stops = tuple(dict.fromkeys(stop_strings))  # deduplicated, order kept
        self._include = include_stop_str_in_output
        # Every proper prefix of every stop: a suffix of the text equal to one may still grow into
        # a stop, so it is held back.
        self._prefixes = frozenset(s[:k] for s in self._stops for k in range(1, len(s)))
        self._max_held = max((len(s) for s in self._stops), default=1) - 1
        self._held = ""
        self.matched: str | None = None  # the stop string that ended the text, once one has

    @property
    def held_text(self) -> str:
        return self._held

    def push(self, text: str) -> tuple[str, bool]:
        """Returns (text safe to emit now, whether a stop string was hit).

        After a hit the caller must stop; further pushes return ("", True).
        """
        if self.matched is not None:
            return "", True
        buf = self._held + text if self._held else text
        if not buf:
            return "", False
        hit = self._first_hit(buf)
        if hit is not None:
            start, stop = hit
            self.matched = stop
            self._held = ""
            return buf[: start + len(stop)] if self._include else buf[:start], True
        num_held = self._num_to_hold(buf)
        if num_held == 0:
            self._held = ""
            return buf, False
        self._held = buf[-num_held:]
        return buf[:-num_held], False

    def flush(self) -> str:
        """The natural end of the text: the held suffix was not a stop after all."""
        out, self._held = self._held, ""
        return "" if self.matched is not None else out

    def _first_hit(self, buf: str) -> tuple[int, str] | None:
        """(start, stop) of the stop occurrence that ends first; ties go to the longest stop.

        The held part alone contains no complete stop (it would have hit earlier), so any
        occurrence found ends inside the new text.
        """
        best: tuple[int, str] | None = None
        best_end = 0
        for stop in self._stops:
            start = buf.find(stop)
            if start < 0:
                continue
            end = start + len(stop)
            if best is None or end < best_end or (end == best_end and len(stop) > len(best[1])):
                best, best_end = (start, stop), end
        return best

    def _num_to_hold(self, buf: str) -> int:
        """Length of the longest suffix of `buf` that is a proper prefix of some stop string."""
        for k in range(min(len(buf), self._max_held), 0, -1):
            if buf[-k:] in self._prefixes:
                return k
        return 0
