"""The cuBLASLt binding: every split-free algorithm the heuristic offers computes x @ W^T, in a
CUDA graph as eagerly. GPU only (CUDA builds of torch ship libcublasLt)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from gpu_stage.tuning import cublaslt

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("rows,n,k", [(1, 256, 128), (7, 384, 256), (64, 1024, 512), (300, 512, 1024),
                                      (2048, 768, 256)])
def test_every_offered_algorithm_equals_f_linear(rows: int, n: int, k: int, dtype: torch.dtype) -> None:
    lt = cublaslt.Lt(torch.device("cuda", torch.cuda.current_device()))
    x = torch.randn(rows, k, device="cuda", dtype=dtype)
    w = torch.randn(n, k, device="cuda", dtype=dtype) / k**0.5
    ref = F.linear(x, w).float()
    product = lt.product(rows, n, k, dtype)
    algos = product.algorithms()
    assert algos, "the heuristic offers no split-free algorithm"
    for algo in algos:
        assert product.supports(algo)
        out = torch.empty(rows, n, device="cuda", dtype=dtype)
        product.run(x, w, out, algo)
        assert (out.float() - ref).abs().max().item() <= 1e-2 * ref.abs().max().item(), algo.rank


def test_an_algorithm_runs_inside_a_cuda_graph_as_eagerly() -> None:
    lt = cublaslt.Lt(torch.device("cuda", torch.cuda.current_device()))
    x = torch.randn(96, 512, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(640, 512, device="cuda", dtype=torch.bfloat16)
    product = lt.product(96, 640, 512, torch.bfloat16)
    algo = product.algorithms()[-1]
    eager = torch.empty(96, 640, device="cuda", dtype=torch.bfloat16)
    product.run(x, w, eager, algo)
    out = torch.empty_like(eager)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        product.run(x, w, out, algo)
    x.copy_(torch.randn_like(x))
    graph.replay()
    product.run(x, w, eager, algo)
    assert torch.equal(out, eager)


def test_operands_fit_only_dense_aligned_rows() -> None:
    w = torch.randn(64, 32, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(10, 48, device="cuda", dtype=torch.bfloat16)
    assert cublaslt.operands_fit(x[:, :32].contiguous(), w)
    assert not cublaslt.operands_fit(x[:, :32], w)  # rows 48 apart
    assert not cublaslt.operands_fit(x.view(-1)[1:321].view(10, 32), w)  # address off the 16-byte grid
