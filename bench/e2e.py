"""End to end (issue 27): a model's training step with FLA's kernels, then with rewy swapped in.

    make e2e                                  # on the GPU machine (FLA under .ref/fla-src), or:
    FLA_DISABLE_BACKEND_DISPATCH=1 PYTHONPATH=python:.ref/fla-src python3 bench/e2e.py
    python3 bench/e2e.py --dry-run            # the plan and the sizes, no GPU, no FLA
    python3 bench/e2e.py --selftest           # the whole pipeline on CPU with a stand-in FLA (seconds)
    python3 bench/e2e.py --plot build/e2e/e2e.json   # the PNG from a saved run (needs matplotlib)

Models. GatedDeltaNet, DeltaNet and KDA built from FLA's own code: fla.models (the *ForCausalLM
classes) when they import under the installed transformers, else FLA's layers (fla.layers) inside
plain PyTorch blocks (embedding, pre-norm RMSNorm, SwiGLU MLP of FLA's size, LM head). KDA is
FLA's KimiDeltaAttention, the layer Kimi Linear uses (short convolutions, low-rank gate and
output-gate projections, head dim 128). All three use 128-wide heads (K = V = 128). Defaults:
hidden 2048, 16 heads, 8 layers, vocabulary 32000 (fla.models: GDN 0.576B, DeltaNet 0.543B,
KDA 0.551B parameters), sequence 4096, batch 4 (16k tokens a step); --layers/--hidden/--batch/
--seq change them.

Training. bf16 parameters under bf16 autocast, fused AdamW (betas 0.9/0.95, weight decay 0.1),
20 warm-up steps then cosine, gradient clipping at 1, as FLA's own throughput benchmark. Each
model is built once (fixed seed); every implementation starts from those same weights and sees
the same batches. The batches are generated token ids with learnable structure: a fixed table
of 4096 "phrases" of 8 tokens, and each row a chain of phrases whose next index is the previous
one plus 1, 2, 3 or 7 (so the loss can fall from ln 32000 ≈ 10.4 towards ≈ 0.2 nats: the next
token inside a phrase is nearly determined, the next phrase has 4 choices that the mixer must
read from the previous phrase). All batches are made on the device before training starts.

Implementations. "fla": FLA as shipped. "rewy": rewy.patch_fla(), the one change a user makes.
"flashqla" (GDN only, when the package flash_qla imports): FlashQLA's chunk_gated_delta_rule
installed the same way; FLA's GDN layer asks for the in-kernel gate and β sigmoid, which
FlashQLA does not take, so the adapter computes them in PyTorch (rewy.gate, σ) first.

Reported per (model, implementation), in a table and in --json:
- tok/s: B·T·(timed steps) / wall time of the timed steps, which are the last --timed-steps
  before the profiled ones (device synchronized at both ends; nothing synchronizes the host
  inside: losses stay on the device until the run ends). ratio = tok/s over FLA's.
- peak GiB: torch.cuda.max_memory_allocated over the run (weights, their initial copy,
  gradients, optimizer state, activations).
- attention share: from torch.profiler over the last --profile-steps steps: device time of
  the kernels launched inside the attention call (a record_function range around it) and
  inside every backward node that the call created (ranges opened by hooks on those nodes:
  the operator's own backward plus, for rewy, the PyTorch ops of the gate, l2norm and β
  sigmoid that FLA fuses into its function), over the device time of all kernels.
- final loss: mean of the last 10 steps. max |Δloss|: the largest per-step difference from
  FLA's curve.

Agreement "within bf16 noise" (printed per implementation against FLA). Both runs compute the
same function; they differ by rounding only (bf16 unit roundoff u = 2^-8), and training then
amplifies rounding differences into slightly different trajectories. The judgement:
(1) step 1, same weights and batch: |L_impl − L_fla| / L_fla ≤ 2^-7 (two bf16 roundings;
    MATH §10's 0.8% output bound), and
(2) every window of 20 steps: |mean L_impl − mean L_fla| / mean L_fla ≤ 1% (the curves do
    not drift apart; a wrong gradient drifts by far more within 200 steps).
Both must hold over at least 200 steps (the default) for "agree".
The noise floor (--impls …,fla-noise): FLA once more from initial weights each multiplied by
(1 + 2^-8·u), u uniform in [−1, 1] (seeded), then rounded to the weights' dtype: in bf16 weights
about half the values move by one ulp (a perturbation of 2^-9 would round back to the same bf16
weights and change nothing), the size of one bf16 rounding, which is what separates two correct
implementations. FLA run twice unperturbed is bit-identical on
this stack (fla-again), so it cannot show how far training carries such a difference. Where
fla-noise ran, a window passes (2) if it is within 1% or within NOISE_FACTOR (2) times the
noise run's own worst window: the curve moved no further than bf16 noise moves FLA's.
Where rewy ran under both policies, the table also prints how far those two curves part: R and A
compute the same gradients and differ only in the rounding of the chunk states (recomputed, or kept
from the forward), so that is the same kind of floor, measured without a perturbation.

Time. All of it (three models, FLA and rewy, FLA's Triton compile and autotune) is meant to fit
8 minutes on an H200. FLA's first steps compile and autotune every Triton kernel of a model
(about two minutes per model on a fresh cache): --prewarm (default on a GPU) does that for all
models at once in child processes, so the compiles overlap; the measured runs then hit the
compile cache (TRITON_CACHE_DIR, which `make e2e` points at .fla-cache/triton: carried to the
next run, it saves the compiles too). Expected: prewarm 2-3 min, then per run 200 steps of
about 0.15-0.2 s (0.58B parameters, 16k tokens), 6 runs in 3-4 min. The prewarm logs go next
to --json. --deadline (default 470 s) skips the runs that would start after it and cuts a
run that passes it (the table says so); FlashQLA's column runs last for that reason.
"""
import argparse
import collections
import functools
import hashlib
import importlib
import json
import math
import os
import subprocess
import sys
import time
import types

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))

