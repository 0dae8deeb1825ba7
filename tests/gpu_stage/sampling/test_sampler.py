"""Sampler: greedy, seeded reproducibility, truncation masks, penalties, min_tokens, logprobs."""
from __future__ import annotations

import math

import pytest
import torch

from gpu_stage.sampling.penalties import apply_penalties
from gpu_stage.sampling.rows import SamplingRow, SamplingTensors
from gpu_stage.sampling.sampler import Sampler
from gpu_stage.sampling.torch_draw import truncation_mask
from stages.sampling import SamplingParams

PROBS = [0.5, 0.3, 0.15, 0.05]  # a hand-made distribution over 4 tokens (plus banned padding)


def _row(seed: int | None = None, prompt=(), output=(), **params) -> SamplingRow:
    gen = None
    if seed is not None:
        gen = torch.Generator().manual_seed(seed)
    return SamplingRow(SamplingParams(**params), list(prompt), list(output), gen)


def _hand_logits(num_rows: int) -> torch.Tensor:
    return torch.tensor([math.log(p) for p in PROBS]).repeat(num_rows, 1)  # [R, 4]


def _support(num_rows: int = 300, **params) -> set[int]:
    """Tokens drawn from PROBS by many independently seeded rows in one vectorised call."""
    rows = [_row(seed=i, **params) for i in range(num_rows)]
    return set(Sampler()(_hand_logits(num_rows), rows).token_ids)


def test_greedy_is_argmax_and_top_k_one_is_greedy() -> None:
    logits = torch.randn(6, 1000, generator=torch.Generator().manual_seed(0))
    argmax = logits.argmax(dim=-1).tolist()
    assert Sampler()(logits, [_row(temperature=0.0) for _ in range(6)]).token_ids == argmax
    rows = [_row(seed=i, temperature=1.3, top_k=1) for i in range(6)]
    assert Sampler()(logits, rows).token_ids == argmax


def test_seeded_sampling_reproducible_and_independent_of_batch() -> None:
    gen = torch.Generator().manual_seed(1)
    logits_steps = [torch.randn(4, 500, generator=gen) for _ in range(20)]
    target = dict(seed=1234, temperature=0.9, top_p=0.95)

    def run(batch: bool) -> list[int]:
        rows = [_row(**target)]
        if batch:  # neighbours: greedy, unseeded, another seed with top_k and penalties
            rows += [_row(temperature=0.0), _row(temperature=1.0),
                     _row(seed=7, top_k=5, presence_penalty=0.5, output=[1, 2])]
        out = []
        for logits in logits_steps:
            out.append(Sampler()(logits[: len(rows)], rows).token_ids[0])
            rows[0].output_token_ids.append(out[-1])
        return out

    alone, batched = run(False), run(True)
    assert alone == run(False)
    assert alone == batched
    other_seed = [_row(seed=99, temperature=0.9, top_p=0.95)]
    assert [Sampler()(lg[:1], other_seed).token_ids[0] for lg in logits_steps] != alone


def test_frequencies_follow_the_distribution() -> None:
    n = 4000
    counts = torch.bincount(torch.tensor(Sampler()(_hand_logits(n), [_row(seed=i) for i in range(n)]).token_ids), minlength=4)
    for p, c in zip(PROBS, counts.tolist()):
        assert abs(c - n * p) < 4 * math.sqrt(n * p * (1 - p)), (p, c)


@pytest.mark.parametrize(
    "params,expected",
    [
        ({"top_p": 0.7}, {0, 1}),
        ({"top_p": 0.85}, {0, 1, 2}),
        ({"top_p": 0.4}, {0}),
        ({"top_k": 2}, {0, 1}),
        ({"top_k": 3, "top_p": 0.7}, {0, 1}),
        ({"min_p": 0.4}, {0, 1}),  # keep p >= 0.4 * 0.5
        ({"min_p": 0.25}, {0, 1, 2}),
        ({"temperature": 1.0}, {0, 1, 2, 3}),
    ],
)
def test_truncation_masks(params: dict, expected: set[int]) -> None:
    assert _support(**params) == expected


