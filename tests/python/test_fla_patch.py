"""rewy.patch_fla() on a stand-in for the fla package (FLA itself needs a GPU and Triton).

The stand-in has the shape that matters: fla.ops and its per-operator packages export the chunk
functions, a defining module holds them too, and a "layer" module imported a function by name
(once under an alias), as fla.layers.gated_deltanet does. A module outside fla holds one as well
and must be left alone. Every real fla module is taken out of sys.modules for the test (and put
back after), so the tests mean the same with FLA on PYTHONPATH.
"""
import sys
import types

import pytest
import torch

import rewy
from helpers import TOL, make_inputs, rel_err
from reference import reference


def _fla_function(name):
    def f(*args, **kwargs):
        return ("fla", name)
    f.__name__ = name
    return f


@pytest.fixture
def fake_fla(monkeypatch):
    for name in [n for n in sys.modules if n == "fla" or n.startswith("fla.")]:
        monkeypatch.delitem(sys.modules, name)

    def module(name, **attrs):
        m = types.ModuleType(name)
        m.__dict__.update(attrs)
        monkeypatch.setitem(sys.modules, name, m)
        return m

    fn = {n: _fla_function(n) for n in ("chunk_delta_rule", "chunk_gated_delta_rule", "chunk_kda")}
    fla = module("fla")
    fla.ops = module("fla.ops", **fn, chunk_gdn=fn["chunk_gated_delta_rule"])
    module("fla.ops.delta_rule", chunk_delta_rule=fn["chunk_delta_rule"])
    module("fla.ops.gated_delta_rule", chunk_gated_delta_rule=fn["chunk_gated_delta_rule"],
           chunk_gdn=fn["chunk_gated_delta_rule"])
    module("fla.ops.gated_delta_rule.chunk", chunk_gated_delta_rule=fn["chunk_gated_delta_rule"])
    module("fla.ops.kda", chunk_kda=fn["chunk_kda"])
    layer = module("fla.layers.gated_deltanet", chunk_gated_delta_rule=fn["chunk_gated_delta_rule"],
                   gdr=fn["chunk_gated_delta_rule"], unrelated=len)
    outsider = module("someone_elses_module", chunk_kda=fn["chunk_kda"])
    # no fla.ops.gdn2: this stand-in is an FLA release without GDN2
    return types.SimpleNamespace(fn=fn, layer=layer, outsider=outsider, module=module)


def _import_in_new_fla_module(fake, name, statement):
    """A module of fla imported after the patch: runs `statement` in a fresh fla.* module."""
    m = fake.module(name)
    exec(statement, m.__dict__)
    return m


def test_patch_replaces_every_fla_reference(fake_fla):
    fn = fake_fla.fn
    patch = rewy.patch_fla()
    try:
        assert sys.modules["fla.ops"].chunk_delta_rule is rewy.chunk_delta_rule
        assert sys.modules["fla.ops"].chunk_gdn is rewy.chunk_gated_delta_rule
        assert sys.modules["fla.ops.gated_delta_rule"].chunk_gdn is rewy.chunk_gated_delta_rule
        assert sys.modules["fla.ops.gated_delta_rule.chunk"].chunk_gated_delta_rule is rewy.chunk_gated_delta_rule
        assert sys.modules["fla.ops.kda"].chunk_kda is rewy.chunk_kda
        assert fake_fla.layer.chunk_gated_delta_rule is rewy.chunk_gated_delta_rule
        assert fake_fla.layer.gdr is rewy.chunk_gated_delta_rule          # imported under another name
        assert fake_fla.layer.unrelated is len
        assert fake_fla.outsider.chunk_kda is fn["chunk_kda"]             # outside fla: untouched
        assert set(patch.skipped) == {"gdn2"}
        # fla.ops 4, delta_rule 1, gated_delta_rule 2, .chunk 1, kda 1, the layer 2
        assert len(patch.replaced) == 11
    finally:
        patch.undo()


