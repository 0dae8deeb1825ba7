"""RequestEmitter: TokenEvents in, the RequestOutput deltas a stream sends out."""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from emitter.output_stream import merge_outputs
from emitter.request_emitter import RequestEmitter
from ingress.dummy_tokenizer import DummyTokenizer
from stages.messages import PromptLogprob, RequestOutput, SampledToken, TokenEvent
from stages.sampling import SamplingParams


def ev(ids, finish=None, **kw) -> TokenEvent:
    return TokenEvent("r", list(ids), finish, **kw)


def feed(emitter, ids, per_event=1, finish="length") -> list[RequestOutput]:
    """Sends ids in events of `per_event` tokens, the last one carrying `finish`."""
    chunks = [ids[i:i + per_event] for i in range(0, len(ids), per_event)] or [[]]
    outs = []
    for n, chunk in enumerate(chunks):
        o = emitter.on_event(ev(chunk, finish if n == len(chunks) - 1 else None))
        if o is not None:
            outs.append(o)
    return outs


def text_of(outs) -> str:
    return "".join(o.text for o in outs)


def test_text_deltas_counts_and_final_output(byte_tok):
    em = RequestEmitter("r", byte_tok, SamplingParams(), num_prompt_tokens=4)
    outs = feed(em, list(b"Hi!"))
    assert [o.text for o in outs] == ["H", "i", "!"]
    assert [o.num_output_tokens for o in outs] == [1, 2, 3]
    assert outs[-1].finish_reason == "length" and all(o.finish_reason is None for o in outs[:-1])
    assert outs[-1].num_prompt_tokens == 4 and outs[-1].token_ids == [ord("!")]
    assert em.finished and em.on_event(ev([65])) is None


def test_nothing_to_send_while_a_character_is_partial(byte_tok):
    em = RequestEmitter("r", byte_tok, SamplingParams())
    emoji = list("😀".encode())
    assert [em.on_event(ev([b])) for b in emoji[:3]] == [None, None, None]
    assert em.on_event(ev([emoji[3]])).text == "😀"


def test_token_ids_of_silent_steps_ride_with_the_next_flush(byte_tok):
    em = RequestEmitter("r", byte_tok, SamplingParams())
    emoji = list("😀".encode())
    outs = feed(em, [*emoji, ord("!")])
    assert [o.token_ids for o in outs] == [emoji, [ord("!")]]  # no id is lost with its empty step
    assert sum(len(o.token_ids) for o in outs) == outs[-1].num_output_tokens


def test_incomplete_character_at_the_end_is_dropped(byte_tok):
    em = RequestEmitter("r", byte_tok, SamplingParams())
    outs = feed(em, [*b"ok", *"界".encode()[:2]])
    assert text_of(outs) == "ok"
    assert outs[-1].finish_reason == "length" and outs[-1].text == ""
    assert outs[-1].num_output_tokens == 4


def test_stop_string_across_tokens_with_the_real_tokenizer(smol):
    text = "The answer is 42.\nObservation: the end"
    ids = smol.encode(text, add_special_tokens=False)
    em = RequestEmitter("r", smol, SamplingParams(stop=("Observation:",)))
    outs = feed(em, ids, finish=None)
    assert text_of(outs) == "The answer is 42.\n"
    assert em.stopped_by_string and em.stop_string == "Observation:"
    assert outs[-1].finish_reason == "stop" and em.finish_reason == "stop"
    assert "Obs" not in text_of(outs)
    # Usage counts the tokens up to the one that completed the stop; later events are ignored.
    num_stop = next(n for n in range(1, len(ids) + 1) if "Observation:" in smol.decode(ids[:n]))
    assert outs[-1].num_output_tokens == num_stop
    assert em.on_event(ev(ids[-1:], "abort")) is None


def test_stop_inside_a_multi_token_event_truncates_ids_and_logprobs(byte_tok):
    em = RequestEmitter("r", byte_tok, SamplingParams(stop=("cd",), logprobs=0))
    ids = list(b"abcdef")
    sampled = [SampledToken("r", t, -0.5, []) for t in ids]
    out = em.on_event(ev(ids, logprobs=sampled))
    assert out.text == "ab" and out.finish_reason == "stop"
    assert out.token_ids == list(b"abcd") and out.num_output_tokens == 4
    assert [lp.token for lp in out.logprobs] == ["a", "b", "c", "d"]


def test_held_text_is_flushed_at_a_natural_end(byte_tok):
    em = RequestEmitter("r", byte_tok, SamplingParams(stop=("xyz",)))
    outs = feed(em, list(b"abxy"))
    assert [o.text for o in outs] == ["a", "b", "xy"]  # "x", "xy" held until the end
    assert outs[-1].finish_reason == "length" and not em.stopped_by_string


def test_include_stop_str_in_output(byte_tok):
    em = RequestEmitter("r", byte_tok, SamplingParams(stop=("yz",), include_stop_str_in_output=True))
    assert text_of(feed(em, list(b"xyzw"), finish=None)) == "xyz"