def test_penalties_match_hand_computed_reference() -> None:
    logits = torch.tensor([[2.0, -1.0, 0.5, 3.0, 0.0], [2.0, -1.0, 0.5, 3.0, 0.0]])
    rows = [
        _row(prompt=[0, 2], output=[3, 3, 1], repetition_penalty=2.0, frequency_penalty=0.5, presence_penalty=0.25),
        _row(prompt=[0, 2], output=[3, 3, 1]),  # no penalties: untouched
    ]
    out = apply_penalties(logits, rows)
    # repetition over prompt+output {0,1,2,3}: positive / 2, negative * 2; then token 3 (count 2):
    # -0.5*2 - 0.25; token 1 (count 1): -0.5 - 0.25. Token 4 was never seen.
    expected = torch.tensor([1.0, -2.0 - 0.75, 0.25, 1.5 - 1.25, 0.0])
    assert torch.allclose(out[0], expected)
    assert torch.equal(out[1], logits[1])
    assert torch.equal(logits[0], torch.tensor([2.0, -1.0, 0.5, 3.0, 0.0]))  # input not modified
    # Greedy sees the penalised logits: token 3 would win unpenalised, token 0 wins after.
    assert Sampler()(logits[:1], [_row(temperature=0.0, output=[3], presence_penalty=2.0)]).token_ids == [0]


def test_min_tokens_bans_eos_and_stop_ids() -> None:
    logits = torch.tensor([[0.0, 1.0, 5.0, 4.0, 3.0]])  # eos = 2 is the argmax, stop id 3 next
    sampler = Sampler(eos_token_ids=[2])
    assert sampler(logits, [_row(temperature=0.0, output=[1], min_tokens=2, stop_token_ids=(3,))]).token_ids == [4]
    assert sampler(logits, [_row(temperature=0.0, output=[1, 1], min_tokens=2)]).token_ids == [2]
    assert sampler(logits, [_row(temperature=0.0, min_tokens=0)]).token_ids == [2]


def test_logprobs_are_raw_log_softmax() -> None:
    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(3))
    rows = [
        _row(temperature=0.0, logprobs=3, repetition_penalty=1.5, prompt=[int(logits[0].argmax())]),
        _row(seed=5, temperature=0.7, logprobs=0),
        _row(temperature=0.0),
    ]
    out = Sampler()(logits, rows)
    ref = torch.log_softmax(logits, dim=-1)
    for i in (0, 1):
        assert out.logprobs[i] == pytest.approx(float(ref[i, out.token_ids[i]]), abs=1e-6)
    top = ref[0].topk(3)
    assert [t for t, _ in out.top_logprobs[0]] == top.indices.tolist()
    assert [lp for _, lp in out.top_logprobs[0]] == pytest.approx(top.values.tolist(), abs=1e-6)
    assert out.top_logprobs[1] == []
    assert out.logprobs[2] is None and out.top_logprobs[2] is None


def test_non_finite_row_is_an_error_for_that_row_only() -> None:
    logits = torch.randn(3, 20)
    logits[1, 4] = float("nan")
    rows = [_row(temperature=0.0), _row(seed=1), _row(seed=2)]
    out = Sampler()(logits, rows)
    assert set(out.errors) == {1}
    assert out.token_ids[0] == int(logits[0].argmax())