MODELS = {  # name: (rewy/patch_fla operator, fla.models config class, causal LM class, fla.layers class)
    "gdn": ("gdn", "GatedDeltaNetConfig", "GatedDeltaNetForCausalLM", "GatedDeltaNet"),
    "delta": ("delta", "DeltaNetConfig", "DeltaNetForCausalLM", "DeltaNet"),
    "kda": ("kda", "KDAConfig", "KDAForCausalLM", "KimiDeltaAttention"),
}
LABEL_FWD, LABEL_BWD = "e2e::attention_fwd", "e2e::attention_bwd"
PHRASE_LEN, PHRASE_STEPS = 8, (1, 2, 3, 7)
STEP1_TOL, WINDOW, WINDOW_TOL = 2.0 ** -7, 20, 0.01
NOISE_REL, NOISE_FACTOR = 2.0 ** -8, 2.0  # fla-noise: the weights' relative perturbation (one bf16 ulp); the floor's factor


# ------------------------------------------------------------------------------------------
# data

def make_batches(n, B, T, vocab, seed, device):
    """n batches [B, T] of token ids (one tensor [n, B, T], on the device): chains of phrases.
    The table has about one phrase position per vocabulary entry (4096 phrases for 32000 ids),
    so the token after a token is nearly determined inside a phrase."""
    gen = torch.Generator().manual_seed(seed)
    n_phrases = max(16, min(4096, vocab // PHRASE_LEN))
    phrases = torch.randint(0, vocab, (n_phrases, PHRASE_LEN), generator=gen)
    per_row = -(-T // PHRASE_LEN)
    steps = torch.tensor(PHRASE_STEPS)[torch.randint(0, len(PHRASE_STEPS), (n, B, per_row), generator=gen)]
    start = torch.randint(0, n_phrases, (n, B, 1), generator=gen)
    ids = (start + steps.cumsum(-1)) % n_phrases
    return phrases[ids].reshape(n, B, -1)[..., :T].contiguous().to(device)


# ------------------------------------------------------------------------------------------
# models

def intermediate_size(hidden, ratio=4):
    """FLA's GatedMLP width: 2/3 · ratio · hidden, rounded up to a multiple of 256."""
    return 256 * ((int(hidden * ratio * 2 / 3) + 255) // 256)


def layer_options(name, a):
    """FLA layer / config options of one model: 128-wide heads (K = V = 128)."""
    head_dim = a.hidden // a.heads
    if name == "gdn":
        return dict(num_heads=a.heads, head_dim=head_dim, expand_v=1, use_gate=True, use_short_conv=True)
    if name == "delta":
        return dict(num_heads=a.heads, expand_k=1, expand_v=1, use_gate=False, use_short_conv=True,
                    qk_norm="l2", qk_activation="silu", use_beta=True)
    return dict(num_heads=a.heads, head_dim=head_dim, expand_v=1, use_short_conv=True)   # kda


def approx_params(name, a):
    h, inter = a.hidden, intermediate_size(a.hidden)
    # q, k, v, o; GDN's output gate; KDA's low-rank gate and output-gate projections (rank 128)
    attn = 4 * h * h + (h * h if name == "gdn" else 0) + (4 * 128 * h if name == "kda" else 0)
    return 2 * a.vocab * h + a.layers * (attn + 3 * h * inter)


def _accepted(cls, options):
    """The options that cls's constructor takes (FLA's signatures vary between releases)."""
    import inspect
    params = inspect.signature(cls.__init__).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return dict(options)
    return {k: v for k, v in options.items() if k in params}


class PlainLM(nn.Module):
    """Embedding, then per layer x + attn(norm(x)) and x + MLP(norm(x)), final norm, LM head."""

    def __init__(self, make_attn, vocab, hidden, layers, eps=1e-6):
        super().__init__()
        inter = intermediate_size(hidden)
        self.embed = nn.Embedding(vocab, hidden)
        self.blocks = nn.ModuleList()
        for i in range(layers):
            blk = nn.Module()
            blk.attn_norm, blk.mlp_norm = nn.RMSNorm(hidden, eps=eps), nn.RMSNorm(hidden, eps=eps)
            blk.attn = make_attn(i)
            blk.gate_proj, blk.up_proj = nn.Linear(hidden, inter, bias=False), nn.Linear(hidden, inter, bias=False)
            blk.down_proj = nn.Linear(inter, hidden, bias=False)
            self.blocks.append(blk)
        self.norm = nn.RMSNorm(hidden, eps=eps)
        self.lm_head = nn.Linear(hidden, vocab, bias=False)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)

    def forward(self, ids):
        x = self.embed(ids)
        for blk in self.blocks:
            out = blk.attn(blk.attn_norm(x))
            x = x + (out[0] if isinstance(out, tuple) else out)
            y = blk.mlp_norm(x)
            x = x + blk.down_proj(F.silu(blk.gate_proj(y)) * blk.up_proj(y))
        logits = self.lm_head(self.norm(x))
        return F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), ids[:, 1:].flatten())


def build_model(name, a, device):
    """(model, loss function, how it was built). fla.models if it loads, else fla.layers in PlainLM."""
    _, cfg_name, lm_name, layer_name = MODELS[name]
    opts = layer_options(name, a)
    errors = []
    if a.builder in ("auto", "models"):
        try:
            models = importlib.import_module("fla.models")
            cfg_cls, lm_cls = getattr(models, cfg_name), getattr(models, lm_name)
            cfg = cfg_cls(**_accepted(cfg_cls, dict(
                opts, hidden_size=a.hidden, num_hidden_layers=a.layers, vocab_size=a.vocab,
                max_position_embeddings=a.seq, use_cache=False, fuse_cross_entropy=True,
                fuse_linear_cross_entropy=False, tie_word_embeddings=False)))
            torch.manual_seed(a.seed)
            with torch.device(device):
                model = lm_cls(cfg)
            model = model.to(dtype=a.dtype)

            def loss_fn(m, ids):
                return m(input_ids=ids, labels=ids, use_cache=False).loss
            return model, loss_fn, f"fla.models.{lm_name}"
        except Exception as e:   # an import or API mismatch with this transformers: say so, use the layers
            if a.builder == "models":
                raise
            errors.append(f"fla.models: {type(e).__name__}: {e}")
    layers = importlib.import_module("fla.layers")
    layer_cls = getattr(layers, layer_name)
    layer_opts = _accepted(layer_cls, dict(opts, hidden_size=a.hidden, mode="chunk"))
    torch.manual_seed(a.seed)
    with torch.device(device):
        model = PlainLM(lambda i: layer_cls(**layer_opts, layer_idx=i), a.vocab, a.hidden, a.layers)
    model = model.to(dtype=a.dtype)
    for e in errors:
        print(f"  ({e}; using fla.layers.{layer_name} in plain PyTorch blocks)")
    return model, (lambda m, ids: m(ids)), f"fla.layers.{layer_name} in PlainLM"


# ------------------------------------------------------------------------------------------
# implementations

def flashqla_gdn():
    """FlashQLA's GDN with FLA's signature; the in-kernel gate and β sigmoid that FLA's layer asks
    for are applied in PyTorch first (FlashQLA takes neither)."""
    import flash_qla
    import rewy
    from rewy.ops import beta_activation

    def chunk_gated_delta_rule(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
                               use_qk_l2norm_in_kernel=False, use_beta_sigmoid_in_kernel=False,
                               allow_neg_eigval=False, state_v_first=False, cu_seqlens=None, cu_seqlens_cpu=None,
                               use_gate_in_kernel=False, A_log=None, dt_bias=None, **kwargs):
        if use_gate_in_kernel:
            g = rewy.gate(g, A_log, dt_bias)
        if use_beta_sigmoid_in_kernel:
            beta = beta_activation(beta, allow_neg_eigval)
        return flash_qla.chunk_gated_delta_rule(
            q=q, k=k, v=v, g=g, beta=beta, scale=scale, initial_state=initial_state,
            output_final_state=output_final_state, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
            state_v_first=state_v_first, cu_seqlens=cu_seqlens, auto_cp=True)
    return chunk_gated_delta_rule


def install(impl, op):
    """Swap the implementation in; returns the undo (None for FLA as shipped). "fla-again" is FLA run a
    second time: its kernels use atomics, so the two runs differ by rounding alone, and its agreement
    with the first run is the noise floor that the agreement rule is read against."""
    import rewy
    if impl in ("fla", "fla-again", "fla-noise"):
        return None
    if impl == "rewy":
        return rewy.patch_fla(ops=(op,))
    if impl == "rewy-a":   # policy A: the forward saves the chunk states, the backward recomputes nothing
        return rewy.patch_fla(ops=(op,), options={"disable_recompute": True})
    if impl == "flashqla":
        return rewy.patch_fla(ops=("gdn",), functions={"gdn": flashqla_gdn()})
    raise ValueError(f"unknown implementation {impl!r}")


def current_function(op):
    from rewy.fla_patch import _FLA_FUNCTIONS
    package, names, _ = _FLA_FUNCTIONS[op]
    return getattr(importlib.import_module(package), names[0])


def _mark_backward(args, kwargs, out):
    """Open a LABEL_BWD profiler range around every backward node the attention call created:
    the nodes reachable from its outputs that are not behind its inputs' own nodes."""
    stop = {t.grad_fn for t in (*args, *kwargs.values()) if isinstance(t, torch.Tensor) and t.grad_fn is not None}
    outs = out if isinstance(out, (tuple, list)) else (out,)
    todo = [t.grad_fn for t in outs if isinstance(t, torch.Tensor) and t.grad_fn is not None]
    seen = set()
    while todo:
        node = todo.pop()
        if node is None or node in seen or node in stop or type(node).__name__ == "AccumulateGrad":
            continue
        seen.add(node)
        ranges = []

        def pre(grad_outputs, ranges=ranges):
            ranges.append(torch.profiler.record_function(LABEL_BWD).__enter__())

        def post(grad_inputs, grad_outputs, ranges=ranges):
            if ranges:
                ranges.pop().__exit__(None, None, None)
        try:
            node.register_prehook(pre)
            node.register_hook(post)
        except (AttributeError, RuntimeError):   # a node that takes no hooks: its time counts as other work
            pass
        todo.extend(n for n, _ in node.next_functions)
    return len(seen)


def profiled(fn):
    """fn with its forward inside a LABEL_FWD range and its backward nodes inside LABEL_BWD ranges."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with torch.profiler.record_function(LABEL_FWD):
            out = fn(*args, **kwargs)
        _mark_backward(args, kwargs, out)
        return out
    return wrapper


def attention_share(prof, steps, cuda):
    """(attention ms per step, all-kernel ms per step, share) from a profile of `steps` steps.
    On CPU (selftest) CPU time stands in for device time."""
    CPU = torch.autograd.DeviceType.CPU
    events = prof.events()
    labels = (LABEL_FWD, LABEL_BWD)
    if cuda:
        attn = sum(e.device_time_total for e in events if e.device_type == CPU and e.name in labels)
        annotations = {e.name for e in events if getattr(e, "is_user_annotation", False)} | set(labels)
        total = sum(e.time_range.elapsed_us() for e in events
                    if e.device_type != CPU and e.name not in annotations and not e.name.startswith("ProfilerStep"))
    else:
        attn = sum(e.cpu_time_total for e in events if e.name in labels)
        total = sum(e.cpu_time_total for e in events if e.name == "e2e::step")
    if total <= 0:
        return None, None, None
    return attn / steps / 1e3, total / steps / 1e3, attn / total


def attention_kernels(prof, steps, top=14):
    """[(kernel name, ms per step, launches per step)] inside the attention ranges, largest first: where an
    implementation's attention time goes in the model (the kernels each range's ops launched)."""
    CPU = torch.autograd.DeviceType.CPU
    ms, count = collections.Counter(), collections.Counter()

    def walk(e):
        for k in e.kernels:
            ms[k.name] += k.duration / 1e3 / steps
            count[k.name] += 1 / steps
        for c in e.cpu_children:
            walk(c)
    for e in prof.events():
        if e.device_type == CPU and e.name in (LABEL_FWD, LABEL_BWD):
            walk(e)
    return [(name[:110], round(t, 4), round(count[name], 2)) for name, t in ms.most_common(top)]


# ------------------------------------------------------------------------------------------
# one training run

def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def lr_at(step, a):
    warm = min(1.0, (step + 1) / a.warmup_steps)
    return a.lr * warm * 0.5 * (1 + math.cos(math.pi * step / a.steps))


def train(model, loss_fn, init, batches, a, device, op, deadline):
    """One implementation's run from the initial weights; returns its measurements."""
    with torch.no_grad():
        for p, p0 in zip(model.parameters(), init):
            p.copy_(p0)
    cuda = device.type == "cuda"
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.1, fused=cuda)
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    losses = torch.zeros(a.steps, device=device)
    first_timed = a.steps - a.profile_steps - a.timed_steps
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda)
    t_start, t_timed, t_first3, done, prof, wrap, cut = time.perf_counter(), None, None, 0, None, None, False

    def step(i):
        for group in opt.param_groups:
            group["lr"] = lr_at(i, a)
        with autocast:
            loss = loss_fn(model, batches[i])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses[i] = loss.detach()

    try:
        for i in range(a.steps):
            if i == 3:
                sync(device)
                t_first3 = time.perf_counter() - t_start
            if i == first_timed:
                sync(device)
                t_timed = time.perf_counter()
            if i == a.steps - a.profile_steps:
                sync(device)
                t_timed = time.perf_counter() - t_timed
                wrap = _install_profiling(op)
                activities = [torch.profiler.ProfilerActivity.CPU]
                if cuda:
                    activities.append(torch.profiler.ProfilerActivity.CUDA)
                prof = torch.profiler.profile(activities=activities)
                prof.__enter__()
            if prof is not None:
                with torch.profiler.record_function("e2e::step"):
                    step(i)
            else:
                step(i)
            done = i + 1
            if i % 20 == 19 and time.perf_counter() > deadline:
                cut = True
                break
        sync(device)
    finally:
        if prof is not None:
            prof.__exit__(None, None, None)
        if wrap is not None:
            wrap.undo()
    share = (None, None, None)
    if prof is not None:
        try:
            share = attention_share(prof, a.profile_steps, cuda)
        except Exception as e:   # the run's other numbers stand without it
            print(f"  (no attention share: the profile did not parse: {type(e).__name__}: {e})")
    kernels = []
    if prof is not None and cuda:
        try:
            kernels = attention_kernels(prof, a.profile_steps)
        except Exception as e:
            print(f"  (no attention kernel table: {type(e).__name__}: {e})")
    curve = losses[:done].tolist()
    timed_ok = not cut and t_timed is not None and a.timed_steps > 0
    tok_s = a.batch * a.seq * a.timed_steps / t_timed if timed_ok else None
    return dict(losses=curve, steps_done=done, cut=cut, tok_s=tok_s,
                step_ms=(t_timed / a.timed_steps * 1e3) if timed_ok else None,
                first3_s=t_first3, run_s=time.perf_counter() - t_start,
                peak_gib=torch.cuda.max_memory_allocated(device) / 2 ** 30 if cuda else None,
                attn_ms=share[0], kernels_ms=share[1], attn_share=share[2], attn_kernels=kernels)


