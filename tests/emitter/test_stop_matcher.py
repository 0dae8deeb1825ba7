"""StopMatcher: hold-back, stops across pushes, overlapping and multiple stops, properties."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emitter.stop_matcher import StopMatcher


def run(stops, pieces, include=False) -> tuple[list[str], bool, StopMatcher]:
    """Pushes the pieces until a hit; the flush is appended when there was none."""
    m = StopMatcher(tuple(stops), include)
    outs = []
    for p in pieces:
        out, hit = m.push(p)
        outs.append(out)
        if hit:
            return outs, True, m
    outs.append(m.flush())
    return outs, False, m


def reference(text: str, stops, include=False) -> tuple[str, bool]:
    """Character by character: the first stop to complete ends the text (longest on a tie)."""
    for end in range(1, len(text) + 1):
        done = [s for s in stops if text[:end].endswith(s)]
        if done:
            longest = max(done, key=len)
            return (text[:end] if include else text[: end - len(longest)]), True
    return text, False


def test_stop_across_pushes_is_never_emitted():
    outs, hit, m = run(["Observation:"], ["Hello wor", "ld. Obs", "ervat", "ion: more"])
    assert hit and m.matched == "Observation:"
    assert outs == ["Hello wor", "ld. ", "", ""]


def test_held_text_is_released_when_the_stop_does_not_complete():
    m = StopMatcher(("Observation:",))
    assert m.push("an Obs") == ("an ", False)
    assert m.held_text == "Obs"
    assert m.push("cure end") == ("Obscure end", False)
    assert m.held_text == ""


def test_flush_releases_held_text_at_the_natural_end():
    outs, hit, _ = run(["</s>"], ["text </"])
    assert not hit and outs == ["text ", "</"]


def test_stop_at_the_very_start():
    assert run(["STOP"], ["STOP and more"])[:2] == ([""], True)
    assert run(["STOP"], ["S", "T", "O", "P"])[:2] == (["", "", "", ""], True)


def test_overlapping_candidates_hold_only_what_can_still_match():
    m = StopMatcher(("aab",))
    assert m.push("a") == ("", False)
    assert m.push("a") == ("", False)
    assert m.push("a") == ("a", False)  # "aaa": only the last "aa" can still become "aab"
    assert m.push("b") == ("", True)


def test_the_first_stop_to_complete_wins():
    # "c" completes before "abcd" would, so text before "c" is emitted.
    assert run(["abcd", "c"], ["abcd"])[:2] == (["ab"], True)
    assert run(["abcd", "c"], ["a", "b", "c", "d"])[:2] == (["", "", "ab"], True)
    # Completing at the same place: the longest is cut, so no part of a stop is emitted.
    assert run(["b", "ab"], ["xab"])[:2] == (["x"], True)
    assert run(["ab", "b"], ["xab"])[2].matched == "ab"


def test_multiple_stops_each_held_back():
    m = StopMatcher(("\n\n", "User:"))
    assert m.push("Hi\n") == ("Hi", False)
    assert m.push("Us") == ("\n", False)  # "\nUs" cannot become "\n\n"; "Us" may become "User:"
    assert m.push("er:") == ("", True)
    assert m.matched == "User:"


def test_include_stop_str_in_output():
    outs, hit, _ = run(["END"], ["the E", "ND tail"], include=True)
    assert hit and "".join(outs) == "the END"


def test_after_a_hit_nothing_more_is_emitted():
    m = StopMatcher(("x",))
    assert m.push("abxcd") == ("ab", True)
    assert m.push("more") == ("", True)
    assert m.flush() == ""


def test_no_stop_strings_passes_text_through():
    m = StopMatcher(())
    assert m.push("anything") == ("anything", False)
    assert m.flush() == ""


def test_empty_stop_string_is_rejected():
    with pytest.raises(ValueError):
        StopMatcher(("ok", ""))


@st.composite
def cases(draw):
    alphabet = "abc😀"  # a small alphabet makes stops actually occur, overlapping
    text = draw(st.text(alphabet, max_size=40))
    stops = draw(st.lists(st.text(alphabet, min_size=1, max_size=5), min_size=1, max_size=4))
    cuts = sorted(set(draw(st.lists(st.integers(0, len(text)), max_size=12))))
    bounds = [0, *cuts, len(text)]
    pieces = [text[a:b] for a, b in zip(bounds, bounds[1:])]
    return text, stops, pieces


@settings(max_examples=500, deadline=None)
@given(case=cases(), include=st.booleans())
def test_emitted_text_is_the_text_cut_at_the_first_stop(case, include):
    text, stops, pieces = case
    outs, hit, _ = run(stops, pieces, include)
    assert ("".join(outs), hit) == reference(text, stops, include)


@settings(max_examples=300, deadline=None)
@given(case=cases())
def test_holds_back_only_a_possible_stop_start(case):
    """Before a hit: emitted + held == everything pushed; held is a proper prefix of a stop."""
    _text, stops, pieces = case
    m = StopMatcher(tuple(stops))
    emitted, pushed = "", ""
    for p in pieces:
        out, hit = m.push(p)
        emitted += out
        pushed += p
        if hit:
            break
        assert emitted + m.held_text == pushed
        assert m.held_text == "" or any(
            s.startswith(m.held_text) and s != m.held_text for s in stops
        )
        assert not any(s in emitted for s in stops)