@pytest.mark.parametrize("banned", [False, True])
def test_fused_matches_the_torch_path(banned: bool) -> None:
    """Sampler(fused=True) (the Triton kernels; on CPU under the interpreter) gives the torch
    path's ids and errors for greedy rows and rows sampling with a temperature, top_p, top_k or
    min_p, min_tokens bans and non-finite rows included, and the same logprobs where rows ask for
    them. (The kernels need the logits on the GPU where there is one: the runner turns the flag on
    only there.)"""
    pytest.importorskip("triton")
    gen = torch.Generator().manual_seed(11)
    logits = torch.randn(4, 300, generator=gen).to("cuda" if torch.cuda.is_available() else "cpu")
    logits[2, 7] = float("nan")
    logits[1, 3] = 50.0  # its argmax is token 3, an eos id: banned below min_tokens
    fused, plain = Sampler(eos_token_ids=[3], fused=True), Sampler(eos_token_ids=[3])

    def batch(*extra: dict) -> list[SamplingRow]:  # greedy rows, then the extra rows, freshly seeded
        greedy = [_row(temperature=0.0, min_tokens=4 if banned else 0) for _ in range(4 - len(extra))]
        return greedy + [_row(**params) for params in extra]

    for extra in ((), ({"seed": 5},), ({"seed": 6, "temperature": 0.5}, {"seed": 7, "temperature": 2.0}),
                  ({"seed": 8, "top_p": 0.9},), ({"seed": 9, "top_k": 20, "min_p": 0.05},),
                  ({"temperature": 0.0, "logprobs": 2},), ({"seed": 10, "top_p": 0.8, "logprobs": 3},)):
        a, b = fused(logits, batch(*extra)), plain(logits, batch(*extra))
        assert set(a.errors) == set(b.errors) == {2}
        assert [t for i, t in enumerate(a.token_ids) if i != 2] == [t for i, t in enumerate(b.token_ids) if i != 2]
        assert a.top_logprobs == b.top_logprobs and a.logprobs == b.logprobs
        if not extra:
            assert (a.token_ids[1] == 3) is not banned


def test_warm_up_runs_both_fused_variants_and_leaves_the_sampler_usable() -> None:
    pytest.importorskip("triton")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    sampler = Sampler(fused=True)
    sampler.warm_up(64, torch.device(device))
    out = sampler(torch.arange(64.0).repeat(2, 1).to(device), [_row(temperature=0.0), _row(seed=1)])
    assert out.token_ids[0] == 63 and 0 <= out.token_ids[1] < 64 and not out.errors
    Sampler().warm_up(64, torch.device(device))  # not fused: nothing to compile


@pytest.mark.parametrize("peaked", [True, False])
def test_cpu_truncation_from_the_top_candidates_equals_the_whole_sort(peaked: bool, monkeypatch) -> None:
    """On CPU top_k and top_p look among each row's TOP_P_CANDIDATES largest values first; the
    kept sets equal those of a sort of the whole row, also when a row's nucleus reaches past the
    candidates (a flat distribution: every row is then sorted whole)."""
    import gpu_stage.sampling.torch_draw as torch_draw

    gen = torch.Generator().manual_seed(21)
    vocab = 3000
    scaled = torch.randn(6, vocab, generator=gen) * 2
    if peaked:
        scaled[:, :30] += 10
    scaled[:, 100:104] = scaled[:, 100:101]  # ties
    params = [{"top_p": 0.9}, {"top_k": 40}, {"top_k": 200, "top_p": 0.5}, {"temperature": 0.0},
              {"top_p": 0.8, "min_p": 0.01}, {"top_k": 101}]
    rows = [_row(seed=i, **p) for i, p in enumerate(params)]
    t = SamplingTensors.build(rows, torch.device("cpu"), vocab)
    widths = []
    cut_off = torch_draw._cut_off

    def spy(scaled, top, t, width):
        widths.append(width)
        return cut_off(scaled, top, t, width)

    monkeypatch.setattr(torch_draw, "_cut_off", spy)
    monkeypatch.setattr(torch_draw, "TOP_P_CANDIDATES", 64)
    from_candidates = truncation_mask(scaled, t)
    assert widths == ([200] if peaked else [200, vocab])  # the largest top_k sets the width
    monkeypatch.setattr(torch_draw, "TOP_P_CANDIDATES", vocab)
    whole = truncation_mask(scaled, t)
    assert torch.equal(from_candidates, whole)
    assert int(whole[1].sum()) == 40 and int(whole[5].sum()) >= 101