def _install_profiling(op):
    import rewy
    return rewy.patch_fla(ops=(op,), functions={op: profiled(current_function(op))})


# ------------------------------------------------------------------------------------------
# judgement, table, plot

def perturbed(init, seed):
    """fla-noise's initial weights: each times (1 + 2^-8·u), u uniform in [−1, 1], from a seeded generator."""
    out = []
    for i, p0 in enumerate(init):
        g = torch.Generator(device=p0.device).manual_seed(seed * 1000 + i)
        u = torch.rand(p0.shape, generator=g, device=p0.device, dtype=torch.float32) * 2 - 1
        out.append((p0.float() * (1 + NOISE_REL * u)).to(p0.dtype))
    return out


def judge(ref, other, window_tol=WINDOW_TOL):
    """Agreement within bf16 noise (see the module docstring): (agree, numbers)."""
    n = min(len(ref), len(other))
    if n == 0:
        return False, {}
    step1 = abs(other[0] - ref[0]) / abs(ref[0])
    windows = []
    for s in range(0, n - WINDOW + 1, WINDOW):
        mr, mo = sum(ref[s:s + WINDOW]) / WINDOW, sum(other[s:s + WINDOW]) / WINDOW
        windows.append(abs(mo - mr) / abs(mr))
    worst = max(windows) if windows else float("inf")
    max_abs = max(abs(x - y) for x, y in zip(ref[:n], other[:n]))
    agree = step1 <= STEP1_TOL and worst <= window_tol
    return agree, dict(steps=n, step1_rel=step1, worst_window_rel=worst, max_abs_diff=max_abs, window_tol=window_tol)


