"""OpenAI's logit_bias on the device: each biased row's (id, bias) pairs added to its logits.

A request's pairs are put on the device once, when the runner admits it (rows.BiasRow, kept in its
SamplingState), through pinned memory and without waiting for the device. A step with biased rows
then concatenates their pairs on the device, stages one row index per pair (a small pinned copy,
not waited for) and scatters them into the logits in one `index_put`: no host sync, nothing per
step for a request without a bias, nothing at all for a step without one (a host flag decides).

The bias is added to the raw logits after the min_tokens ban and before the penalties and the
temperature, as vLLM orders its logits processors; a bias of -100 makes a token practically
impossible (as OpenAI says) but is not a ban: a row whose every token is biased so still samples.
Logprobs stay those of the model's own distribution (taken before any of this).
"""
from __future__ import annotations

from typing import Sequence

import torch

from gpu_stage.sampling.rows import BiasRow, SamplingRow, device_ids


def apply_logit_bias(logits: torch.Tensor, rows: Sequence[SamplingRow]) -> torch.Tensor:
    """logits [R, V] float32 -> new logits with each row's bias added (the input is left as it
    is: a failed batch is sampled again row by row from the same logits)."""
    device = logits.device
    biases = [(i, row.bias or BiasRow.of(row.params.logit_bias, device))
              for i, row in enumerate(rows) if row.params.logit_bias]
    if not biases:
        return logits
    row_index = device_ids([i for i, bias in biases for _ in range(len(bias))], device)
    ids = torch.cat([bias.ids for _, bias in biases])
    values = torch.cat([bias.values for _, bias in biases])
    return logits.index_put((row_index, ids), values, accumulate=True)
