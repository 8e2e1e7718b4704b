"""Bad calls raise a clear error: ValueError for values and shapes, TypeError for dtypes,
devices and unknown keywords, NotImplementedError for FLA options rewy cannot honour.
Messages about values come from librewy's rewy_validate_* (the library's own wording)."""
import pytest
import torch

import rewy
from helpers import make_inputs


def inputs(op="gdn", **kw):
    return {n: t.float() for n, t in make_inputs(op, T=16, **kw).items()}


def test_unknown_keyword():
    with pytest.raises(TypeError, match="unexpected keyword argument.*'use_fancy_kernel'"):
        rewy.chunk_gated_delta_rule(**inputs(), use_fancy_kernel=True)


def test_head_first_removed():
    with pytest.raises(ValueError, match="head_first"):
        rewy.chunk_kda(**inputs("kda"), head_first=True)


@pytest.mark.parametrize("name,shape", [("k", (2, 16, 2, 16)), ("beta", (2, 16, 3)), ("g", (2, 16, 2, 32)),
                                        ("initial_state", (3, 2, 32, 24))])
def test_bad_shapes(name, shape):
    x = inputs()
    x[name] = torch.zeros(shape)
    with pytest.raises(ValueError, match=f"{name} must have shape"):
        rewy.chunk_gated_delta_rule(**x)


def test_q_not_4d():
    x = inputs()
    x["q"] = x["q"][0]
    with pytest.raises(ValueError, match=r"q must be a 4-D tensor \[B, T, H, K\]"):
        rewy.chunk_gated_delta_rule(**x)


def test_gdn2_gate_shapes():
    x = inputs("gdn2")
    x["w"] = x["w"][..., :5]
    with pytest.raises(ValueError, match="w must have shape"):
        rewy.chunk_gdn2(**x)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.int64, torch.float8_e4m3fn])
def test_unsupported_dtype(dtype):
    x = {n: t.to(dtype) if n in ("q", "k", "v") else t.float() for n, t in make_inputs("gdn", T=16).items()}
    with pytest.raises(TypeError, match=rf"q must be float32, bfloat16, float16 or float64 \(got {dtype}\)"):
        rewy.chunk_gated_delta_rule(**x)


@pytest.mark.skipif(not (torch.cuda.is_available() and rewy.has_cuda()),
                    reason="needs a CUDA device and librewy built with CUDA=1")
def test_float64_on_cuda():
    """float64 runs on the CPU backend (REWY_F64); on CUDA the library's own message, as a TypeError."""
    x = {n: t.cuda() for n, t in make_inputs("gdn", T=16).items()}
    with pytest.raises(TypeError, match="REWY_F64 runs on the CPU backend only"):
        rewy.chunk_gated_delta_rule(**x)


def test_mixed_dtypes():
    x = inputs()
    x["k"] = x["k"].bfloat16()
    with pytest.raises(TypeError, match="one dtype"):
        rewy.chunk_gated_delta_rule(**x)


def test_integer_gate():
    x = inputs()
    x["g"] = x["g"].int()
    with pytest.raises(TypeError, match="g must be a floating-point tensor"):
        rewy.chunk_gated_delta_rule(**x)


def test_mismatched_devices():
    x = inputs()
    x["v"] = x["v"].to("meta")
    with pytest.raises(TypeError, match="one device.*v is on meta"):
        rewy.chunk_gated_delta_rule(**x)


def test_cu_seqlens_cpu_must_be_on_cpu():
    x = inputs(B=1, N=2)
    cu = torch.tensor([0, 5, 16])
    with pytest.raises(TypeError, match="cu_seqlens_cpu must be a CPU tensor"):
        rewy.chunk_gated_delta_rule(**x, cu_seqlens=cu, cu_seqlens_cpu=cu.to("meta"))


def test_varlen_needs_batch_one():
    with pytest.raises(ValueError, match="batch size is expected to be 1"):
        rewy.chunk_gated_delta_rule(**inputs(h0=False), cu_seqlens=torch.tensor([0, 5, 16]))


@pytest.mark.parametrize("cu,message", [([0, 5, 15], "cu_seqlens must end at T=16"),
                                        ([0, 9, 5, 16], "cu_seqlens must increase strictly"),
                                        ([1, 5, 16], r"cu_seqlens\[0\] must be 0")])