def print_table(results, min_steps):
    head = (f"{'model':6} {'impl':9} {'tok/s':>9} {'ratio':>6} {'peak GiB':>8} {'attn':>6} {'attn ms':>8} "
            f"{'final loss':>10} {'max|Δloss|':>10}  agreement with FLA")
    print(head)
    print("-" * len(head))
    for name, runs in results.items():
        ref = runs.get("fla")
        tol = WINDOW_TOL  # widened by the noise run's worst window where it ran (module docstring)
        noise = runs.get("fla-noise")
        if ref and not ref.get("skipped") and noise and noise.get("losses"):
            tol = max(WINDOW_TOL, NOISE_FACTOR * judge(ref["losses"], noise["losses"])[1].get("worst_window_rel", 0))
        for impl, r in runs.items():
            if r.get("skipped"):
                print(f"{name:6} {impl:9} skipped: {r['skipped']}")
                continue
            ratio = r["tok_s"] / ref["tok_s"] if ref and ref.get("tok_s") and r.get("tok_s") else None
            fin = sum(r["losses"][-10:]) / len(r["losses"][-10:])
            verdict, mx = "", None
            if impl != "fla" and ref and not ref.get("skipped"):
                ok, j = judge(ref["losses"], r["losses"], WINDOW_TOL if impl == "fla-noise" else tol)
                r["agreement"] = dict(j, agree=ok)
                mx = j.get("max_abs_diff")
                long_enough = j.get("steps", 0) >= min_steps
                verdict = (("AGREE" if ok else "DISAGREE") + ("" if long_enough else f" (only {j.get('steps')} steps)")
                           + f": step 1 {j.get('step1_rel', 0):.2e} (≤ {STEP1_TOL:.2e}), "
                           f"worst 20-step window {j.get('worst_window_rel', 0):.2e} (≤ {j.get('window_tol', WINDOW_TOL):.2e})")

            def f(x, fmt):
                return format(x, fmt) if x is not None else "-"
            print(f"{name:6} {impl:9} {f(r.get('tok_s'), '9.0f')} {f(ratio, '6.3f')} {f(r.get('peak_gib'), '8.2f')} "
                  f"{f(r.get('attn_share'), '6.1%')} {f(r.get('attn_ms'), '8.2f')} {fin:10.4f} {f(mx, '10.2e')}  "
                  f"{verdict}{'  [cut at step %d]' % r['steps_done'] if r.get('cut') else ''}")
        # rewy's two policies compute the same gradients and differ only in rounding (policy A keeps the
        # forward's chunk states, R recomputes them): how far their curves part is a second noise floor
        ra, rb = runs.get("rewy"), runs.get("rewy-a")
        if ra and rb and ra.get("losses") and rb.get("losses"):
            _, j = judge(ra["losses"], rb["losses"])
            runs["rewy-a"]["vs_rewy"] = j
            print(f"{name:6} rewy vs rewy-a (same gradients, other roundings): step 1 {j['step1_rel']:.2e}, "
                  f"worst 20-step window {j['worst_window_rel']:.2e}")