def test_eos_and_stop_token_text_is_not_emitted(byte_tok):
    kept = SamplingParams(skip_special_tokens=False)
    em = RequestEmitter("r", byte_tok, kept)
    outs = feed(em, [*b"ok", byte_tok.EOS], finish="stop")
    assert text_of(outs) == "ok" and outs[-1].num_output_tokens == 3
    em = RequestEmitter("r", byte_tok, SamplingParams(stop_token_ids=(ord("."),)))
    assert text_of(feed(em, list(b"end."), finish="stop")) == "end"
    # With include_stop_str_in_output the stop token's text is part of the reply.
    em = RequestEmitter("r", byte_tok, SamplingParams(stop_token_ids=(ord("."),), include_stop_str_in_output=True))
    assert text_of(feed(em, list(b"end."), finish="stop")) == "end."
    # ignore_eos: an EOS is an ordinary token (its text is kept when specials are).
    em = RequestEmitter("r", byte_tok, SamplingParams(ignore_eos=True, skip_special_tokens=False))
    assert text_of(feed(em, [*b"a", byte_tok.EOS], finish="stop")) == "a<|endoftext|>"


def test_specials_are_skipped_by_default(byte_tok):
    em = RequestEmitter("r", byte_tok, SamplingParams())
    assert text_of(feed(em, [byte_tok.IM_END, *b"hi", byte_tok.IM_END])) == "hi"


def test_logprob_tokens_are_their_own_text(byte_tok):
    emoji = list("😀".encode())
    em = RequestEmitter("r", byte_tok, SamplingParams(logprobs=1))
    out = em.on_event(ev([65, emoji[0]], logprobs=[
        SampledToken("r", 65, -0.1, [(65, -0.1)]),
        SampledToken("r", emoji[0], -1.0, [(66, -0.5)]),
    ]))
    assert out.text == "A"
    first, partial = out.logprobs
    assert (first.token, first.token_id, first.logprob, first.top) == ("A", 65, -0.1, [("A", 65, -0.1)])
    assert partial.token == "\ufffd" and partial.top == [("B", 66, -0.5)]
    # Without logprobs asked for, none are passed on.
    plain = RequestEmitter("r", byte_tok, SamplingParams())
    assert plain.on_event(ev([65], logprobs=[SampledToken("r", 65, -0.1)])).logprobs is None


def test_min_tokens_defers_stop_strings(byte_tok):
    em = RequestEmitter("r", byte_tok, SamplingParams(stop=("a",), min_tokens=3))
    assert text_of(feed(em, list(b"aabab"), finish=None)) == "aab"
    assert em.stopped_by_string


def test_error_and_counts_from_the_event(byte_tok):
    em = RequestEmitter("r", byte_tok, SamplingParams())
    first = em.on_event(ev([65], num_prompt_tokens=9, num_cached_tokens=4))
    assert (first.num_prompt_tokens, first.num_cached_tokens) == (9, 4)
    out = em.on_event(ev([], "error", error="step failed"))
    assert out.finish_reason == "error" and out.error == "step failed" and out.text == ""
    assert out.num_prompt_tokens == 9


def test_abort_with_no_tokens_still_ends_the_stream(byte_tok):
    em = RequestEmitter("r", byte_tok, SamplingParams(stop=("zz",)))
    assert em.on_event(ev(b"z")) is None  # held back
    out = em.on_event(ev([], "abort"))
    assert out.text == "z" and out.finish_reason == "abort"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    text=st.text("ab😀 \n", max_size=30),
    stops=st.lists(st.text("ab😀\n", min_size=1, max_size=3), max_size=3),
    per_event=st.integers(1, 4),
)
def test_stream_is_the_decoded_text_cut_at_the_first_stop(byte_tok, text, stops, per_event):
    tok = byte_tok  # stateless: sharing it between examples is fine
    ids = list(text.encode())
    em = RequestEmitter("r", tok, SamplingParams(stop=tuple(stops)))
    outs = feed(em, ids, per_event)
    full = text_of(outs)
    cut = min(
        (text.find(s) + len(s) for s in stops if s in text), default=None
    )  # where the first stop completes
    if cut is None:
        assert full == text and outs[-1].finish_reason == "length"
    else:
        longest = max((s for s in stops if text[:cut].endswith(s)), key=len)
        assert full == text[: cut - len(longest)]
        assert em.stopped_by_string and outs[-1].finish_reason == "stop"
    assert outs[-1].num_output_tokens <= len(ids)


def test_emitter_hands_the_scores_out_with_the_first_output_and_merging_keeps_them() -> None:
    tok = DummyTokenizer(512)
    params = SamplingParams(prompt_logprobs=1)
    emitter = RequestEmitter("r", tok, params, num_prompt_tokens=3, first_prompt_token=0)
    scores = [PromptLogprob(3 + ord("a"), -0.25, 2, [(300, -0.1)]), PromptLogprob(3 + ord("b"), -1.0, 1, [])]
    # Its first token is half a character: no text yet, but the prompt logprobs go out now.
    out = emitter.on_event(TokenEvent("r", [3 + 0xC3], prompt_logprobs=scores))
    assert out is not None and out.text == "" and out.token_ids == [3 + 0xC3]
    assert out.prompt_logprobs.first_token == "<s>" and out.prompt_logprobs.first_token_id == 0
    assert [(p.token, p.logprob, p.rank, p.top) for p in out.prompt_logprobs.positions] == [
        ("a", -0.25, 2, [(" t300", 300, -0.1)]), ("b", -1.0, 1, [])]
    later = emitter.on_event(TokenEvent("r", [3 + 0xA9]))
    assert later.text == "\u00e9" and later.prompt_logprobs is None
    assert merge_outputs(out, later).prompt_logprobs is out.prompt_logprobs