def test_later_imports_and_undo(fake_fla):
    fn = fake_fla.fn
    undo = rewy.patch_fla()
    late = _import_in_new_fla_module(fake_fla, "fla.layers.kda", "from fla.ops.kda import chunk_kda")
    assert late.chunk_kda is rewy.chunk_kda
    undo()
    assert late.chunk_kda is fn["chunk_kda"]
    assert sys.modules["fla.ops"].chunk_gdn is fn["chunk_gated_delta_rule"]
    assert sys.modules["fla.ops.gated_delta_rule.chunk"].chunk_gated_delta_rule is fn["chunk_gated_delta_rule"]
    assert fake_fla.layer.gdr is fn["chunk_gated_delta_rule"]
    assert fake_fla.layer.chunk_gated_delta_rule(1, 2, 3, 4, 5) == ("fla", "chunk_gated_delta_rule")
    assert not undo.active
    undo()   # a second undo changes nothing
    assert sys.modules["fla.ops.kda"].chunk_kda is fn["chunk_kda"]


def test_some_operators_other_functions_and_with(fake_fla):
    fn = fake_fla.fn
    calls = []

    def mine(*args, **kwargs):
        calls.append(kwargs)
        return "mine"

    with rewy.patch_fla(ops=("gdn",), functions={"gdn": mine}) as patch:
        assert fake_fla.layer.chunk_gated_delta_rule(1, 2, 3, 4, 5, use_qk_l2norm_in_kernel=True) == "mine"
        assert calls == [{"use_qk_l2norm_in_kernel": True}]
        assert sys.modules["fla.ops.kda"].chunk_kda is fn["chunk_kda"]   # not asked for
        assert patch.skipped == {}
        # a patch on top of a patch (a wrapper around the installed function), undone first
        with rewy.patch_fla(ops="gdn"):
            assert fake_fla.layer.gdr is rewy.chunk_gated_delta_rule
        assert fake_fla.layer.gdr is mine
    assert fake_fla.layer.gdr is fn["chunk_gated_delta_rule"]