def plot(data, png):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"matplotlib is not installed: no PNG. Later, where it is: python3 bench/e2e.py --plot <json> --png {png}")
        return False
    results = data["results"]
    fig, axes = plt.subplots(2, len(results), figsize=(5 * len(results), 6), squeeze=False,
                             gridspec_kw=dict(height_ratios=[3, 1]), sharex="col")
    styles = {"fla": dict(lw=1.6, color="tab:blue"), "rewy": dict(lw=1.0, ls="--", color="tab:red"),
              "flashqla": dict(lw=1.0, ls=":", color="tab:green"), "rewy-a": dict(lw=1.0, ls="-.", color="tab:orange"),
              "fla-again": dict(lw=1.0, ls=":", color="tab:gray"), "fla-noise": dict(lw=1.0, ls=":", color="tab:purple")}
    for col, (name, runs) in enumerate(results.items()):
        top, bottom = axes[0][col], axes[1][col]
        ref = runs.get("fla", {}).get("losses")
        for impl, r in runs.items():
            if r.get("losses"):
                top.plot(r["losses"], label=impl, **styles.get(impl, {}))
                if ref and impl != "fla":
                    n = min(len(ref), len(r["losses"]))
                    bottom.plot([r["losses"][i] - ref[i] for i in range(n)], label=f"{impl} − fla",
                                **styles.get(impl, {}))
        top.set_title(f"{name}: {runs.get('fla', {}).get('built', '')}", fontsize=8)
        top.set_ylabel("training loss (nats/token)")
        top.legend()
        bottom.axhline(0, color="gray", lw=0.5)
        bottom.set_ylabel("loss − FLA's")
        bottom.set_xlabel("step")
    m = data["meta"]
    # two lines: one model's column (5 inches) is narrower than the whole title
    fig.suptitle(f"rewy vs FLA, end to end: {m.get('gpu', '')}\nB={m['batch']} T={m['seq']}, "
                 f"hidden {m['hidden']}, {m['layers']} layers, commit {m.get('commit', '?')[:9]}", fontsize=9)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(png)), exist_ok=True)
    fig.savefig(png, dpi=110)
    print(f"wrote {png}")
    return True


# ------------------------------------------------------------------------------------------
# the stand-in FLA of --selftest: fla.ops.* are rewy's functions with the WY backward, and the
# layers import them by name, as FLA's do

_STANDIN_LAYERS = '''
import importlib
import torch, torch.nn as nn
# bound by name at import, as FLA's layers bind theirs (what patch_fla must reach)
chunk_gated_delta_rule = importlib.import_module("fla.ops.gated_delta_rule").chunk_gated_delta_rule
chunk_delta_rule = importlib.import_module("fla.ops.delta_rule").chunk_delta_rule
chunk_kda = importlib.import_module("fla.ops.kda").chunk_kda


class _Base(nn.Module):
    def __init__(self, hidden_size, num_heads, head_dim=None, layer_idx=None, mode="chunk", **unused):
        super().__init__()
        self.h, self.d = num_heads, head_dim or hidden_size // num_heads
        self.q_proj, self.k_proj, self.v_proj = (nn.Linear(hidden_size, self.h * self.d, bias=False) for _ in range(3))
        self.b_proj = nn.Linear(hidden_size, self.h, bias=False)
        self.o_proj = nn.Linear(self.h * self.d, hidden_size, bias=False)

    def qkv(self, x):
        B, T, _ = x.shape
        return [p(x).view(B, T, self.h, self.d) for p in (self.q_proj, self.k_proj, self.v_proj)]

    def out(self, o):
        return self.o_proj(o.flatten(2)), None, None


class DeltaNet(_Base):
    def forward(self, x, **kw):
        q, k, v = self.qkv(x)
        o, _ = chunk_delta_rule(q=q, k=k, v=v, beta=self.b_proj(x).sigmoid(), use_qk_l2norm_in_kernel=True)
        return self.out(o)


class GatedDeltaNet(_Base):
    def __init__(self, hidden_size, num_heads, **kw):
        super().__init__(hidden_size, num_heads, **kw)
        self.a_proj = nn.Linear(hidden_size, self.h, bias=False)
        self.A_log = nn.Parameter(torch.zeros(self.h))
        self.dt_bias = nn.Parameter(torch.zeros(self.h))

    def forward(self, x, **kw):
        q, k, v = self.qkv(x)
        o, _ = chunk_gated_delta_rule(q=q, k=k, v=v, g=self.a_proj(x), beta=self.b_proj(x), A_log=self.A_log,
                                      dt_bias=self.dt_bias, use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True,
                                      use_beta_sigmoid_in_kernel=True, state_v_first=True)
        return self.out(o)


class KimiDeltaAttention(_Base):
    def __init__(self, hidden_size, num_heads, **kw):
        super().__init__(hidden_size, num_heads, **kw)
        self.f_proj = nn.Linear(hidden_size, self.h * self.d, bias=False)
        self.A_log = nn.Parameter(torch.zeros(self.h))
        self.dt_bias = nn.Parameter(torch.zeros(self.h * self.d))

    def forward(self, x, **kw):
        q, k, v = self.qkv(x)
        B, T, _ = x.shape
        o, _ = chunk_kda(q=q, k=k, v=v, g=self.f_proj(x).view(B, T, self.h, self.d), beta=self.b_proj(x),
                         A_log=self.A_log, dt_bias=self.dt_bias, use_qk_l2norm_in_kernel=True,
                         use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True, state_v_first=True)
        return self.out(o)
'''


