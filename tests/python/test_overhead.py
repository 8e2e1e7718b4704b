"""The overhead probe (python -m rewy._overhead) runs and reports sane numbers."""
import pytest

from rewy._overhead import measure


def test_overhead_probe_runs():
    r = measure(repeat=20, warmup=5)
    for key in ("api_forward", "bare_forward", "api_backward", "bare_backward", "floor_forward", "floor_backward",
                "direct_backward"):
        assert r[key] > 0, key
    for d in ("forward", "backward"):
        assert r["overhead_" + d] == r["api_" + d] - r["bare_" + d]
        assert r["rewy_" + d] == pytest.approx(r["api_" + d] - r["bare_" + d] - r["floor_" + d])
    assert r["rewy_backward_direct"] == r["direct_backward"] - r["bare_backward"]


def test_packed_params_match_ctypes_constructor():
    """_lib.fwd_params / bwd_params (one struct.pack per call) fill the same bytes as the ctypes
    constructors of rewy_fwd_params / rewy_bwd_params."""
    from rewy import _lib
    cfg = _lib.Config(1, 0, 1, 2, 64, 4, 8, 128, 64, 32, 0.125)
    cfg.policy, cfg.state_v_first, cfg.num_seqs = 1, 1, 3
    fwd = range(16, 16 * 15, 16)   # 12 pointers, then workspace_bytes, saved_bytes
    assert bytes(_lib.fwd_params(bytes(cfg), *fwd)) == bytes(_lib.FwdParams(cfg, *fwd))
    bwd = list(range(16, 16 * 23, 16))   # 9 pointers, saved_bytes, 11 pointers, workspace_bytes
    bwd[3] = bwd[14] = 0   # NULL
    assert bytes(_lib.bwd_params(bytes(cfg), *bwd)) == bytes(_lib.BwdParams(cfg, *bwd))


def test_seen_signature_skips_checks_and_others_still_get_them():
    """A call with the signature of a checked one reuses its plan (rewy.ops._CALLS) and gives the same
    result; a call that differs in any tensor's dtype, device, shape or type still gets the full checks."""
    import torch
    from helpers import make_inputs

    import rewy
    from rewy import ops
    x = {n: t.float() for n, t in make_inputs("gdn", T=16).items()}
    o1, h1 = rewy.chunk_gated_delta_rule(**x, output_final_state=True)
    n_calls = len(ops._CALLS)
    o2, h2 = rewy.chunk_gated_delta_rule(**x, output_final_state=True)
    assert len(ops._CALLS) == n_calls and torch.equal(o1, o2) and torch.equal(h1, h2)
    for name, bad, error, message in [("k", x["k"].bfloat16(), TypeError, "one dtype"),
                                      ("v", x["v"].to("meta"), TypeError, "one device"),
                                      ("beta", x["beta"][:, :8], ValueError, "beta must have shape"),
                                      ("g", x["g"].tolist(), TypeError, "g must be a torch.Tensor")]:
        with pytest.raises(error, match=message):
            rewy.chunk_gated_delta_rule(**dict(x, **{name: bad}))
    with pytest.raises(ValueError, match="backward must be"):   # options are checked on every call
        rewy.chunk_gated_delta_rule(**x, backward="fast")
