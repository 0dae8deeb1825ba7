import time, torch, sys
from gpu_stage.sampler import Sampler, SamplingRow, SamplingTensors
from stages.sampling import SamplingParams
torch.set_num_threads(2)
V=49152
gen=torch.Generator().manual_seed(0)
# a peaked distribution like a trained model's (a few dozen likely tokens), and a flat one
peaked=torch.randn(8,V,generator=gen)*2; peaked[:, :40] += 12
flat=torch.randn(8,V,generator=gen)*2
for name, logits in (("peaked",peaked),("flat",flat)):
  for kind in ({"temperature":0.0},{"temperature":0.7},{"temperature":0.7,"top_p":0.9},{"temperature":0.7,"top_k":50},{"temperature":0.7,"min_p":0.05}):
    rows=[SamplingRow(SamplingParams(**kind),[],[],torch.Generator().manual_seed(i)) for i in range(8)]
    t=SamplingTensors.build(rows,torch.device("cpu"),V)
    s=Sampler()
    ids=s(logits,rows,t).token_ids
    t0=time.perf_counter()
    for _ in range(20): s(logits,rows,t)
    print(name, kind, round((time.perf_counter()-t0)/20*1e3,2),"ms", ids[:4])