def install_standin_fla():
    import rewy
    if any(n == "fla" or n.startswith("fla.") for n in sys.modules):
        raise SystemExit("--selftest installs a stand-in fla package; a real one is already imported")

    def module(name, **attrs):
        m = types.ModuleType(name)
        m.__dict__.update(attrs)
        m.__path__ = []     # a package, so that submodule imports resolve through sys.modules
        sys.modules[name] = m
        return m

    def wy(fn):
        @functools.wraps(fn)
        def f(*args, **kwargs):
            return fn(*args, backward="wy", **kwargs)
        return f
    fns = dict(chunk_delta_rule=wy(rewy.chunk_delta_rule), chunk_gated_delta_rule=wy(rewy.chunk_gated_delta_rule),
               chunk_kda=wy(rewy.chunk_kda))
    module("fla")
    module("fla.ops", **fns, chunk_gdn=fns["chunk_gated_delta_rule"])
    module("fla.ops.delta_rule", chunk_delta_rule=fns["chunk_delta_rule"])
    module("fla.ops.gated_delta_rule", chunk_gated_delta_rule=fns["chunk_gated_delta_rule"],
           chunk_gdn=fns["chunk_gated_delta_rule"])
    module("fla.ops.kda", chunk_kda=fns["chunk_kda"])
    layers = module("fla.layers")
    exec(compile(_STANDIN_LAYERS, "<stand-in fla.layers>", "exec"), layers.__dict__)
    sys.modules["fla.models"] = None     # makes `import fla.models` fail: the layers path is taken


# ------------------------------------------------------------------------------------------

def git_commit():
    try:
        return subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10).stdout.strip() or "unknown"
    except Exception:
        return "unknown"


def library_id():
    """The rewy library the runs load: its path and SHA-256. A device's copy of the tree may name another commit than
    the one its library was built from (session 22's JSON said aeb6778 for a build of 61bf01a's kernels)."""
    try:
        import rewy._lib as rl
        path = rl.lib().path
        with open(path, "rb") as f:
            return dict(path=path, sha256=hashlib.sha256(f.read()).hexdigest())
    except Exception as e:  # the runs themselves report a missing library
        return dict(error=str(e))


def versions():
    out = {"torch": torch.__version__}
    for mod in ("triton", "transformers", "fla", "flash_qla"):
        try:
            out[mod] = getattr(importlib.import_module(mod), "__version__", "?")
        except Exception:
            out[mod] = None
    return out


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[1:]))
    ap.add_argument("--models", default="gdn,delta,kda", help="comma list of gdn, delta, kda")
    ap.add_argument("--impls", default="fla,rewy", help="comma list of fla, rewy, rewy-a, fla-again (fla first: it is the reference; rewy-a: rewy with policy A, "
                    "disable_recompute=True; fla-again: FLA once more; fla-noise: FLA from weights perturbed by "
                    "one bf16 rounding, the noise floor of the agreement)")
    ap.add_argument("--flashqla", choices=("auto", "on", "off"), default="auto",
                    help="a FlashQLA column for GDN: auto = when flash_qla imports")
    ap.add_argument("--builder", choices=("auto", "models", "layers"), default="auto",
                    help="fla.models, FLA's layers in plain blocks, or the first that works")
    ap.add_argument("--steps", type=int, default=200, help="training steps per run (≥ 200 for the agreement)")
    ap.add_argument("--timed-steps", type=int, default=50, help="steady-state steps timed, before the profiled ones")
    ap.add_argument("--profile-steps", type=int, default=2, help="last steps, under torch.profiler")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup-steps", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--deadline", type=float, default=470.0, help="seconds: runs after it are skipped or cut")
    ap.add_argument("--prewarm", choices=("auto", "on", "off"), default="auto",
                    help="compile FLA's (and FlashQLA's) kernels first in parallel processes, one per model "
                         "(auto: on a GPU); their autotune timings are not kept")
    ap.add_argument("--warm-only", metavar="MODEL:IMPL", help=argparse.SUPPRESS)
    # (on the device machine only $OUT comes back: the results default to it there)
    out = os.environ.get("OUT")
    ap.add_argument("--json", default=os.path.join(out, "e2e.json") if out else os.path.join(ROOT, "build", "e2e", "e2e.json"),
                    help="results (default $OUT/e2e.json where OUT is set, else build/e2e/e2e.json)")
    ap.add_argument("--png", default=os.path.join(out, "e2e_loss.png") if out else os.path.join(ROOT, "docs", "e2e_loss.png"),
                    help="loss curves (default $OUT/e2e_loss.png where OUT is set, else docs/e2e_loss.png)")
    ap.add_argument("--plot", metavar="JSON", help="only draw --png from a saved --json")
    ap.add_argument("--dry-run", action="store_true", help="print the plan and sizes; no GPU, no FLA")
    ap.add_argument("--selftest", action="store_true", help="tiny CPU run with a stand-in FLA (rewy's WY backward)")
    a = ap.parse_args(argv)
    if a.selftest:
        a.hidden, a.heads, a.layers, a.vocab, a.batch, a.seq = 64, 2, 2, 256, 2, 80
        a.steps, a.timed_steps, a.profile_steps, a.warmup_steps, a.lr = 24, 6, 2, 4, 3e-3
        a.json = os.path.join(ROOT, "build", "e2e", "selftest.json")
        a.png = os.path.join(ROOT, "build", "e2e", "selftest.png")
        a.flashqla = "off"
    a.models = [m for m in a.models.split(",") if m]
    a.impls = [i for i in a.impls.split(",") if i]
    for m in a.models:
        if m not in MODELS:
            ap.error(f"--models: unknown model {m!r} (gdn, delta, kda)")
    if not a.impls or a.impls[0] != "fla" or any(i not in ("fla", "rewy", "rewy-a", "fla-again", "fla-noise")
                                                   for i in a.impls):
        ap.error("--impls: fla first, then any of rewy, rewy-a, fla-again, fla-noise (FlashQLA is --flashqla)")
    if a.steps < a.timed_steps + a.profile_steps + 3:
        ap.error("--steps must exceed --timed-steps + --profile-steps + 3 (compile and warm-up)")
    if a.hidden % a.heads:
        ap.error("--hidden must be a multiple of --heads")
    a.dtype = torch.float32 if a.selftest else torch.bfloat16   # (bf16 matmuls are slow on a CPU)
    return a