def test_bad_cu_seqlens(cu, message):
    """Checked by the library (rewy_validate_fwd), which reads the host copy."""
    with pytest.raises(ValueError, match=message):
        rewy.chunk_gated_delta_rule(**inputs(B=1, h0=False), cu_seqlens=torch.tensor(cu))


def test_bad_chunk_size():
    with pytest.raises(ValueError, match=r"chunk_size must be 16, 32 or 64 \(got 48\)"):
        rewy.chunk_kda(**inputs("kda"), chunk_size=48)


def test_head_dim_too_large():
    with pytest.raises(ValueError, match="K and V must be at most 256"):
        rewy.chunk_delta_rule(**inputs("delta", K=300, h0=False))


def test_value_heads_not_a_multiple():
    with pytest.raises(ValueError, match=r"HV \(3\) must be a multiple of H \(2\)"):
        rewy.chunk_gated_delta_rule(**inputs(H=2, HV=3))


def test_bad_backward_name():
    with pytest.raises(ValueError, match="backward must be 'rewy' or 'wy'"):
        rewy.chunk_gated_delta_rule(**inputs(), backward="adjoint")


def test_neg_eigval_needs_sigmoid():
    with pytest.raises(ValueError, match="allow_neg_eigval"):
        rewy.chunk_gated_delta_rule(**inputs(), allow_neg_eigval=True)


def test_gate_in_kernel_needs_A_log():
    with pytest.raises(ValueError, match="A_log` must be provided"):
        rewy.chunk_gated_delta_rule(**inputs(), use_gate_in_kernel=True)


@pytest.mark.parametrize("extra", [dict(A_log=torch.zeros(2)), dict(dt_bias=torch.zeros(64)),
                                   dict(lower_bound=-5.0)])
def test_gate_parameters_without_gate_in_kernel(extra):
    """FLA drops A_log / dt_bias / lower_bound when the gate is not in the kernel; rewy says so."""
    with pytest.raises(ValueError, match="only applies with `use_gate_in_kernel=True`"):
        rewy.chunk_kda(**inputs("kda"), **extra)


def test_gate_parameter_sizes():
    with pytest.raises(ValueError, match="dt_bias must have 64 elements"):
        rewy.chunk_kda(**inputs("kda"), use_gate_in_kernel=True, A_log=torch.zeros(2), dt_bias=torch.zeros(2))
    with pytest.raises(ValueError, match="A_log must have HV = 2 elements"):
        rewy.chunk_gated_delta_rule(**inputs(), use_gate_in_kernel=True, A_log=torch.zeros(3))


def test_safe_gate_lower_bound_range():
    with pytest.raises(ValueError, match="safe range"):
        rewy.chunk_kda(**inputs("kda"), use_gate_in_kernel=True, safe_gate=True, lower_bound=-7.0)


def test_unsupported_fla_options():
    with pytest.raises(NotImplementedError, match="return_intermediate_states"):
        rewy.chunk_kda(**inputs("kda"), return_intermediate_states=True)
    with pytest.raises(NotImplementedError, match="cp_context"):
        rewy.chunk_gated_delta_rule(**inputs(), cp_context=object())


def test_backward_config_mismatch():
    """The library refuses a saved buffer written by a different forward (its own message)."""
    x = inputs()
    args = [x["q"], x["k"], x["v"], x["g"], x["beta"], None, None, x["initial_state"], None, None]
    o, _, saved = torch.ops.rewy.chunk_fwd(*args, 1, 0.25, 64, 0, 0, False, False)
    with pytest.raises(ValueError, match="differs from the forward"):
        torch.ops.rewy.chunk_bwd(*args, saved, torch.ones_like(o), None, 1, 0.25, 32, 0, 0, False)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_tensors_need_a_cuda_build():
    if rewy.has_cuda():
        pytest.skip("this librewy has the CUDA backend")
    x = {n: t.cuda() for n, t in inputs().items()}
    with pytest.raises(ValueError, match="built without CUDA"):
        rewy.chunk_gated_delta_rule(**x)


def test_cu_seqlens_must_be_a_tensor():
    with pytest.raises(TypeError, match="cu_seqlens must be a torch.Tensor"):
        rewy.chunk_gated_delta_rule(**inputs(B=1, h0=False), cu_seqlens=[0, 5, 16])