def test_cpu_truncation_sorts_at_once_a_row_too_flat_for_the_candidates(monkeypatch) -> None:
    """A top_p row whose mass could not fit in the candidates even at the largest weight each is
    sorted whole at once (no selection first); a top_k row beside it never forces that."""
    import gpu_stage.sampling.torch_draw as torch_draw

    vocab = 2000
    scaled = torch.zeros(2, vocab)
    scaled[0] = torch.arange(vocab) * 1e-5  # flat, without ties: every token weighs about 1
    scaled[1, 7] = 0.5
    rows = [_row(seed=0, top_p=0.5), _row(seed=1, top_k=3)]
    t = SamplingTensors.build(rows, torch.device("cpu"), vocab)
    widths = []
    cut_off = torch_draw._cut_off
    monkeypatch.setattr(torch_draw, "_cut_off", lambda s, top, t, w: widths.append(w) or cut_off(s, top, t, w))
    monkeypatch.setattr(torch_draw, "TOP_P_CANDIDATES", 64)
    keep = truncation_mask(scaled, t)
    assert widths == [vocab]
    assert 900 <= int(keep[0].sum()) <= 1000 and bool(keep[0, -1]) and not bool(keep[0, 0])  # half the mass
    widths.clear()
    assert torch.equal(truncation_mask(scaled[1:], SamplingTensors.build(rows[1:], torch.device("cpu"), vocab)),
                       scaled[1:] >= 0.0)  # top_k 3 keeps the 0.5 and every tie of 0.0
    assert widths == [3]  # top_k alone: its k largest values


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="host syncs are a CUDA matter")
def test_start_queues_the_sampling_without_a_host_sync() -> None:
    """Bans (min_tokens), truncation, random draws and logprobs: nothing in start() waits for the
    device (a sync there stalls the launch thread until the forward is done)."""
    from gpu_stage.kernels import triton_available

    sampler = Sampler(eos_token_ids=[1], fused=triton_available())
    rows = [_row(temperature=0.0, min_tokens=5, stop_token_ids=(2,)), _row(seed=1, temperature=0.7, top_p=0.9),
            _row(seed=2, temperature=1.0, top_k=20, min_p=0.05, logprobs=2), _row(temperature=0.0)]
    logits = torch.randn(4, 1000, device="cuda")
    logits[0, 1] = logits[0, 2] = 100.0  # row 0's argmax: an EOS and a stop id, both banned
    tensors = SamplingTensors.build(rows, logits.device, 1000)
    sampler.finish(sampler.start(logits, rows, tensors))  # compiled and cached before the check
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        pending = sampler.start(logits, rows, tensors)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    out = sampler.finish(pending)
    assert out.token_ids[0] not in (1, 2) and out.token_ids[3] == int(logits[3].argmax())


def test_a_logits_processor_edits_the_draw_and_the_logprobs() -> None:
    """The processor runs before the logprobs are taken (a grammar's mask shows in them, as in vLLM,
    which applies the bitmask to the logits its sampler reads)."""
    def ban_first(logits: torch.Tensor, rows: list[SamplingRow]) -> torch.Tensor:
        assert len(rows) == logits.shape[0]
        out = logits.clone()
        out[:, 0] = float("-inf")
        return out

    logits = _hand_logits(2)
    rows = [_row(temperature=0.0, logprobs=0), _row(seed=1, temperature=1.0, logprobs=0)]
    plain = Sampler()(logits, rows)
    processed = Sampler()(logits, rows, process=ban_first)
    assert plain.token_ids[0] == 0 and processed.token_ids[0] == 1  # the argmax is banned
    assert processed.token_ids[1] != 0  # and never drawn
    assert plain.logprobs[0] == pytest.approx(math.log(PROBS[0]), abs=1e-6)
    # the processed distribution's: token 1's share of what is left once token 0 is banned
    assert processed.logprobs[0] == pytest.approx(math.log(PROBS[1] / (1 - PROBS[0])), abs=1e-6)
    assert torch.equal(logits, _hand_logits(2))  # the input is left as it is
