"""Train a small character-level language model with rewy's Gated DeltaNet, twice: once with
the ReWY backward and once with the conventional WY backward, and plot both loss curves.

    pip install matplotlib tqdm          # matplotlib for the PNG; tqdm is optional (progress bar)
    python examples/train_lm.py          # CPU: a few minutes; uses CUDA when available
    python examples/train_lm.py --steps 300 --device cpu --out /tmp/loss_curves.png

Run from a checkout after `make lib` (the script puts python/ on sys.path), or after
`pip install ./python`. The model is a few layers of an FLA-style GDN block written with
plain PyTorch modules around `rewy.chunk_gated_delta_rule` (l2-normalized q/k, the gate
computed in the kernel from A_log and dt_bias, β from a sigmoid). The text is generated
(a small grammar), so nothing is downloaded. Both runs start from the same weights and see
the same batches; the two backward algorithms compute the same gradients up to rounding
(docs/MATH.md §4), so the curves must track each other.

Timing is fair to both: after a few discarded warm-up steps of each (first-call costs: CUDA
context, library load, allocator growth), the two models train in lockstep, and the one
that runs first alternates from step to step. The PNG goes to build/ by default, so the
committed examples/loss_curves.png changes only when asked for with --out.
"""
import argparse
import math
import os
import random
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "python"))
import rewy  # noqa: E402


# ------------------------------------------------------------------------------------------
# data: sentences from a small grammar

def generate_text(n_chars, seed=0):
    rng = random.Random(seed)
    names = ["alice", "bob", "carol", "dave", "eve", "mallory"]
    adjs = ["small", "red", "quiet", "old", "bright", "heavy", "green"]
    nouns = ["cat", "river", "lamp", "stone", "garden", "letter", "window", "boat"]
    verbs = ["sees", "carries", "paints", "finds", "opens", "keeps"]
    places = ["in the morning", "near the hill", "by the sea", "at night", "after the rain"]
    out, size = [], 0
    while size < n_chars:
        who = rng.choice(names)
        s = f"{who} {rng.choice(verbs)} the {rng.choice(adjs)} {rng.choice(nouns)} {rng.choice(places)}. "
        if rng.random() < 0.3:   # a dependency to carry: the same name comes back
            s += f"then {who} goes home. "
        out.append(s)
        size += len(s)
    return "".join(out)[:n_chars]


# ------------------------------------------------------------------------------------------
# model: FLA-style Gated DeltaNet blocks in plain PyTorch

class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(d)), eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class GatedDeltaNet(nn.Module):
    def __init__(self, d, heads, head_dim, backward):
        super().__init__()
        self.h, self.dk, self.backward = heads, head_dim, backward
        self.q_proj, self.k_proj, self.v_proj = (nn.Linear(d, heads * head_dim, bias=False) for _ in range(3))
        self.a_proj = nn.Linear(d, heads, bias=False)      # raw gate: g = −exp(A_log)·softplus(a + dt_bias)
        self.b_proj = nn.Linear(d, heads, bias=False)      # β logits
        self.g_proj = nn.Linear(d, heads * head_dim, bias=False)  # output gate
        self.o_norm = RMSNorm(head_dim)
        self.o_proj = nn.Linear(heads * head_dim, d, bias=False)
        self.A_log = nn.Parameter(torch.empty(heads).uniform_(1, 16).log())
        dt = torch.exp(torch.rand(heads) * (math.log(0.1) - math.log(0.001)) + math.log(0.001))
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))   # softplus⁻¹(dt)

    def forward(self, x, state=None):
        B, T, _ = x.shape
        q, k, v = (p(x).view(B, T, self.h, self.dk) for p in (self.q_proj, self.k_proj, self.v_proj))
        o, state = rewy.chunk_gated_delta_rule(
            q, k, v, self.a_proj(x), self.b_proj(x), initial_state=state, output_final_state=state is not None,
            use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, A_log=self.A_log, dt_bias=self.dt_bias,
            use_beta_sigmoid_in_kernel=True, backward=self.backward)
        o = self.o_norm(o) * F.silu(self.g_proj(x).view(B, T, self.h, self.dk))
        return self.o_proj(o.reshape(B, T, -1)), state


class Block(nn.Module):
    def __init__(self, d, heads, head_dim, backward):
        super().__init__()
        self.norm1, self.norm2 = RMSNorm(d), RMSNorm(d)
        self.attn = GatedDeltaNet(d, heads, head_dim, backward)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d, bias=False), nn.GELU(), nn.Linear(4 * d, d, bias=False))

    def forward(self, x, state=None):
        a, state = self.attn(self.norm1(x), state)
        x = x + a
        return x + self.mlp(self.norm2(x)), state


class CharLM(nn.Module):
    def __init__(self, vocab, d=64, layers=2, heads=2, head_dim=32, backward="rewy"):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(Block(d, heads, head_dim, backward) for _ in range(layers))
        self.norm = RMSNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx, states=None):
        x = self.embed(idx)
        new_states = []
        for i, block in enumerate(self.blocks):
            x, s = block(x, None if states is None else states[i])
            new_states.append(s)
        return self.head(self.norm(x)), new_states


# ------------------------------------------------------------------------------------------
# training

def progress(iterable, desc):
    try:
        from tqdm import tqdm
        return tqdm(iterable, desc=desc, ncols=90)
    except ImportError:
        return _SimpleBar(iterable, desc)


class _SimpleBar:
    def __init__(self, iterable, desc):
        self.items, self.desc, self.post = list(iterable), desc, ""

    def set_postfix_str(self, s):
        self.post = s

    def __iter__(self):
        n, t0 = len(self.items), time.time()
        for i, x in enumerate(self.items):
            yield x
            done = (i + 1) * 30 // n
            print(f"\r{self.desc} [{'#' * done}{'.' * (30 - done)}] {i + 1}/{n} {time.time() - t0:5.1f}s {self.post}",
                  end="", flush=True)
        print()


