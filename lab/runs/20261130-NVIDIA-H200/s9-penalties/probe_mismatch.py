import torch
from gpu_stage.sampling.penalties import PenaltyCache, apply_penalties
from gpu_stage.sampling.rows import SamplingRow, SamplingTensors
from gpu_stage.sampling.sampler import Sampler
from stages.sampling import SamplingParams
dev = torch.device("cuda"); V = 128256; R = 64
gen = torch.Generator().manual_seed(R)
logits = (torch.randn(R, V, generator=gen) * 4).to(dev)
params = SamplingParams(temperature=0.7, repetition_penalty=1.1, frequency_penalty=0.2)
hist = torch.randint(0, V, (R, 2048 + 64), generator=gen).tolist()
rows = [SamplingRow(params, h[:2048], h[2048:], torch.Generator().manual_seed(i)) for i, h in enumerate(hist)]
t = SamplingTensors.build(rows, dev, V)
a = Sampler()(logits, rows, t).token_ids
b = Sampler(fused=True)(logits, rows, t).token_ids
cache = PenaltyCache(V, dev)
for i, r in enumerate(rows):
    r.penalty_slot = cache.slot(str(i), r.prompt_token_ids, r.output_token_ids)
t2 = SamplingTensors.build(rows, dev, V, uniforms=t.uniform.tolist())
c = Sampler(fused=True, penalties=cache)(logits, rows, t2).token_ids
pen = apply_penalties(logits.float(), rows).double().cpu() / 0.7
cdf = torch.softmax(pen, -1).cumsum(-1)
u = t.uniform.double().cpu()[:, None]
ref = torch.searchsorted(cdf, u * cdf[:, -1:], right=True)[:, 0].tolist()
for i in range(R):
    if not (a[i] == b[i] == c[i] == ref[i]):
        target = float(u[i, 0] * cdf[i, -1]); j = ref[i]
        print(i, "torch", a[i], "fused", b[i], "cached", c[i], "f64", ref[i], "u", float(u[i, 0]),
              "margin", min(abs(target - float(cdf[i, j])), abs(target - float(cdf[i, j - 1]))))
print("mismatch torch/fused", sum(x != y for x, y in zip(a, b)), "fused/cached", sum(x != y for x, y in zip(b, c)))