def main(argv=None):
    a = parse_args(argv)
    if a.plot:
        with open(a.plot) as f:
            return 0 if plot(json.load(f), a.png) else 1
    t0 = time.perf_counter()
    deadline = t0 + a.deadline
    print(f"e2e: models {','.join(a.models)}; B={a.batch} T={a.seq} ({a.batch * a.seq} tokens/step), "
          f"hidden {a.hidden}, {a.heads} heads of {a.hidden // a.heads}, {a.layers} layers, vocab {a.vocab}; "
          f"{a.steps} steps (timed {a.timed_steps}, profiled {a.profile_steps}); deadline {a.deadline:.0f} s")
    for m in a.models:
        n = approx_params(m, a)
        print(f"  {m}: about {n / 1e9:.2f}B parameters, about {6 * n * a.batch * a.seq / 1e12:.0f} TFLOP a step "
              f"outside attention")
    if a.dry_run:
        b = make_batches(2, 2, 64, a.vocab, a.seed, "cpu")
        print(f"  data: {tuple(b.shape)} ids in [{int(b.min())}, {int(b.max())}], e.g. {b[0, 0, :16].tolist()}")
        print(f"  agreement rule: step 1 ≤ {STEP1_TOL:.2e} relative, every {WINDOW}-step window mean ≤ "
              f"{WINDOW_TOL:.0%} relative; FlashQLA: {a.flashqla}; json {a.json}; png {a.png}")
        return 0

    if a.selftest:
        install_standin_fla()
        device = torch.device("cpu")
        torch.set_num_threads(1)
    else:
        if not torch.cuda.is_available():
            raise SystemExit("e2e: needs a CUDA device (or --dry-run / --selftest)")
        device = torch.device("cuda")
    import rewy
    if device.type == "cuda" and not rewy.has_cuda():
        raise SystemExit(f"e2e: {rewy.library_path()} was built without CUDA (make CUDA=1)")
    if a.warm_only:
        return warm_only(a, device)

    impls_of = {m: list(a.impls) for m in a.models}
    if "gdn" in impls_of and a.flashqla != "off":
        try:
            importlib.import_module("flash_qla")
            impls_of["gdn"].append("flashqla")
        except Exception as e:
            if a.flashqla == "on":
                raise
            print(f"  (no FlashQLA column: flash_qla does not import: {type(e).__name__}: {e})")

    if a.prewarm == "on" or (a.prewarm == "auto" and device.type == "cuda"):
        prewarm(a, impls_of, argv if argv is not None else sys.argv[1:], deadline)

    meta = dict(commit=git_commit(), library=library_id(), date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                gpu=torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu (selftest)",
                versions=versions(), argv=sys.argv[1:], batch=a.batch, seq=a.seq, hidden=a.hidden, heads=a.heads,
                layers=a.layers, vocab=a.vocab, steps=a.steps, timed_steps=a.timed_steps,
                profile_steps=a.profile_steps, lr=a.lr,
                env={k: os.environ.get(k) for k in ("FLA_DISABLE_BACKEND_DISPATCH", "TRITON_CACHE_DIR",
                                                    "TRITON_CACHE_AUTOTUNING", "REWY_LIBRARY")})
    print(f"  {meta['gpu']}, commit {meta['commit'][:12]}, {meta['versions']}")
    batches = make_batches(a.steps, a.batch, a.seq, a.vocab, a.seed + 1, device)
    results, last_run_s = {}, 0.0
    data = dict(meta=meta, results=results)
    # FLA and rewy for every model first; FlashQLA (whose first call per shape JIT-compiles for
    # minutes) last, so that it can only cost its own column when time runs out
    groups = [(name, [i for i in impls_of[name] if i != "flashqla"]) for name in a.models]
    if "flashqla" in impls_of.get("gdn", []):
        groups.append(("gdn", ["flashqla"]))
    for name, impls in groups:
        op = MODELS[name][0]
        runs = results.setdefault(name, {})
        if time.perf_counter() + last_run_s > deadline:
            for impl in impls:
                runs[impl] = dict(skipped="past the deadline")
            continue
        tb = time.perf_counter()
        model, loss_fn, built = build_model(name, a, device)
        init = [p.detach().clone() for p in model.parameters()]
        n_params = sum(p.numel() for p in model.parameters())
        print(f"{name}: {built}, {n_params / 1e6:.1f}M parameters (built in {time.perf_counter() - tb:.1f} s)")
        for impl in impls:
            if impl != "fla" and time.perf_counter() + last_run_s > deadline:
                runs[impl] = dict(skipped="past the deadline")
                continue
            undo = install(impl, op)
            try:
                r = train(model, loss_fn, perturbed(init, a.seed) if impl == "fla-noise" else init, batches, a, device,
                          op, deadline)
            except Exception as e:
                # fla.models built but does not train under this transformers: FLA's layers instead
                if impl != "fla" or a.builder != "auto" or not built.startswith("fla.models"):
                    raise
                print(f"  fla.models failed in training ({type(e).__name__}: {e}); using fla.layers in plain blocks")
                del model, init
                a.builder = "layers"
                model, loss_fn, built = build_model(name, a, device)
                a.builder = "auto"
                init = [p.detach().clone() for p in model.parameters()]
                n_params = sum(p.numel() for p in model.parameters())
                r = train(model, loss_fn, init, batches, a, device, op, deadline)
            finally:
                if undo is not None:
                    undo.undo()
            r.update(built=built, params=n_params)
            runs[impl] = r
            last_run_s = r["run_s"] if impl == "fla" else max(last_run_s, r["run_s"])
            print(f"  {impl:9} {r['steps_done']} steps in {r['run_s']:.1f} s (first 3: {r['first3_s'] or 0:.1f} s): "
                  f"{(r['tok_s'] or 0):.0f} tok/s, step {(r['step_ms'] or 0):.1f} ms, "
                  f"peak {(r['peak_gib'] or 0):.2f} GiB, loss {r['losses'][0]:.3f} → {r['losses'][-1]:.3f}, "
                  f"attention {(r['attn_ms'] or 0):.1f} of {(r['kernels_ms'] or 0):.1f} ms a step", flush=True)
            for kname, ms, n in r.get("attn_kernels") or []:
                print(f"      {ms:8.3f} ms x{n:<5g} {kname}")
            os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
            with open(a.json, "w") as f:
                json.dump(data, f)
        del model, init
        if device.type == "cuda":
            torch.cuda.empty_cache()
    print()
    print_table(results, min_steps=200 if not a.selftest else a.steps)
    with open(a.json, "w") as f:
        json.dump(data, f, indent=1)
    print(f"\nwrote {a.json}; total {time.perf_counter() - t0:.0f} s")
    try:
        plot(data, a.png)
    except Exception as e:
        print(f"no PNG ({type(e).__name__}: {e}); later: python3 bench/e2e.py --plot {a.json} --png {a.png}")
    return selftest_verdict(results) if a.selftest else 0


