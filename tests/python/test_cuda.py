"""CUDA tensors: the CUDA backend on PyTorch's current stream and CUDA-graph capture.

Every test here is skipped without a CUDA device (and without a librewy built with CUDA=1);
a skip is never a pass. The CPU-vs-reference matrix of test_ops.py also runs on CUDA
(its `device` parameter)."""
import pytest
import torch

import rewy
from helpers import FN, OPS, check, make_inputs, run

pytestmark = [
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
    pytest.mark.skipif(torch.cuda.is_available() and not rewy.has_cuda(),
                       reason="librewy was built without CUDA (make CUDA=1)"),
]


@pytest.mark.parametrize("op", OPS)
def test_cuda_matches_reference_varlen_gva(op):
    cu = torch.tensor([0, 7, 8, 80, 200])
    x = make_inputs(op, B=1, T=200, H=2, HV=4, N=4)
    check(run(op, x, torch.bfloat16, "cuda", cu_seqlens=cu, cu_seqlens_cpu=cu))


def test_runs_on_the_current_stream():
    x = {n: t.float().cuda() for n, t in make_inputs("gdn", T=300).items()}
    expected, _ = rewy.chunk_gated_delta_rule(**x)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        o, _ = rewy.chunk_gated_delta_rule(**x)
    torch.cuda.current_stream().wait_stream(side)
    assert torch.equal(o, expected)


@pytest.mark.parametrize("op", OPS)
def test_cuda_graph_capture(op):
    """Forward and backward captured in one CUDA graph (varlen with cu_seqlens_cpu: no host sync)."""
    cu = torch.tensor([0, 50, 64, 130], dtype=torch.int32)
    x = {n: t.float().cuda().requires_grad_() for n, t in make_inputs(op, B=1, T=130, N=3).items()}
    do = torch.randn(1, 130, 2, 24, device="cuda")
    cu_cuda = cu.cuda()

    def step():
        o, ht = FN[op](**x, cu_seqlens=cu_cuda, cu_seqlens_cpu=cu, output_final_state=True)
        return torch.autograd.grad((o * do).sum() + ht.sum(), list(x.values()))

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        expected = step()          # warm-up (allocations, autotuning) outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = step()
    graph.replay()
    torch.cuda.synchronize()
    for a, b in zip(captured, expected):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6)
    # new inputs copied into the captured leaves: a replay must give the new results
    fresh = make_inputs(op, B=1, T=130, N=3, seed=11)
    with torch.no_grad():
        for n, t in x.items():
            t.copy_(fresh[n].float())
    with torch.cuda.stream(side):
        direct = step()
    torch.cuda.current_stream().wait_stream(side)
    graph.replay()
    torch.cuda.synchronize()
    for a, b, old in zip(captured, direct, expected):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6)
        assert not torch.allclose(a, old)