def test_errors(fake_fla, monkeypatch):
    with pytest.raises(ValueError, match="unknown operator 'gla'"):
        rewy.patch_fla(ops=("gla",))
    with pytest.raises(ValueError, match="leaves out"):
        rewy.patch_fla(ops=("kda",), functions={"gdn": len})
    with pytest.raises(ImportError, match="gdn2: fla.ops.gdn2 cannot be imported"):
        rewy.patch_fla(ops=("kda", "gdn2"))
    # the failed call above changed nothing
    assert sys.modules["fla.ops.kda"].chunk_kda is fake_fla.fn["chunk_kda"]
    for name in [n for n in sys.modules if n == "fla" or n.startswith("fla.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "fla", None)   # import fla fails
    with pytest.raises(ImportError, match=r"FLA \(the package fla\) cannot be imported"):
        rewy.patch_fla()


def test_patched_layer_computes_rewy_gdn(fake_fla):
    """A layer written like FLA's GatedDeltaNet (a module-level name, FLA's in-kernel options)
    runs rewy's function after the patch: its output matches the fp64 reference (MATH §10)."""
    layer = _import_in_new_fla_module(fake_fla, "fla.layers.gdn_like", (
        "from fla.ops.gated_delta_rule import chunk_gated_delta_rule\n"
        "def forward(q, k, v, a, beta, A_log, dt_bias):\n"
        "    return chunk_gated_delta_rule(q=q, k=k, v=v, g=a, beta=beta, A_log=A_log, dt_bias=dt_bias,\n"
        "        initial_state=None, output_final_state=False, use_qk_l2norm_in_kernel=True,\n"
        "        use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True, allow_neg_eigval=False,\n"
        "        state_v_first=True, cu_seqlens=None)\n"))
    x = make_inputs("gdn", B=1, T=70, H=2, K=32, V=32, h0=False, raw_gate=True, raw_qk=True)
    A_log = torch.linspace(0.0, 1.0, 2, dtype=torch.float64)
    dt_bias = torch.linspace(-0.5, 0.5, 2, dtype=torch.float64)
    beta_logits = torch.logit(x["beta"])
    args = (x["q"], x["k"], x["v"], x["g"], beta_logits, A_log, dt_bias)
    assert layer.forward(*args) == ("fla", "chunk_gated_delta_rule")   # FLA's (the stand-in) before
    with rewy.patch_fla():
        o, ht = layer.forward(*(t.float() for t in args))
    assert ht is None
    o_ref, _ = reference("gdn", x["q"], x["k"], x["v"], x["g"], beta_logits, use_qk_l2norm_in_kernel=True,
                         use_gate_in_kernel=True, A_log=A_log, dt_bias=dt_bias, use_beta_sigmoid_in_kernel=True)
    err = rel_err(o, o_ref)
    assert err <= TOL["o"], f"o: relative error {err:.3g} > {TOL['o']}"


def test_e2e_selftest():
    """bench/e2e.py's whole pipeline (models from fla.layers in plain blocks, patch_fla, training,
    timing, the profiler's attention share, the agreement judgement) on CPU with a stand-in FLA
    whose functions are rewy's with the WY backward: it must report agreement and a falling loss."""
    import os
    import subprocess
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=os.path.join(root, "python"))
    r = subprocess.run([sys.executable, os.path.join(root, "bench", "e2e.py"), "--selftest"], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "selftest: passed" in r.stdout, r.stdout[-3000:] + r.stderr[-3000:]


def test_patch_real_fla():
    """The real FLA package where it imports (the GPU machine puts .ref/fla-src on PYTHONPATH;
    importing it needs Triton, not a GPU): its layers' module-level names are rewy's after the
    patch and FLA's own again after undo."""
    layers = {"delta_net": "chunk_delta_rule", "gated_deltanet": "chunk_gated_delta_rule", "kda": "chunk_kda",
              "gdn2": "chunk_gdn2"}
    mods = {}
    for mod, name in layers.items():
        mods[mod] = pytest.importorskip(f"fla.layers.{mod}")
    before = {mod: getattr(m, layers[mod]) for mod, m in mods.items()}
    patch = rewy.patch_fla()
    try:
        assert patch.skipped == {}
        for mod, m in mods.items():
            assert getattr(m, layers[mod]) is getattr(rewy, layers[mod]), mod
        assert sys.modules["fla.ops"].chunk_gdn is rewy.chunk_gated_delta_rule
    finally:
        patch.undo()
    for mod, m in mods.items():
        assert getattr(m, layers[mod]) is before[mod], mod
        assert getattr(m, layers[mod]).__module__.startswith("fla.ops."), mod


def test_options(fake_fla):
    """options sets rewy's keywords on every installed function (a caller's own keyword wins); other names are refused."""
    with pytest.raises(ValueError, match="options takes disable_recompute, backward, chunk_size"):
        rewy.patch_fla(ops="gdn", options={"state_v_first": True})
    x = make_inputs("gdn", B=1, T=40, H=2, K=16, V=16, seed=3)
    with rewy.patch_fla(ops="gdn", options={"backward": "nope"}):
        with pytest.raises(ValueError, match="backward must be 'rewy' or 'wy'"):
            fake_fla.layer.chunk_gated_delta_rule(**x)
        fake_fla.layer.chunk_gated_delta_rule(**x, backward="wy")   # the caller's keyword wins
    with rewy.patch_fla(ops="gdn", options={"disable_recompute": True}):
        o, _ = fake_fla.layer.gdr(**x)
        assert fake_fla.layer.gdr.__name__ == "chunk_gated_delta_rule"
    o_ref, _ = rewy.chunk_gated_delta_rule(**x, disable_recompute=True)
    assert torch.equal(o, o_ref)
