#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_api.c (tests/fuzz/corpus/): per operator five valid problems
(tails, varlen with resets and grouped heads, strong gates, K or V = 1 and 256, custom scale with
zero betas, fp64), for the gated ones three more (-inf, huge and mixed gates), then one problem per
fault. The byte layout is fuzz_api.c's header comment; every valid seed is within its work bounds,
so the harness runs it at the shape named here."""
import os

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
OPS = ["deltanet", "gdn", "kda", "gdn2"]
F32, BF16, F16, F64 = 0, 1, 2, 3
CHUNK = {0: 0, 16: 1, 32: 2, 64: 3}
NORMAL, STRONG, RESET, NEG_INF, HUGE, MIXED = 0, 1, 2, 3, 4, 5
WORK_MAX, PADDED_MAX = 1 << 17, 1 << 21   # fuzz_api.c's
FAULTS = ["t_zero", "k_big", "chunk", "dtype", "op", "policy", "algo", "hv", "seq_end", "seq_b", "scale",
          "backend", "null_q", "gate", "misaligned", "fwd_ws", "saved", "bwd_scale", "bwd_h0", "bwd_null_dk",
          "bwd_no_dh0", "bwd_ws", "bwd_seqlens"]


def problem(op, dtype=BF16, policy=0, algo=0, vfirst=0, hv_zero=0, chunk=64, h0=1, ht=1, dht=1, dh0=0,
            scale=0, seqs=None, H=1, group=1, gates=NORMAL, beta0=0, feature_resets=0, fault=0, K=24, V=40, B=2,
            T=65, seed=1):
    lens = seqs if seqs is not None else [T]   # one batch row; B counts in heads
    bt = chunk or 64
    heads = (B if seqs is None else 1) * H * group
    assert sum(lens) * heads * K * V <= WORK_MAX
    assert sum(-(-n // bt) * bt for n in lens) * heads * (K * V + bt * (K + V) + bt * bt) <= PADDED_MAX
    b = [op, dtype, policy | algo << 1 | vfirst << 2 | hv_zero << 3, CHUNK[chunk],
         h0 | ht << 1 | dht << 2 | dh0 << 3 | scale << 4 | (seqs is not None) << 5,
         (H - 1) | (group - 1) << 2, gates | beta0 << 3 | feature_resets << 4, 0 if not fault else 175 + fault, K - 1, V - 1]
    if seqs is not None:
        b += [len(seqs) - 1] + [n - 1 for n in seqs]
    else:
        b += [B - 1, T - 1]
    return bytes(b) + seed.to_bytes(8, "big")


def main():
    os.makedirs(OUT, exist_ok=True)
    seeds = {}
    for i, name in enumerate(OPS):
        seeds[f"{name}_tail"] = problem(i, B=1, seed=10 + i)
        seeds[f"{name}_varlen_resets_gva"] = problem(i, dtype=F32, seqs=[1, 15, 64, 65], group=2, K=16, V=24,
                                                     gates=RESET, chunk=32, dh0=1, ht=0, seed=20 + i)
        seeds[f"{name}_strong_vfirst_A_wy"] = problem(i, dtype=F16, gates=STRONG, chunk=16, vfirst=1, policy=1,
                                                      algo=1, K=40, V=24, B=1, T=100, seed=30 + i)
        seeds[f"{name}_k1_v256"] = problem(i, K=1, V=256, B=1, T=17, h0=0, dht=0, hv_zero=1, chunk=0,
                                             seed=40 + i)
        seeds[f"{name}_k256_v1_scale_beta0"] = problem(i, dtype=F32, K=256, V=1, B=1, T=33, scale=1,
                                                       beta0=1, group=3, chunk=16, seed=50 + i)
        seeds[f"{name}_f64_varlen_gva"] = problem(i, dtype=F64, seqs=[7, 64, 30], H=2, group=2, K=20, V=12,
                                                  gates=RESET, dh0=1, chunk=32, seed=100 + i)
        if i:   # the gated operators: exact, huge and mixed resets (issue 25 item 1)
            seeds[f"{name}_neg_inf_feature_resets"] = problem(i, gates=NEG_INF, feature_resets=1, K=24, V=40,
                                                              T=130, B=1, chunk=32, seed=70 + i)
            seeds[f"{name}_huge_resets_varlen"] = problem(i, dtype=F32, gates=HUGE, seqs=[3, 64, 40], K=32, V=32,
                                                          seed=80 + i)
            seeds[f"{name}_mixed_fp32"] = problem(i, dtype=F32, gates=MIXED, K=32, V=32, T=100, B=1, seed=90 + i)
    for f, name in enumerate(FAULTS, start=1):
        seqs = [5, 20] if name.startswith("seq") or name == "bwd_seqlens" else None
        seeds[f"fault_{name}"] = problem(f % 4, fault=f, seqs=seqs, K=16, V=16, T=20, seed=60 + f)
    for name, data in seeds.items():
        with open(os.path.join(OUT, name), "wb") as fh:
            fh.write(data)
    print(f"{len(seeds)} seeds in {OUT}")


if __name__ == "__main__":
    main()