def warm_only(a, device):
    """A prewarm child: two training steps of one (model, implementation), nothing measured."""
    name, impl = a.warm_only.split(":")
    t = time.perf_counter()
    model, loss_fn, built = build_model(name, a, device)
    undo = install(impl, MODELS[name][0])
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, fused=device.type == "cuda")
    for ids in make_batches(2, a.batch, a.seq, a.vocab, a.seed + 1, device):
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            loss = loss_fn(model, ids)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    sync(device)
    if undo is not None:
        undo.undo()
    print(f"warm {name}/{impl} ({built}): {time.perf_counter() - t:.1f} s")
    return 0


def prewarm(a, impls_of, argv, deadline):
    """FLA's first steps compile (and autotune) every Triton kernel of the model, minutes per
    model; FlashQLA's first call JIT-compiles with TileLang. Do that for all models at once in
    child processes (the CPU-bound compiles overlap), filling the on-disk compile caches that the
    measured runs then hit. The children's autotune timings, taken under that load, are not kept
    (TRITON_CACHE_AUTOTUNING=0, FLA_CACHE_RESULTS=0): the measured FLA run autotunes for itself,
    from compiled kernels."""
    jobs = [(name, "fla") for name in a.models]
    if "flashqla" in impls_of.get("gdn", []):
        jobs.append(("gdn", "flashqla"))
    logdir = os.path.dirname(os.path.abspath(a.json))
    os.makedirs(logdir, exist_ok=True)
    # (FLA passes cache_results=FLA_CACHE_RESULTS, default on, to triton.autotune itself, which
    # overrides TRITON_CACHE_AUTOTUNING: both are needed to keep the children's choices off disk)
    env = dict(os.environ, TRITON_CACHE_AUTOTUNING="0", FLA_CACHE_RESULTS="0")
    t, procs = time.perf_counter(), []
    for name, impl in jobs:
        log = open(os.path.join(logdir, f"warm-{name}-{impl}.log"), "w")
        cmd = [sys.executable, os.path.abspath(__file__), *argv, "--warm-only", f"{name}:{impl}", "--prewarm", "off"]
        procs.append((name, impl, log, subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)))
    for name, impl, log, proc in procs:
        try:
            rc = proc.wait(timeout=max(1.0, deadline - time.perf_counter()))
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = "killed at the deadline"
        log.close()
        if rc != 0:
            print(f"  prewarm {name}/{impl}: {rc} (see {log.name}); the measured run compiles for itself")
    print(f"  prewarm: {len(procs)} processes, {time.perf_counter() - t:.0f} s", flush=True)


def selftest_verdict(results):
    """--selftest passes when, for every model, the stand-in FLA (rewy's WY backward) and rewy
    (ReWY) agree, the loss fell, and the profiler found the attention's share."""
    bad = []
    for name, runs in results.items():
        for impl, r in runs.items():
            if r.get("skipped") or not r.get("losses"):
                bad.append(f"{name}/{impl}: no run")
                continue
            if not r["losses"][-1] < 0.9 * r["losses"][0]:
                bad.append(f"{name}/{impl}: the loss did not fall ({r['losses'][0]:.3f} → {r['losses'][-1]:.3f})")
            if not (r.get("attn_share") or 0) > 0 or not r["attn_share"] < 1:
                bad.append(f"{name}/{impl}: attention share {r.get('attn_share')}")
            if impl != "fla" and not r.get("agreement", {}).get("agree"):
                bad.append(f"{name}/{impl}: disagrees with the reference: {r.get('agreement')}")
    print("selftest: " + ("passed" if not bad else "FAILED\n  " + "\n  ".join(bad)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