class Run:
    """One model and its optimizer; both runs start from the same weights (same seed)."""

    def __init__(self, backward, vocab, args, device):
        torch.manual_seed(args.seed)
        self.backward, self.vocab = backward, vocab
        self.model = CharLM(vocab, args.dim, args.layers, args.heads, args.head_dim, backward).to(device)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=args.lr, weight_decay=0.01)
        self.losses, self.seconds = [], []

    def step(self, chunk, lr, device):
        """One training step; returns the loss and the step's wall time (device synchronized)."""
        for group in self.opt.param_groups:
            group["lr"] = lr
        sync(device)
        t0 = time.perf_counter()
        logits, _ = self.model(chunk[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, self.vocab), chunk[:, 1:].reshape(-1))
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        value = loss.item()       # synchronizes
        sync(device)
        return value, time.perf_counter() - t0


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def batch_at(data, args, gen, device):
    starts = torch.randint(0, len(data) - args.seq - 1, (args.batch,), generator=gen)
    return torch.stack([data[s:s + args.seq + 1] for s in starts]).to(device)


def train(data, vocab, args, device):
    """Warm up both backwards on throwaway models, then train one model per backward in
    lockstep on the same batches, alternating which goes first, so neither order is favoured."""
    warm_gen = torch.Generator().manual_seed(args.seed + 2)
    for backward in ("rewy", "wy"):
        w = Run(backward, vocab, args, device)
        for _ in range(args.warmup):
            w.step(batch_at(data, args, warm_gen, device), args.lr, device)
    runs = [Run(b, vocab, args, device) for b in ("rewy", "wy")]
    batches = torch.Generator().manual_seed(args.seed + 1)     # same batches in both runs
    bar = progress(range(args.steps), "ReWY and WY")
    for step in bar:
        lr = args.lr * min(1.0, (step + 1) / 20) * 0.5 * (1 + math.cos(math.pi * step / args.steps))
        chunk = batch_at(data, args, batches, device)
        for run in (runs if step % 2 == 0 else runs[::-1]):
            loss, sec = run.step(chunk, lr, device)
            run.losses.append(loss)
            run.seconds.append(sec)
        bar.set_postfix_str(f"loss {runs[0].losses[-1]:.3f} / {runs[1].losses[-1]:.3f}")
    return {r.backward: r for r in runs}


@torch.no_grad()
def sample(model, prompt, stoi, itos, n, device):
    """Recurrent generation: the prompt in one chunked call, then one token at a time from the
    final states (initial_state / output_final_state)."""
    idx = torch.tensor([[stoi[c] for c in prompt]], device=device)
    states = [torch.zeros(1, b.attn.h, b.attn.dk, b.attn.dk, device=device) for b in model.blocks]
    logits, states = model(idx, states)
    out = prompt
    gen = torch.Generator(device=device).manual_seed(0)
    for _ in range(n):
        probs = torch.softmax(logits[0, -1] / 0.7, -1)
        nxt = torch.multinomial(probs, 1, generator=gen)
        out += itos[nxt.item()]
        logits, states = model(nxt.view(1, 1), states)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=32)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--warmup", type=int, default=5, help="discarded steps per backward before timing")
    ap.add_argument("--device", default="auto", help="cpu, cuda or auto (cuda when rewy has the CUDA backend)")
    ap.add_argument("--out", default=os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir,
                                                                   "build", "train_lm_loss_curves.png")),
                    help="PNG path (default build/train_lm_loss_curves.png)")
    args = ap.parse_args()
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() and rewy.has_cuda() else "cpu"
    device = torch.device(args.device)

    text = generate_text(200_000, args.seed)
    chars = sorted(set(text))
    stoi, itos = {c: i for i, c in enumerate(chars)}, dict(enumerate(chars))
    data = torch.tensor([stoi[c] for c in text])
    print(f"rewy {rewy.library_version()} ({rewy.library_path()}), device {device}, "
          f"{len(text)} chars, vocab {len(chars)}")

    runs = train(data, len(chars), args, device)
    for backward, run in runs.items():
        ms = sorted(run.seconds)[len(run.seconds) // 2] * 1e3
        print(f"{backward}: final loss {sum(run.losses[-20:]) / len(run.losses[-20:]):.4f} (mean of last 20), "
              f"median step {ms:.1f} ms, total {sum(run.seconds):.1f}s")
    print("sample:", repr(sample(runs["rewy"].model, "alice ", stoi, itos, 120, device)))
    curves = {b: r.losses for b, r in runs.items()}

    a, b = curves["rewy"], curves["wy"]
    diff = [abs(x - y) for x, y in zip(a, b)]
    print(f"|loss(ReWY) − loss(WY)|: max {max(diff):.2e}, mean {sum(diff) / len(diff):.2e} "
          f"(loss falls from {a[0]:.3f} to {a[-1]:.3f})")

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install matplotlib): no PNG written")
        return
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True, gridspec_kw=dict(height_ratios=[3, 1]))
    top.plot(a, label="ReWY backward", lw=1.5)
    top.plot(b, label="WY backward", lw=1.0, ls="--")
    top.set_ylabel("training loss (nats/char)")
    top.set_title(f"char-level GDN LM with rewy on {device.type.upper()}: "
                  f"{args.layers} layers, d={args.dim}, {args.steps} steps")
    top.legend()
    bottom.semilogy([max(d, 1e-9) for d in diff], color="gray", lw=0.8)
    bottom.set_ylabel("|difference|")
    bottom.set_xlabel("step")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
